"""A shared link: fair between connections, first-in first-out within each.

TensorFlow carries every tensor between one worker and one PS over a single
gRPC channel (one HTTP/2 connection). Two facts of the profile fix the model:

- Between connections, the PS NIC is shared fairly: with one PS whose NIC has
  the same capacity as every worker's, it is the only bottleneck in each
  direction, and each of the ``k`` active connections gets ``C / k`` bytes/s
  (max-min fairness, i.e. processor sharing between connections).
- Within a connection, tensors complete one after another in a stable order:
  the i-th pull of a traced step ends at ``t_0 + α + B_i / C``, ``B_i`` the
  bytes of the pulls completed by then (see
  :func:`sgdsim.traces.profile_network`, whose residual stays at a few ms).
  So each connection serves its flows first-in first-out at its full share.

Virtual time (Kleinrock, *Queueing Systems Vol. 2*, 1976, §4.4; the virtual
clock of fair queueing, Demers, Keshav, Shenker, SIGCOMM 1989): a global clock
``G`` counts bytes served to each active connection and grows at ``C / k``. The
head flow of connection ``w`` started when ``G = g`` leaves when ``G`` reaches
``g + bytes``; that tag changes only when the connection's own head changes,
so a heap of connections keyed by it gives O(log n) per arrival or departure.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any


class _Conn:
    __slots__ = ("flows", "head_end", "version")

    def __init__(self) -> None:
        self.flows: deque[tuple[float, Any]] = deque()  # (bytes, payload), head first
        self.head_end = 0.0  # G at which the head flow leaves
        self.version = 0


class TokenBucket:
    """A shaper's token bucket in front of a link (Linux ``tbf``, tc-tbf(8)).

    Tokens, in bytes, accrue at the link's rate while it is idle, up to the
    depth (``burst_bytes``); while it sends at its rate they are spent as fast
    as they come. Whatever a flow finds in the bucket leaves at once: a flow
    of ``b`` bytes that starts on a link idle for ``t`` seconds leaves
    ``min(b, burst, t · C) / C`` seconds earlier than at the rate ``C``, and
    what it leaves in the bucket goes to the flows after it. The bucket starts full.

    Args:
        burst_bytes: the depth, bytes (> 0).
    """

    __slots__ = ("burst", "tokens")

    def __init__(self, burst_bytes: float) -> None:
        if not burst_bytes > 0:
            raise ValueError(f"burst must be > 0 bytes, got {burst_bytes}")
        self.burst = float(burst_bytes)
        self.tokens = self.burst

    def fill(self, nbytes: float) -> None:
        """Add ``nbytes`` of tokens (the link's rate times its idle seconds), up to the depth."""
        self.tokens = min(self.burst, self.tokens + nbytes)

    def take(self, size_bytes: float) -> float:
        """Bytes of a flow of ``size_bytes`` that leave at once; they leave the bucket."""
        used = min(self.tokens, size_bytes)
        self.tokens -= used
        return used


class PSLink:
    """One direction of a NIC: fair between connections, FIFO within each.

    Also a node's cores, shared by the compute of the workers placed there
    (capacity in worker-equivalents, each capped at one: see ``max_rate``).

    Args:
        capacity_Bps: capacity in bytes/s (> 0).
        max_rate: most a single connection is served at, bytes/s (``inf``: no
            cap). With ``k`` busy connections each is served at
            ``min(capacity / k, max_rate)`` (limited processor sharing): a
            worker's compute that uses ``p`` of a node's ``C`` cores runs at
            full speed until ``C / p`` workers compute at once.

    Attributes:
        busy_s: time with at least one flow on the link, seconds.
        bytes_done: bytes of all flows that have left.
    """

    __slots__ = (
        "_conns",
        "_heap",
        "_seq",
        "active_conns",
        "busy_s",
        "bytes_done",
        "capacity",
        "g",
        "last_conn",
        "max_rate",
        "t",
    )

    def __init__(self, capacity_Bps: float, max_rate: float = math.inf) -> None:
        if not capacity_Bps > 0:
            raise ValueError(f"link capacity must be > 0 bytes/s, got {capacity_Bps}")
        if not max_rate > 0:
            raise ValueError(f"max_rate must be > 0, got {max_rate}")
        self.capacity = float(capacity_Bps)
        self.max_rate = float(max_rate)
        self.g = 0.0
        self.t = 0.0
        self.active_conns = 0
        self._conns: dict[Any, _Conn] = {}
        self._heap: list[tuple[float, int, Any, int]] = []  # (head_end, seq, conn, version)
        self._seq = 0
        self.busy_s = 0.0
        self.bytes_done = 0.0
        self.last_conn: Any = None  # connection of the flow last popped

    @property
    def active(self) -> int:
        """Number of flows on the link (queued or in service)."""
        return sum(len(c.flows) for c in self._conns.values())

    def _advance(self, now: float) -> None:
        k = self.active_conns
        if k:
            dt = now - self.t
            if self.capacity / k < self.max_rate:
                self.g += dt * self.capacity / k
            else:
                self.g += dt * self.max_rate
            self.busy_s += dt
        self.t = now

    def _schedule(self, key: Any, c: _Conn) -> None:
        c.version += 1
        if c.flows:
            heapq.heappush(self._heap, (c.head_end, self._seq, key, c.version))
            self._seq += 1

    def add(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> bool:
        """A flow of ``size_bytes`` joins the tail of connection ``conn`` at ``now`` (s).

        Returns:
            True if the connection was idle, so every departure time changed
            (the caller must ask :meth:`next_departure` again); False if the
            next departure is unchanged.
        """
        k = self.active_conns
        if k:  # _advance(now), inlined: this is the simulator's inner loop
            dt = now - self.t
            if self.capacity / k < self.max_rate:
                self.g += dt * self.capacity / k
            else:
                self.g += dt * self.max_rate
            self.busy_s += dt
        self.t = now
        c = self._conns.get(conn)
        if c is None:
            c = self._conns[conn] = _Conn()
        flows = c.flows
        flows.append((size_bytes, payload))
        if len(flows) == 1:
            self.active_conns = k + 1
            c.head_end = self.g + size_bytes
            c.version += 1
            heapq.heappush(self._heap, (c.head_end, self._seq, conn, c.version))
            self._seq += 1
            return True
        return False

    def add_batch(self, now: float, flows: list[tuple[float, Any]], conn: Any = 0) -> bool:
        """Flows ``(bytes, payload)`` join the tail of ``conn`` together at ``now``, in order.

        Returns:
            As :meth:`add`: True if every departure time changed.
        """
        if not flows:
            return False
        self._advance(now)
        c = self._conns.get(conn)
        if c is None:
            c = self._conns[conn] = _Conn()
        was_idle = not c.flows
        c.flows.extend(flows)
        if was_idle:
            self.active_conns += 1
            c.head_end = self.g + flows[0][0]
            self._schedule(conn, c)
        return was_idle

    def _top(self) -> tuple[float, int, Any, int] | None:
        h = self._heap
        while h and h[0][3] != self._conns[h[0][2]].version:
            heapq.heappop(h)
        return h[0] if h else None

    def next_departure(self) -> float | None:
        """Real time at which the next flow leaves if nothing else joins, or None."""
        h = self._heap
        conns = self._conns
        while h and h[0][3] != conns[h[0][2]].version:
            heapq.heappop(h)
        if not h:
            return None
        gap = h[0][0] - self.g
        gap = gap if gap > 0.0 else 0.0
        k = self.active_conns
        if self.capacity / k < self.max_rate:
            return self.t + gap * k / self.capacity
        return self.t + gap / self.max_rate

    def pop_head(self, now: float) -> Any:
        """Remove the departing flow at ``now`` (s) and return its payload; the same
        as :meth:`pop_next` without computing the next departure.

        Call only when a departure is due (at least one flow on the link).
        """
        k = self.active_conns
        dt = now - self.t
        if self.capacity / k < self.max_rate:
            self.g += dt * self.capacity / k
        else:
            self.g += dt * self.max_rate
        self.busy_s += dt
        self.t = now
        h = self._heap
        conns = self._conns
        while h[0][3] != conns[h[0][2]].version:
            heapq.heappop(h)
        head_end, _, key, _ = h[0]
        self.last_conn = key
        c = conns[key]
        size, payload = c.flows.popleft()
        self.bytes_done += size
        c.version += 1
        if c.flows:
            c.head_end = head_end + c.flows[0][0]
            heapq.heapreplace(h, (c.head_end, self._seq, key, c.version))
            self._seq += 1
        else:  # its entry, now stale, stays on top for refill() (or next_departure) to drop
            self.active_conns = k - 1
        return payload

    def refill(self, now: float, size_bytes: float, payload: Any, conn: Any) -> None:
        """:meth:`add` right after :meth:`pop_head` at the same ``now`` (s): the clocks
        are already there (advancing them by 0 s changes nothing), and the new head
        takes the place of the departed connection's stale entry when that is still
        on top (one heap operation instead of two; the same order, as entries order
        by ``(tag, sequence)``)."""
        c = self._conns[conn]
        flows = c.flows
        flows.append((size_bytes, payload))
        if len(flows) > 1:
            return
        self.active_conns += 1
        c.head_end = self.g + size_bytes
        c.version += 1
        entry = (c.head_end, self._seq, conn, c.version)
        self._seq += 1
        h = self._heap
        if h and h[0][2] is conn:  # stale: the connection's current entry is this one
            heapq.heapreplace(h, entry)
        else:
            heapq.heappush(h, entry)

    def pop_next(self, now: float) -> tuple[Any, Any, float | None]:
        """Pop the departing flow at ``now``; return (payload, connection, next departure):
        :meth:`pop_head` then :meth:`next_departure`, in one call.
        """
        payload = self.pop_head(now)
        return payload, self.last_conn, self.next_departure()

    def pop(self, now: float) -> Any:
        """Remove and return the payload of the next flow to leave (at time ``now``)."""
        self._advance(now)
        top = self._top()
        if top is None:
            raise RuntimeError("pop from an idle link")
        key = top[2]
        self.last_conn = key
        c = self._conns[key]
        size, payload = c.flows.popleft()
        self.bytes_done += size
        if c.flows:
            c.head_end = top[0] + c.flows[0][0]
        else:
            self.active_conns -= 1
        self._schedule(key, c)
        return payload


class FairLink:
    """One direction of a NIC shared fairly by connections that carry one flow at a time.

    :class:`PSLink` when no connection queues a second flow behind its first
    (a :class:`~sgdsim.simulation.connection.Connection` sends its next unit
    when the previous one has left): each flow's virtual finish tag
    ``G + bytes`` is fixed when it joins, so the heap of tags needs no
    per-connection queue and no stale entries but the one :meth:`pop_head`
    leaves on top for :meth:`refill` to replace. Tags, clock and departures
    are computed as :class:`PSLink` computes them, entries ordered by
    ``(tag, sequence)`` as there, so both give bit-identical times and order
    (virtual time: Demers, Keshav, Shenker, SIGCOMM 1989).

    Args:
        capacity_Bps: capacity in bytes/s (> 0).
        burst_bytes: depth of the link's token bucket, bytes (0: none; see
            :class:`TokenBucket`).

    Attributes:
        busy_s: time with at least one flow on the link, seconds.
        bytes_done: bytes of all flows that have left.
    """

    __slots__ = (
        "_heap",
        "_seq",
        "_stale",
        "bucket",
        "busy_s",
        "bytes_done",
        "capacity",
        "g",
        "k",
        "t",
    )

    def __init__(self, capacity_Bps: float, burst_bytes: float = 0.0) -> None:
        if not capacity_Bps > 0:
            raise ValueError(f"link capacity must be > 0 bytes/s, got {capacity_Bps}")
        self.capacity = float(capacity_Bps)
        self.bucket = TokenBucket(burst_bytes) if burst_bytes else None
        self.g = 0.0  # virtual clock: bytes served to each flow on the link
        self.t = 0.0
        self.k = 0  # flows on the link
        # (finish tag, sequence, bytes, payload) of every flow on the link
        self._heap: list[tuple[float, int, float, Any]] = []
        self._seq = 0
        self._stale = False  # the top entry is the flow pop_head removed
        self.busy_s = 0.0
        self.bytes_done = 0.0

    @property
    def active(self) -> int:
        """Number of flows on the link."""
        return self.k

    def add(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> bool:
        """A flow of ``size_bytes`` joins at ``now`` (s) on an idle connection ``conn``;
        True (every departure time changed)."""
        k = self.k
        if k:
            dt = now - self.t
            self.g += dt * self.capacity / k
            self.busy_s += dt
        elif self.bucket is not None:  # idle since t: the bucket filled meanwhile
            self.bucket.fill((now - self.t) * self.capacity)
        self.t = now
        self.refill(now, size_bytes, payload, conn)  # the clocks are at now
        return True

    def refill(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> float:
        """:meth:`add` right after :meth:`pop_head` at the same ``now`` (s): the
        clocks are there already; the new entry replaces the departed one's.

        Returns:
            The next departure, seconds (as :meth:`next_departure`).
        """
        g = self.g
        tag = g + size_bytes
        if self.bucket is not None:
            tag -= self.bucket.take(size_bytes)
        entry = (tag, self._seq, size_bytes, payload)
        self._seq += 1
        k = self.k = self.k + 1
        h = self._heap
        if self._stale:
            self._stale = False
            heapq.heapreplace(h, entry)
        else:
            heapq.heappush(h, entry)
        gap = h[0][0] - g
        return self.t + (gap if gap > 0.0 else 0.0) * k / self.capacity

    def set_capacity(self, now: float, capacity_Bps: float) -> None:
        """From ``now`` (s) on, the link sends at ``capacity_Bps`` (bytes/s, > 0);
        the clocks advance to ``now`` at the old rate first."""
        k = self.k
        if k:
            dt = now - self.t
            self.g += dt * self.capacity / k
            self.busy_s += dt
        elif self.bucket is not None:
            self.bucket.fill((now - self.t) * self.capacity)
        self.t = now
        self.capacity = capacity_Bps

    def next_departure(self) -> float | None:
        """Real time at which the next flow leaves if nothing else joins, or None."""
        h = self._heap
        if self._stale:
            self._stale = False
            heapq.heappop(h)
        if not h:
            return None
        gap = h[0][0] - self.g
        gap = gap if gap > 0.0 else 0.0
        return self.t + gap * self.k / self.capacity

    def pop_head(self, now: float) -> Any:
        """Remove the flow leaving at ``now`` (s) and return its payload.

        Call only when a departure is due (at least one flow on the link)."""
        h = self._heap
        if self._stale:
            heapq.heappop(h)
        k = self.k
        dt = now - self.t
        self.g += dt * self.capacity / k
        self.busy_s += dt
        self.t = now
        _, _, size, payload = h[0]
        self._stale = True
        self.k = k - 1
        self.bytes_done += size
        return payload


class SoloLink:
    """One direction of a NIC that a single connection uses, one flow at a time.

    :class:`PSLink` with one connection: processor sharing with ``k ≤ 1`` is a
    plain server, the flow leaving ``bytes / capacity`` after it joins. The
    virtual clock ``G`` is kept and the departure computed as
    :class:`PSLink` computes it (``t + (G_end − G) / C``, ``G_end = G + bytes``),
    so both give bit-identical times; without the heap, the per-connection
    queues and the entry versions. Used where one connection per direction
    exists (one worker, or every worker on one connection under the ``fifo``
    PS discipline), which sends its next flow only when the previous left.

    Args:
        capacity_Bps: capacity in bytes/s (> 0).
        burst_bytes: depth of the link's token bucket, bytes (0: none; see
            :class:`TokenBucket`).

    Attributes:
        busy_s: time with a flow on the link, seconds.
        bytes_done: bytes of all flows that have left.
    """

    __slots__ = (
        "bucket",
        "busy_s",
        "bytes_done",
        "capacity",
        "g",
        "head_end",
        "payload",
        "size",
        "t",
    )

    def __init__(self, capacity_Bps: float, burst_bytes: float = 0.0) -> None:
        if not capacity_Bps > 0:
            raise ValueError(f"link capacity must be > 0 bytes/s, got {capacity_Bps}")
        self.capacity = float(capacity_Bps)
        self.bucket = TokenBucket(burst_bytes) if burst_bytes else None
        self.g = 0.0  # bytes served since the start (PSLink's virtual clock at k = 1)
        self.t = 0.0
        self.head_end = 0.0  # G at which the flow on the link leaves
        self.size = 0.0
        self.payload: Any = None
        self.busy_s = 0.0
        self.bytes_done = 0.0

    @property
    def active(self) -> int:
        """Number of flows on the link (0 or 1)."""
        return 0 if self.payload is None else 1

    def add(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> bool:
        """A flow of ``size_bytes`` joins the idle link at ``now`` (s); True (its
        departure time is new).

        Raises:
            ValueError: a flow is on the link already, or ``payload`` is None.
        """
        if self.payload is not None or payload is None:
            raise ValueError("SoloLink carries one flow (payload not None) at a time")
        bucket = self.bucket
        if bucket is not None:  # idle since t: the bucket filled meanwhile
            bucket.fill((now - self.t) * self.capacity)
        self.t = now
        self.size = size_bytes
        self.payload = payload
        self.head_end = self.g + size_bytes
        if bucket is not None:
            self.head_end -= bucket.take(size_bytes)
        return True

    def refill(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> float:
        """:meth:`add` right after :meth:`pop_head` at the same ``now`` (s); returns
        the flow's departure, seconds (as :meth:`next_departure`)."""
        self.size = size_bytes
        self.payload = payload
        g = self.g
        end = g + size_bytes
        if self.bucket is not None:
            end -= self.bucket.take(size_bytes)
        self.head_end = end
        gap = end - g
        return self.t + (gap if gap > 0.0 else 0.0) / self.capacity

    def set_capacity(self, now: float, capacity_Bps: float) -> None:
        """From ``now`` (s) on, the link sends at ``capacity_Bps`` (bytes/s, > 0);
        the clock advances to ``now`` at the old rate first."""
        if self.payload is not None:
            dt = now - self.t
            self.g += dt * self.capacity
            self.busy_s += dt
        elif self.bucket is not None:
            self.bucket.fill((now - self.t) * self.capacity)
        self.t = now
        self.capacity = capacity_Bps

    def next_departure(self) -> float | None:
        """Real time at which the flow leaves, or None if the link is idle."""
        if self.payload is None:
            return None
        gap = self.head_end - self.g
        return self.t + (gap if gap > 0.0 else 0.0) / self.capacity

    def pop_head(self, now: float) -> Any:
        """Remove the flow leaving at ``now`` (s); return its payload."""
        dt = now - self.t
        self.g += dt * self.capacity
        self.busy_s += dt
        self.t = now
        self.bytes_done += self.size
        payload = self.payload
        self.payload = None
        return payload


class _Flow:
    __slots__ = ("a", "b", "conn", "left", "payload", "rate", "seq", "size")

    def __init__(self, size: float, payload: Any, conn: Any, a: int, b: int, seq: int) -> None:
        self.size = size
        self.left = size  # bytes still to send
        self.payload = payload
        self.conn = conn
        self.a = a  # the two NICs (resources) the flow crosses
        self.b = b
        self.rate = 0.0
        self.seq = seq


class MaxMinLink:
    """One direction of a network of NICs, shared max-min fairly.

    Every flow crosses two NICs ("resources", each of capacity ``capacity_Bps``
    in this direction): for PS → worker the shard's NIC and the worker node's,
    for worker → PS the other way round. With several PS shards a worker talks
    to all of them, so its own NIC can bind as well as a shard's, and the one
    common bottleneck of :class:`PSLink` no longer exists. Rates are the
    max-min fair allocation, found by progressive filling (water-filling:
    every unfrozen flow's rate grows equally until a NIC is full, whose flows
    are then frozen; Bertsekas and Gallager, *Data Networks*, 2nd ed., 1992,
    §6.5.2), recomputed whenever a flow joins or leaves: O(R·r + F) for R
    NICs, r filling rounds and F flows.

    Each connection carries one flow at a time (the caller's per-connection
    queue hands it the next unit when the previous one leaves), which is how
    TensorFlow's one gRPC channel per worker/PS pair behaves.

    Args:
        capacity_Bps: capacity of every NIC in this direction, bytes/s (> 0).
        resources: number of NICs.

    Attributes:
        busy_s: (resources,) time with at least one flow on each NIC, seconds.
        nic_bytes: (resources,) bytes of the flows that left, per NIC.
        bytes_done: bytes of all flows that left.
    """

    def __init__(self, capacity_Bps: float, resources: int) -> None:
        if not capacity_Bps > 0:
            raise ValueError(f"link capacity must be > 0 bytes/s, got {capacity_Bps}")
        self.capacity = float(capacity_Bps)
        self.n_res = resources
        self.t = 0.0
        self._flows: dict[Any, _Flow] = {}
        self._seq = 0
        self._next: _Flow | None = None  # flow leaving first at the current rates
        self._t_next: float | None = None
        self._users = [0] * resources  # flows on each NIC
        self.busy_s = [0.0] * resources
        self.nic_bytes = [0.0] * resources
        self.bytes_done = 0.0

    @property
    def active(self) -> int:
        """Number of flows on the link."""
        return len(self._flows)

    def _advance(self, now: float) -> None:
        dt = now - self.t
        if dt > 0.0:
            for f in self._flows.values():
                f.left -= f.rate * dt
            users, busy = self._users, self.busy_s
            for r in range(self.n_res):
                if users[r]:
                    busy[r] += dt
        self.t = now

    def _fill(self) -> None:
        """Max-min fair rates by progressive filling; then the next departure."""
        flows = list(self._flows.values())
        self._next, self._t_next = None, None
        if not flows:
            return
        cap = [self.capacity] * self.n_res
        n = list(self._users)
        tol = self.capacity * 1e-9
        level = 0.0
        active = flows
        while active:
            inc, full = math.inf, -1
            for r in range(self.n_res):
                if n[r] and cap[r] / n[r] < inc:
                    inc, full = cap[r] / n[r], r
            level += inc
            saturated = [False] * self.n_res
            for r in range(self.n_res):
                if n[r]:
                    cap[r] -= inc * n[r]
                    saturated[r] = r == full or cap[r] <= tol
            rest = []
            for f in active:
                if saturated[f.a] or saturated[f.b]:
                    f.rate = level
                    n[f.a] -= 1
                    n[f.b] -= 1
                else:
                    rest.append(f)
            active = rest
        best, t_best = None, math.inf
        for f in flows:
            t = (f.left if f.left > 0.0 else 0.0) / f.rate
            if t < t_best:  # ties: the flow that joined first (dict order)
                best, t_best = f, t
        self._next, self._t_next = best, self.t + t_best

    def add(
        self, now: float, size_bytes: float, payload: Any, conn: Any, route: tuple[int, int]
    ) -> bool:
        """A flow of ``size_bytes`` on idle connection ``conn`` crossing NICs ``route``.

        Returns:
            True: every departure time changed (ask :meth:`next_departure` again).

        Raises:
            ValueError: the connection already carries a flow.
        """
        if conn in self._flows:
            raise ValueError(f"connection {conn!r} already carries a flow")
        self._advance(now)
        a, b = route
        self._flows[conn] = _Flow(size_bytes, payload, conn, a, b, self._seq)
        self._seq += 1
        self._users[a] += 1
        self._users[b] += 1
        self._fill()
        return True

    def next_departure(self) -> float | None:
        """Real time at which the next flow leaves if nothing else joins, or None."""
        return self._t_next

    def pop_next(self, now: float) -> tuple[Any, Any, float | None]:
        """Remove the departing flow at ``now``; return (payload, connection, next departure)."""
        f = self._next
        if f is None:
            raise RuntimeError("pop from an idle link")
        self._advance(now)
        del self._flows[f.conn]
        self._users[f.a] -= 1
        self._users[f.b] -= 1
        self.nic_bytes[f.a] += f.size
        self.nic_bytes[f.b] += f.size
        self.bytes_done += f.size
        self._fill()
        return f.payload, f.conn, self._t_next

    def pop_head(self, now: float) -> Any:
        """Remove the departing flow at ``now``; return its payload."""
        return self.pop_next(now)[0]


class RoundRobinLink:
    """One direction of a NIC whose connections take turns of ``quantum_bytes``.

    TCP flows through one bottleneck share it fairly only over many round
    trips: over tens of milliseconds the flow that is ahead keeps most of the
    rate. On this project's testbed two 248 KB transfers started together
    finished after 24 and 39 ms at 100 Mbit/s (20 ms alone, 40 ms both), and
    two 1 MB transfers at 200 Mbit/s 15–20 ms apart (each alone 40 ms). A
    round robin with a quantum (deficit round robin, Shreedhar and Varghese,
    SIGCOMM 1995) has both properties: the connection whose turn it is sends
    at the full capacity for up to ``quantum_bytes``, then the next busy one
    does; transfers shorter than a quantum go one after another, longer ones
    share the link fairly in the long run. A quantum of 0+ is processor
    sharing (:class:`PSLink`), an infinite one FIFO between connections.

    Same interface as :class:`PSLink` for one flow per connection at a time,
    as a :class:`~sgdsim.simulation.connection.Connection` uses it: a
    connection whose flow left keeps the rest of its turn if its next flow
    joins at the same instant.

    Args:
        capacity_Bps: capacity in bytes/s (> 0).
        quantum_bytes: bytes a connection sends per turn (> 0).

    Attributes:
        busy_s: time with at least one flow on the link, seconds.
        bytes_done: bytes of all flows that have left.
    """

    def __init__(self, capacity_Bps: float, quantum_bytes: float) -> None:
        if not capacity_Bps > 0:
            raise ValueError(f"link capacity must be > 0 bytes/s, got {capacity_Bps}")
        if not quantum_bytes > 0:
            raise ValueError(f"quantum must be > 0 bytes, got {quantum_bytes}")
        self.capacity = float(capacity_Bps)
        self.quantum = float(quantum_bytes)
        self.t = 0.0
        self.busy_s = 0.0
        self.bytes_done = 0.0
        self._flows: dict[Any, deque[list[Any]]] = {}  # conn -> [[left, size, payload], ...]
        self._order: deque[Any] = deque()  # connections in turn order, current first
        self._credit = self.quantum  # bytes the current connection may still send

    @property
    def active(self) -> int:
        """Number of flows on the link."""
        return sum(len(f) for f in self._flows.values())

    def _plan(self) -> tuple[float, Any] | None:
        """(seconds from now, connection) of the next flow to leave, or None."""
        order = [c for c in self._order if self._flows.get(c)]
        if not order:
            return None
        left = {c: self._flows[c][0][0] for c in order}
        cur = self._order[0]
        credit = self._credit if order[0] == cur else self.quantum
        i, dt = 0, 0.0
        while True:
            c = order[i]
            if left[c] <= credit:
                return dt + left[c] / self.capacity, c
            dt += credit / self.capacity
            left[c] -= credit
            i = (i + 1) % len(order)
            credit = self.quantum

    def _advance(self, now: float) -> None:
        budget = (now - self.t) * self.capacity
        if budget > 0 and any(self._flows.get(c) for c in self._order):
            self.busy_s += now - self.t
        while budget > 1e-9 * self.capacity and self._order:
            c = self._order[0]
            fl = self._flows.get(c)
            if not fl:  # its turn passes: nothing to send
                self._order.popleft()
                self._credit = self.quantum
                continue
            head = fl[0]
            x = min(budget, self._credit, head[0])
            head[0] -= x
            self._credit -= x
            budget -= x
            if self._credit <= 1e-9 * self.quantum and head[0] > 1e-9 * head[1]:
                self._order.rotate(-1)
                self._credit = self.quantum
            elif head[0] <= 1e-9 * head[1]:
                break  # a departure: the caller pops it
        self.t = now

    def add(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> bool:
        """A flow joins connection ``conn`` at ``now``; True (departure times changed)."""
        self._advance(now)
        flow = [float(size_bytes), float(size_bytes), payload]
        self._flows.setdefault(conn, deque()).append(flow)
        if conn not in self._order:
            self._order.append(conn)
        return True

    def next_departure(self) -> float | None:
        """Real time at which the next flow leaves if nothing else joins, or None."""
        p = self._plan()
        return None if p is None else self.t + p[0]

    def pop_next(self, now: float) -> tuple[Any, Any, float | None]:
        """Remove the flow leaving at ``now``; return (payload, connection, next departure)."""
        p = self._plan()
        if p is None:
            raise RuntimeError("pop from an idle link")
        conn = p[1]
        self._advance(now)
        while self._order[0] != conn:  # the turn reached the departing connection
            self._order.rotate(-1)
            self._credit = self.quantum
        _, size, payload = self._flows[conn].popleft()
        self.bytes_done += size
        return payload, conn, self.next_departure()

    def pop_head(self, now: float) -> Any:
        """Remove the flow leaving at ``now``; return its payload."""
        return self.pop_next(now)[0]
