"""How a validation point's throughput is scored from its workers' step end times.

Pure functions of step end times (seconds, ascending per worker), shared by
the testbed's measurement (:mod:`sgdsim.testbed`) and its prediction (the
simulator run under the same protocol), so that both are scored by the very
same rule. No I/O, no TensorFlow, no testbed.

Two protocols:

``episodes``
    every worker starts at a drawn offset from a common start, trains
    :func:`episode_train_s` seconds and at least ``min_steps`` steps
    (:func:`episode_done`), and the rate counts the whole steps that end
    inside the window from ``warmup_s`` after the last offset to the first
    worker's last step end (:func:`summarize`). A transient from chosen phases.

``steady``
    every worker starts when its process is up (phases left to the system, as
    in a training job), runs ``warmup_steps`` steps, then a settle period of
    ``settle_s``; from then on the run goes on until the throughput estimate
    converges by batch means (:func:`steady_estimate`, :func:`steady_stop`),
    or until ``max_s`` seconds of window have passed.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sgdsim.errors import SgdsimError

#: The protocols a validation point can be measured and predicted under.
PROTOCOLS: tuple[str, ...] = ("episodes", "steady")


class MeasurementError(SgdsimError):
    """A measurement failed: a process exited with an error, the run timed out,
    or its step end times leave no window to count."""


# ---------------------------------------------------------------- episodes


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


def window_start(
    step_end_times: Sequence[Sequence[float]], warmup_s: float, warmup_steps: int
) -> float:
    """Start of the measurement window: ``warmup_s`` after the last worker's
    ``warmup_steps``-th step end (its first with 0 or 1), in the times' unit.

    Raises:
        MeasurementError: a worker ended fewer steps than that.
    """
    k = max(warmup_steps, 1)
    if any(len(t) < k for t in step_end_times):
        raise MeasurementError(f"a worker finished before its {k} warm-up step(s)")
    return max(t[k - 1] for t in step_end_times) + warmup_s


def summarize(
    step_end_times: Sequence[Sequence[float]],
    warmup_s: float,
    sub_windows: int = 4,
    warmup_steps: int = 1,
    start: float | None = None,
) -> tuple[float, tuple[float, ...], float, tuple[float, ...]]:
    """Rates over the common window of the workers' step end times (seconds).

    A worker is warm when its ``warmup_steps``-th step ended (its first step
    end with ``warmup_steps`` = 0 or 1). The window starts ``warmup_s`` seconds
    after the last worker is warm (or at ``start``, when given: the workers
    started their timed steps together) and stops when the first worker's last
    step ended. A worker's rate is the number of its steps that ended inside the
    window after its first one there, divided by the time between its first and
    last step end there (whole steps only, so a window that cuts a slow step
    does not bias the rate by up to one step); a worker with fewer than two
    step ends inside falls back to steps ended inside / window. The total is
    the sum over workers.

    Returns:
        (total steps/s, per-worker steps/s, window in seconds, total steps/s per
        sub-window; each sub-window's rate counts step ends inside it).

    Raises:
        MeasurementError: a worker ran no step or fewer than ``warmup_steps``, or
            the window is empty.
    """
    if not step_end_times or any(len(t) == 0 for t in step_end_times):
        raise MeasurementError("a worker finished without completing a single step")
    if start is None:
        start = window_start(step_end_times, warmup_s, warmup_steps)
    end = min(t[-1] for t in step_end_times)
    window = end - start
    if window <= 0:
        raise MeasurementError(
            f"no common window after the warm-up ({warmup_steps} step(s) + {warmup_s:g} s) "
            "in which every worker trained (workers started too far apart); raise duration_s"
        )
    per_list = []
    for t in step_end_times:
        inside = [x for x in t if start <= x <= end]
        if len(inside) >= 2 and inside[-1] > inside[0]:
            per_list.append((len(inside) - 1) / (inside[-1] - inside[0]))
        else:
            per_list.append(len(inside) / window)
    per = tuple(per_list)
    edges = [start + window * i / sub_windows for i in range(sub_windows + 1)]
    sub = tuple(
        sum(1 for t in step_end_times for x in t if lo < x <= hi) / (hi - lo)
        for lo, hi in itertools.pairwise(edges)
    )
    return sum(per), per, window, sub


# ---------------------------------------------------------------- steady state


@dataclass(frozen=True)
class SteadyRule:
    """When a steady-state run has measured enough (``validation.steady`` in the config).

    Attributes:
        warmup_steps: steps each worker runs before the settle period (≥ 1).
        settle_s: seconds after the last worker's warm-up before the window
            starts (≥ 0): relative phases and TCP windows settle.
        min_steps: step ends each worker needs inside the window, at least.
        rel_half_width: converged when the confidence interval's half-width
            is at most this share of the estimate (0.03 = ±3 %).
        batches: equal-length batches the window is cut into (≥ 2; Schmeiser,
            "Batch size effects in the analysis of simulation output",
            Operations Research 30(3), 1982, recommends 10 to 30).
        confidence: confidence level of the interval (0 < c < 1).
        max_s: seconds of window at most: a run that has not converged by then
            stops and is recorded with ``converged`` false.
        check_every_s: the rule is evaluated at window lengths that are
            multiples of this (seconds), the same for a measurement (which
            polls its workers this often) and its prediction.
        min_s: seconds of window at least before the rule may hold (0 … ``max_s``;
            ``max_s``: every run takes its whole window, as a join capture
            does, whose joins and two-way shares need time where its rate
            may converge within a second).
    """

    warmup_steps: int = 1
    settle_s: float = 5.0
    min_steps: int = 30
    rel_half_width: float = 0.03
    batches: int = 10
    confidence: float = 0.95
    max_s: float = 300.0
    check_every_s: float = 1.0
    min_s: float = 0.0

    def __post_init__(self) -> None:
        if (
            self.warmup_steps < 1
            or not self.settle_s >= 0
            or self.min_steps < 0
            or not self.rel_half_width > 0
            or self.batches < 2
            or not 0 < self.confidence < 1
            or not self.max_s > 0
            or not self.check_every_s > 0
            or not 0 <= self.min_s <= self.max_s
        ):
            raise ValueError(
                "SteadyRule needs warmup_steps >= 1, settle_s >= 0, min_steps >= 0, "
                "rel_half_width > 0, batches >= 2, 0 < confidence < 1, max_s > 0, "
                f"check_every_s > 0 and 0 <= min_s <= max_s; got {self}"
            )


@dataclass(frozen=True)
class SteadyEstimate:
    """Throughput of a steady-state window, by batch means.

    Attributes:
        steps_per_s: steps per second of all workers together over the window
            (= the mean of ``batch_steps_per_s``).
        half_width: half-width of its confidence interval, steps/s.
        rel_half_width: ``half_width / steps_per_s`` (inf when that is 0).
        batch_steps_per_s: (batches,) all workers' steps/s in each batch.
        per_worker_steps_per_s: (N,) each worker's steps/s over the window.
        steps: (N,) step ends of each worker inside the window.
        start, end: the window, in the step end times' clock (seconds).
        converged: the rule held: every worker has ``min_steps`` step ends
            inside, ``rel_half_width`` is at most the rule's and the window
            is ``min_s`` long at least.
    """

    steps_per_s: float
    half_width: float
    rel_half_width: float
    batch_steps_per_s: tuple[float, ...]
    per_worker_steps_per_s: tuple[float, ...]
    steps: tuple[int, ...]
    start: float
    end: float
    converged: bool

    @property
    def window_s(self) -> float:
        """Seconds of the window."""
        return self.end - self.start


def steady_window_start(
    step_end_times: Sequence[Sequence[float]], rule: SteadyRule
) -> float | None:
    """Start of the steady-state window: ``rule.settle_s`` after the last worker's
    ``rule.warmup_steps``-th step end; None while a worker has not got that far."""
    if not step_end_times or any(len(t) < rule.warmup_steps for t in step_end_times):
        return None
    return max(t[rule.warmup_steps - 1] for t in step_end_times) + rule.settle_s


def completed_steps(step_ends: Sequence[float], t: np.ndarray) -> np.ndarray:
    """A worker's steps done by times ``t``: whole steps ended plus the elapsed
    share of the step in progress (linear between step ends), shape of ``t``.

    Valid for ``step_ends[0] <= t <= step_ends[-1]``. Counting the step in
    progress by its elapsed share removes the ±1-step rounding that counting
    whole step ends in a batch would add to every batch rate.
    """
    ends = np.asarray(step_ends, dtype=float)
    return np.interp(t, ends, np.arange(1, len(ends) + 1, dtype=float))


def batch_means_half_width(values: Sequence[float], confidence: float) -> float:
    """Half-width of the batch-means confidence interval of the mean of ``values``.

    ``t_{b-1, (1+c)/2} · sqrt(S² / b)``, with ``b`` batch means, ``S²`` their
    sample variance (divisor ``b - 1``) and ``t`` Student's quantile (Law and
    Kelton, *Simulation Modeling and Analysis*, 3rd ed., 2000, Sec. 9.5.3,
    method of batch means).

    Raises:
        ValueError: fewer than two values.
    """
    from scipy.stats import t as student_t

    b = len(values)
    if b < 2:
        raise ValueError(f"batch means need at least 2 batches, got {b}")
    s2 = float(np.var(np.asarray(values, dtype=float), ddof=1))
    return float(student_t.ppf((1 + confidence) / 2, b - 1)) * math.sqrt(s2 / b)


def batch_trend(values: Sequence[float], confidence: float = 0.95) -> tuple[float, bool] | None:
    """How far the rate moved across a window, from its batches' rates in time order.

    A least-squares line through the ``b`` batch rates (``scipy.stats.linregress``):
    the change is its rise over the window relative to the mean rate,
    ``slope · (b − 1) / mean`` (0.3: the fitted last batch 30 % above the fitted
    first), and it is significant where the slope's two-sided p-value (Student's
    t, ``b − 2`` degrees of freedom) is below ``1 − confidence``. The batch-means
    interval (:func:`batch_means_half_width`) assumes the batches come from one
    stationary regime; a significant trend says the workers were still moving
    to another when the window ended (docs/steady-state.md, "90 s is a transient").

    Args:
        values: (b,) rates of consecutive equal batches, steps/s.
        confidence: two-sided confidence of the test, in (0, 1).

    Returns:
        ``(change, significant)``; None with fewer than 3 batches or a mean of 0.
    """
    from scipy.stats import linregress

    y = np.asarray(values, dtype=float)
    if len(y) < 3 or not y.mean() > 0:
        return None
    if np.ptp(y) == 0:  # a flat line: linregress has no slope error to test
        return 0.0, False
    fit = linregress(np.arange(len(y), dtype=float), y)
    return float(fit.slope * (len(y) - 1) / y.mean()), bool(fit.pvalue < 1 - confidence)


#: The least change across a window (:func:`batch_trend`) that counts as still
#: moving: twice the rule's default relative half-width, so that a line whose
#: ends stay within ± that half-width of the mean is not counted.
MOVING_MIN_CHANGE = 2 * SteadyRule.rel_half_width


def is_moving(trend: tuple[float, bool] | None, min_change: float = MOVING_MIN_CHANGE) -> bool:
    """Whether a :func:`batch_trend` result says the rate was still moving: the
    trend significant and at least ``min_change`` in size."""
    return trend is not None and trend[1] and abs(trend[0]) >= min_change


def still_moving(values: Sequence[float], min_change: float = MOVING_MIN_CHANGE) -> float | None:
    """The change across a window (:func:`batch_trend` at 95 %) where its rate
    was still moving (:func:`is_moving`); else None."""
    trend = batch_trend(values)
    return trend[0] if trend is not None and is_moving(trend, min_change) else None


def describe_window(
    protocol: str | None,
    converged: bool | None,
    rel_half_width: float | None,
    window_s: float | None,
) -> str:
    """How a record's rate was scored, in a few words: under protocol ``steady``
    its interval and window ("± 2.1 % after 41 s", or "± 7.4 %, cut at 300 s"
    where ``max_s`` ended the window before the rule held); "" for any other
    record or missing values (a store written before the columns)."""
    if protocol != "steady" or rel_half_width is None or window_s is None:
        return ""
    interval = f"± {100 * rel_half_width:.1f} %"
    if converged:
        return f"{interval} after {window_s:.0f} s"
    return f"{interval}, cut at {window_s:.0f} s"


def steady_estimate(
    step_end_times: Sequence[Sequence[float]], rule: SteadyRule, end: float | None = None
) -> SteadyEstimate | None:
    """Batch-means estimate of the steady-state throughput over ``[start, end]``.

    ``start`` is :func:`steady_window_start`; ``end`` defaults to the first
    worker's last step end (every worker trained until then). The window is cut
    into ``rule.batches`` equal batches; batch ``j``'s rate is the steps all
    workers completed in it (:func:`completed_steps`) divided by its length,
    and the estimate is their mean with :func:`batch_means_half_width`.

    Args:
        step_end_times: (N, steps) each worker's step end times, ascending, seconds.
        rule: the protocol's parameters.
        end: end of the window (≤ every worker's last step end).

    Returns:
        The estimate, or None when there is no window yet (a worker has not
        finished its warm-up, or ``end`` is not after ``start``).

    Raises:
        ValueError: ``end`` after a worker's last step end.
    """
    start = steady_window_start(step_end_times, rule)
    if start is None:
        return None
    last = min(t[-1] for t in step_end_times)
    if end is None:
        end = last
    elif end > last:
        raise ValueError(f"window end {end} is after a worker's last step end {last}")
    if not end > start:
        return None
    edges = np.linspace(start, end, rule.batches + 1)
    done = np.array([completed_steps(t, edges) for t in step_end_times])  # (N, b+1)
    rates = (done[:, 1:] - done[:, :-1]).sum(axis=0) / np.diff(edges)
    per = (done[:, -1] - done[:, 0]) / (end - start)
    steps = tuple(
        bisect.bisect_right(t, end) - bisect.bisect_right(t, start) for t in step_end_times
    )
    mean = float(rates.mean())
    hw = batch_means_half_width(rates.tolist(), rule.confidence)
    rel = hw / mean if mean > 0 else math.inf
    return SteadyEstimate(
        steps_per_s=mean,
        half_width=hw,
        rel_half_width=rel,
        batch_steps_per_s=tuple(float(x) for x in rates),
        per_worker_steps_per_s=tuple(float(x) for x in per),
        steps=steps,
        start=float(start),
        end=float(end),
        converged=min(steps) >= rule.min_steps
        and rel <= rule.rel_half_width
        and end - start >= rule.min_s - 1e-9,
    )


def steady_stop(
    step_end_times: Sequence[Sequence[float]], rule: SteadyRule
) -> SteadyEstimate | None:
    """Where a steady-state run stops, and its estimate; None: not decided yet.

    The rule is evaluated on windows ``[start, start + k · check_every_s]``,
    k = 1, 2, …, as far as every worker's step ends reach; the run stops at
    the first that :func:`steady_estimate` calls converged, or at ``start +
    max_s`` (then ``converged`` is false). A measurement calls this on the step
    ends so far each time it polls, and a simulation on its whole log: both
    stop at the same window for the same step ends.

    Args:
        step_end_times: (N, steps) each worker's step end times, ascending, seconds.
        rule: the protocol's parameters.
    """
    start = steady_window_start(step_end_times, rule)
    if start is None:
        return None
    last = min(t[-1] for t in step_end_times)
    k_max = math.ceil(rule.max_s / rule.check_every_s - 1e-9)
    for k in range(1, k_max + 1):
        end = start + min(k * rule.check_every_s, rule.max_s)
        if end > last:
            return None
        est = steady_estimate(step_end_times, rule, end)
        if est is not None and (est.converged or k == k_max):
            return est
    return None


def _step_phases(
    step_ends: Sequence[Sequence[float]], window_s: float
) -> list[tuple[float, float]]:
    """(phase, step length) of every step that ends inside the window and follows
    another of the same worker: the time from its end to the nearest step end
    of another worker, as a fraction of the step, folded into 0 … 0.5; the
    step length in the ends' unit. Empty with fewer than two workers."""
    ends = [np.asarray(e, dtype=float) for e in step_ends]
    if len(ends) < 2:
        return []
    out = []
    for w, own in enumerate(ends):
        others = np.sort(np.concatenate([e for k, e in enumerate(ends) if k != w]))
        if not others.size:
            return []
        for prev, t in _window_steps(own, window_s):
            out.append((_folded_gap(others, t, t - prev), float(t - prev)))
    return out


def _window_steps(own: np.ndarray, window_s: float) -> Iterator[tuple[float, float]]:
    """(previous end, end) of each of a worker's steps that ends inside the window."""
    for prev, t in itertools.pairwise(own):
        if 0.0 <= t <= window_s and t > prev:
            yield prev, t


def _folded_gap(others: np.ndarray, t: float, step: float) -> float:
    """Time from ``t`` to the nearest of the sorted, non-empty ``others``, as a
    fraction of ``step`` folded into 0 … 0.5."""
    i = int(np.searchsorted(others, t))
    near = min(abs(others[j] - t) for j in (i - 1, i) if 0 <= j < others.size)
    x = (near / step) % 1.0
    return min(x, 1.0 - x)


def phase_distance(step_ends: Sequence[Sequence[float]], window_s: float) -> float | None:
    """How far apart asynchronous workers step: the median, over every step end
    inside the window, of the time to the nearest step end of another worker,
    as a fraction of that step (folded into 0 … 0.5).

    0 = in phase (every worker pulls, computes and pushes with the others);
    1/N = evenly spread (two workers alternating: 0.5, four taking turns:
    0.25). It tells which regime a run settled into (docs/steady-state.md),
    and so why a point misses the expected value.

    Args:
        step_ends: (N, steps) each worker's step end times, ascending, seconds
            since the window started (negative: before it).
        window_s: the window's length, seconds.

    Returns:
        The median fraction, or None with fewer than two workers or no step
        end inside the window that follows another of the same worker.
    """
    samples = [x for x, _ in _step_phases(step_ends, window_s)]
    return float(np.median(samples)) if samples else None


def phase_spread(step_ends: Sequence[Sequence[float]], window_s: float) -> float | None:
    """How far the farthest other worker steps from each worker: the median, over
    every step end inside the window, of the largest over the other workers of
    the time to that worker's nearest step end, as a fraction of the step
    (folded into 0 … 0.5).

    Beside :func:`phase_distance` (the nearest other worker) it tells groups
    apart: N workers in one group have both 0; workers split into groups that
    take turns at the PS have a distance of 0 and a spread near 0.5; workers
    evenly spread have a distance of 1/N and a spread of 0.5. With two workers
    the two are the same. Four simulated GoogLeNet workers behind a deep FIFO
    moved as one group where the real ones split (docs/steady-state-log.md, "The
    captures against their own simulation").

    Args and the None it returns: as :func:`phase_distance`.
    """
    ends = [np.asarray(e, dtype=float) for e in step_ends]
    if len(ends) < 2 or not all(e.size for e in ends):
        return None
    samples = [
        max(_folded_gap(other, t, t - prev) for k, other in enumerate(ends) if k != w)
        for w, own in enumerate(ends)
        for prev, t in _window_steps(own, window_s)
    ]
    return float(np.median(samples)) if samples else None


#: Phase bins of :func:`phase_profile`: 0–0.1, 0.1–0.2, … 0.4–0.5.
PHASE_BINS = 5


def phase_profile(
    runs: Sequence[tuple[Sequence[Sequence[float]], float]],
) -> tuple[tuple[float, ...], tuple[float | None, ...]] | None:
    """Where in phase the workers of one or more runs spent their windows, and
    how fast they went there.

    Each step that ends inside its run's window and follows another of the
    same worker gets the phase of :func:`phase_distance` (0 … 0.5) and falls
    into one of :data:`PHASE_BINS` equal bins. Per bin, pooled over the runs:
    the share of the workers' stepping time spent in those steps, and the
    rate the N workers reach at that phase, ``N × steps / their summed
    length`` (steps/s if the times are seconds). The shares weight the rates
    into the runs' overall rate (``Σ share × rate``). Splitting a point's rate
    this way tells a miss of the step model at a given phase (the rates
    differ bin by bin) from a miss of the phase dynamics (the rates agree, the
    shares do not): docs/steady-state.md, "Throughput by phase".

    Args:
        runs: (step ends, window) of each run: (N, steps) each worker's step
            end times, ascending, seconds since the window started (negative:
            before it), and the window's length in seconds (``inf``: every
            step end from 0 on). N is the same in every run.

    Returns:
        ((PHASE_BINS,) time shares summing to 1, (PHASE_BINS,) rates, None for a
        bin no step fell into), or None with fewer than two workers or no step
        inside a window.
    """
    count = [0] * PHASE_BINS
    length = [0.0] * PHASE_BINS
    n = 0
    for step_ends, window_s in runs:
        n = len(step_ends)
        for x, d in _step_phases(step_ends, window_s):
            b = min(int(x * 2 * PHASE_BINS), PHASE_BINS - 1)
            count[b] += 1
            length[b] += d
    total = sum(length)
    if not total > 0:
        return None
    shares = tuple(x / total for x in length)
    rates = tuple(n * c / x if c else None for c, x in zip(count, length, strict=True))
    return shares, rates


def steady_columns(est: SteadyEstimate, step_ends: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Columns of a ``steady`` protocol record (measured or predicted) from its
    estimate and every worker's step ends in seconds since the window started
    (negative: warm-up and settling); ``phase_distance`` as :func:`phase_distance`."""
    return {
        "protocol": "steady",
        "converged": est.converged,
        "steps_per_s_half_width": est.half_width,
        "rel_half_width": est.rel_half_width,
        "window_s": est.window_s,
        "steps_per_s_windows": list(est.batch_steps_per_s),
        "steps_in_window": list(est.steps),
        "step_end_times": [list(e) for e in step_ends],
        "phase_distance": phase_distance(step_ends, est.window_s),
    }
