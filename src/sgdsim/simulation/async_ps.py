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
server applying updates). The model's parts are objects on one event loop
(:mod:`sgdsim.simulation.engine` assembles them: topology, connections with
the policies' queues, PS shards, workers); transmission policies that cut,
group or reorder tensors are in :mod:`sgdsim.simulation.policies`. The
whole-tensor FIFO policies on one PS also have a loop specialised for them
(:mod:`sgdsim.simulation.fast_fifo`), which works in bulk and gives the same figures within
rounding.

Events are ordered by ``(time, priority, sequence)`` so simultaneous events
break ties deterministically: the same inputs and seed give bit-identical
results.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sgdsim.simulation import fast_general
from sgdsim.simulation.chrome_trace import TraceRecord
from sgdsim.simulation.connection import JoinDelay
from sgdsim.simulation.engine import AsyncPSModel, RawRun, single_step_estimate
from sgdsim.simulation.fast_fifo import FastFifoRun
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
# tests empty this to compare it with the object model
_FAST_POLICIES = frozenset(n for n in POLICIES if get_policy(n).whole_tensor_fifo)
# a pull gap as a pure delay on a fair PS NIC runs in the fast loop; tests switch
# it off to compare with the object model
_GAP_FAST = True


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
    pull_join_delay_s: float | JoinDelay = 0.0,
    push_join_delay_s: float | JoinDelay = 0.0,
    start_window_s: float | None = None,
    step_jitter: bool = False,
) -> AsyncResult:
    """Simulate ``workers`` asynchronous workers against the PS (one or several shards).

    All pulls of a step are issued together ``workload.pull_start_s`` after
    step start, in the order the policy gives (:func:`pull_issue_order`);
    pushes are issued when produced. Each worker's connection serves its
    units one at a time at its fair share of the PS NIC
    (:class:`~sgdsim.simulation.link.PSLink`), whole tensors in issue order
    or as the policy cuts and orders them (:mod:`sgdsim.simulation.policies`;
    ``p3`` also moves pulls, see there).
    Worker ``w > 0`` starts after a seeded uniform random delay in ``[0, T1)``,
    ``T1`` the contention-free step time (:func:`single_step_estimate`): workers
    keep the offsets they start with, so independently launched ones are drawn
    over a whole step (``start_window_s``: workers a launcher starts together).

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
        start_window_s: seconds over which worker ``w > 0``'s seeded start delay
            is drawn (None: ``T1``); ignored with ``start_offsets_s``.
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
        pull_join_delay_s: seconds (or a
            :class:`~sgdsim.simulation.connection.JoinDelay`: mean and sd by
            how many transfers it joins) the first pull of a worker's step
            waits before its first byte when the PS NIC is sending to other
            workers at that moment (0: none). Real TensorFlow PS serves a
            step that starts while it sends to another worker late by a few
            ms, which drives asynchronous workers from pulling together into
            taking turns; processor sharing alone keeps any phase they start
            with. Measured on the testbed, in training, by
            :func:`sgdsim.testbed.calibrate.training_join_delays`.
        push_join_delay_s: the same (seconds or a ``JoinDelay``) for the first
            push of a step's backward pass (its first gradient once every pull
            of the step has arrived; the forward pass's pushes of
            batch-normalization statistics neither wait nor count) when the PS
            NIC is receiving from other workers. On the testbed a worker whose
            gradients start while another's stream into the PS runs gets its
            share about 30 ms late, 60–80 ms behind two or three
            (docs/steady-state.md), which keeps asynchronous workers taking turns.
        step_jitter: stretch each step's compute by a measured step ratio
            (``Workload.step_scale``, drawn per worker and step; docs/model.md).

    With several PS shards (``workload.ps_tasks`` > 1) each shard is its own
    host with a full-duplex NIC and its own PS CPU, each worker has one
    connection to each shard, and the NICs are shared max-min fairly (see
    :class:`~sgdsim.simulation.topology.StarTopology`); ``ps_down_util`` and
    ``ps_up_util`` are then means over the shards' NICs. Whole-tensor FIFO
    policies on one PS run a faster loop with the same model (with a pull gap,
    only as a pure delay on a ``fair`` PS NIC).

    Returns:
        The grid point's metrics; throughput is measured over the window in
        which every worker is past warm-up and none has finished.

    Raises:
        ValueError: bad N, step counts, policy or policy sizes.
    """
    _check_args(
        workers, steps_per_worker, warmup_steps, ps_discipline, workers_per_node, compute_slots,
        link_quantum_bytes, (pull_join_delay_s, push_join_delay_s), pull_gap_s, start_offsets_s,
        start_window_s,
    )  # fmt: skip
    wall0 = time.perf_counter()
    raw = _run_model(
        workload, network, workers, steps_per_worker, policy, seed, start_offsets_s, trace,
        workers_per_node, ps_discipline, compute_slots, link_quantum_bytes,
        (pull_join_delay_s, push_join_delay_s), pull_gap_s, pull_gap_cpu,
        PolicySizes(p3_slice_bytes, bytescheduler_partition_bytes, bytescheduler_credit_bytes),
        start_window_s,
        workload.step_scale.tolist() if step_jitter and workload.step_scale is not None else None,
    )  # fmt: skip
    if step_log is not None:
        step_log.extend(raw.step_ends)
    if nic_stats is not None:
        nic_stats.update(raw.nic)
    return _summarize(raw, workload, policy, seed, steps_per_worker, warmup_steps, wall0)


