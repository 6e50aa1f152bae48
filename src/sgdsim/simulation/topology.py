"""Where transfers and compute run: the network's hosts and links, and a node's cores.

A topology places the hosts (PS shards, worker nodes) on NICs and gives each
transfer its route, the NICs it crosses; the links of
:mod:`sgdsim.simulation.link` share each NIC's capacity among the flows on it.
The model's objects see one narrow interface: :meth:`StarTopology.transfer`
puts a flow from one host to another on the network, and when its last byte
arrives the topology calls ``on_arrival(now, payload)`` of the flow's sender
object. A ring or a hierarchical all-reduce is another topology with the same
interface (hosts on a ring, each hop a transfer between neighbours).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from sgdsim.simulation.core import DEPART, Simulation
from sgdsim.simulation.link import FairLink, MaxMinLink, PSLink, RoundRobinLink, SoloLink
from sgdsim.simulation.workload import Network

DOWN, UP = 0, 1  # PS → workers (pulls), workers → PS (pushes)


class Receiver(Protocol):
    """What a transfer's owner offers the topology: it is told when a flow has arrived,
    and may hand back its next unit, which goes on the wire at once on its ``route``;
    such a unit's first item is its size in bytes (as a policy's
    :data:`~sgdsim.simulation.policies.Unit`)."""

    def on_arrival(self, now: float, unit: Any) -> Any | None: ...

    def route(self, unit: Any) -> tuple[int, int]: ...


class _Port:
    """Schedules the next departure of one link, ``action(t, version)``; stale ones
    are skipped by version."""

    __slots__ = ("action", "link", "sim", "version")

    def __init__(self, sim: Simulation, link: Any, action: Callable[[float, Any], Any]) -> None:
        self.sim = sim
        self.link = link
        self.action = action
        self.version = 0

    def reschedule(self) -> None:
        self.version += 1
        t = self.link.next_departure()
        if t is not None:
            self.sim.schedule(t, DEPART, self.action, self.version)


class StarTopology:
    """PS shards and worker nodes on one switch, one full-duplex NIC per host.

    Hosts ``0 … shards − 1`` are the PS shards, ``shards … shards + nodes − 1``
    the worker nodes. A pull from shard ``s`` to node ``j`` crosses the
    shard's NIC out and the node's NIC in; a push the other way. Every NIC has
    the network's capacity per direction. With one shard its NIC is the only
    bottleneck in each direction, and the link is the virtual-time
    :class:`~sgdsim.simulation.link.FairLink` (:class:`~sgdsim.simulation.link.PSLink`'s
    processor sharing between connections, each sending one flow at a time
    as a :class:`~sgdsim.simulation.connection.Connection` does) or, given a quantum, the
    :class:`~sgdsim.simulation.link.RoundRobinLink`, or with one connection
    per direction (``solo``) the plain server
    :class:`~sgdsim.simulation.link.SoloLink`; with several shards a
    node's NIC can bind too, and each direction is a
    :class:`~sgdsim.simulation.link.MaxMinLink` over all NICs.

    With a ``network.two_way_share`` below 1 (one shard, no quantum), each PS
    NIC direction sends at that share of its capacity while the other
    direction has a flow on it, at the full capacity otherwise; the rate
    changes at the moment the other direction turns busy or idle.

    While an arrival is being handled, links whose next departure changes are
    rescheduled once when it is done, in link order (the departing link
    first among equals), which fixes the order of simultaneous events.

    Args:
        sim: the event loop.
        network: NIC capacity (bytes/s per direction), latency (s), the PS
            NIC's token bucket (``burst_bytes``; :class:`~sgdsim.simulation.link.TokenBucket`)
            and two-way share (``two_way_share``).
        shards: PS shards (≥ 1).
        nodes: worker nodes (≥ 1).
        quantum_bytes: with one shard, the round-robin quantum (0: processor sharing).
        solo: with one shard and no quantum, one connection per direction uses
            the link, sending one flow at a time.

    Raises:
        ValueError: a token bucket or a two-way share below 1 with several
            shards or a quantum.
    """

    __slots__ = (
        "_adds",
        "_busy",
        "_deferred",
        "_ports",
        "_refill",
        "_share",
        "capacity",
        "links",
        "nodes",
        "shards",
    )

    def __init__(
        self,
        sim: Simulation,
        network: Network,
        shards: int,
        nodes: int,
        quantum_bytes: float,
        solo: bool = False,
    ) -> None:
        self.shards = shards
        self.nodes = nodes
        cap, burst = network.bandwidth_Bps, network.burst_bytes
        for what, value in (
            ("a token bucket (burst_bytes)", burst),
            ("a two-way share below 1 (two_way_share)", network.two_way_share != (1.0, 1.0)),
        ):
            if value and (shards > 1 or quantum_bytes > 0):
                raise ValueError(
                    f"network {network.name}: {what} needs one PS shard and no link quantum"
                )
        self.capacity = cap
        # the two directions' shares while the other carries data; None: no coupling
        self._share = None if network.two_way_share == (1.0, 1.0) else network.two_way_share
        self._busy = [False, False]
        links: list[Any]
        if shards > 1:
            links = [MaxMinLink(cap, shards + nodes) for _ in (DOWN, UP)]
        elif quantum_bytes > 0:
            links = [RoundRobinLink(cap, quantum_bytes) for _ in (DOWN, UP)]
        elif solo:
            links = [SoloLink(cap, burst), SoloLink(cap, burst)]
        else:
            links = [FairLink(cap, burst), FairLink(cap, burst)]
        self.links = links
        self._refill = isinstance(links[0], FairLink | SoloLink)  # refill after pop_head
        self._adds = [link.add for link in links]
        # a departure event calls self._depart(d, t, version), without a Python wrapper
        self._ports = [
            _Port(sim, link, functools.partial(self._depart, d)) for d, link in enumerate(links)
        ]
        self._deferred = 0  # during an arrival: bit d set if link d must be rescheduled

    def transfer(
        self, now: float, src: int, dst: int, size_bytes: float, unit: Any, conn: Receiver
    ) -> None:
        """A flow of ``size_bytes`` from host ``src`` to host ``dst`` joins connection
        ``conn`` at ``now`` (s); ``conn.on_arrival(t, unit)`` when its last byte arrives
        (the unit it returns, if any, follows on the same route at ``t``)."""
        shards = self.shards
        d = DOWN if src < shards else UP
        if shards > 1:
            route = (src, dst) if d == DOWN else (dst, src)
            self._adds[d](now, size_bytes, (conn, unit), conn, route)
        else:
            self._adds[d](now, size_bytes, (conn, unit), conn)
        changed = 1 << d
        if self._share is not None:
            changed |= self._couple(now)
        if self._deferred:
            self._deferred |= changed
        else:
            if changed & 1:
                self._ports[DOWN].reschedule()
            if changed & 2:
                self._ports[UP].reschedule()

    @property
    def two_way(self) -> bool:
        """Whether a direction's rate drops while the other carries data
        (``Network.two_way_share``)."""
        return self._share is not None

    def _couple(self, now: float) -> int:
        """Set each direction's rate for whether the other carries data at ``now``
        (s); bit ``d`` set for each link whose rate changed."""
        share, busy, links = self._share, self._busy, self.links
        assert share is not None
        changed = 0
        for d in (DOWN, UP):
            other = links[1 - d].active > 0
            if other != busy[1 - d]:
                links[d].set_capacity(now, self.capacity * (share[d] if other else 1.0))
                changed |= 1 << d
        busy[DOWN], busy[UP] = links[DOWN].active > 0, links[UP].active > 0
        return changed

    def _depart(self, d: int, now: float, version: int) -> bool:
        """Link ``d``'s next departure at ``now``. When the arrival changed no other
        link and the link's next departure precedes every pending event, it is
        taken at once, as the event loop would take it next (same order, no heap)."""
        port = self._ports[d]
        if version != port.version:
            return True  # stale: the link changed since
        link, sim, bit = port.link, port.sim, 1 << d
        refill, events = self._refill, sim.heap
        while True:
            conn, unit = link.pop_head(now)
            self._deferred = bit
            nxt = conn.on_arrival(now, unit)
            if nxt is None:
                t = link.next_departure()
            elif refill:  # the connection's next unit, on the same link
                t = link.refill(now, nxt[0], (conn, nxt), conn)
            else:
                src, dst = conn.route(nxt)
                self.transfer(now, src, dst, nxt[0], nxt, conn)
                t = link.next_departure()
            if self._share is not None:
                changed = self._couple(now)
                if changed & bit:
                    t = link.next_departure()
                self._deferred |= changed
            deferred = self._deferred
            self._deferred = 0
            if deferred != bit:
                break
            if t is None or (events and t >= events[0][0]):  # not before the next event
                port.version += 1  # as port.reschedule, with t known
                if t is not None:
                    sim.schedule(t, DEPART, port.action, port.version)
                return False
            now = sim.now = t
            sim.events += 1
        if deferred & 1:  # in link order, DOWN first
            self._ports[DOWN].reschedule()
        if deferred & 2:
            self._ports[UP].reschedule()
        return False

    def bytes_done(self, d: int) -> float:
        """Bytes carried in direction ``d`` (DOWN or UP)."""
        return float(self.links[d].bytes_done)

    def ps_busy_s(self, d: int) -> float:
        """Seconds the PS NIC was busy in direction ``d``; mean over shards."""
        link = self.links[d]
        if self.shards > 1:
            return float(sum(link.busy_s[: self.shards]) / self.shards)
        return float(link.busy_s)

    def nic_stats(self) -> dict[str, tuple[float, float]]:
        """``{nic: (bytes, busy seconds)}`` of every NIC the topology models."""
        down, up = self.links
        k = self.shards
        if k == 1:
            return {"ps0.out": (down.bytes_done, down.busy_s), "ps0.in": (up.bytes_done, up.busy_s)}
        nic: dict[str, tuple[float, float]] = {}
        for s in range(k):
            nic[f"ps{s}.out"] = (down.nic_bytes[s], down.busy_s[s])
            nic[f"ps{s}.in"] = (up.nic_bytes[s], up.busy_s[s])
        for j in range(self.nodes):
            nic[f"node{j}.in"] = (down.nic_bytes[k + j], down.busy_s[k + j])
            nic[f"node{j}.out"] = (up.nic_bytes[k + j], up.busy_s[k + j])
        return nic


class NodeCores:
    """The cores of one worker node, shared by the work of the workers placed there.

    Limited processor sharing (:class:`~sgdsim.simulation.link.PSLink` with
    capacity ``slots`` and each job served at most at rate 1): while ``k``
    jobs run, each progresses at ``min(1, slots / k)`` seconds of profiled
    work per second.

    Args:
        sim: the event loop.
        slots: jobs that run at full speed at once (> 0).
    """

    __slots__ = ("_port",)

    def __init__(self, sim: Simulation, slots: float) -> None:
        self._port = _Port(sim, PSLink(slots, 1.0), self._depart)

    def run(self, now: float, work_s: float, done: Callable[[float], None], key: Any) -> None:
        """Start ``work_s`` seconds of work for job ``key`` at ``now``; ``done(t)`` at its end."""
        port = self._port
        if port.link.add(now, work_s, done, key):
            port.reschedule()

    def _depart(self, now: float, version: int) -> bool:
        port = self._port
        if version != port.version:
            return True
        done, _, t_next = port.link.pop_next(now)
        port.version += 1
        if t_next is not None:
            port.sim.schedule(t_next, DEPART, self._depart, port.version)
        done(now)
        return False
