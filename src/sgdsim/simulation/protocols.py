"""Simulating a validation point under the protocol it is measured with.

The scoring itself (pure functions of step end times) lives in
:mod:`sgdsim.protocol`, shared with the measurement.

A validation point is measured in episodes (:func:`sgdsim.testbed.run_async_measurement`):
every worker starts at its offset from a common start, trains
:func:`~sgdsim.protocol.episode_train_s` seconds and at least ``min_steps`` steps
(:func:`~sgdsim.protocol.episode_done`), and the episode's rate counts the whole steps that end
inside the window from ``warmup_s`` after the last offset to the first
worker's last step end (:func:`sgdsim.protocol.summarize`).

:func:`simulate_episodes` runs the simulator under the same protocol and scores
it with the same function, so a prediction and its measurement are the same
experiment: asynchronous workers change their relative phase over a run (from
their start offsets towards the phase they settle in), and a window of a few
seconds after a short warm-up holds part of that transient. Scoring the
simulator's own steady state, or a fixed number of steps, would compare two
different quantities.

:func:`simulate_steady` predicts a point measured under the ``steady``
protocol: it simulates until the same convergence rule
(:func:`sgdsim.protocol.steady_stop`) holds and scores the run with it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from sgdsim.protocol import (
    SteadyEstimate,
    SteadyRule,
    episode_stop,
    episode_train_s,
    steady_stop,
    summarize,
)

__all__ = ["simulate_episodes", "simulate_steady"]

#: Doublings of a steady-state simulation's length before giving up (each run
#: reaches twice as far; ``SteadyRule.max_s`` ends every run long before).
MAX_DOUBLINGS = 24


def simulate_episodes(
    workload: Any,
    network: Any,
    workers: int,
    start_offsets_s: Sequence[Sequence[float]],
    warmup_s: float,
    duration_s: float,
    min_steps: int,
    policy: str = "tf_default",
    seed: int = 0,
    **kwargs: Any,
) -> Any:
    """Simulate the measured episodes of one validation point, scored as the
    measurement scores them.

    For each row of ``start_offsets_s`` one run of
    :func:`sgdsim.simulation.simulate_async` starts the workers at those
    offsets (seconds from the episode's start); each worker keeps the steps up
    to where it would stop (:func:`~sgdsim.protocol.episode_done` with
    :func:`~sgdsim.protocol.episode_train_s`),
    and the episode's steps/s is :func:`sgdsim.protocol.summarize` from
    ``warmup_s`` after the row's last offset. A run is lengthened (doubled)
    until every worker reaches its stop.

    Args:
        workload, network, workers, policy, seed: as for ``simulate_async``.
        start_offsets_s: (E, N) start offsets, seconds (E ≥ 1).
        warmup_s, duration_s, min_steps: the measurement's (see
            :func:`sgdsim.testbed.run_async_measurement`).
        kwargs: further arguments of :func:`sgdsim.simulation.sync.simulate`
            (mode, placement, policy sizes, pull gap, ...).

    Returns:
        An :class:`~sgdsim.simulation.async_ps.AsyncResult` whose ``steps_per_s``
        is the mean of the episodes' rates (``steps_per_s_std`` their spread,
        ``replications`` E) and whose other metrics are means over the runs.

    Raises:
        ValueError: no episode, a row without N offsets, ``duration_s`` ≤ 0 or
            ``warmup_s`` < 0, or any error of ``simulate_async``.
    """
    import dataclasses

    import numpy as np

    from sgdsim.simulation.async_ps import single_step_estimate
    from sgdsim.simulation.sync import simulate

    rows = [list(map(float, r)) for r in start_offsets_s]
    if not rows:
        raise ValueError("start_offsets_s needs at least one episode")
    if any(len(r) != workers for r in rows):
        raise ValueError(f"every row of start_offsets_s needs {workers} offsets")
    if not duration_s > 0 or not warmup_s >= 0:
        raise ValueError(f"need duration_s > 0 and warmup_s >= 0, got {duration_s}, {warmup_s}")
    train_s = episode_train_s(warmup_s, duration_s, rows)
    t1 = single_step_estimate(workload, network)
    runs, rates = [], []
    for row in rows:
        steps = max(min_steps, math.ceil((max(row) + train_s) / t1)) + 2
        while True:
            log: list[list[float]] = []
            r = simulate(
                workload, network, workers, steps, 0, policy, seed,
                start_offsets_s=row, step_log=log, **kwargs,
            )  # fmt: skip
            stops = [episode_stop(e, row[k], train_s, min_steps) for k, e in enumerate(log)]
            if min(stops) > 0:
                break
            steps *= 2
        ends = [e[:n] for e, n in zip(log, stops, strict=True)]
        rates.append(summarize(ends, 0.0, 1, 0, start=max(row) + warmup_s)[0])
        runs.append(r)
    fields = (
        "mean_step_s", "ps_down_util", "ps_up_util", "blocked_fraction",
        "sim_time_s", "bytes_pulled", "bytes_pushed",
    )  # fmt: skip
    rate = statistics.fmean(rates)
    means: dict[str, Any] = {f: float(np.mean([getattr(r, f) for r in runs])) for f in fields}
    return dataclasses.replace(
        runs[0],
        steps_per_s=rate,
        samples_per_s=rate * workload.batch_size,
        events=sum(r.events for r in runs),
        wall_s=sum(r.wall_s for r in runs),
        replications=len(runs),
        steps_per_s_std=statistics.stdev(rates) if len(rates) > 1 else 0.0,
        **means,
    )


def simulate_steady(
    workload: Any,
    network: Any,
    workers: int,
    rule: SteadyRule,
    policy: str = "tf_default",
    seed: int = 0,
    estimate: list[SteadyEstimate] | None = None,
    step_log: list[list[float]] | None = None,
    replications: int = 1,
    start_offsets_s: Sequence[Sequence[float]] | None = None,
    **kwargs: Any,
) -> Any:
    """Simulate one validation point under the ``steady`` protocol, scored as
    the measurement scores it.

    Runs of :func:`sgdsim.simulation.simulate_async` with the simulator's own
    seeded start phases (the testbed's workers start when their processes
    come up, so their phases are not chosen either), each lengthened (doubled,
    from the contention-free step time
    :func:`~sgdsim.simulation.async_ps.single_step_estimate`) until
    :func:`sgdsim.protocol.steady_stop` decides on its step ends: at the first
    window that converges, or at ``rule.max_s``. Asynchronous workers can
    settle into more than one regime (taking turns at the PS NIC or moving
    together, docs/steady-state.md), and which one a run reaches depends on
    its start, so the expected rate is the mean over ``replications`` runs
    with seeds ``seed, seed + 1, …`` (one run for one worker or a synchronous
    mode, whose start does not matter).

    Args:
        workload, network, workers, policy, seed: as for ``simulate_async``.
        rule: the measurement's protocol parameters.
        estimate: if given, receives the first run's
            :class:`~sgdsim.protocol.SteadyEstimate` (half-width, batch rates,
            window, whether it converged).
        step_log: if given, receives each worker's simulated step ends (s) of
            the first run.
        replications: runs to average (≥ 1).
        start_offsets_s: (R, N) start time of each worker, seconds, one row per
            run: R runs from these phases instead of ``replications`` seeded
            random ones (a replay of a measured launch, for example from its
            workers' step ends after warm-up: docs/steady-state.md).
        kwargs: further arguments of :func:`sgdsim.simulation.sync.simulate`
            (mode, placement, policy sizes, pull gap, ...).

    Returns:
        An :class:`~sgdsim.simulation.async_ps.AsyncResult` whose ``steps_per_s``
        and ``samples_per_s`` are the mean of the runs' estimates
        (``steps_per_s_std`` their standard deviation); its other metrics
        cover the first run.

    Raises:
        ValueError: any error of ``simulate_async``, ``replications`` < 1, an
            empty ``start_offsets_s``, or no decision after :data:`MAX_DOUBLINGS`
            doublings (a run whose steps never end).
    """
    import dataclasses

    if replications < 1:
        raise ValueError(f"replications must be >= 1, got {replications}")
    if workers == 1 or kwargs.get("mode", "async") != "async":
        replications = 1
    rows: list[Sequence[float] | None] = [None] * replications
    if start_offsets_s is not None:
        rows = list(start_offsets_s)
        if not rows:
            raise ValueError("start_offsets_s needs at least one row")
    runs = [
        _steady_run(
            workload, network, workers, rule, policy, seed + k,
            kwargs if row is None else kwargs | {"start_offsets_s": row},
        )
        for k, row in enumerate(rows)
    ]  # fmt: skip
    r, est, log = runs[0]
    if estimate is not None:
        estimate.append(est)
    if step_log is not None:
        step_log.extend(log)
    rates = [e.steps_per_s for _, e, _ in runs]
    mean = sum(rates) / len(rates)
    return dataclasses.replace(
        r,
        steps_per_s=mean,
        samples_per_s=mean * workload.batch_size,
        steps_per_s_std=statistics.pstdev(rates),
        replications=len(runs),
    )


def _steady_run(
    workload: Any,
    network: Any,
    workers: int,
    rule: SteadyRule,
    policy: str,
    seed: int,
    kwargs: dict[str, Any],
) -> tuple[Any, SteadyEstimate, list[list[float]]]:
    """One run of :func:`simulate_steady`: its result, estimate and step ends."""
    from sgdsim.simulation.async_ps import single_step_estimate
    from sgdsim.simulation.sync import simulate

    t1 = single_step_estimate(workload, network)
    reach = rule.settle_s + max(rule.min_steps * t1, 10 * rule.check_every_s)
    steps = rule.warmup_steps + max(rule.min_steps, math.ceil(reach / t1)) + 2
    for _ in range(MAX_DOUBLINGS):
        log: list[list[float]] = []
        r = simulate(
            workload, network, workers, steps, rule.warmup_steps, policy, seed,
            step_log=log, **kwargs,
        )  # fmt: skip
        est = steady_stop(log, rule)
        if est is not None:
            break
        steps *= 2
    else:
        raise ValueError(
            f"the steady-state simulation did not reach a decision in {steps} steps per worker"
        )
    return r, est, log
