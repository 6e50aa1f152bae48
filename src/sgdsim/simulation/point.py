"""One grid point, predicted one way: :class:`SimParams` and :func:`predict_point`.

The ``simulate`` and ``chrome_trace`` rules, the testbed predictions and
``sgdsim predict`` all build a :class:`SimParams` (from the config, whose
defaults live in the schema) and call :func:`predict_point`, so the same point
gives the same figure from every entry point; the ``simulate`` rule and
``sgdsim predict`` through :func:`predict_grid_point`, under the grid's
protocol (:func:`grid_rule`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sgdsim.simulation.async_ps import simulate_async_replicated
from sgdsim.simulation.bounds import (
    ETHERNET_PAYLOAD_FRACTION,
    compute_slots,
    cpu_bound_steps_per_s,
    link_bound_steps_per_s,
)
from sgdsim.simulation.chrome_trace import TraceRecord
from sgdsim.simulation.connection import JoinDelay
from sgdsim.simulation.policies import PolicySizes, get_policy
from sgdsim.simulation.sync import MODES, CollectiveSettings, simulate
from sgdsim.simulation.workload import Network, Workload

#: Rounds of the damped fixed-point iteration of the testbed's compute slots.
SLOT_ROUNDS = 4


@dataclass(frozen=True)
class SimParams:
    """Every knob of a prediction besides the workload, network, N and policy.

    Attributes:
        steps_per_worker: steps each simulated worker runs (> ``warmup_steps``).
        warmup_steps: first steps of each worker left out of the throughput window.
        replications: runs with seeds ``seed, seed+1, …`` averaged per point.
        seed: seed of the first replication's ``numpy.random.Generator``.
        workers_per_node: workers placed on one node (they share its cores).
        ps_discipline: ``fair`` or ``fifo`` (how the PS NIC serves the workers).
        sizes: the policies' unit sizes, bytes.
        ps_with_workers: the PS, every worker and the emulated network share
            one node's cores (the testbed's placement): the compute slots are
            then a fixed point of the throughput and the enforced pull order's
            round trip is CPU work on those cores.
        network_cpu_s_per_byte: kernel CPU seconds per byte the emulated
            network costs that node (0 outside the testbed).
        pull_join_delay_s: seconds, or a
            :class:`~sgdsim.simulation.connection.JoinDelay` by how many
            transfers it joins, a step that starts on a busy PS waits
            (measured on the testbed; 0 elsewhere).
        push_join_delay_s: the same for a step's backward pass that starts
            while the PS receives from other workers.
        collective: settings of the ``allreduce`` mode.
        phase_band: add the phase band (:func:`phase_band`) to ``async`` points with N > 1.
        start_window_s: ``async``: seconds over which worker ``w > 0`` starts
            after worker 0 (None: over one contention-free step, workers
            launched independently; see :func:`~sgdsim.simulation.simulate_async`).
        step_jitter: ``async``: each step's compute stretched by a measured
            step ratio (``Workload.step_scale``; see
            :func:`~sgdsim.simulation.simulate_async`).
    """

    steps_per_worker: int
    warmup_steps: int
    replications: int
    seed: int
    workers_per_node: int
    ps_discipline: str
    sizes: PolicySizes = field(default_factory=PolicySizes)
    ps_with_workers: bool = False
    network_cpu_s_per_byte: float = 0.0
    pull_join_delay_s: float | JoinDelay = 0.0
    push_join_delay_s: float | JoinDelay = 0.0
    collective: CollectiveSettings = field(default_factory=CollectiveSettings)
    phase_band: bool = False
    start_window_s: float | None = None
    step_jitter: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any], **overrides: Any) -> SimParams:
        """From a config whose defaults are filled (Snakemake's ``validate`` or
        :func:`sgdsim.config.with_defaults`): ``seed`` and ``simulation.*``."""
        sim = config["simulation"]
        ar = sim["allreduce"]
        params = cls(
            steps_per_worker=int(sim["steps_per_worker"]),
            warmup_steps=int(sim["warmup_steps"]),
            replications=int(sim["replications"]),
            seed=int(config["seed"]),
            workers_per_node=int(sim["workers_per_node"]),
            ps_discipline=str(sim["ps_discipline"]),
            sizes=PolicySizes(
                float(sim["p3_slice_bytes"]),
                float(sim["bytescheduler_partition_bytes"]),
                float(sim["bytescheduler_credit_bytes"]),
            ),
            phase_band=bool(sim["phase_band"]),
            step_jitter=bool(sim["step_jitter"]),
            start_window_s=None if sim["start_window_s"] is None else float(sim["start_window_s"]),
            collective=CollectiveSettings(
                algorithm=str(ar["algorithm"]),
                bucket_bytes=float(ar["bucket_bytes"]),
                first_bucket_bytes=float(ar["first_bucket_bytes"]),
                horovod_fusion_bytes=float(ar["horovod_fusion_bytes"]),
                horovod_cycle_s=float(ar["horovod_cycle_s"]),
                message_overhead_s=float(ar["message_overhead_s"]),
            ),
        )
        return dataclasses.replace(params, **overrides)


def grid_network(bandwidth_bps: float, latency_s: float, name: str = "net") -> Network:
    """A data-sheet network as the simulator sees it: the NIC rate (bit/s) less
    TCP/IP and Ethernet framing (:data:`~sgdsim.simulation.bounds.ETHERNET_PAYLOAD_FRACTION`),
    and the per-message latency (seconds).

    Raises:
        ValueError: rate ≤ 0 or latency < 0.
    """
    return Network.from_bits(bandwidth_bps * ETHERNET_PAYLOAD_FRACTION, latency_s, name)


def predict_point(
    workload: Workload,
    network: Network,
    workers: int,
    policy: str,
    params: SimParams,
    *,
    mode: str = "async",
    start_offsets_s: Sequence[Sequence[float]] | None = None,
    episodes: tuple[float, float, int] | None = None,
    steady: Any = None,
    trace: list[TraceRecord] | None = None,
    by_phase: bool = True,
) -> dict[str, Any]:
    """Simulated metrics of one point, capped by the nodes' CPU (a flat record).

    ``steps_per_s`` is the simulated throughput (``sim_steps_per_s``) or, when
    lower, the CPU bound (``cpu_bound_steps_per_s``, see
    :func:`sgdsim.simulation.bounds.cpu_bound_steps_per_s`; None when the
    profile did not measure CPU). One-at-a-time policies
    (:attr:`~sgdsim.simulation.policies.Policy.serial_pulls`) wait one RPC
    round trip per pull (``pull_gap_s``: the profile's ``rpc_rtt_s`` plus the
    network's round-trip latency), as real TensorFlow enforcing that order does.

    Co-located workers share their node's cores
    (:func:`sgdsim.simulation.bounds.compute_slots`). With
    ``params.ps_with_workers`` the node also runs the PS, the RPC threads and
    the emulated network's kernel work, which take cores in proportion to the
    throughput, so the slots are a fixed point of the throughput, found by
    damped iteration (:data:`SLOT_ROUNDS` rounds; more throughput leaves fewer
    cores to compute, so the iteration contracts). ``compute_slots`` records
    the value used (None: cores not shared).

    Args:
        workload: the calibrated single-worker step.
        network: what the simulator sees of the network (see :func:`grid_network`).
        workers: N ≥ 1.
        policy: a registered policy name (``async``, ``sync_ps``) or, in
            ``allreduce`` mode, a fusion rule (:data:`~sgdsim.simulation.sync.FUSIONS`).
        params: every other knob.
        mode: ``async``, ``sync_ps`` or ``allreduce``.
        start_offsets_s: (R, N) start offsets, seconds: R runs from these
            instead of ``params.replications`` seeded random ones (also under
            ``steady``).
        episodes: (``warmup_s``, ``duration_s``, ``min_steps``): with
            ``start_offsets_s``, run and score each as the measured episode it
            predicts (:func:`sgdsim.simulation.protocols.simulate_episodes`).
        steady: a :class:`~sgdsim.protocol.SteadyRule`: simulate
            ``params.replications`` runs until the measurement's convergence
            rule holds, score each by it and average
            (:func:`sgdsim.simulation.protocols.simulate_steady`); the record
            gains the columns of :func:`sgdsim.protocol.steady_columns` (of
            the first run).
        trace: if given, receives the first run's trace records.
        by_phase: under ``steady`` without ``start_offsets_s``, a pair also
            gets ``steps_per_s_by_phase`` (:func:`phase_rates`, six more runs).

    With ``params.phase_band`` an ``async`` point with N > 1 gains
    ``steps_per_s_lo`` and ``steps_per_s_hi`` (:func:`phase_band`); other
    points get None there.

    Raises:
        ValueError: bad N, policy or parameters (see :func:`simulate_async`).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    serial = mode != "allreduce" and get_policy(policy).serial_pulls
    kw = _sim_kwargs(workload, network, policy, params, mode)

    estimates: list[Any] = []  # the steady-state estimate of the last run
    sim_log: list[list[float]] = []

    def run(slots: float) -> Any:
        if steady is not None:
            from sgdsim.simulation.protocols import simulate_steady

            estimates.clear()
            sim_log.clear()
            return simulate_steady(
                workload, network, workers, steady, estimate=estimates, step_log=sim_log,
                replications=params.replications, start_offsets_s=start_offsets_s,
                compute_slots=slots, **kw,
            )  # fmt: skip
        if episodes is not None and start_offsets_s is not None:
            from sgdsim.simulation.protocols import simulate_episodes

            warmup_s, duration_s, min_steps = episodes
            return simulate_episodes(
                workload, network, workers, start_offsets_s, warmup_s, duration_s, min_steps,
                compute_slots=slots, **kw,
            )  # fmt: skip
        if mode != "async":
            return simulate(
                workload, network, workers, params.steps_per_worker, params.warmup_steps,
                compute_slots=slots, **kw,
            )  # fmt: skip
        return simulate_async_replicated(
            workload,
            network,
            workers=workers,
            steps_per_worker=params.steps_per_worker,
            warmup_steps=params.warmup_steps,
            replications=params.replications,
            start_offsets_s=start_offsets_s,
            compute_slots=slots,
            trace=trace,
            **kw,
        )

    cpu_net = params.network_cpu_s_per_byte
    shared = params.workers_per_node > 1 or (params.ps_with_workers and serial)
    slots = compute_slots(workload)
    r = run(slots)
    if shared and params.ps_with_workers:
        x = r.steps_per_s
        for _ in range(SLOT_ROUNDS):
            slots = compute_slots(workload, x, cpu_net)
            if trace is not None:
                trace.clear()
            r = run(slots)
            x = 0.5 * (x + r.steps_per_s)
    row = dataclasses.asdict(r)
    row["sim_wall_s"] = row.pop("wall_s")
    bound = _cpu_bound(workload, workers, params, mode)
    row["sim_steps_per_s"] = r.steps_per_s
    row["cpu_bound_steps_per_s"] = None if math.isinf(bound) else bound
    row["pull_gap_s"] = kw["pull_gap_s"]
    row["compute_slots"] = slots if shared else None
    row["start_window_s"] = params.start_window_s if mode == "async" else None
    if bound < r.steps_per_s:
        row["steps_per_s"] = bound
        row["samples_per_s"] = bound * workload.batch_size
    row["steps_per_s_lo"] = row["steps_per_s_hi"] = None
    if steady is not None:
        from sgdsim.protocol import steady_columns

        est = estimates[-1]
        row |= steady_columns(est, [[t - est.start for t in e] for e in sim_log])
    if mode == "async" and workers > 1:
        t0 = time.perf_counter()
        # a run from given starts (a replay) shares the point's rates by phase
        split = by_phase and steady is not None and start_offsets_s is None
        _add_phase_columns(row, workload, network, workers, params, kw, slots, bound, split)
        row["sim_wall_s"] += time.perf_counter() - t0
    return row


def grid_rule(config: dict[str, Any]) -> Any:
    """The :class:`~sgdsim.protocol.SteadyRule` grid points are predicted by
    (``simulation.steady``), or None under ``simulation.protocol: steps``.

    ``config`` has its defaults filled (:func:`sgdsim.config.with_defaults`)."""
    from sgdsim.protocol import SteadyRule

    sim = config["simulation"]
    return SteadyRule(**sim["steady"]) if sim["protocol"] == "steady" else None


#: Columns of a steady record that a grid row leaves out: per-step detail that
#: grows with the window (the validation keeps it in ``testbed_predictions``).
GRID_DROPPED = ("steps_in_window", "step_end_times")


def predict_grid_point(
    workload: Workload,
    network: Network,
    workers: int,
    policy: str,
    params: SimParams,
    *,
    mode: str = "async",
    steady: Any = None,
) -> dict[str, Any]:
    """One point of the prediction grid (rule ``simulate``, ``sgdsim predict``):
    :func:`predict_point`, an asynchronous point with N > 1 under ``steady``
    (:func:`grid_rule`) when it is given, every other point over
    ``params.steps_per_worker`` steps.

    A steady row records ``protocol`` ``steady`` and the rule's estimate of its
    first replication (``converged``, ``steps_per_s_half_width``,
    ``rel_half_width``, ``window_s``, ``steps_per_s_windows``,
    ``phase_distance``; :func:`sgdsim.protocol.steady_columns` less
    :data:`GRID_DROPPED`); its ``steps_per_s`` is the mean over
    ``params.replications`` runs from seeded random start phases, each scored
    on its own converged (or ``max_s``) window. Other rows record ``protocol``
    ``steps``.

    Raises:
        ValueError: as :func:`predict_point`.
    """
    rule = steady if mode == "async" and workers > 1 else None
    row = predict_point(
        workload, network, workers, policy, params, mode=mode, steady=rule, by_phase=False
    )
    for key in GRID_DROPPED:
        row.pop(key, None)
    row["protocol"] = "steps" if rule is None else "steady"
    return row


def _add_phase_columns(
    row: dict[str, Any],
    workload: Workload,
    network: Network,
    workers: int,
    params: SimParams,
    kw: dict[str, Any],
    slots: float,
    bound: float,
    split: bool,
) -> None:
    """The phase columns of an asynchronous point with N > 1: with
    ``params.phase_band``, ``steps_per_s_lo`` and ``steps_per_s_hi``
    (:func:`phase_band`, capped by the CPU ``bound`` and widened to hold the
    point's own rate); for a pair with ``split``, ``steps_per_s_by_phase``
    (:func:`phase_rates`, one step being two over its ``sim_steps_per_s``)."""
    if params.phase_band:
        lo, hi = phase_band(workload, network, workers, params, kw, slots)
        v = row["steps_per_s"]
        row["steps_per_s_lo"] = min(lo, bound, v)
        row["steps_per_s_hi"] = max(min(hi, bound), v)
    if split and workers == 2 and row["sim_steps_per_s"] > 0:
        step_s = 2 / row["sim_steps_per_s"]
        row["steps_per_s_by_phase"] = list(
            phase_rates(workload, network, params, kw, slots, step_s)
        )


#: Start offsets of the second worker in :func:`phase_rates`, in steps of the pair.
PHASE_STARTS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)


