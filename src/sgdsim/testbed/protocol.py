"""The protocol of a measured episode, shared by the measurement and its prediction.

A validation point is measured in episodes (:func:`sgdsim.testbed.run_async_measurement`):
every worker starts at its offset from a common start, trains
:func:`episode_train_s` seconds and at least ``min_steps`` steps
(:func:`episode_done`), and the episode's rate counts the whole steps that end
inside the window from ``warmup_s`` after the last offset to the first
worker's last step end (:func:`sgdsim.testbed.run.summarize`).

:func:`simulate_episodes` runs the simulator under the same protocol and scores
it with the same function, so a prediction and its measurement are the same
experiment: asynchronous workers change their relative phase over a run (from
their start offsets towards the phase they settle in), and a window of a few
seconds after a short warm-up holds part of that transient. Scoring the
simulator's own steady state, or a fixed number of steps, would compare two
different quantities.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from typing import Any


def episode_train_s(
    warmup_s: float, duration_s: float, offsets_s: Sequence[Sequence[float]]
) -> float:
    """Seconds each worker trains in every episode, from its own start.

    ``warmup_s + duration_s`` plus the largest start offset of all episodes, so
    that every worker trains through the whole window of every episode.

    Args:
        warmup_s: seconds skipped after the last worker started (≥ 0).
        duration_s: seconds of the window (> 0).
        offsets_s: (E, N) start offsets of the episodes, seconds.
    """
    return warmup_s + duration_s + max((max(row) for row in offsets_s if len(row)), default=0.0)


def episode_done(step_ends: Sequence[float], start: float, train_s: float, min_steps: int) -> bool:
    """Whether a worker that started at ``start`` stops after its steps ending at
    ``step_ends`` (seconds, ascending): it trained ``train_s`` seconds and at
    least ``min_steps`` steps."""
    return len(step_ends) >= max(min_steps, 1) and step_ends[-1] - start >= train_s


def episode_stop(step_ends: Sequence[float], start: float, train_s: float, min_steps: int) -> int:
    """Number of steps after which :func:`episode_done` first holds, or -1 if it never does."""
    k = max(min_steps, 1) - 1
    i = bisect.bisect_left(step_ends, start + train_s, lo=min(k, len(step_ends)))
    return i + 1 if i < len(step_ends) else -1


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
    to where it would stop (:func:`episode_done` with :func:`episode_train_s`),
    and the episode's steps/s is :func:`sgdsim.testbed.run.summarize` from
    ``warmup_s`` after the row's last offset. A run is lengthened (doubled)
    until every worker reaches its stop.

    Args:
        workload, network, workers, policy, seed: as for ``simulate_async``.
        start_offsets_s: (E, N) start offsets, seconds (E ≥ 1).
        warmup_s, duration_s, min_steps: the measurement's (see
            :func:`sgdsim.testbed.run_async_measurement`).
        kwargs: further arguments of ``simulate_async`` (placement, policy sizes,
            pull gap, ...).

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

    from sgdsim.simulation.async_ps import simulate_async, single_step_estimate
    from sgdsim.testbed.run import summarize

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
            r = simulate_async(
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
