"""The event loop every simulated mode runs on.

In the style of SimPy's ``Environment`` and Ciw's ``Simulation``: a heap of
events ordered by ``(time, priority, sequence)``; popping one calls the action
of the model object that owns it. The priority breaks ties between events at
the same time by kind (a link's departure before a join, before a segment end,
…); the sequence number breaks the remaining ties in scheduling order, so the
same inputs and seed give bit-identical runs.

A heap cannot cancel an event. An object whose pending event has become
obsolete (a link whose next departure moved because a flow joined) schedules
a new one and lets its action recognise the old one as stale (lazy deletion):
the action returns True, and the loop does not count it as an event.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

#: Priorities of the event kinds at equal times (smaller first).
DEPART, JOIN, SEG_END, STEP_END, STEP_START = range(5)

#: An event's action: called with the current time and the event's argument;
#: returns True if the event was stale.
Action = Callable[[float, Any], bool | None]


class Simulation:
    """A heap of events and the loop that runs them.

    Attributes:
        now: time of the event being run (or the last one run), seconds.
        events: events run, stale ones not counted.
        heap: the pending events ``(time, priority, sequence, action, arg)``, a
            heap (read it; :meth:`schedule` adds to it).
    """

    __slots__ = ("_seq", "events", "heap", "now")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, Action, Any]] = []
        self._seq = 0
        self.now = 0.0
        self.events = 0

    def schedule(self, t: float, priority: int, action: Action, arg: Any = None) -> None:
        """Run ``action(t, arg)`` at time ``t`` (s), after every event with a smaller
        ``(t, priority)`` and after those scheduled earlier with the same."""
        heapq.heappush(self.heap, (t, priority, self._seq, action, arg))
        self._seq += 1

    def peek(self) -> float:
        """Time of the earliest pending event (s), ``inf`` if there is none."""
        return self.heap[0][0] if self.heap else math.inf

    def run(self) -> float:
        """Run events until none is left; returns the time of the last one (s)."""
        heap = self.heap
        pop = heapq.heappop
        popped = len(heap) - self._seq  # + the sequence number at the end
        stale = 0
        while heap:
            now, _, _, action, arg = pop(heap)
            self.now = now
            if action(now, arg):
                stale += 1
        self.events += popped + self._seq - stale
        return self.now