def phase_rates(
    workload: Workload,
    network: Network,
    params: SimParams,
    kw: dict[str, Any],
    slots: float,
    step_s: float,
) -> tuple[float | None, ...]:
    """Steps/s of a simulated pair of workers at each phase: (PHASE_BINS,), None
    where no simulated step fell.

    A pair leaves any start phase for the phase its dynamics pick, so its
    settled run shows the step at one phase only. This runs the pair from
    each of :data:`PHASE_STARTS` (the second worker that many ``step_s``
    seconds after the first; ``params.steps_per_worker`` steps each, all
    counted) and pools every step by its phase
    (:func:`sgdsim.protocol.phase_profile`): the simulated step at the phases
    a measurement spent its time in, to tell a miss of the step from a miss
    of the dynamics (docs/steady-state.md, "Throughput by phase").

    Args:
        workload, network, params: as :func:`predict_point`.
        kw: the point's simulator arguments (:func:`_sim_kwargs`).
        slots: the compute slots of the point's run.
        step_s: one step of the pair, seconds (> 0).

    Raises:
        ValueError: as :func:`~sgdsim.simulation.async_ps.simulate_async`.
    """
    from sgdsim.protocol import PHASE_BINS, phase_profile
    from sgdsim.simulation.async_ps import simulate_async

    runs = []
    for f in PHASE_STARTS:
        log: list[list[float]] = []
        simulate_async(
            workload, network, 2, params.steps_per_worker, 0,
            start_offsets_s=[0.0, f * step_s], step_log=log, compute_slots=slots, **kw,
        )  # fmt: skip
        runs.append((log, math.inf))
    profile = phase_profile(runs)
    return profile[1] if profile is not None else (None,) * PHASE_BINS