def _run_model(
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
    compute_slots: float,
    link_quantum_bytes: float,
    join_delays_s: tuple[float | JoinDelay, float | JoinDelay],
    pull_gap_s: float,
    pull_gap_cpu: bool,
    sizes: PolicySizes,
    start_window_s: float | None = None,
    step_scale: Sequence[float] | None = None,
) -> RawRun:
    """One run of the step model that serves this configuration (arguments as
    :func:`simulate_async`, checked there): the bulk :class:`FastFifoRun` for
    whole-tensor FIFO policies on one PS without quantum, join delays
    (``join_delays_s``: pulls', pushes'), step ratios (``step_scale``) or token
    bucket (``network.burst_bytes``) or two-way share (``network.two_way_share``), and
    with a pull gap only as a pure delay on a fair PS NIC; :class:`AsyncPSModel`
    otherwise, compiled (:func:`.fast_general.run_model`, the same figures) where
    :func:`.fast_general.supports` it."""
    pol = get_policy(policy)
    spec = pol.spec(sizes)
    serial_gap = pull_gap_s > 0 and pol.serial_pulls
    if serial_gap:
        spec = dataclasses.replace(spec, pull_gap_s=pull_gap_s, pull_gap_cpu=pull_gap_cpu)
    gap_ok = not serial_gap or (_GAP_FAST and not pull_gap_cpu and ps_discipline == "fair")
    plain = not (
        link_quantum_bytes
        or any(join_delays_s)
        or network.burst_bytes
        or network.two_way_share != (1.0, 1.0)
    )
    fast = gap_ok and plain and step_scale is None
    if policy in _FAST_POLICIES and workload.ps_tasks == 1 and fast:
        return FastFifoRun(
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
            pull_gap_s if serial_gap else 0.0,
            start_window_s,
        ).run()
    model = AsyncPSModel(
        workload,
        network,
        workers,
        steps_per_worker,
        policy,
        spec,
        seed,
        pull_issue_order(workload, policy),
        start_offsets_s,
        single_step_estimate(workload, network) if start_window_s is None else start_window_s,
        trace,
        workers_per_node,
        ps_discipline,
        compute_slots,
        link_quantum_bytes,
        *join_delays_s,
        step_scale,
    )
    return fast_general.run_model(model) if fast_general.supports(model) else model.run()


def _check_args(
    workers: int,
    steps_per_worker: int,
    warmup_steps: int,
    ps_discipline: str,
    workers_per_node: int,
    compute_slots: float,
    link_quantum_bytes: float,
    join_delays_s: tuple[float | JoinDelay, float | JoinDelay],
    pull_gap_s: float,
    start_offsets_s: Sequence[float] | None,
    start_window_s: float | None = None,
) -> None:
    """Raise ValueError naming the first argument of :func:`simulate_async` out of range."""
    checks = [
        (workers >= 1, f"workers must be >= 1, got {workers}"),
        (
            0 <= warmup_steps < steps_per_worker,
            f"need 0 <= warmup_steps < steps_per_worker, got {warmup_steps}, {steps_per_worker}",
        ),
        (
            ps_discipline in PS_DISCIPLINES,
            f"unknown ps_discipline {ps_discipline!r}; choose one of {', '.join(PS_DISCIPLINES)}",
        ),
        (workers_per_node >= 1, f"workers_per_node must be >= 1, got {workers_per_node}"),
        (compute_slots > 0, f"compute_slots must be > 0, got {compute_slots}"),
        (link_quantum_bytes >= 0, f"link_quantum_bytes must be >= 0, got {link_quantum_bytes}"),
        (
            start_offsets_s is None or len(start_offsets_s) == workers,
            f"start_offsets_s needs {workers} values, got "
            f"{None if start_offsets_s is None else len(start_offsets_s)}",
        ),
        (pull_gap_s >= 0, f"pull_gap_s must be >= 0, got {pull_gap_s}"),
        (
            start_window_s is None or start_window_s >= 0,
            f"start_window_s must be >= 0 or None, got {start_window_s}",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
    for name, delay in zip(("pull_join_delay_s", "push_join_delay_s"), join_delays_s, strict=True):
        try:
            JoinDelay.of(delay)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None


def _summarize(
    raw: RawRun,
    workload: Workload,
    policy: str,
    seed: int,
    steps_per_worker: int,
    warmup_steps: int,
    wall0: float,
) -> AsyncResult:
    """The grid point's record from a run; throughput over the window in which every
    worker is past warm-up and none has finished."""
    step_ends, now = raw.step_ends, raw.now
    workers = len(step_ends)
    firsts = [e[warmup_steps - 1] if warmup_steps else 0.0 for e in step_ends]
    t_lo, t_hi = max(firsts), min(e[-1] for e in step_ends)
    if t_hi > t_lo:
        done = sum(sum(1 for t in e if t_lo < t <= t_hi) for e in step_ends)
        steps_per_s = done / (t_hi - t_lo)
    else:  # cannot happen with identical workers; keep a defined value
        steps_per_s = workers * (steps_per_worker - warmup_steps) / max(now - max(firsts), 1e-12)
    per_worker = [
        (e[-1] - first) / (steps_per_worker - warmup_steps)
        for e, first in zip(step_ends, firsts, strict=True)
    ]
    span = now if now > 0 else 1e-12
    total_time = sum(e[-1] for e in step_ends)
    overhead = workers * steps_per_worker * workload.overhead_s
    blocked = 1.0 - (sum(raw.busy) + overhead) / max(total_time, 1e-12)
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
    pull_join_delay_s: float | JoinDelay = 0.0,
    push_join_delay_s: float | JoinDelay = 0.0,
    trace: list[TraceRecord] | None = None,
    start_window_s: float | None = None,
    step_jitter: bool = False,
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
    ``start_window_s``, ``step_jitter``: as for :func:`simulate_async`.

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
            push_join_delay_s=push_join_delay_s,
            trace=trace if r == 0 else None,
            start_window_s=start_window_s,
            step_jitter=step_jitter,
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
