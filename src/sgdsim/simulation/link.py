"""A shared link under processor sharing between connections, with virtual time.

TensorFlow carries every tensor between one worker and one PS over a single
gRPC channel (one HTTP/2 connection), so the PS NIC is shared fairly between
*connections*, and each connection's share between the tensors in flight on
it (HTTP/2 streams interleave). With one PS whose NIC has the same capacity as
every worker's, the PS NIC is the only bottleneck in each direction, and this
two-level processor sharing is its max-min fair allocation: each of the ``k``
active connections gets ``C / k`` bytes/s, each of the ``m_w`` flows of
connection ``w`` gets ``C / (k · m_w)``.

Per-tensor fairness would instead give a worker a share proportional to its
number of tensors in flight, which drags workers into lock-step; the
per-connection rule does not.

Virtual time (Kleinrock, *Queueing Systems Vol. 2*, 1976, §4.4; the virtual
clock of fair queueing, Demers, Keshav, Shenker, SIGCOMM 1989): a global clock
``G`` counts bytes served to each active connection and grows at ``C / k``;
connection ``w`` has its own clock ``V_w`` counting bytes served to each of its
flows, growing at ``dG / m_w``. A flow of ``b`` bytes joining at ``V_w = v``
leaves when ``V_w`` reaches ``v + b``. Each connection's next departure, in
``G`` units, changes only when that connection's flows change, so a heap of
connections gives O(log n) per arrival or departure.
"""

from __future__ import annotations

import heapq
from typing import Any


class _Conn:
    __slots__ = ("flows", "g_ref", "v", "version")

    def __init__(self) -> None:
        self.v = 0.0  # bytes served to each flow of this connection
        self.g_ref = 0.0  # G when v was last brought up to date
        self.flows: list[tuple[float, int, float, Any]] = []  # (finish tag, seq, bytes, payload)
        self.version = 0


class PSLink:
    """One direction of a NIC shared by two-level processor sharing.

    Args:
        capacity_Bps: capacity in bytes/s (> 0).

    Attributes:
        busy_s: time with at least one flow on the link, seconds.
        bytes_done: bytes of all flows that have left, bytes.
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
        "t",
    )

    def __init__(self, capacity_Bps: float) -> None:
        if not capacity_Bps > 0:
            raise ValueError(f"link capacity must be > 0 bytes/s, got {capacity_Bps}")
        self.capacity = float(capacity_Bps)
        self.g = 0.0
        self.t = 0.0
        self.active_conns = 0
        self._conns: dict[Any, _Conn] = {}
        self._heap: list[
            tuple[float, int, Any, int]
        ] = []  # (G at next departure, seq, conn, version)
        self._seq = 0
        self.busy_s = 0.0
        self.bytes_done = 0.0

    @property
    def active(self) -> int:
        """Number of flows on the link."""
        return sum(len(c.flows) for c in self._conns.values())

    def _advance(self, now: float) -> None:
        if self.active_conns:
            dt = now - self.t
            self.g += dt * self.capacity / self.active_conns
            self.busy_s += dt
        self.t = now

    def _sync(self, c: _Conn) -> None:
        if c.flows:
            c.v += (self.g - c.g_ref) / len(c.flows)
        c.g_ref = self.g

    def _schedule(self, key: Any, c: _Conn) -> None:
        c.version += 1
        if c.flows:
            g_dep = self.g + max(0.0, c.flows[0][0] - c.v) * len(c.flows)
            heapq.heappush(self._heap, (g_dep, self._seq, key, c.version))
            self._seq += 1

    def add(self, now: float, size_bytes: float, payload: Any, conn: Any = 0) -> None:
        """A flow of ``size_bytes`` joins connection ``conn`` at time ``now`` (seconds)."""
        self._advance(now)
        c = self._conns.get(conn)
        if c is None:
            c = self._conns[conn] = _Conn()
        self._sync(c)
        if not c.flows:
            self.active_conns += 1
        heapq.heappush(c.flows, (c.v + size_bytes, self._seq, size_bytes, payload))
        self._seq += 1
        self._schedule(conn, c)

    def _top(self) -> tuple[float, int, Any, int] | None:
        h = self._heap
        while h and h[0][3] != self._conns[h[0][2]].version:
            heapq.heappop(h)
        return h[0] if h else None

    def next_departure(self) -> float | None:
        """Real time at which the next flow leaves if nothing else joins, or None."""
        top = self._top()
        if top is None:
            return None
        return self.t + max(0.0, top[0] - self.g) * self.active_conns / self.capacity

    def pop(self, now: float) -> Any:
        """Remove and return the payload of the next flow to leave (at time ``now``)."""
        self._advance(now)
        top = self._top()
        if top is None:
            raise RuntimeError("pop from an idle link")
        key = top[2]
        c = self._conns[key]
        self._sync(c)
        tag, _, size, payload = heapq.heappop(c.flows)
        c.v = max(c.v, tag)
        self.bytes_done += size
        if not c.flows:
            self.active_conns -= 1
        self._schedule(key, c)
        return payload