def _cpu_bound(workload: Workload, workers: int, params: SimParams, mode: str) -> float:
    """The point's CPU bound in steps/s (inf: none); ``allreduce`` has no PS to bound."""
    if mode == "allreduce":
        return math.inf
    return cpu_bound_steps_per_s(
        workload,
        workers,
        params.workers_per_node,
        params.ps_with_workers,
        params.network_cpu_s_per_byte,
    )


def _sim_kwargs(
    workload: Workload, network: Network, policy: str, params: SimParams, mode: str
) -> dict[str, Any]:
    """The simulator's keyword arguments of a point (see :func:`predict_point`)."""
    kw: dict[str, Any] = {
        "policy": policy,
        "seed": params.seed,
        "workers_per_node": params.workers_per_node,
        "ps_discipline": params.ps_discipline,
        "pull_gap_s": workload.rpc_rtt_s + 2 * network.latency_s,
        "pull_gap_cpu": params.ps_with_workers,
        "pull_join_delay_s": params.pull_join_delay_s,
        "push_join_delay_s": params.push_join_delay_s,
        **dataclasses.asdict(params.sizes),
    }
    if mode != "async":
        return kw | {"mode": mode, "collective": params.collective}
    kw["step_jitter"] = params.step_jitter
    if params.start_window_s is not None:
        kw["start_window_s"] = params.start_window_s
    return kw


