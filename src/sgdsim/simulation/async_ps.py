"""Discrete-event simulation of asynchronous SGD with a parameter server.

Model (Li, Yan, Paolieri, Golubchik, "Throughput Prediction of Asynchronous
SGD in TensorFlow", ICPE 2020): N workers run the profiled step independently.
Each step a worker pulls every parameter from the PS, replays its compute
segments in profiled order, each gated on the pulls it reads, pushes each
gradient as soon as the segment producing it ends (WFBP), and ends the step
when every pull arrived and every push was applied by the PS. Workers never
wait for each other, only for the shared PS NIC (one processor-sharing link
per direction, shared fairly between workers' connections, each serving its
tensors in order, see :mod:`sgdsim.simulation.link`) and the PS CPU (one FIFO
server applying updates). Transmission policies that cut, group or reorder
tensors (:mod:`sgdsim.simulation.policies`) and several PS shards, each with
its own NIC and CPU, run in :mod:`sgdsim.simulation.engine`.

Events are ordered by ``(time, priority, sequence)`` so simultaneous events
break ties deterministically: the same inputs and seed give bit-identical
results.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sgdsim.simulation.chrome_trace import COMPUTE, PULL, PUSH, UPDATE, TraceRecord
from sgdsim.simulation.engine import RawRun, run_general
from sgdsim.simulation.link import PSLink
from sgdsim.simulation.policies import (
    BYTESCHEDULER_CREDIT_BYTES,
    BYTESCHEDULER_PARTITION_BYTES,
    P3_SLICE_BYTES,
    POLICIES,
    PolicySizes,
    get_policy,
)
from sgdsim.simulation.workload import Network, Workload

#: How the PS NIC serves workers: fair share per connection, or one FIFO queue.
PS_DISCIPLINES: tuple[str, ...] = ("fair", "fifo")

# the fast loop serves whole-tensor first-in first-out policies on one PS;
# tests empty this to compare it with the general loop
_FAST_POLICIES = frozenset(n for n in POLICIES if get_policy(n).whole_tensor_fifo)

# event kinds; the number is also the tie-break priority at equal times
_DEPART, _JOIN, _SEG_END, _STEP_END, _STEP_START = range(5)
_DOWN, _UP = 0, 1  # PS → workers (pulls), workers → PS (pushes)

# the fast loop works in bulk: each run of pulls that release the same segments
# is one flow (see _pull_flows), a worker's segments run ahead until one waits
# for a pull, and with a fair PS NIC pull flows whose arrival matters to no one
# else travel in groups, the pushes a connection carries back to back are one
# flow, and the PS applies pushes in batches (see _run_fast); tests switch it
# off to compare with one event per tensor and segment
_BULK = True


@dataclass(frozen=True)
class AsyncResult:
    """Metrics of one simulated grid point (flat record; units in the names).

    Attributes:
        workers: N.
        steps_per_s: completed worker steps per second, all workers together.
        samples_per_s: ``steps_per_s × batch_size``.
        mean_step_s: mean time between two step ends of one worker, seconds.
        ps_down_util, ps_up_util: busy fraction of the PS NIC, PS → workers and
            workers → PS, over the simulated run (0…1).
        blocked_fraction: share of a worker's time neither computing nor in the
            per-step overhead, i.e. waiting for communication or the PS (0…1).
        sim_time_s: simulated time span in seconds.
        bytes_pulled, bytes_pushed: bytes carried by the PS NIC in each direction.
        events: events processed.
        wall_s: simulator wall time in seconds (not deterministic).
        seed: seed of the run's numpy Generator (of the first replication).
        replications: runs averaged into this record (seeds ``seed``, ``seed+1``, …).
        steps_per_s_std: sample standard deviation of steps_per_s over replications.
    """

    workers: int
    steps_per_worker: int
    warmup_steps: int
    policy: str
    steps_per_s: float
    samples_per_s: float
    mean_step_s: float
    ps_down_util: float
    ps_up_util: float
    blocked_fraction: float
    sim_time_s: float
    bytes_pulled: float
    bytes_pushed: float
    events: int
    wall_s: float
    seed: int
    replications: int = 1
    steps_per_s_std: float = 0.0


def single_step_estimate(workload: Workload, network: Network) -> float:
    """Contention-free step time in seconds: compute, overhead, pull offset, and all
    pulled and pushed bytes at full NIC capacity, plus two latencies."""
    moved = float(workload.pull_bytes.sum() + workload.push_bytes.sum())
    return (
        workload.compute_s
        + workload.overhead_s
        + workload.pull_start_s
        + moved / network.bandwidth_Bps
        + 2 * network.latency_s
    )


def pull_issue_order(workload: Workload, policy: str) -> list[int]:
    """Order in which a worker issues its pulls each step (indices into ``pull_bytes``):
    the policy's :meth:`~sgdsim.simulation.policies.Policy.pull_order` (for
    ``fifo_random`` only a placeholder: it draws a fresh order every step).

    Raises:
        ValueError: unknown policy.
    """
    return get_policy(policy).pull_order(workload)


def simulate_async(
    workload: Workload,
    network: Network,
    workers: int,
    steps_per_worker: int = 30,
    warmup_steps: int = 3,
    policy: str = "tf_default",
    seed: int = 0,
    start_offsets_s: Sequence[float] | None = None,
    step_log: list[list[float]] | None = None,
    trace: list[TraceRecord] | None = None,
    workers_per_node: int = 1,
    ps_discipline: str = "fair",
    p3_slice_bytes: float = P3_SLICE_BYTES,
    bytescheduler_partition_bytes: float = BYTESCHEDULER_PARTITION_BYTES,
    bytescheduler_credit_bytes: float = BYTESCHEDULER_CREDIT_BYTES,
    nic_stats: dict[str, tuple[float, float]] | None = None,
    pull_gap_s: float = 0.0,
    pull_gap_cpu: bool = False,
    compute_slots: float = 1.0,
    link_quantum_bytes: float = 0.0,
    pull_join_delay_s: float = 0.0,
) -> AsyncResult:
    """Simulate ``workers`` asynchronous workers against the PS (one or several shards).

    All pulls of a step are issued together ``workload.pull_start_s`` after
    step start, in the order the policy gives (:func:`pull_issue_order`);
    pushes are issued when produced. Each worker's connection serves its
    units one at a time at its fair share of the PS NIC
    (:class:`~sgdsim.simulation.link.PSLink`), whole tensors in issue order
    or as the policy cuts and orders them (:mod:`sgdsim.simulation.policies`;
    ``p3`` also moves pulls, see there).
    Worker ``w > 0`` starts after a seeded uniform random delay
    in ``[0, T1)``, ``T1`` the contention-free step time on this network
    (:func:`single_step_estimate`): processor sharing keeps workers at whatever
    offsets they start with, and real workers drift over all offsets, so the
    start offsets are drawn over one whole step rather than all set to zero
    (which would lock every worker into pulling and pushing at the same time).

    Args:
        workload: the calibrated single-worker step.
        network: NIC capacity (bytes/s per direction) and per-message latency.
        workers: N ≥ 1.
        steps_per_worker: steps each worker runs (> warmup_steps).
        warmup_steps: first steps of each worker left out of the throughput window.
        policy: one of :data:`POLICIES`.
        seed: seed of the run's ``numpy.random.Generator``.
        start_offsets_s: (N,) start time of each worker in seconds, instead of
            the seeded random offsets.
        step_log: if given, receives each worker's list of step end times (s).
        workers_per_node: workers placed on one node (worker ``w`` on node
            ``w // workers_per_node``). Co-located workers share the node's
            cores: while ``k`` of them compute, each runs at
            ``min(1, compute_slots / k)`` of its profiled speed (limited
            processor sharing).
            With one PS their NIC is not a bottleneck (the PS NIC, of the same
            capacity, carries all their traffic); with several shards the
            node's NIC is shared by its workers' connections.
        ps_discipline: how the PS NIC serves the workers: ``fair`` (each worker's
            connection gets an equal share, processor sharing) or ``fifo`` (one
            queue for all workers' tensors, served one at a time in arrival order;
            for a priority policy, in its priority order; one queue per shard NIC).
        trace: if given, receives ``(kind, worker, index, start_s, end_s)`` for
            every compute segment, transfer unit (time on the wire) and PS
            update, with a sixth element, the shard, when ``workload.ps_tasks``
            > 1; see :func:`sgdsim.simulation.chrome_trace.chrome_trace`.
        p3_slice_bytes: slice size of ``p3``, bytes.
        bytescheduler_partition_bytes: partition size of ``bytescheduler``, bytes.
        bytescheduler_credit_bytes: credit window of ``bytescheduler``, bytes.
        nic_stats: if given, receives ``{nic: (bytes, busy_s)}`` for every NIC
            the run models: ``ps{s}.out`` / ``ps{s}.in`` per shard and, with
            several shards, ``node{j}.in`` / ``node{j}.out`` per worker node.
        pull_gap_s: for the one-at-a-time policies (``Policy.serial_pulls``),
            seconds each pull after the first waits after the previous one
            arrived: the control message by which real TensorFlow enforces the
            order (:func:`sgdsim.profiling.graph.enforce_pull_order`), about one
            RPC round trip. 0 = an ideal scheduler. Ignored by other policies.
        pull_gap_cpu: the gap is CPU work on the worker's node, not a pure delay:
            it shares the node's cores with the compute of the workers there
            (processor sharing), so it stretches while they compute: the
            control message needs the worker's and the PS's threads scheduled
            (used for the testbed, where every process shares one node's cores).
        compute_slots: how many co-located workers compute at their profiled
            speed at once: the node's cores free for compute divided by the
            cores one worker's compute keeps busy (> 0; 1 = a worker's compute
            takes the whole node). Only matters with ``workers_per_node`` > 1
            or ``pull_gap_cpu``.
        link_quantum_bytes: with one PS, the PS NIC serves the workers'
            connections in turns of this many bytes
            (:class:`~sgdsim.simulation.link.RoundRobinLink`: how TCP flows
            share a bottleneck over tens of milliseconds) instead of
            processor sharing (0).
        pull_join_delay_s: seconds the first pull of a worker's step waits
            before its first byte when the PS NIC is sending to another worker
            at that moment (0: none). Real TensorFlow PS serves a step that
            starts while it sends to another worker late by a few ms, which
            drives asynchronous workers from pulling together into taking turns
            within a few steps; processor sharing alone keeps any phase they
            start with. Measured on the testbed by
            :func:`sgdsim.testbed.calibrate.pull_join_delay`.

    With several PS shards (``workload.ps_tasks`` > 1) each shard is its own
    host with a full-duplex NIC and its own PS CPU, each worker has one
    connection to each shard, and the NICs are shared max-min fairly (see
    :mod:`sgdsim.simulation.engine`); ``ps_down_util`` and ``ps_up_util`` are
    then means over the shards' NICs. Whole-tensor FIFO policies on one PS run
    a faster loop with the same model.

    Returns:
        The grid point's metrics; throughput is measured over the window in
        which every worker is past warm-up and none has finished.

    Raises:
        ValueError: bad N, step counts, policy or policy sizes.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not 0 <= warmup_steps < steps_per_worker:
        raise ValueError(
            f"need 0 <= warmup_steps < steps_per_worker, got {warmup_steps}, {steps_per_worker}"
        )
    if ps_discipline not in PS_DISCIPLINES:
        raise ValueError(
            f"unknown ps_discipline {ps_discipline!r}; choose one of {', '.join(PS_DISCIPLINES)}"
        )
    if workers_per_node < 1:
        raise ValueError(f"workers_per_node must be >= 1, got {workers_per_node}")
    if not compute_slots > 0:
        raise ValueError(f"compute_slots must be > 0, got {compute_slots}")
    if not link_quantum_bytes >= 0:
        raise ValueError(f"link_quantum_bytes must be >= 0, got {link_quantum_bytes}")
    if not pull_join_delay_s >= 0:
        raise ValueError(f"pull_join_delay_s must be >= 0, got {pull_join_delay_s}")
    if start_offsets_s is not None and len(start_offsets_s) != workers:
        raise ValueError(f"start_offsets_s needs {workers} values, got {len(start_offsets_s)}")
    pol = get_policy(policy)
    spec = pol.spec(
        PolicySizes(p3_slice_bytes, bytescheduler_partition_bytes, bytescheduler_credit_bytes)
    )
    if not pull_gap_s >= 0:
        raise ValueError(f"pull_gap_s must be >= 0, got {pull_gap_s}")
    serial_gap = pull_gap_s > 0 and pol.serial_pulls
    if serial_gap:
        spec = dataclasses.replace(spec, pull_gap_s=pull_gap_s, pull_gap_cpu=pull_gap_cpu)
    wall0 = time.perf_counter()
    fast = not serial_gap and not link_quantum_bytes and not pull_join_delay_s
    if policy in _FAST_POLICIES and workload.ps_tasks == 1 and fast:
        raw = _run_fast(
            workload,
            network,
            workers,
            steps_per_worker,
            policy,
            seed,
            start_offsets_s,
            trace,
            workers_per_node,
            ps_discipline,
            compute_slots,
        )
    else:
        raw = run_general(
            workload,
            network,
            workers,
            steps_per_worker,
            policy,
            spec,
            seed,
            pull_issue_order(workload, policy),
            start_offsets_s,
            single_step_estimate(workload, network),
            trace,
            workers_per_node,
            ps_discipline,
            compute_slots,
            link_quantum_bytes,
            pull_join_delay_s,
        )
    step_ends, busy, now = raw.step_ends, raw.busy, raw.now
    overhead = workload.overhead_s
    if step_log is not None:
        step_log.extend(step_ends)
    if nic_stats is not None:
        nic_stats.update(raw.nic)
    # throughput window: every worker past warm-up, none finished
    firsts = [e[warmup_steps - 1] if warmup_steps else 0.0 for e in step_ends]
    t_lo, t_hi = max(firsts), min(e[-1] for e in step_ends)
    if t_hi > t_lo:
        done = sum(sum(1 for t in e if t_lo < t <= t_hi) for e in step_ends)
        steps_per_s = done / (t_hi - t_lo)
    else:  # cannot happen with identical workers; keep a defined value
        steps_per_s = workers * (steps_per_worker - warmup_steps) / max(now - max(firsts), 1e-12)
    per_worker = [
        (e[-1] - (e[warmup_steps - 1] if warmup_steps else 0.0)) / (steps_per_worker - warmup_steps)
        for e in step_ends
    ]
    span = now if now > 0 else 1e-12
    total_time = sum(e[-1] for e in step_ends)
    blocked = 1.0 - (sum(busy) + workers * steps_per_worker * overhead) / max(total_time, 1e-12)
    return AsyncResult(
        workers=workers,
        steps_per_worker=steps_per_worker,
        warmup_steps=warmup_steps,
        policy=policy,
        steps_per_s=steps_per_s,
        samples_per_s=steps_per_s * workload.batch_size,
        mean_step_s=float(np.mean(per_worker)),
        ps_down_util=min(1.0, raw.down_busy_s / span),
        ps_up_util=min(1.0, raw.up_busy_s / span),
        blocked_fraction=max(0.0, blocked),
        sim_time_s=now,
        bytes_pulled=raw.bytes_pulled,
        bytes_pushed=raw.bytes_pushed,
        events=raw.events,
        wall_s=time.perf_counter() - wall0,
        seed=seed,
    )


def _pull_flows(
    order: npt.NDArray[np.int64],
    pull_bytes: npt.NDArray[np.float64],
    pull_gate: npt.NDArray[np.int64],
    n_seg: int,
    aggregate: bool,
) -> tuple[list[tuple[float, int]], list[int]]:
    """The flows that carry one step's pulls, issued in ``order``, and what gates on them.

    Within the connection the pulls arrive in issue order, so the pull at
    position ``k`` holds up segment ``s`` exactly when some pull at or after
    ``k`` has gate ``≤ s``: its effective gate is the minimum gate from ``k``
    on (non-decreasing along the order). Consecutive pulls with the same
    effective gate release nothing between them, so with ``aggregate`` they
    travel as one flow of their summed bytes, which leaves when the last of
    them would (the link serves a connection's flows back to back at its
    share, :class:`~sgdsim.simulation.link.PSLink`); otherwise one flow per pull.

    Returns:
        ``flows``: ``(bytes, label)`` in issue order, the label being the flow's
        index (aggregated) or the pull's index (one flow per pull);
        ``req``: (S + 1,) flows that must have arrived before segment ``s`` may
        start (``req[S]``: before the step may end).
    """
    if len(order) == 0:
        return [], [0] * (n_seg + 1)
    eff = np.minimum.accumulate(pull_gate[order][::-1])[::-1]
    if aggregate:
        starts = np.flatnonzero(np.concatenate(([True], eff[1:] != eff[:-1])))
        sizes = np.add.reduceat(pull_bytes[order], starts).tolist()
        flows = list(zip(sizes, range(len(sizes)), strict=True))
        eff = eff[starts]
    else:
        flows = list(zip(pull_bytes[order].tolist(), order.tolist(), strict=True))
    req = np.searchsorted(eff, np.arange(n_seg + 1), side="right").tolist()
    return flows, req


def _run_fast(
    workload: Workload,
    network: Network,
    workers: int,
    steps_per_worker: int,
    policy: str,
    seed: int,
    start_offsets_s: Sequence[float] | None,
    trace: list[TraceRecord] | None,
    workers_per_node: int,
    ps_discipline: str,
    compute_slots: float = 1.0,
) -> RawRun:
    """The loop of the whole-tensor FIFO policies on one PS.

    The PS NIC is :class:`~sgdsim.simulation.link.PSLink`'s virtual-time link
    inlined (same arithmetic: with ``_BULK`` off it gives the figures of one
    event per tensor and segment bit for bit); departures are taken without
    heap operations when nothing else comes first. In bulk (``_BULK``, no
    ``trace``):

    - each step's pulls travel as one flow per run of pulls that release the
      same segments (:func:`_pull_flows`);
    - a worker runs its segments at once until one waits for a pull that has
      not arrived (with shared cores, one event per segment as before).

    With a fair PS NIC and one worker per node ("early" below), the link's
    virtual clock does the rest. A connection serves its flows back to back
    at the link's one rate per busy connection, so a run of consecutive flows
    can travel as one flow that leaves when its last byte does: each flow in
    it leaves when the clock g(t) reaches its tag (virtual time at its last
    byte), at t = g⁻¹(tag), which the clock's breakpoints (t, g, busy
    connections) give after the fact. So only what others see is an event:

    - pushes: those a worker's segments issue are due one latency later; if
      its connection is idle, the first that are due join it then, as one
      flow (a "release", taken by the link's own event, not a JOIN event);
      while it is busy their join time does not matter, so all that are due
      when it empties join then, as one flow;
    - the PS CPU applies pushes later, in batches (``settle``): pushes leave
      in the order of their tags, each at g⁻¹(tag), and the PS serves them
      in that order, one FIFO server, by Lindley's recursion. A batch is
      settled whenever a worker's last push of a step has left, whose step
      end needs the time its last update ends: every push with a tag up to
      that one's, of every worker, in tag order;
    - pulls: a pull flow whose arrival lets only segments run that issue no
      push, other than the step's last flow, travels in one group with the
      flows after it (``pull_groups``); when the group leaves, its worker
      runs those segments from each flow's arrival g⁻¹(tag) on
      (``quiet_arrivals``).

    With one FIFO queue for all workers, or with shared cores, pulls and
    pushes stay one flow each (one JOIN event per batch of pushes issued
    together), and each push reaches the PS CPU on its own, in the order of
    arrival.
    """
    rng = np.random.default_rng(seed)

    seg_dur = workload.seg_dur_s.tolist()
    n_seg = len(seg_dur)
    n_pull = len(workload.pull_bytes)
    push_bytes = workload.push_bytes.tolist()
    push_update = workload.push_update_s.tolist()
    n_push = len(push_bytes)
    pushes_after: list[list[int]] = [[] for _ in range(n_seg + 1)]  # index seg+1
    for q, s in enumerate(workload.push_seg.tolist()):
        pushes_after[s + 1].append(q)
    latency = network.latency_s
    pull_start = workload.pull_start_s
    overhead = workload.overhead_s
    bulk = _BULK and trace is None
    aggregate = bulk
    random_order = get_policy(policy).shuffle_pulls
    pull_bytes_a = np.asarray(workload.pull_bytes, np.float64)
    pull_gate_a = np.asarray(workload.pull_gate, np.int64)

    def chunks(order: npt.NDArray[np.int64]) -> tuple[list[tuple[float, int]], list[int]]:
        return _pull_flows(order, pull_bytes_a, pull_gate_a, n_seg, aggregate)

    fixed_flows, fixed_req = chunks(np.asarray(pull_issue_order(workload, policy), np.int64))

    shared_cpu = workers_per_node > 1
    n_nodes = -(-workers // workers_per_node)
    # the cores of each worker node, a link of capacity compute_slots, each
    # worker's compute served at most at 1 (one second of profiled compute per
    # second); index 2 + node in events
    cores = [PSLink(compute_slots, 1.0) for _ in range(n_nodes)] if shared_cpu else []
    # with one FIFO queue for all workers the link cannot tell flows apart by
    # connection, so each payload carries its worker: label + worker * stride
    fifo = ps_discipline == "fifo"
    stride = max(n_pull, n_push) + 1
    # segment chains run ahead of the clock (not with shared cores, whose speed
    # depends on the node's other workers), and their pushes join a busy
    # connection early, as one flow, the PS applying them in batches (not with
    # one FIFO queue, where others' pushes may join in between)
    eager = bulk and not shared_cpu
    early = eager and not fifo
    n_conn = 1 if fifo else workers
    # segment chains in bulk: seg_end[s] = the time the step's compute takes up
    # to the start of segment s (C_s = d_0 + … + d_{s−1})
    seg_end = np.concatenate(([0.0], np.cumsum(seg_dur))).tolist()
    # early: a step's pushes in issue order ("positions"), slot by slot; the
    # pushes of slots j_lo … j_hi − 1 are positions first_pos[j_lo] … first_pos[j_hi] − 1
    push_order = [q for slot in pushes_after for q in slot]
    first_pos = np.concatenate(([0], np.cumsum([len(s) for s in pushes_after]))).tolist()
    # at position p: C of its slot (its issue time, less the chain's start offset),
    # the bytes of positions < p, and its PS update time
    pos_issue = [seg_end[s + 1] for s in workload.push_seg[push_order].tolist()]
    pos_bytes_a = np.concatenate(([0.0], np.cumsum(workload.push_bytes[push_order])))
    pos_bytes = pos_bytes_a.tolist()
    pos_update_a = np.asarray(workload.push_update_s, np.float64)[push_order]
    push_slots = [j for j, slot in enumerate(pushes_after) if slot]
    seg_pushes = np.array([bool(slot) for slot in pushes_after[1:]], bool)

    seg_index = np.arange(n_seg + 1)

    def pull_groups(
        order: npt.NDArray[np.int64],
    ) -> tuple[list[int], int, list[float], list[tuple[float, float, int]]]:
        """One step's pulls issued in ``order``, as :func:`_pull_flows` makes them
        flows, and those flows grouped for the link (early): a flow whose arrival
        lets only segments run that issue no push, and that is not the step's
        last, travels in one group with the flows after it (its arrival has no
        effect on anything but its worker's compute, which runs it later from
        the arrival time, see ``quiet_arrivals``).

        Returns:
            ``req`` and the number of flows F as :func:`_pull_flows`; ``cum``:
            (F + 1,) bytes of the flows before each flow; ``groups``: ``(cum at
            the group's end, bytes, index of its last flow)``.
        """
        eff = np.minimum.accumulate(pull_gate_a[order][::-1])[::-1]
        last_pull = np.flatnonzero(np.append(eff[1:] != eff[:-1], True))
        n = len(last_pull)
        cum = np.zeros(n + 1)
        cum[1:] = np.cumsum(pull_bytes_a[order])[last_pull]
        rq = np.searchsorted(eff[last_pull], seg_index, "right")
        loud = np.zeros(n + 1, bool)  # loud[i]: the segments the i-th arrival lets run push
        loud[rq[:n_seg][seg_pushes]] = True
        loud[n] = True
        ends = np.flatnonzero(loud[1:])
        at_end = cum[ends + 1].tolist()
        sizes = [b - a for a, b in zip([0.0, *at_end], at_end, strict=False)]
        return rq.tolist(), n, cum.tolist(), list(zip(at_end, sizes, ends.tolist(), strict=True))

    # the PS NIC, per direction (_DOWN, _UP): PSLink's state, inlined. Each
    # connection queues (tag, bytes, payload), tag the virtual time g at which
    # the flow leaves; the heap holds (tag of the head flow, seq, connection)
    # of every busy connection.
    cap = float(network.bandwidth_Bps)
    queues: list[list[deque[tuple[float, float, int]]]] = [
        [deque() for _ in range(n_conn)] for _ in range(2)
    ]
    heaps: list[list[tuple[float, int, int]]] = [[], []]
    vg = [0.0, 0.0]  # virtual time: bytes served to each busy connection
    vt = [0.0, 0.0]  # real time vg was last advanced to
    k_busy = [0, 0]  # busy connections
    nic_busy = [0.0, 0.0]
    nic_bytes = [0.0, 0.0]
    hseq = 0

    link_version = [0] * (2 + n_nodes)
    seg_start = [0.0] * workers
    events: list[tuple[float, int, int, int, int, int]] = []
    seq = 0
    n_events = 0
    # trace bookkeeping: when each flow joined, when each connection last freed up
    joined: list[list[float]] = [[0.0] * n_pull for _ in range(workers)]
    push_joined: list[list[float]] = [[0.0] * n_push for _ in range(workers)]
    conn_free = [[0.0] * workers, [0.0] * workers]

    def push_event(t: float, kind: int, a: int, b: int = 0) -> None:
        nonlocal seq
        heapq.heappush(events, (t, kind, seq, kind, a, b))
        seq += 1

    def nic_add(d: int, now: float, flows: list[tuple[float, int]], conn: int) -> None:
        """Flows ``(bytes, payload)`` join connection ``conn`` of direction ``d`` at ``now``."""
        nonlocal hseq
        if not flows:
            return
        k = k_busy[d]
        if k:
            dt = now - vt[d]
            vg[d] += dt * cap / k
            nic_busy[d] += dt
        vt[d] = now
        q = queues[d][conn]
        if q:
            tag = q[-1][0]
            for size, payload in flows:
                tag += size
                q.append((tag, size, payload))
            return
        tag = vg[d]
        for size, payload in flows:
            tag += size
            q.append((tag, size, payload))
        k_busy[d] = k + 1
        heapq.heappush(heaps[d], (q[0][0], hseq, conn))
        hseq += 1
        # every departure time changed
        link_version[d] += 1
        gap = heaps[d][0][0] - vg[d]
        push_event(now + (gap if gap > 0.0 else 0.0) * (k + 1) / cap, _DEPART, d, link_version[d])

    def reschedule_cores(li: int) -> None:
        link_version[li] += 1
        t = cores[li - 2].next_departure()
        if t is not None:
            push_event(t, _DEPART, li, link_version[li])

    # per-worker state
    seg = [0] * workers
    running = [False] * workers
    arrived = [0] * workers  # pull flows arrived this step
    n_flows = [len(fixed_flows)] * workers  # pull flows this step (-1: not issued yet)
    req = [fixed_req] * workers
    pushes_left = [0] * workers
    last_update = [0.0] * workers
    ending = [False] * workers
    free_at = [0.0] * workers  # when the worker's compute reaches seg[w] (eager chains)
    busy = [0.0] * workers
    step_ends: list[list[float]] = [[] for _ in range(workers)]
    ps_free = 0.0
    # early: pushes issued ahead by eager chains and not yet on the connection,
    # per worker, as runs (base, lo, hi) of positions lo … hi − 1, position p due
    # at base + pos_issue[p]. If the connection is idle, those due first join it
    # when due (releases); while it is busy, all that are due join as one flow
    # when it empties (the join time of a busy connection's tail does not matter)
    pending: list[deque[tuple[float, int, int]]] = [deque() for _ in range(workers)]
    # early: the pushes that joined the link and that the PS has not applied
    # yet (settle), one record per flow, in join order: base (position p's tag
    # is base + pos_bytes[p + 1]), first unsettled position, end, worker
    records: list[float] = []  # flat: base, lo, hi, worker, base, …
    gone = [0] * workers  # positions of this step that left, per worker
    settled_end = np.full(workers, -np.inf)  # latest PS update end of settled pushes
    # early: breakpoints of the workers → PS link's virtual clock: from up_t[i]
    # on, g = up_g[i] + (t − up_t[i]) · cap / up_k[i]
    up_t, up_g, up_k = [0.0], [0.0], [0]
    log_from = 0  # breakpoints before this one precede every unsettled push
    # early: (due, order, worker) of each idle connection with pending pushes, and
    # the time of the link's next event in the queue (its departure or a join)
    releases: list[tuple[float, int, int]] = []
    rseq = 0
    up_wake = math.inf
    # early: each step's pull flows travel in groups (pull_groups): per worker the
    # step's cum, the virtual time its first flow started at, and the breakpoint
    # (absolute index) at which its head group started; breakpoints of the
    # PS → workers link's clock as up_t, up_g, up_k (down_off: entries dropped
    # before the head group of every busy connection)
    if early and n_pull:
        _, _, fixed_cum, fixed_groups = pull_groups(np.asarray(pull_issue_order(workload, policy)))
    else:
        fixed_cum, fixed_groups = [], []
    down_cum = [fixed_cum] * workers
    down_tag0 = [0.0] * workers
    down_hint = [0] * workers
    down_t, down_g, down_k = [0.0], [0.0], [0]
    down_off = 0
    down_trim = max(4096, 16 * workers)

    def try_start(w: int, now: float) -> None:
        s = seg[w]
        if eager:
            if s < n_seg and arrived[w] >= req[w][s]:
                t = free_at[w]
                run_chain(w, t if t > now else now, now)
        elif not running[w] and s < n_seg and arrived[w] >= req[w][s]:
            running[w] = True
            if shared_cpu:
                seg_start[w] = now
                node = w // workers_per_node
                if cores[node].add(now, seg_dur[s], s, w):
                    reschedule_cores(2 + node)
            else:
                push_event(now + seg_dur[s], _SEG_END, w)

    def end_segment(w: int, now: float) -> None:
        """Segment ``seg[w]`` of worker ``w`` ends at ``now`` (shared-core mode)."""
        running[w] = False
        s = seg[w]
        busy[w] += seg_dur[s]
        if trace is not None:
            trace.append((COMPUTE, w, s, seg_start[w], now))
        issue_pushes(w, s + 1, now)
        seg[w] = s + 1
        if s + 1 < n_seg:
            try_start(w, now)
        else:
            check_end(w, now)

    push_flows = [[(push_bytes[q], q) for q in slot] for slot in pushes_after]

    def join_pulls(w: int, now: float) -> None:
        if early:
            join_pull_groups(w, now)
            return
        if random_order:
            flows, req[w] = chunks(rng.permutation(n_pull))
            n_flows[w] = len(flows)
        else:
            flows = fixed_flows
        if trace is not None:
            for _, p in flows:
                joined[w][p] = now
        if fifo:
            flows = [(b, p + w * stride) for b, p in flows]
        nic_add(_DOWN, now, flows, 0 if fifo else w)

    def join_pull_groups(w: int, now: float) -> None:
        """Worker ``w``'s pulls of the step join its idle connection at ``now`` as
        groups (early; see ``pull_groups``)."""
        nonlocal hseq, down_off, down_trim
        if random_order:
            req[w], n_flows[w], cum, groups = pull_groups(rng.permutation(n_pull))
        else:
            cum, groups = fixed_cum, fixed_groups
        k = k_busy[_DOWN]
        if k:
            dt = now - vt[_DOWN]
            vg[_DOWN] += dt * cap / k
            nic_busy[_DOWN] += dt
        vt[_DOWN] = now
        tag0 = vg[_DOWN]
        down_cum[w] = cum
        down_tag0[w] = tag0
        q = queues[_DOWN][w]
        q.extend([(tag0 + end, size, last) for end, size, last in groups])
        k += 1
        k_busy[_DOWN] = k
        h = heaps[_DOWN]
        heapq.heappush(h, (q[0][0], hseq, w))
        hseq += 1
        down_t.append(now)
        down_g.append(tag0)
        down_k.append(k)
        down_hint[w] = down_off + len(down_t) - 1
        # every departure time changed
        link_version[_DOWN] += 1
        gap = h[0][0] - tag0
        push_event(now + (gap if gap > 0.0 else 0.0) * k / cap, _DEPART, _DOWN, link_version[_DOWN])
        if len(down_t) > down_trim:
            # drop the breakpoints before every busy connection's head group
            keep = min(down_hint[c] for c in range(workers) if queues[_DOWN][c])
            del down_t[: keep - down_off], down_g[: keep - down_off], down_k[: keep - down_off]
            down_off = keep
            down_trim = max(4096, 16 * workers, 2 * len(down_t))

    def quiet_arrivals(w: int, last: int, now: float, hint: int) -> None:
        """The flows of worker ``w``'s group before its last, flow ``last``, arrived by
        ``now`` (early): each at g⁻¹(its tag) from the clock's breakpoints from
        ``hint`` on, when the group started (the connection was busy all along,
        so the clock rose), its worker's compute running the segments it lets
        run (they issue no push) from then on."""
        cum = down_cum[w]
        tag0 = down_tag0[w]
        j = hint - down_off
        n_log = len(down_g)
        rw = req[w]
        for f in range(arrived[w], last):
            tag = tag0 + cum[f + 1]
            j = bisect_left(down_g, tag, j + 1, n_log) - 1  # the last breakpoint before it
            arrived[w] = f + 1
            s = seg[w]
            if s < n_seg and f + 1 >= rw[s]:
                gap = tag - down_g[j]
                t = down_t[j] + (gap if gap > 0.0 else 0.0) * down_k[j] / cap
                if t > now:
                    t = now
                # as run_chain, without pushes
                t0 = free_at[w]
                e = bisect_right(rw, f + 1, s + 1, n_seg)
                span = seg_end[e] - seg_end[s]
                busy[w] += span
                seg[w] = e
                free_at[w] = (t0 if t0 > t else t) + span
                if e == n_seg:
                    check_end(w, t)

    def join_pushes(w: int, slot: int, now: float) -> None:
        flows = push_flows[slot]
        if trace is not None:
            for _, q in flows:
                push_joined[w][q] = now
        if fifo:
            flows = [(b, q + w * stride) for b, q in flows]
        nic_add(_UP, now, flows, 0 if fifo else w)

    def run_chain(w: int, t: float, now: float) -> None:
        """Worker ``w`` runs its segments from ``seg[w]`` on, starting at ``t`` ≥ ``now``,
        until one waits for a pull that has not arrived or the step's compute ends.

        ``req`` does not decrease along the segments, so the chain ends at the
        first segment ``e`` > ``s`` that needs more pull flows than have
        arrived (or at the step's end); it takes ``C_e − C_s`` seconds, and
        the pushes of slot ``j`` (after segment ``j − 1``) are issued at
        ``t + C_j − C_s``.
        """
        s = seg[w]
        e = bisect_right(req[w], arrived[w], s + 1, n_seg)
        c0 = seg_end[s]
        span = seg_end[e] - c0
        busy[w] += span
        seg[w] = e
        free_at[w] = t + span
        if early:
            lo, hi = first_pos[s + 1], first_pos[e + 1]
            if hi > lo:
                issue_run(w, t - c0 + latency, lo, hi, now)
        else:
            for i in range(bisect_right(push_slots, s), bisect_right(push_slots, e)):
                j = push_slots[i]
                issue_pushes_at(w, j, t + (seg_end[j] - c0), now)
        if e == n_seg:
            check_end(w, now)

    def issue_pushes_at(w: int, slot: int, t: float, now: float) -> None:
        """The pushes of ``slot`` are issued at ``t`` ≥ ``now`` (eager chains, one FIFO queue)."""
        due = t + latency
        if due > now:
            push_event(due, _JOIN, w, (_UP << 30) + slot)
        else:
            join_pushes(w, slot, now)

    def issue_run(w: int, base: float, lo: int, hi: int, now: float) -> None:
        """Positions ``lo`` … ``hi − 1`` of worker ``w`` are issued, position ``p`` due
        at ``base + pos_issue[p]`` ≥ ``now`` (early)."""
        nonlocal rseq, up_wake
        pq = pending[w]
        busy_conn = pq or queues[_UP][w]
        pq.append((base, lo, hi))
        if busy_conn:
            return
        # the connection is idle: it joins the link when the first position is due
        due = base + pos_issue[lo]
        heapq.heappush(releases, (due, rseq, w))
        rseq += 1
        if due < now:
            due = now
        if due < up_wake:
            up_wake = due
            link_version[_UP] += 1
            push_event(due, _DEPART, _UP, link_version[_UP])

    def take_before(w: int, now: float) -> tuple[int, int]:
        """Take worker ``w``'s pending positions due before ``now``; returns their
        range ``(lo, hi)`` (empty if none)."""
        pq = pending[w]
        lo = hi = pq[0][1]
        while pq:
            base, plo, phi = pq[0]
            if base + pos_issue[phi - 1] < now:
                hi = phi
                pq.popleft()
                continue
            # the first position not due: bisect on C, then settle rounding on due times
            hi = bisect_left(pos_issue, now - base, plo, phi)
            while hi > plo and base + pos_issue[hi - 1] >= now:
                hi -= 1
            while hi < phi and base + pos_issue[hi] < now:
                hi += 1
            if hi > plo:
                pq[0] = (base, hi, phi)
            break
        return lo, hi

    def take_by(w: int, now: float) -> tuple[int, int]:
        """As :func:`take_before`, the positions due by ``now``."""
        pq = pending[w]
        lo = hi = pq[0][1]
        while pq:
            base, plo, phi = pq[0]
            if base + pos_issue[phi - 1] <= now:
                hi = phi
                pq.popleft()
                continue
            hi = bisect_right(pos_issue, now - base, plo, phi)
            while hi > plo and base + pos_issue[hi - 1] > now:
                hi -= 1
            while hi < phi and base + pos_issue[hi] <= now:
                hi += 1
            if hi > plo:
                pq[0] = (base, hi, phi)
            break
        return lo, hi

    def settle(x: float, g: float) -> None:
        """The PS applies every push on the link whose tag is at most ``x`` (early).

        Pushes leave the link in the order of their tags (ties: the one that
        became its connection's head first, then join order), at the real time
        the link's virtual clock reaches the tag: g⁻¹(tag), from the clock's
        breakpoints. The PS CPU serves them first-in first-out, by Lindley's
        recursion (Lindley 1952) D_i = max(a_i, D_{i−1}) + u_i, which unrolls to
        D_i = U_i + max(D_0, max_{j≤i}(a_j − U_{j−1})), U_i = u_1 + … + u_i: one
        cumulative sum and one running maximum for the whole batch. ``g`` is
        the link's virtual time now; every later push has a tag ≥ min(x, g).
        """
        nonlocal ps_free, log_from
        if not records:
            return
        rec = np.fromiter(records, np.float64, len(records)).reshape(-1, 4)
        base = rec[:, 0]
        lo, hi, conn = rec[:, 1:].T.astype(np.int64)
        # positions with tag ≤ x; all that have left (gone) in any case
        cut = np.searchsorted(pos_bytes_a, x - base, "right") - 1
        np.maximum(cut, lo, out=cut)
        np.minimum(cut, hi, out=cut)
        np.maximum(cut, np.minimum(hi, np.fromiter(gone, np.int64, workers)[conn]), out=cut)
        lens = cut - lo
        ends = np.cumsum(lens)
        total = int(ends[-1])
        if total:
            # the positions in join order; a stable sort by (tag, head tag) keeps it for ties
            pos = np.arange(total) + np.repeat(lo - (ends - lens), lens)
            b = np.repeat(base, lens)
            tags = b + pos_bytes_a[pos + 1]
            o = np.lexsort((b + pos_bytes_a[pos], tags))
            tags = tags[o]
            # arrival at the PS: g⁻¹(tag) on the last breakpoint before the tag
            n_log = len(up_g) - log_from
            gl = np.fromiter(up_g[log_from:], np.float64, n_log)
            i = np.searchsorted(gl, tags, "left") - 1
            np.maximum(i, 0, out=i)
            gap = tags - gl[i]
            np.maximum(gap, 0.0, out=gap)
            tl = np.fromiter(up_t[log_from:], np.float64, n_log)
            kl = np.fromiter(up_k[log_from:], np.float64, n_log)
            arrive = tl[i] + gap * kl[i] / cap
            u = pos_update_a[pos[o]]
            u_sum = np.cumsum(u)
            m = arrive - (u_sum - u)
            if m[0] < ps_free:
                m[0] = ps_free
            done = u_sum + np.maximum.accumulate(m)
            ps_free = float(done[-1])
            np.maximum.at(settled_end, np.repeat(conn, lens)[o], done)
        rec[:, 1] = cut
        records[:] = rec[cut < hi].ravel().tolist()
        j = bisect_left(up_g, x if x < g else g, log_from) - 1
        if j > log_from:
            log_from = j
        if log_from > 4096:
            del up_t[:log_from], up_g[:log_from], up_k[:log_from]
            log_from = 0

    def check_end(w: int, now: float) -> None:
        if not ending[w] and seg[w] == n_seg and arrived[w] == n_flows[w] and pushes_left[w] == 0:
            ending[w] = True
            push_event(max(now, last_update[w], free_at[w]), _STEP_END, w)

    def issue_pushes(w: int, slot: int, now: float) -> None:
        if not pushes_after[slot]:
            return
        if latency > 0:
            push_event(now + latency, _JOIN, w, (_UP << 30) + slot)
        else:
            join_pushes(w, slot, now)

    t1 = single_step_estimate(workload, network)
    for w in range(workers):
        if start_offsets_s is not None:
            start = float(start_offsets_s[w])
        else:
            start = 0.0 if w == 0 else float(rng.uniform(0.0, t1))
        push_event(start, _STEP_START, w)

    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    now = 0.0
    while events:
        now, _, _, kind, a, b = heappop(events)
        if kind == _DEPART and b != link_version[a]:
            continue  # stale: the link changed since this was scheduled
        n_events += 1
        if kind == _DEPART and a >= 2:  # a node's cores finished a segment
            _, w, t_next = cores[a - 2].pop_next(now)
            link_version[a] += 1
            if t_next is not None:
                push_event(t_next, _DEPART, a, link_version[a])
            end_segment(w, now)
        elif kind == _DEPART and early and a == _UP:
            # the workers → PS link: its next departure or the next idle connection
            # whose pushes are due (a departure first at equal times). An emptying
            # connection takes the pushes due by then as one flow; when a step's
            # last push has left, the PS applies all that left by then (settle)
            h = heaps[_UP]
            qs = queues[_UP]
            k = k_busy[_UP]
            g = vg[_UP]
            t_last = vt[_UP]
            nb = nic_busy[_UP]
            nbytes = nic_bytes[_UP]
            up_wake = math.inf
            while True:
                if h:
                    gap = h[0][0] - g
                    t_next = t_last + (gap if gap > 0.0 else 0.0) * k / cap
                    depart = not releases or t_next <= releases[0][0]
                    if not depart:
                        t_next = releases[0][0]
                elif releases:
                    t_next = releases[0][0]
                    depart = False
                else:
                    link_version[_UP] += 1
                    break
                if t_next > now:
                    if not events or t_next < events[0][0]:
                        now = t_next  # as in the loop below
                        n_events += 1
                    else:
                        up_wake = t_next
                        link_version[_UP] += 1
                        heappush(events, (t_next, _DEPART, seq, _DEPART, _UP, link_version[_UP]))
                        seq += 1
                        break
                if k:
                    dt = now - t_last
                    g += dt * cap / k
                    nb += dt
                t_last = now
                if depart:
                    c = h[0][2]
                    tag, size, count = qs[c].popleft()
                    if g < tag:
                        # rounding: the clock reaches the tag when the flow leaves, so
                        # that g⁻¹(tag) over the breakpoints (settle) gives this time
                        g = tag
                    nbytes += size
                    left = pushes_left[c] - count
                    pushes_left[c] = left
                    gone[c] = n_push - left
                    pq = pending[c]
                    if pq:
                        lo, hi = take_before(c, now)
                        if hi > lo:  # the pushes due by now join as one flow, a record
                            base = tag - pos_bytes[lo]
                            tag_run = base + pos_bytes[hi]
                            records.extend((base, lo, hi, c))
                            qs[c].append((tag_run, pos_bytes[hi] - pos_bytes[lo], hi - lo))
                            heapreplace(h, (tag_run, hseq, c))
                            hseq += 1
                        else:
                            heappop(h)
                            k -= 1
                            base, lo, _ = pq[0]
                            heappush(releases, (base + pos_issue[lo], rseq, c))
                            rseq += 1
                    else:
                        heappop(h)
                        k -= 1
                else:
                    c = heappop(releases)[2]
                    lo, hi = take_by(c, now)
                    base = g - pos_bytes[lo]  # one flow, a record
                    tag_run = base + pos_bytes[hi]
                    records.extend((base, lo, hi, c))
                    qs[c].append((tag_run, pos_bytes[hi] - pos_bytes[lo], hi - lo))
                    heappush(h, (tag_run, hseq, c))
                    hseq += 1
                    k += 1
                up_t.append(now)
                up_g.append(g)
                up_k.append(k)
                if depart and not left:
                    settle(tag, g)
                    end = float(settled_end[c])
                    settled_end[c] = -np.inf
                    if end > last_update[c]:
                        last_update[c] = end
                    check_end(c, now)
            k_busy[_UP] = k
            vg[_UP] = g
            vt[_UP] = t_last
            nic_busy[_UP] = nb
            nic_bytes[_UP] = nbytes
        elif kind == _DEPART:
            h = heaps[a]
            qs = queues[a]
            k = k_busy[a]
            g = vg[a]
            t_last = vt[a]
            nb = nic_busy[a]
            nbytes = nic_bytes[a]
            while True:
                # advance the virtual clock to now and pop the head of the first connection
                dt = now - t_last
                g += dt * cap / k
                nb += dt
                t_last = now
                c = h[0][2]
                fq = qs[c]
                tag, size, payload = fq.popleft()
                nbytes += size
                if fq:
                    heapreplace(h, (fq[0][0], hseq, c))
                    hseq += 1
                else:
                    heappop(h)
                    k -= 1
                if early:  # the PS → workers link: log the clock; c's next group starts now
                    hint = down_hint[c]
                    down_t.append(now)
                    down_g.append(g)
                    down_k.append(k)
                    if fq:
                        down_hint[c] = down_off + len(down_t) - 1
                if fifo:
                    w, idx = divmod(payload, stride)
                else:
                    w, idx = c, payload
                if trace is not None:
                    t_join = joined[w][idx] if a == _DOWN else push_joined[w][idx]
                    begin = max(t_join, conn_free[a][c])
                    trace.append((PULL if a == _DOWN else PUSH, w, idx, begin, now))
                    conn_free[a][c] = now
                if a == _DOWN:
                    if early and payload > arrived[w]:
                        quiet_arrivals(w, payload, now, hint)
                    got = arrived[w] + 1
                    arrived[w] = got
                    s = seg[w]
                    if s < n_seg:
                        if not running[w] and got >= req[w][s]:
                            try_start(w, now)
                    elif got == n_flows[w]:
                        check_end(w, now)
                else:
                    start = now if now > ps_free else ps_free
                    ps_free = start + push_update[idx]
                    if trace is not None:
                        trace.append((UPDATE, w, idx, start, ps_free))
                    if ps_free > last_update[w]:
                        last_update[w] = ps_free
                    pushes_left[w] -= 1
                    if not pushes_left[w]:
                        check_end(w, now)
                if h:
                    gap = h[0][0] - g
                    t_next = now + (gap if gap > 0.0 else 0.0) * k / cap
                    if not events or t_next < events[0][0]:
                        # the link's next departure precedes every pending event: take it
                        # now, exactly as the queue would (no other event can come first)
                        now = t_next
                        n_events += 1
                        continue
                    link_version[a] += 1
                    heappush(events, (t_next, _DEPART, seq, _DEPART, a, link_version[a]))
                    seq += 1
                else:
                    link_version[a] += 1
                break
            k_busy[a] = k
            vg[a] = g
            vt[a] = t_last
            nic_busy[a] = nb
            nic_bytes[a] = nbytes
        elif kind == _JOIN:
            li, slot = divmod(b, 1 << 30)
            if li == _DOWN:
                join_pulls(a, now)
            else:
                join_pushes(a, slot, now)
        elif kind == _SEG_END:
            w = a
            rw = req[w]
            while True:
                s = seg[w]
                busy[w] += seg_dur[s]
                if trace is not None:
                    trace.append((COMPUTE, w, s, now - seg_dur[s], now))
                if pushes_after[s + 1]:
                    issue_pushes(w, s + 1, now)
                s += 1
                seg[w] = s
                if s == n_seg:
                    running[w] = False
                    check_end(w, now)
                elif arrived[w] >= rw[s]:  # the next segment can start at once
                    t_end = now + seg_dur[s]
                    if not events or t_end < events[0][0]:
                        now = t_end  # and it ends before any pending event: run it now
                        n_events += 1
                        continue
                    push_event(t_end, _SEG_END, w)
                else:
                    running[w] = False  # waits for a pull
                break
        elif kind == _STEP_END:
            w = a
            step_ends[w].append(now)
            if len(step_ends[w]) < steps_per_worker:
                push_event(now + overhead, _STEP_START, w)
        else:  # _STEP_START
            w = a
            seg[w] = 0
            running[w] = False
            ending[w] = False
            arrived[w] = 0
            free_at[w] = now
            if random_order and n_pull:
                n_flows[w] = -1  # drawn when the pulls are issued
            pushes_left[w] = n_push
            last_update[w] = now
            if early:
                gone[w] = 0
                if first_pos[1]:
                    issue_run(w, now + latency, 0, first_pos[1], now)
            elif eager:
                if pushes_after[0]:
                    issue_pushes_at(w, 0, now, now)
            else:
                issue_pushes(w, 0, now)
            if n_pull:
                if pull_start > 0 or latency > 0:
                    push_event(now + pull_start + latency, _JOIN, w, _DOWN << 30)
                else:
                    join_pulls(w, now)
            try_start(w, now)
            check_end(w, now)

    return RawRun(
        step_ends=step_ends,
        busy=busy,
        now=now,
        events=n_events,
        bytes_pulled=nic_bytes[_DOWN],
        bytes_pushed=nic_bytes[_UP],
        down_busy_s=nic_busy[_DOWN],
        up_busy_s=nic_busy[_UP],
        nic={
            "ps0.out": (nic_bytes[_DOWN], nic_busy[_DOWN]),
            "ps0.in": (nic_bytes[_UP], nic_busy[_UP]),
        },
    )


def simulate_async_replicated(
    workload: Workload,
    network: Network,
    workers: int,
    steps_per_worker: int = 30,
    warmup_steps: int = 3,
    policy: str = "tf_default",
    seed: int = 0,
    replications: int = 3,
    workers_per_node: int = 1,
    ps_discipline: str = "fair",
    p3_slice_bytes: float = P3_SLICE_BYTES,
    bytescheduler_partition_bytes: float = BYTESCHEDULER_PARTITION_BYTES,
    bytescheduler_credit_bytes: float = BYTESCHEDULER_CREDIT_BYTES,
    pull_gap_s: float = 0.0,
    pull_gap_cpu: bool = False,
    compute_slots: float = 1.0,
    start_offsets_s: Sequence[Sequence[float]] | None = None,
    link_quantum_bytes: float = 0.0,
    pull_join_delay_s: float = 0.0,
    trace: list[TraceRecord] | None = None,
) -> AsyncResult:
    """Mean of :func:`simulate_async` over seeds ``seed … seed + replications − 1``.

    Workers keep the offsets they start with (the PS link treats them
    symmetrically), so one run depends on its random start offsets; the mean
    over replications is the expected throughput, and ``steps_per_s_std`` its
    spread. With one worker every replication is identical.

    ``start_offsets_s``: (R, N) start offsets of each replication, seconds,
    instead of seeded random ones (``replications`` is then R; the measured
    validation starts its episodes from the same offsets).

    ``trace``: if given, receives the first replication's trace records.

    Returns:
        An :class:`AsyncResult` whose metrics are means over replications
        (``events`` and ``wall_s`` are totals).

    Raises:
        ValueError: ``replications < 1``, no rows in ``start_offsets_s``, or any
            error of :func:`simulate_async`.
    """
    if start_offsets_s is not None:
        rows: list[Sequence[float] | None] = list(start_offsets_s)
        if not rows:
            raise ValueError("start_offsets_s needs at least one row")
    else:
        if replications < 1:
            raise ValueError(f"replications must be >= 1, got {replications}")
        rows = [None] * (replications if workers > 1 else 1)
    runs = [
        simulate_async(
            workload,
            network,
            workers,
            steps_per_worker,
            warmup_steps,
            policy,
            seed + r,
            workers_per_node=workers_per_node,
            ps_discipline=ps_discipline,
            p3_slice_bytes=p3_slice_bytes,
            bytescheduler_partition_bytes=bytescheduler_partition_bytes,
            bytescheduler_credit_bytes=bytescheduler_credit_bytes,
            pull_gap_s=pull_gap_s,
            pull_gap_cpu=pull_gap_cpu,
            compute_slots=compute_slots,
            start_offsets_s=row,
            link_quantum_bytes=link_quantum_bytes,
            pull_join_delay_s=pull_join_delay_s,
            trace=trace if r == 0 else None,
        )
        for r, row in enumerate(rows)
    ]
    mean = {
        f: float(np.mean([getattr(r, f) for r in runs]))
        for f in (
            "steps_per_s",
            "samples_per_s",
            "mean_step_s",
            "ps_down_util",
            "ps_up_util",
            "blocked_fraction",
            "sim_time_s",
            "bytes_pulled",
            "bytes_pushed",
        )
    }
    sps = [r.steps_per_s for r in runs]
    return AsyncResult(
        workers=workers,
        steps_per_worker=steps_per_worker,
        warmup_steps=warmup_steps,
        policy=policy,
        events=sum(r.events for r in runs),
        wall_s=sum(r.wall_s for r in runs),
        seed=seed,
        replications=len(runs),
        steps_per_s_std=float(np.std(sps, ddof=1)) if len(sps) > 1 else 0.0,
        **mean,
    )
