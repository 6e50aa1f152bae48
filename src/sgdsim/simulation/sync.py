"""Synchronous SGD on the event loop: the ``sync_ps`` and ``allreduce`` modes.

Both modes hold every worker in lockstep: no worker starts step ``k + 1``
before every worker's step-``k`` gradients are aggregated. On a symmetric
cluster (identical workers, identical NICs, the switch non-blocking) every
worker then does the same thing at the same time, so the simulator runs one
*representative* worker whose share of each shared resource is what N
identical flows get from it:

- ``sync_ps`` (TensorFlow's ``SyncReplicasOptimizer``): each worker pulls the
  parameters, computes, and pushes each gradient when produced (WFBP); the PS
  accumulates the N gradients of each variable, and once all are in, applies
  the averaged update and releases every worker's next step. The parameter
  server's NIC carries N identical flows, each at ``1/N`` of its capacity
  under fair sharing (processor sharing is exact for identical flows that
  start together); its CPU runs N accumulations per gradient. The
  representative is the asynchronous worker of :mod:`sgdsim.simulation.engine`
  on a NIC of ``bandwidth / N`` with ``N × update`` per push, and the apply
  of all updates (``Σ update``) as part of the step's end: the same core,
  topology, connections, policies and worker state machine as ``async``.
- ``allreduce`` (Horovod, PyTorch DDP, ``MultiWorkerMirroredStrategy``): the
  gradients, grouped by a fusion rule (:data:`FUSIONS`), are all-reduced one
  group after another on one communication stream (:class:`CommStream`),
  each group once its last gradient is produced; the step ends when the last
  group is reduced and the update applied. A ring all-reduce on a
  non-blocking switch gives each NIC exactly one flow per direction, so its
  duration is the α–β cost of :class:`Ring` (:func:`sgdsim.simulation.dag.ring_allreduce_s`).

Workers that start at different times meet at the first aggregation: the
representative starts when the last worker does.

Every worker reports the representative's step ends, so throughput (worker
steps per second, all workers together) and the protocols' scoring are as
in ``async``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sgdsim.simulation.core import SEG_END, STEP_END, STEP_START, Simulation
from sgdsim.simulation.dag import fixed_buckets, mgwfbp_groups
from sgdsim.simulation.workload import Network, Workload

#: The modes every entry point accepts; ``async`` is :mod:`sgdsim.simulation.async_ps`.
MODES = ("async", "sync_ps", "allreduce")
SYNC_MODES = ("sync_ps", "allreduce")
#: Fusion rules of ``allreduce`` (the config's ``fusions``, stored as the point's policy).
FUSIONS = ("single", "none", "buckets", "horovod", "mgwfbp")
#: All-reduce algorithms (``simulation.allreduce.algorithm``).
ALGORITHMS = ("ring", "hierarchical")


@dataclass(frozen=True)
class CollectiveSettings:
    """How ``allreduce`` mode groups and reduces gradients (config ``simulation.allreduce``).

    Attributes:
        algorithm: ``ring`` (one flat ring) or ``hierarchical`` (reduce-scatter in
            each node, ring between nodes, all-gather in each node).
        bucket_bytes, first_bucket_bytes: caps of fusion ``buckets``, bytes.
        horovod_fusion_bytes: fusion buffer of fusion ``horovod``, bytes.
        horovod_cycle_s: cycle time of fusion ``horovod``, seconds.
        message_overhead_s: software cost of one ring message, seconds (added to
            the network's latency to make α).
        gpus_per_node: workers per node (≥ 1); ring hops inside a node use ``intra_node``.
        intra_node: the interconnect between the workers of one node (None: the
            network's NIC, as for workers on separate hosts).
    """

    algorithm: str = "ring"
    bucket_bytes: float = 25 * 2**20
    first_bucket_bytes: float = 2**20
    horovod_fusion_bytes: float = 64 * 2**20
    horovod_cycle_s: float = 0.005
    message_overhead_s: float = 0.0
    gpus_per_node: int = 1
    intra_node: Network | None = None


@dataclass(frozen=True)
class Ring:
    """Where an all-reduce runs: P workers, ``g`` per node, and the α–β cost of one.

    α of a hop is the link's latency plus ``message_overhead_s``; β is 1 /
    its rate (bytes/s). A flat ``ring`` of P ranks, ranks of a node adjacent,
    moves ``bytes / P`` per hop in each of its ``2(P − 1)`` steps; every hop
    runs at once, and on a non-blocking switch each NIC carries one of them per
    direction, so a step lasts as long as its slowest hop (Patarasuk and Yuan,
    JPDC 69(2), 2009): ``2(P−1) · max(α + bytes/(P·B))`` over the hop kinds.
    ``hierarchical`` (NCCL's and Horovod's two-level all-reduce; Jia et al.,
    "Highly Scalable Deep Learning Training System with Mixed-Precision",
    arXiv 1807.11205, 2018) reduce-scatters inside each node over the
    interconnect (``g − 1`` steps of ``bytes/g``), all-reduces between the
    ``n`` nodes (``2(n − 1)`` steps of ``bytes/n`` through each node's NIC)
    and all-gathers inside each node (``g − 1`` steps of ``bytes/g``).

    Attributes:
        workers: P ≥ 1.
        network: the NICs between nodes.
        settings: algorithm, workers per node, interconnect, message overhead.
    """

    workers: int
    network: Network
    settings: CollectiveSettings

    @property
    def per_node(self) -> int:
        """Workers on one node (``g``, at most P)."""
        return max(1, min(self.settings.gpus_per_node, self.workers))

    @property
    def nodes(self) -> int:
        """Nodes ``n = ⌈P / g⌉``."""
        return -(-self.workers // self.per_node)

    def _hop(self, link: Network, nbytes: float) -> float:
        return link.latency_s + self.settings.message_overhead_s + nbytes / link.bandwidth_Bps

    def allreduce_s(self, nbytes: float) -> float:
        """Seconds of one all-reduce of ``nbytes`` bytes (0 with one worker)."""
        p, g, n = self.workers, self.per_node, self.nodes
        if p == 1:
            return 0.0
        intra = self.settings.intra_node or self.network
        if self.settings.algorithm == "hierarchical" and g > 1:
            inside = 2 * (g - 1) * self._hop(intra, nbytes / g)
            between = 2 * (n - 1) * self._hop(self.network, nbytes / n) if n > 1 else 0.0
            return inside + between
        chunk = nbytes / p
        step = self._hop(self.network, chunk) if n > 1 else 0.0
        if g > 1:
            step = max(step, self._hop(intra, chunk))
        return 2 * (p - 1) * step

    def nic_bytes(self, nbytes: float) -> float:
        """Bytes one node's NIC sends (and receives) per all-reduce of ``nbytes``."""
        p, n = self.workers, self.nodes
        if n == 1:
            return 0.0
        if self.settings.algorithm == "hierarchical" and self.per_node > 1:
            return 2 * (n - 1) / n * nbytes
        return 2 * (p - 1) / p * nbytes


class CommStream:
    """The communication stream: all-reduces one at a time in the order enqueued
    (NCCL's and Horovod's one stream of collectives; MG-WFBP's single channel).

    Args:
        sim: the event loop.
        ring: the all-reduce's cost.

    Attributes:
        busy_s: seconds the stream ran all-reduces.
        nic_bytes: bytes one node's NIC sent.
    """

    __slots__ = ("_free_at", "busy_s", "nic_bytes", "ring", "sim")

    def __init__(self, sim: Simulation, ring: Ring) -> None:
        self.sim = sim
        self.ring = ring
        self._free_at = 0.0
        self.busy_s = 0.0
        self.nic_bytes = 0.0

    def allreduce(self, now: float, nbytes: float, done: Callable[[float, Any], Any]) -> None:
        """All-reduce ``nbytes`` once the stream is free; ``done(t, None)`` when reduced."""
        d = self.ring.allreduce_s(nbytes)
        end = max(now, self._free_at) + d
        self._free_at = end
        self.busy_s += d
        self.nic_bytes += self.ring.nic_bytes(nbytes)
        self.sim.schedule(end, SEG_END, done)


@dataclass(frozen=True)
class Group:
    """Gradients all-reduced together: ready ``ready_s`` after the step starts, bytes."""

    ready_s: float
    nbytes: float


def gradients(workload: Workload, speed: float = 1.0) -> list[Group]:
    """Each gradient as produced: (seconds after step start, bytes), in production
    order (by the segment that produces it, then by index). ``speed`` divides the
    compute time (co-located workers sharing cores)."""
    ends = np.concatenate([[0.0], np.cumsum(workload.seg_dur_s)]) / speed
    seg = workload.push_seg.tolist()
    order = sorted(range(len(seg)), key=lambda q: (seg[q], q))
    return [Group(float(ends[seg[q] + 1]), float(workload.push_bytes[q])) for q in order]


def _merge(grads: list[Group], groups: list[list[int]]) -> list[Group]:
    """Groups of gradient indices as all-reduces: ready with their last gradient."""
    return [
        Group(max(grads[i].ready_s for i in g), sum(grads[i].nbytes for i in g)) for g in groups
    ]


def fusion_groups(fusion: str, grads: list[Group], ring: Ring) -> list[Group]:
    """The all-reduces of one step under a fusion rule other than ``horovod``
    (whose groups depend on the clock; see :class:`HorovodCycle`).

    - ``single``: one all-reduce of every gradient once back-propagation is done
      (``MultiWorkerMirroredStrategy`` with its default ``bytes_per_pack = 0``
      concatenates all gradients into one pack: TensorFlow
      ``cross_device_utils.CollectiveReplicaLauncher.batch_all_reduce``).
    - ``none``: one per gradient, as produced (WFBP; Zhang et al., Poseidon, ATC 2017).
    - ``buckets``: :func:`sgdsim.simulation.dag.fixed_buckets` (PyTorch DDP).
    - ``mgwfbp``: :func:`sgdsim.simulation.dag.mgwfbp_groups` over the gradients
      of each producing segment (a layer), with the ring's all-reduce time and
      start-up cost ``2(P − 1)α``.

    Args:
        fusion: one of :data:`FUSIONS` but ``horovod``.
        grads: (G,) gradients in production order (:func:`gradients`).
        ring: the all-reduce's cost and the bucket caps.

    Raises:
        ValueError: unknown fusion rule.
    """
    if not grads:
        return []
    s = ring.settings
    if fusion == "single":
        return _merge(grads, [list(range(len(grads)))])
    if fusion == "none":
        return list(grads)
    if fusion == "buckets":
        caps = fixed_buckets([g.nbytes for g in grads], s.bucket_bytes, s.first_bucket_bytes)
        return _merge(grads, caps)
    if fusion == "mgwfbp":
        return _mgwfbp(grads, ring)
    raise ValueError(f"unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")


def _mgwfbp(grads: list[Group], ring: Ring) -> list[Group]:
    """MG-WFBP on layers = the gradients produced at one moment, in forward order."""
    layers = [
        Group(t, sum(g.nbytes for g in group))
        for t, group in itertools.groupby(grads, key=lambda g: g.ready_s)
    ]
    layers.reverse()  # forward order: the last produced is layer 0
    ready = [g.ready_s for g in layers]
    tb = [r - (ready[i + 1] if i + 1 < len(ready) else 0.0) for i, r in enumerate(ready)]
    hop_alpha = ring.network.latency_s + ring.settings.message_overhead_s
    alpha = 2 * (ring.workers - 1) * hop_alpha
    groups = mgwfbp_groups(tb, [g.nbytes for g in layers], ring.allreduce_s, alpha)
    return _merge(layers, groups)


class HorovodCycle:
    """Horovod's fusion: every ``cycle_s`` its background loop all-reduces the
    gradients every worker has ready, fused into buffers of at most
    ``fusion_bytes`` in production order (a larger gradient alone)
    (``HOROVOD_CYCLE_TIME``, ``HOROVOD_FUSION_THRESHOLD``; Sergeev and Del
    Balso, arXiv 1802.05799). Cycles tick at multiples of ``cycle_s``.

    Args:
        sim: the event loop.
        stream: where the fused all-reduces run.
        settings: cycle time and buffer size.
        reduced: called ``reduced(t, None)`` when an all-reduce is done, once
            per gradient it carried.
    """

    __slots__ = ("_pending", "_ticking", "cycle_s", "fusion_bytes", "reduced", "sim", "stream")

    def __init__(
        self,
        sim: Simulation,
        stream: CommStream,
        settings: CollectiveSettings,
        reduced: Callable[[float, int], Any],
    ) -> None:
        self.sim = sim
        self.stream = stream
        self.cycle_s = settings.horovod_cycle_s
        self.fusion_bytes = settings.horovod_fusion_bytes
        self.reduced = reduced
        self._pending: list[float] = []
        self._ticking = False

    def ready(self, now: float, nbytes: float) -> None:
        """A gradient of ``nbytes`` is ready on every worker at ``now``."""
        self._pending.append(nbytes)
        if not self._ticking:
            self._ticking = True
            tick = math.floor(now / self.cycle_s + 1.0) * self.cycle_s
            self.sim.schedule(tick, SEG_END, self._tick)

    def _tick(self, now: float, _: Any) -> None:
        self._ticking = False
        buf: list[float] = []
        for b in self._pending:
            if buf and sum(buf) + b > self.fusion_bytes:
                self._send(now, buf)
                buf = []
            buf.append(b)
        self._send(now, buf)
        self._pending = []

    def _send(self, now: float, buf: list[float]) -> None:
        n = len(buf)
        self.stream.allreduce(now, sum(buf), lambda t, _: self.reduced(t, n))


class AllReduceWorker:
    """The representative worker of ``allreduce`` mode: its step as a state machine.

    A step: the compute segments run back to back (the parameters are local);
    each group of gradients is handed to the fusion rule when its last gradient
    is produced; once every gradient is reduced and the compute is done, the
    update (``Σ push_update_s``: every variable's optimizer op, as the profile's
    PS ran them) is applied and the step ends; the next starts ``overhead_s``
    later. Transitions: :meth:`start_step`, :meth:`reduced`, :meth:`end_step`.

    Args:
        sim: the event loop.
        stream: the communication stream.
        fusion: the fusion rule.
        grads: (G,) the step's gradients in production order (:func:`gradients`).
        compute_s: the step's compute, seconds.
        update_s, overhead_s: seconds of the update and between steps.
        steps: steps to run.

    Attributes:
        step_ends: end time of each step, seconds.
    """

    __slots__ = (
        "_compute_end",
        "_groups",
        "_horovod",
        "_left",
        "compute_s",
        "grads",
        "overhead_s",
        "sim",
        "step_ends",
        "steps",
        "stream",
        "update_s",
    )

    def __init__(
        self,
        sim: Simulation,
        stream: CommStream,
        settings: CollectiveSettings,
        fusion: str,
        grads: list[Group],
        compute_s: float,
        update_s: float,
        overhead_s: float,
        steps: int,
    ) -> None:
        self.sim = sim
        self.stream = stream
        self.grads = grads
        self.compute_s = compute_s
        self.update_s = update_s
        self.overhead_s = overhead_s
        self.steps = steps
        self.step_ends: list[float] = []
        self._horovod = (
            HorovodCycle(sim, stream, settings, self.reduced) if fusion == "horovod" else None
        )
        self._groups = [] if self._horovod else fusion_groups(fusion, grads, stream.ring)
        self._left = 0
        self._compute_end = 0.0

    def start_step(self, now: float, _: Any = None) -> None:
        """Start a step: schedule each group's hand-over to the fusion rule."""
        self._compute_end = now + self.compute_s
        if self._horovod is not None:
            self._left = len(self.grads)
            for t, group in itertools.groupby(self.grads, key=lambda g: g.ready_s):
                sizes = [g.nbytes for g in group]
                self.sim.schedule(now + t, SEG_END, self._horovod_ready, sizes)
        else:
            self._left = len(self._groups)
            for g in self._groups:
                self.sim.schedule(now + g.ready_s, SEG_END, self._group_ready, g.nbytes)
        if self._left == 0:
            self.reduced(self._compute_end, 0)

    def _group_ready(self, now: float, nbytes: float) -> None:
        self.stream.allreduce(now, nbytes, lambda t, _: self.reduced(t, 1))

    def _horovod_ready(self, now: float, sizes: list[float]) -> None:
        assert self._horovod is not None
        for nbytes in sizes:
            self._horovod.ready(now, nbytes)

    def reduced(self, now: float, n: int) -> None:
        """``n`` gradients (groups) are reduced at ``now``; the last one ends the step."""
        self._left -= n
        if self._left <= 0:
            end = max(now, self._compute_end) + self.update_s
            self.sim.schedule(end, STEP_END, self.end_step)

    def end_step(self, now: float, _: Any = None) -> None:
        """Record the step's end; start the next one ``overhead_s`` later."""
        self.step_ends.append(now)
        if len(self.step_ends) < self.steps:
            self.sim.schedule(now + self.overhead_s, STEP_START, self.start_step)


def run_allreduce(
    workload: Workload,
    network: Network,
    workers: int,
    steps_per_worker: int,
    fusion: str,
    settings: CollectiveSettings,
    speed: float = 1.0,
    start_s: float = 0.0,
) -> tuple[list[float], Simulation, CommStream]:
    """One ``allreduce`` run of the representative worker.

    Args:
        workload, network, workers, steps_per_worker: as :func:`simulate`.
        fusion: one of :data:`FUSIONS`.
        settings: the all-reduce's settings.
        speed: compute speed relative to the profile (≤ 1 when co-located
            workers share a node's cores).
        start_s: when the first step starts (the last worker's start), seconds.

    Returns:
        The step end times (s), the finished event loop and the stream.
    """
    sim = Simulation()
    stream = CommStream(sim, Ring(workers, network, settings))
    worker = AllReduceWorker(
        sim,
        stream,
        settings,
        fusion,
        gradients(workload, speed),
        workload.compute_s / speed,
        float(workload.push_update_s.sum()),
        workload.overhead_s,
        steps_per_worker,
    )
    sim.schedule(start_s, STEP_START, worker.start_step)
    sim.run()
    return worker.step_ends, sim, stream


def sync_ps_representative(
    workload: Workload, network: Network, workers: int
) -> tuple[Workload, Network]:
    """The workload and network of ``sync_ps``'s representative worker.

    N identical flows share the PS NIC fairly, so each moves at
    ``bandwidth / N`` (exact for processor sharing of flows that start
    together) and gets ``1 / N`` of its token bucket (``burst_bytes``); the
    PS accumulates N gradients per push (``N × update``,
    ``ConditionalAccumulator.apply_grad`` costs an update's arithmetic); once
    every gradient is in, the chief applies the averaged update of every
    variable (``Σ update``) while the workers wait for their token, which
    lengthens the step's end (``overhead_s``).

    Raises:
        ValueError: a workload with several PS shards (the node NIC, which then
            can bind too, would be scaled with the PS NICs).
    """
    if workload.ps_tasks > 1:
        raise ValueError("sync_ps is simulated with one PS shard; set hardware ps_tasks: 1")
    rep = dataclasses.replace(
        workload,
        push_update_s=workload.push_update_s * workers,
        overhead_s=workload.overhead_s + float(workload.push_update_s.sum()),
    )
    share = dataclasses.replace(
        network,
        bandwidth_Bps=network.bandwidth_Bps / workers,
        burst_bytes=network.burst_bytes / workers,
    )
    return rep, share


def simulate(
    workload: Workload,
    network: Network,
    workers: int,
    steps_per_worker: int = 30,
    warmup_steps: int = 3,
    policy: str = "tf_default",
    seed: int = 0,
    *,
    mode: str = "async",
    collective: CollectiveSettings | None = None,
    start_offsets_s: Sequence[float] | None = None,
    step_log: list[list[float]] | None = None,
    workers_per_node: int = 1,
    compute_slots: float = 1.0,
    **kwargs: Any,
) -> Any:
    """Simulate one run of any mode; the :class:`~sgdsim.simulation.async_ps.AsyncResult`
    of :func:`~sgdsim.simulation.async_ps.simulate_async`.

    ``async`` is :func:`~sgdsim.simulation.async_ps.simulate_async` with every
    argument. The synchronous modes run the representative worker (module
    docstring): ``sync_ps`` on the asynchronous worker's step with
    :func:`sync_ps_representative`, ``allreduce`` with :func:`run_allreduce`;
    ``steps_per_s``, ``samples_per_s`` and the bytes count all N workers, and
    every row of ``step_log`` holds the representative's step ends.
    Co-located workers (``workers_per_node`` > 1) compute at
    ``min(1, compute_slots / k)`` of their profiled speed, ``k`` of them at once.

    Args:
        workload, network, workers, steps_per_worker, warmup_steps, seed,
        start_offsets_s, step_log, workers_per_node, compute_slots: as
            :func:`~sgdsim.simulation.async_ps.simulate_async`.
        policy: a transmission policy (``async``, ``sync_ps``) or a fusion
            rule of :data:`FUSIONS` (``allreduce``).
        mode: one of :data:`MODES`.
        collective: the all-reduce's settings (``allreduce``; default
            :class:`CollectiveSettings`).
        kwargs: further arguments of ``simulate_async`` (``async``, ``sync_ps``;
            ``allreduce`` accepts and ignores the parameter-server ones).

    Raises:
        ValueError: unknown mode or fusion rule, bad N or step counts, a trace
            of a synchronous mode, ``sync_ps`` with several PS shards.
    """
    from sgdsim.simulation.async_ps import simulate_async

    if mode == "async":
        return simulate_async(
            workload, network, workers, steps_per_worker, warmup_steps, policy, seed,
            start_offsets_s=start_offsets_s, step_log=step_log,
            workers_per_node=workers_per_node, compute_slots=compute_slots, **kwargs,
        )  # fmt: skip
    _check(mode, policy, workers, steps_per_worker, warmup_steps, start_offsets_s, kwargs)
    start = max(start_offsets_s) if start_offsets_s is not None else 0.0
    k = min(workers_per_node, workers)
    speed = min(1.0, compute_slots / k) if k > 1 else 1.0
    if mode == "sync_ps":
        rep, net = sync_ps_representative(workload, network, workers)
        rep = dataclasses.replace(rep, seg_dur_s=rep.seg_dur_s / speed)
        log: list[list[float]] = []
        r = simulate_async(
            rep, net, 1, steps_per_worker, warmup_steps, policy, seed,
            start_offsets_s=[start], step_log=log, **kwargs,
        )  # fmt: skip
        ends = log[0]
        result = dataclasses.replace(
            r,
            workers=workers,
            steps_per_s=r.steps_per_s * workers,
            samples_per_s=r.samples_per_s * workers,
            bytes_pulled=r.bytes_pulled * workers,
            bytes_pushed=r.bytes_pushed * workers,
        )
    else:
        result, ends = _allreduce_result(
            workload, network, workers, steps_per_worker, warmup_steps, policy, seed,
            collective or CollectiveSettings(), speed, start,
        )  # fmt: skip
    if step_log is not None:
        step_log.extend(list(ends) for _ in range(workers))
    return result


def _check(
    mode: str,
    policy: str,
    workers: int,
    steps_per_worker: int,
    warmup_steps: int,
    start_offsets_s: Sequence[float] | None,
    kwargs: dict[str, Any],
) -> None:
    """Raise ValueError naming the first argument of a synchronous run out of range."""
    checks = [
        (mode in MODES, f"unknown mode {mode!r}; choose one of {', '.join(MODES)}"),
        (
            mode != "allreduce" or policy in FUSIONS,
            f"unknown fusion {policy!r} for allreduce; choose one of {', '.join(FUSIONS)}",
        ),
        (workers >= 1, f"workers must be >= 1, got {workers}"),
        (
            0 <= warmup_steps < steps_per_worker,
            f"need 0 <= warmup_steps < steps_per_worker, got {warmup_steps}, {steps_per_worker}",
        ),
        (
            start_offsets_s is None or len(start_offsets_s) == workers,
            f"start_offsets_s needs {workers} values",
        ),
        (kwargs.get("trace") is None, f"traces of mode {mode} are not written; use async"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def _allreduce_result(
    workload: Workload,
    network: Network,
    workers: int,
    steps_per_worker: int,
    warmup_steps: int,
    fusion: str,
    seed: int,
    settings: CollectiveSettings,
    speed: float,
    start_s: float,
) -> tuple[Any, list[float]]:
    """The ``allreduce`` run as an ``AsyncResult`` (PS NIC columns: a node's NIC)."""
    from sgdsim.simulation.async_ps import _summarize
    from sgdsim.simulation.engine import RawRun

    wall0 = time.perf_counter()
    ends, sim, stream = run_allreduce(
        workload, network, workers, steps_per_worker, fusion, settings, speed, start_s
    )
    nic_busy = stream.nic_bytes / network.bandwidth_Bps
    moved = stream.nic_bytes * stream.ring.nodes
    raw = RawRun(
        step_ends=[ends] * workers,
        busy=[steps_per_worker * workload.compute_s / speed] * workers,
        now=sim.now,
        events=sim.events,
        bytes_pulled=moved,
        bytes_pushed=moved,
        down_busy_s=nic_busy,
        up_busy_s=nic_busy,
        nic={"node.out": (stream.nic_bytes, nic_busy), "node.in": (stream.nic_bytes, nic_busy)},
    )
    result = _summarize(raw, workload, fusion, seed, steps_per_worker, warmup_steps, wall0)
    return result, ends