def phase_band(
    workload: Workload,
    network: Network,
    workers: int,
    params: SimParams,
    kw: dict[str, Any],
    slots: float,
) -> tuple[float, float]:
    """Throughput of asynchronous workers in lockstep, and the most any phasing allows:
    (lower, upper) steps/s.

    Asynchronous workers settle into a relative phase that the network and the
    hosts decide (docs/steady-state.md: real workers under a fair queue take
    turns at the PS NIC, one pulling while another pushes, where the simulated
    ones drift into phase), so one point has a band of throughputs:

    - lower: the N workers in lockstep, every one pulling, computing and
      pushing at once (:func:`lockstep_steps_per_s`);
    - upper: the asymptotic bound of a closed network (Denning and Buzen,
      ACM Computing Surveys 10(3), 1978; Jain, *The Art of Computer Systems
      Performance Analysis*, 1991, Sec. 33.1), X(N) ≤ min(N · X(1), 1 / D_max):
      N workers are at most N times as fast as one alone (``X(1)``: one
      simulated worker, the same settings), and no direction of a PS shard's
      NIC carries more than its capacity (:func:`~sgdsim.simulation.bounds.link_bound_steps_per_s`).
      Perfect turn-taking reaches it when transfers dominate; no phasing
      exceeds it.

    Both are single-worker runs, without the join delay (which moves phases).

    Args:
        workload, network, workers, params: as :func:`predict_point`.
        kw: the point's simulator arguments (:func:`_sim_kwargs`).
        slots: the compute slots of the point's run.

    Raises:
        ValueError: as :func:`~sgdsim.simulation.async_ps.simulate_async`.
    """
    from sgdsim.simulation.async_ps import simulate_async

    args = {**kw, "pull_join_delay_s": 0.0, "push_join_delay_s": 0.0, "compute_slots": slots}
    args["step_jitter"] = False  # a worker alone: the mean step
    alone = simulate_async(
        workload, network, 1, params.steps_per_worker, params.warmup_steps,
        start_offsets_s=[0.0], **args,
    ).steps_per_s  # fmt: skip
    lo = lockstep_steps_per_s(workload, network, workers, params, kw, slots)
    return lo, min(workers * alone, link_bound_steps_per_s(workload, network))


