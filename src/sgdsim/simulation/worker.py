"""An asynchronous worker's step as a state machine.

Per step (Li, Yan, Paolieri, Golubchik, ICPE 2020): the worker issues its
pulls ``pull_start_s`` (plus one latency) after the step starts; it runs its
compute segments in profiled order, segment ``s`` once every pull gated on it
has arrived; at the end of each segment it pushes the gradients that segment
produced (wait-free back-propagation); the step ends once its compute is done,
every pull has arrived and the PS has applied every push that holds the step.
The next step starts ``overhead_s`` later.

States (``seg`` and ``running``): waiting for the pulls of segment ``seg``,
running segment ``seg``, or past the last segment waiting for the step's last
pull or update (``ending`` once the end is scheduled). Transitions are the
model's events: :meth:`Worker.start_step`, :meth:`Worker.segment_done`,
:meth:`Worker.pulls_arrived`, :meth:`Worker.pushes_arrived`,
:meth:`Worker.end_step`.

P3's pull after update moves a pull of step ``k + 1`` to the moment the PS has
applied the worker's step-``k`` push of the same parameter, so pulls of the
next step may arrive while this one runs: the counts of pending pulls are kept
for the running step (``cur``) and the next one (``nxt``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from sgdsim.simulation.chrome_trace import COMPUTE, UPDATE
from sgdsim.simulation.core import JOIN, SEG_END, STEP_END, STEP_START
from sgdsim.simulation.policies import draw_pull_order
from sgdsim.simulation.topology import DOWN, UP

if TYPE_CHECKING:
    from sgdsim.simulation.connection import Connection, ParameterServer
    from sgdsim.simulation.engine import AsyncPSModel, Run

Items = tuple[tuple[int, int], ...]

#: A unit's queue key under the fair discipline: ``(step << STEP_SHIFT) + priority``.
STEP_SHIFT = 24


class _Pending:
    """Pulls not yet arrived for one step: per segment (``gate``), per tensor
    (``pieces``) and in all (``left``)."""

    __slots__ = ("gate", "left", "pieces")

    def __init__(self, gate: list[int], pieces: list[int], left: int) -> None:
        self.gate = gate
        self.pieces = pieces
        self.left = left


class Worker:
    """One worker: its step's state and the transitions between its states.

    Args:
        model: the run (plan, event loop, connections, PS shards, settings).
        index: the worker's number ``w`` (node ``w // workers_per_node``).

    Attributes:
        busy_s: seconds of profiled compute run so far.
        step_ends: end time of every step so far, seconds.
    """

    __slots__ = (
        "busy_s",
        "chain_end",
        "chain_slots",
        "cur",
        "ending",
        "gating_left",
        "index",
        "last_update",
        "model",
        "nxt",
        "push_left",
        "running",
        "scale",
        "seg",
        "seg_start",
        "stage",
        "step",
        "step_ends",
    )

    def __init__(self, model: AsyncPSModel, index: int) -> None:
        self.model = model
        self.index = index
        self.step = 0
        self.seg = 0
        self.running = False
        self.ending = False
        self.cur = self.nxt = self._all_pending()
        self.push_left: list[int] = []  # pieces of each push not yet applied
        self.gating_left = 0  # pushes holding the step's end not yet applied
        self.last_update = 0.0  # end of the latest update holding the step
        self.stage = 0  # latest push slot fired (Prophet's block budget)
        self.busy_s = 0.0
        self.scale = 1.0  # this step's compute time over the profiled one
        self.seg_start = 0.0
        self.chain_end = 0  # last segment of the running chain
        # push slots the running chain passes, (time fired, slot), not yet in ``stage``
        self.chain_slots: deque[tuple[float, int]] = deque()
        self.step_ends: list[float] = []

    # -- step start and end --------------------------------------------------------

    def start_step(self, now: float, _: Any = None) -> None:
        """A step starts: push what is due at once, issue the pulls, run what can run."""
        m, plan = self.model, self.model.plan
        step = self.step = len(self.step_ends)
        self.seg = 0
        self.running = False
        self.ending = False
        self.stage = 0
        self.scale = m.draw_step_scale()
        self.cur = self._all_pending() if step == 0 else self.nxt
        self.nxt = self._all_pending()
        self.push_left = [len(x) for x in plan.push_pieces]
        self.gating_left = plan.n_gating
        self.last_update = now
        self.issue_pushes(now, 0)
        if plan.n_pull and (step == 0 or plan.unmatched_pulls):
            if plan.pull_start_s > 0 or plan.latency_s > 0:
                due = now + plan.pull_start_s + plan.latency_s
                m.sim.schedule(due, JOIN, self.join_pulls, step)
            else:
                self.join_pulls(now, step)
        self.try_start(now)
        self.check_end(now)

    def _all_pending(self) -> _Pending:
        plan = self.model.plan
        return _Pending(list(plan.base_pending), list(plan.base_pieces), plan.n_pull)

    def check_end(self, now: float) -> None:
        """Schedule the step's end once compute, pulls and holding updates are done."""
        if (
            not self.ending
            and self.seg == self.model.plan.n_seg
            and self.cur.left == 0
            and self.gating_left == 0
        ):
            self.ending = True
            end = now if now > self.last_update else self.last_update
            self.model.sim.schedule(end, STEP_END, self.end_step)

    def end_step(self, now: float, _: Any = None) -> None:
        """The step has ended: record it; the next starts after the per-step overhead."""
        self.step_ends.append(now)
        m = self.model
        if len(self.step_ends) < m.steps_per_worker:
            m.sim.schedule(now + m.plan.overhead_s, STEP_START, self.start_step)

    # -- compute -------------------------------------------------------------------

    def try_start(self, now: float) -> None:
        """Start segment ``seg`` if idle and every pull it needs has arrived.

        On a worker's own cores (no sharing, no trace) the segment runs as a
        chain with the following ones whose pulls are all here: they start the
        moment the previous one ends. One event at the chain's end stands for
        the chain; its end time is summed segment by segment, as the events
        would have found it, and nothing between reads the worker's segment (a
        pull arriving meanwhile is gated on a later one). A push slot inside
        the chain stops it when pushes join at once (no latency); with a
        latency its pushes only join one latency after the slot, so their join
        event is scheduled now, at the slot's time plus the latency (as the
        slot's own event would have), and Prophet's stage reads the slot's
        time (:meth:`block_budget`).
        """
        s = self.seg
        m = self.model
        plan = m.plan
        if not self.running and s < plan.n_seg and self.cur.gate[s] == 0:
            self.running = True
            self.seg_start = now
            scale = self.scale
            dur = plan.seg_dur[s] * scale
            if m.shared_cpu:
                m.cores_of(self.index).run(now, dur, self.segment_done, self.index)
                return
            end = now + dur
            if m.trace is None:
                gate, after, seg_dur = self.cur.gate, plan.pushes_after, plan.seg_dur
                last = plan.n_seg - 1
                lat = plan.latency_s
                while s < last and gate[s + 1] == 0:
                    if after[s + 1]:
                        if not lat > 0:
                            break
                        m.sim.schedule(end + lat, JOIN, self.join_pushes, (s + 1, self.step))
                        self.chain_slots.append((end, s + 1))
                    s += 1
                    end += seg_dur[s] * scale
            self.chain_end = s
            m.sim.schedule(end, SEG_END, self.segment_done)

    def segment_done(self, now: float, _: Any = None) -> None:
        """Segment ``seg`` (or the chain up to ``chain_end``) has ended: push the
        gradients of the last one, go on to the next."""
        m = self.model
        self.running = False
        s = self.seg
        seg_dur = m.plan.seg_dur
        if m.shared_cpu:
            self.busy_s += seg_dur[s] * self.scale
        else:
            for j in range(s, self.chain_end + 1):
                self.busy_s += seg_dur[j] * self.scale
            s = self.chain_end
            if self.chain_slots:
                self.stage = self.chain_slots[-1][1]
                self.chain_slots.clear()
        if m.trace is not None:
            m.trace.append((COMPUTE, self.index, s, self.seg_start, now))
        self.issue_pushes(now, s + 1)
        self.seg = s + 1
        if s + 1 < m.plan.n_seg:
            self.try_start(now)
        else:
            self.check_end(now)

    def block_budget(self) -> float:
        """Prophet's byte budget of the next block, bytes: the gap to the next backward
        stage. A slot the running chain passed counts once its time is past (a
        departure or join at the very instant comes before a segment's end)."""
        m = self.model
        plan = m.plan
        if self.seg >= plan.n_seg:
            return math.inf
        slots = self.chain_slots
        while slots and slots[0][0] < m.sim.now:
            self.stage = slots.popleft()[1]
        return plan.stage_budget[self.stage]

    # -- pulls ---------------------------------------------------------------------

    def join_pulls(self, now: float, step: int) -> None:
        """The step's pulls join their connections' queues, in the policy's order."""
        m, plan = self.model, self.model.plan
        if plan.orders is not None:
            runs = [plan.pull_runs[p] for p in draw_pull_order(m.rng, plan.orders).tolist()]
        else:
            runs = plan.first_pulls if step == 0 else plan.next_pulls
        self._join(now, DOWN, runs, step)

    def _join(self, now: float, d: int, runs: list[Run], step: int) -> None:
        """Put runs of units (pulls or pushes of ``step``) on their connections'
        queues in order, then start the connections touched, in first-touch order."""
        m, w = self.model, self.index
        conns = m.conns[d]
        fifo = m.fifo
        touched: list[Connection] = []
        for shard, prio, units in runs:
            conn = conns[shard][w]
            # (step, prio) in lexicographic order as one int (|prio| ≤ segments < 2**23)
            key = prio if fifo else (step << STEP_SHIFT) + prio
            conn.queue.put_many(key, [(b, w, step, items) for b, items in units])
            if conn not in touched:
                touched.append(conn)
        for conn in touched:
            conn.kick(now)

    def release_pulls(self, now: float, arg: tuple[int, Run]) -> None:
        """P3: the PS sends pieces of a parameter for ``step`` right after updating it."""
        step, (shard, prio, units) = arg
        m, w = self.model, self.index
        conn = m.conns[DOWN][shard][w]
        key = prio if m.fifo else (step << STEP_SHIFT) + prio
        conn.queue.put_many(key, [(b, w, step, items) for b, items in units])
        if not conn.busy:  # as kick, which does nothing while a unit is on the wire
            conn.kick(now)

    def pulls_arrived(self, now: float, step: int, items: Items) -> None:
        """Pieces of pulls of ``step`` (this one or, under P3, the next) arrived."""
        cur = step == self.step
        pend = self.cur if cur else self.nxt
        gate = self.model.plan.pull_gate
        for p, _ in items:
            pend.pieces[p] -= 1
            if pend.pieces[p]:
                continue
            g = gate[p]
            pend.gate[g] -= 1
            pend.left -= 1
            if cur and g == self.seg:
                self.try_start(now)
                self.check_end(now)

    # -- pushes and updates --------------------------------------------------------

    def issue_pushes(self, now: float, slot: int) -> None:
        """Push the gradients of push slot ``slot`` (after segment ``slot − 1``)."""
        plan = self.model.plan
        if not plan.pushes_after[slot]:
            return
        self.stage = slot
        if plan.latency_s > 0:
            self.model.sim.schedule(now + plan.latency_s, JOIN, self.join_pushes, (slot, self.step))
        else:
            self.join_pushes(now, (slot, self.step))

    def join_pushes(self, now: float, arg: tuple[int, int]) -> None:
        """The pushes of a slot join their connections' queues."""
        slot, step = arg
        self._join(now, UP, self.model.plan.push_runs[slot], step)

    def pushes_arrived(self, now: float, step: int, items: Items, ps: ParameterServer) -> None:
        """Pieces of pushes arrived at ``ps``, which applies them in turn."""
        m, plan = self.model, self.model.plan
        for q, i in items:
            start, end = ps.apply(now, plan.push_piece_update_s[q][i])
            if m.trace is not None:
                rec: Any = (UPDATE, self.index, q, start, end)
                m.trace.append((*rec, ps.shard) if m.sharded else rec)
            if plan.matched_push[q]:
                self._pull_after_update(now, step, q, i, end)
                continue
            if end > self.last_update:
                self.last_update = end
            left = self.push_left  # a push holding the end belongs to the running step
            left[q] -= 1
            if left[q] == 0:
                self.gating_left -= 1
                self.check_end(now)

    def _pull_after_update(self, now: float, step: int, q: int, i: int, end: float) -> None:
        """P3: the pull pieces of the next step that piece ``i`` of push ``q`` releases
        leave the PS when its update ends (``end``), plus one latency."""
        m, plan = self.model, self.model.plan
        run = plan.release_runs[q][i]
        if step + 1 >= m.steps_per_worker or run is None:
            return
        arg = (step + 1, run)
        if plan.latency_s > 0:
            m.sim.schedule(end + plan.latency_s, JOIN, self.release_pulls, arg)
        elif end > now:
            m.sim.schedule(end, JOIN, self.release_pulls, arg)
        else:
            self.release_pulls(now, arg)