def lockstep_steps_per_s(
    workload: Workload,
    network: Network,
    workers: int,
    params: SimParams,
    kw: dict[str, Any],
    slots: float,
) -> float:
    """Steps/s (all workers) of N identical workers in lockstep.

    Workers that pull, compute and push at the same instants split every
    shared resource N ways: each gets 1/N of every PS NIC direction (fair
    sharing), the PS applies N pushes for each of its own, and ``k`` workers
    on one node compute at ``min(1, slots / k)`` of their speed (limited
    processor sharing, as :class:`~sgdsim.simulation.link.PSLink` serves a
    node's cores). So the N of them run N times as fast as one worker with
    those shares: one simulated worker, without the join delay. It is the
    phasing in which they contend most (all pull together, then all push
    together). Arguments and errors as :func:`phase_band`.
    """
    from sgdsim.simulation.async_ps import simulate_async

    together = min(params.workers_per_node, workers)
    slow = max(1.0, together / slots) if together > 1 else 1.0
    one = dataclasses.replace(
        workload,
        seg_dur_s=workload.seg_dur_s * slow,
        push_update_s=workload.push_update_s * workers,
    )
    share = dataclasses.replace(network, bandwidth_Bps=network.bandwidth_Bps / workers)
    gap = kw["pull_gap_s"] * (slow if kw["pull_gap_cpu"] else 1.0)
    args = {
        **kw,
        "pull_join_delay_s": 0.0,
        "push_join_delay_s": 0.0,
        "compute_slots": 1.0,
        "step_jitter": False,
        "workers_per_node": 1,
        "pull_gap_s": gap,
        "pull_gap_cpu": False,
    }
    run = simulate_async(
        one, share, 1, params.steps_per_worker, params.warmup_steps, start_offsets_s=[0.0], **args
    )
    return workers * run.steps_per_s
