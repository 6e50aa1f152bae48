"""Markdown reports written from the store (read-only) by the ``report`` rule."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgdsim.io import atomic_path
from sgdsim.protocol import (
    MOVING_MIN_CHANGE,
    PHASE_BINS,
    batch_trend,
    is_moving,
    phase_distance,
    phase_profile,
    phase_spread,
)
from sgdsim.store import connect_read_only


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; floats with 3 decimals, — for a missing value."""

    def cell(x: Any) -> str:
        if x is None:
            return "—"
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def _protocol_notes(protocols: set[str]) -> list[str]:
    """How the points were measured, one paragraph per protocol present."""
    notes = []
    if "episodes" in protocols:
        notes += [
            "Episodes (`validation.protocol: episodes`): runs with N > 1 start the workers "
            "at seeded random offsets (`validation.episodes`); measured steps/s is the mean "
            "over episodes and ± their standard deviation (one episode: over sub-windows), "
            "and the prediction simulates the same offsets.",
            "",
        ]
    if "steady" in protocols:
        notes += [
            "Steady state (`validation.protocol: steady`): the workers start as a training "
            "job's do and run until the batch-means estimate converges "
            "(`validation.steady`); ± is the batch rates' standard deviation, and the "
            "prediction simulates until the same rule holds.",
            "",
        ]
    return notes


#: Columns that identify a row of the policy gain report.
GAIN_KEYS = ["model", "hardware", "network", "mode", "policy"]


def policy_gain_report(db_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> None:
    """Write the gain of each transmission policy over ``fifo_random`` per model and network.

    Gain = predicted steps/s of the policy / steps/s of ``fifo_random`` at the
    same model, hardware, network and N; the report gives its mean, minimum
    and maximum over the worker counts of the grid.
    """
    con = connect_read_only(db_path)
    try:
        rows = con.execute(
            """
            SELECT model, hardware, network, mode, policy,
                   avg(gain_vs_fifo_random), min(gain_vs_fifo_random),
                   max(gain_vs_fifo_random), count(*)
            FROM policy_gain
            WHERE gain_vs_fifo_random IS NOT NULL AND policy <> 'fifo_random'
            GROUP BY ALL ORDER BY model, hardware, network, mode, policy
            """
        ).fetchall()
    finally:
        con.close()
    text = [
        "# Transmission policies: predicted gain over fifo_random",
        "",
        "Steps/s of each policy divided by steps/s of `fifo_random` (one tensor at a time in",
        "a random order) at the same model, hardware, network, mode and number of workers N;",
        "mean, minimum and maximum over the N of the grid. Written by the `report` rule",
        "from `results/sgdsim.duckdb` (view `policy_gain`).",
        "",
    ]
    if rows:
        text.append(
            markdown_table(
                [*GAIN_KEYS, "mean gain", "min", "max", "N values"],
                rows,
            )
        )
    else:
        text.append("No comparison: add `fifo_random` and another policy to `policies:`.")
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text("\n".join(text) + "\n")


#: N is saturated when no larger measured N gains this factor over it.
SATURATION_GAIN = 1.10


def saturation_n(workers: Sequence[int], steps_per_s: Sequence[float]) -> int | None:
    """Smallest N beyond which no larger worker count raises steps/s by 10 %
    (:data:`SATURATION_GAIN`) or more: the knee of the curve, the answer to
    "how many workers are worth renting"; None if the largest N still gains
    10 % over every smaller one.

    Every larger N counts, not only the next: a pair that locks in phase can
    gain little over one worker while three workers gain much more
    (docs/steady-state.md), and stopping at that pair would understate the
    workers worth having.

    Args:
        workers: worker counts N, in any order.
        steps_per_s: throughput at each N.
    """
    pairs = sorted(zip(workers, steps_per_s, strict=True))
    for i, (n, a) in enumerate(pairs[:-1]):
        if all(b < SATURATION_GAIN * a for _, b in pairs[i + 1 :]):
            return n
    return None


def _has_column(con: Any, table: str, column: str) -> bool:
    """Whether ``table`` (or view) of the store has ``column`` (older stores lack some)."""
    (n,) = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
        [table, column],
    ).fetchone()
    return bool(n)


def _column_or_null(con: Any, table: str, column: str, sql_type: str, alias: str = "") -> str:
    """SQL of ``column`` of ``table`` (as ``alias`` + column), or a NULL of
    ``sql_type`` in a store written before the column existed."""
    return f"{alias}{column}" if _has_column(con, table, column) else f"NULL::{sql_type}"


def _mode(con: Any, table: str, alias: str = "") -> str:
    """SQL of a row's SGD mode in ``table`` (as ``alias`` + column): its ``mode``
    column, or ``'async'`` where the column is missing or NULL (stores written
    before measurements carried the mode, when every measured point was
    asynchronous)."""
    return f"coalesce({alias}mode, 'async')" if _has_column(con, table, "mode") else "'async'"


def _validation_rows(con: Any) -> list[tuple[Any, ...]]:
    """Every measured point: model, network, policy, N, measured steps/s and std,
    predicted steps/s, error and absolute error %, hardware, loopback, CPU busy and
    stolen, the mode (:data:`_MODE`), then the measured and predicted phase distance
    (:data:`_PHASE`), the prediction's spread over start phases (:data:`_SPREAD`)
    and each launch's measured steps/s (:data:`_LAUNCHES`), then whether the steady
    rule held, its interval's half-width and the error beyond it (:data:`_CONVERGED`,
    :data:`_HALF_WIDTH`, :data:`_BEYOND`) and a single launch's batch rates
    (:data:`_BATCHES`), each NULL in stores written before it was recorded (and
    the last four for episodes)."""
    phase = (
        "measured_phase_distance, predicted_phase_distance"
        if _has_column(con, "validation", "measured_phase_distance")
        else "NULL::DOUBLE, NULL::DOUBLE"
    )
    spread = _column_or_null(con, "validation", "predicted_steps_per_s_std", "DOUBLE")
    launches = _column_or_null(con, "validation", "measured_run_steps_per_s", "DOUBLE[]")
    converged = _column_or_null(con, "validation", "measured_converged", "BOOLEAN")
    half = _column_or_null(con, "validation", "measured_steps_per_s_half_width", "DOUBLE")
    beyond = _column_or_null(con, "validation", "ape_beyond_interval_pct", "DOUBLE")
    batches = _column_or_null(con, "validation", "measured_batch_steps_per_s", "DOUBLE[]")
    return con.execute(
        f"""
        SELECT model, network, policy, workers, measured_steps_per_s,
               measured_steps_per_s_std, predicted_steps_per_s, error_pct, ape_pct,
               hardware, loopback, cpu_busy, cpu_steal, {_mode(con, "validation")} AS mode,
               {phase}, {spread}, {launches}, {converged}, {half}, {beyond}, {batches}
        FROM validation ORDER BY mode, model, bandwidth_bps, network, policy, workers
        """
    ).fetchall()


#: Index of the SGD mode in a row of :func:`_validation_rows`.
_MODE = 13
#: Index of the measured phase distance in a row of :func:`_validation_rows`
#: (the predicted one follows).
_PHASE = 14
#: Index of the prediction's standard deviation over start phases in a row of
#: :func:`_validation_rows`.
_SPREAD = 16
#: Index of the list of each launch's measured steps/s in a row of
#: :func:`_validation_rows` (NULL or one value: the point was launched once).
_LAUNCHES = 17
#: Index of whether a steady measurement met its rule in a row of
#: :func:`_validation_rows`.
_CONVERGED = 18
#: Index of a steady measurement's interval half-width (steps/s) in a row of
#: :func:`_validation_rows`.
_HALF_WIDTH = 19
#: Index of the error beyond that interval (%, view ``validation``'s
#: ``ape_beyond_interval_pct``) in a row of :func:`_validation_rows`.
_BEYOND = 20
#: Index of a steady measurement's batch rates (steps/s, in time order; NULL for
#: several launches) in a row of :func:`_validation_rows`.
_BATCHES = 21

#: The columns that name a measured point in the report's tables.
_POINT_COLUMNS = ("model", "network", "policy", "N")

#: Standard deviations of the prediction's spread over start phases within
#: which a measurement counts as one launch the prediction expects.
SPREAD_SDS = 2.0


def _spread_cell(sd: float | None) -> str:
    """``± sd`` of the prediction over start phases, — for one run or none recorded."""
    return "—" if not sd else f"± {sd:.3f}"


def _launch_count(row: Sequence[Any]) -> int:
    """How many launches a point's measured rate is the mean of (1 when not recorded)."""
    return max(1, len(row[_LAUNCHES] or []))


def _launches_cell(rates: Sequence[float] | None) -> str:
    """``k: lowest–highest`` steps/s of a point's launches, — for a single launch."""
    if not rates or len(rates) < 2:
        return "—"
    return f"{len(rates)}: {min(rates):.3f}–{max(rates):.3f}"


def _launch_line(points: Sequence[Sequence[Any]]) -> list[str]:
    """How many measurements lie within :data:`SPREAD_SDS` standard errors of the
    prediction (the points whose prediction has a spread over start phases): one
    launch is one draw with the runs' standard deviation sd, the mean of k
    launches one with sd / √k."""
    spread = [r for r in points if r[_SPREAD]]
    if not spread:
        return []
    inside = sum(
        abs(r[6] - r[4]) <= SPREAD_SDS * r[_SPREAD] / math.sqrt(_launch_count(r)) for r in spread
    )
    return [
        f"Within {SPREAD_SDS:g} standard deviations of the prediction's spread over start "
        f"phases (one launch of the job; for the mean of k launches, over √k; "
        f"docs/steady-state.md): {inside} of the {len(spread)} points that have one.",
        "",
    ]


def _interval_pct(row: Sequence[Any]) -> float:
    """A steady measurement's interval half-width as a share of its rate, %."""
    return float(100 * row[_HALF_WIDTH] / row[4])


def _interval_cell(row: Sequence[Any]) -> str:
    """A steady measurement's interval as ``± x.x %`` of its rate, ``cut`` where
    ``steady.max_s`` ended the window before the rule held; — for episodes."""
    if row[_CONVERGED] is None or row[_HALF_WIDTH] is None:
        return "—"
    cell = f"± {_interval_pct(row):.1f} %"
    return cell if row[_CONVERGED] else f"{cell} cut"


def _interval_lines(points: Sequence[Sequence[Any]]) -> list[str]:
    """The steady points split by whether their measurement met the rule (count,
    MAPE and max error of each part, the cut ones' interval half-widths), and the
    error beyond each measurement's own interval (view ``validation``,
    ``ape_beyond_interval_pct``). A cut measurement is itself uncertain by its
    half-width, so its error says less about the prediction."""
    steady = [r for r in points if r[_CONVERGED] is not None and r[_HALF_WIDTH] is not None]
    if not steady:
        return []

    def errors(rows: Sequence[Sequence[Any]]) -> str:
        ape = [r[8] for r in rows]
        mape, worst = statistics.fmean(ape), max(ape)
        s = "" if len(rows) == 1 else "s"
        return f"{len(rows)} point{s}, MAPE {mape:.1f} %, max error {worst:.1f} %"

    met = [r for r in steady if r[_CONVERGED]]
    cut = [r for r in steady if not r[_CONVERGED]]
    parts = []
    if met:
        parts.append(f"met before `steady.max_s`: {errors(met)}")
    if cut:
        widths = [_interval_pct(r) for r in cut]
        parts.append(
            f"cut at `steady.max_s` before it held: {errors(cut)} (their intervals "
            f"± {min(widths):.1f}–{max(widths):.1f} %, median {statistics.median(widths):.1f} %)"
        )
    beyond = [r[_BEYOND] for r in steady]
    return [
        "The steady rule (`steady.min_steps` steps per worker and the measured rate's "
        "batch-means interval within `steady.rel_half_width`): "
        + "; ".join(parts)
        + ". The error beyond each "
        f"measurement's own interval (`ape_beyond_interval_pct`): MAPE "
        f"{statistics.fmean(beyond):.1f} %, max {max(beyond):.1f} % "
        '(docs/steady-state.md, "The rule").',
        "",
        *_trend_lines(steady),
    ]


def _trend_lines(steady: Sequence[Sequence[Any]]) -> list[str]:
    """The steady single-launch points whose batch rates still trended when the
    window ended (:func:`sgdsim.protocol.is_moving`), each with its change
    across the window; nothing without batch rates."""
    known = [(r, t) for r in steady if r[_BATCHES] and (t := batch_trend(r[_BATCHES]))]
    if not known:
        return []
    moving = [f"{r[0]} {r[1]} N = {r[3]} ({100 * t[0]:+.0f} %)" for r, t in known if is_moving(t)]
    listed = f": {'; '.join(moving)}" if moving else ""
    return [
        f"Still moving when the window ended (a least-squares trend across the batch "
        f"rates, significant at 95 % and {100 * MOVING_MIN_CHANGE:.0f} % or more across the "
        f"window): {len(moving)} of {len(known)} single-launch steady points{listed}. "
        "Their rate depends on how long one measures "
        '(docs/steady-state.md, "90 s is a transient").',
        "",
    ]


def _phase_cell(measured: float | None, predicted: float | None) -> str:
    """``measured / predicted`` phase distance, two decimals, — where missing."""
    if measured is None and predicted is None:
        return "—"
    return " / ".join("—" if x is None else f"{x:.2f}" for x in (measured, predicted))


def accuracy_report(db_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> None:
    """Write the measured-validation accuracy table (Markdown) from view ``validation``:
    MAPE and maximum error per SGD mode, model, policy and network, over all
    points and per mode, saturation points measured vs predicted, each point,
    and the points that were skipped and why.

    The mode comes from the store's ``mode`` column of ``validation`` and
    ``measurements``; a store without one (or a NULL) counts as ``async``.
    With one mode the tables leave the mode column out."""
    con = connect_read_only(db_path)
    try:
        points = _validation_rows(con)
        mode = _mode(con, "validation")
        summary = con.execute(
            f"""
            SELECT {mode} AS m, model, policy, network, count(*), avg(ape_pct), max(ape_pct)
            FROM validation GROUP BY ALL ORDER BY ALL
            """
        ).fetchall()
        per_mode = con.execute(
            f"SELECT {mode} AS m, count(*), avg(ape_pct), max(ape_pct) FROM validation "
            "GROUP BY m ORDER BY m"
        ).fetchall()
        overall = con.execute(
            "SELECT count(*), avg(ape_pct), max(ape_pct) FROM validation"
        ).fetchone()
        band = con.execute(
            "SELECT count(inside_band), count(*) FILTER (WHERE inside_band) FROM validation"
        ).fetchone()
        uncaptured = (
            con.execute(
                "SELECT count(*), avg(profile_only_ape_pct), max(profile_only_ape_pct), "
                "avg(ape_pct), max(ape_pct) "
                "FROM validation WHERE profile_only_steps_per_s IS NOT NULL"
            ).fetchone()
            if _has_column(con, "validation", "profile_only_steps_per_s")
            else None
        )
        skipped = con.execute(
            f"""
            SELECT {_mode(con, "measurements")} AS m, model, network, policy, workers, reason
            FROM measurements WHERE status <> 'ok' ORDER BY ALL
            """
        ).fetchall()
        protocols = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT coalesce(protocol, 'episodes') FROM measurements "
                "WHERE status = 'ok'"
            ).fetchall()
        }
        replays = _replay_section(con)
        phases = _phase_section(con) + _group_section(con)
        captures = _capture_section(con) + _cpu_section(con)
        stolen = _steal_lines(con)
    finally:
        con.close()
    modes = {r[_MODE] for r in points} | {r[0] for r in skipped}
    phased = any(r[_PHASE] is not None or r[_PHASE + 1] is not None for r in points)
    spread = any(r[_SPREAD] for r in points)
    steady = any(r[_CONVERGED] is not None for r in points)
    relaunched = any(_launch_count(r) > 1 for r in points)
    several = len(modes) > 1
    by = ["mode"] if several else []

    def keep(row: Sequence[Any]) -> tuple[Any, ...]:
        # rows lead with their mode: shown only when the store holds several
        return tuple(row) if several else tuple(row[1:])

    text = [
        "# Measured validation: predicted vs measured throughput",
        "",
        "Real TensorFlow training (mode async: one PS, asynchronous updates; sync_ps: one PS,",
        "SyncReplicasOptimizer; allreduce: MultiWorkerMirroredStrategy's RING all-reduce;",
        "each host in its own network namespace on this node, every NIC shaped by",
        "`tc tbf`) against the prediction from this run's single-worker profile, placed as",
        "the testbed is: all N workers on one node, sharing its cores. Error = (predicted −",
        "measured) / measured. Written by the `report` rule from `results/sgdsim.duckdb`",
        "(views `validation`, `validation_by_mode`, `validation_summary`).",
        "",
    ]
    if several:
        text += [
            "Synchronous points train as their mode does (`sync_ps`: a barrier per step on the",
            "same PS testbed; `allreduce`: ring all-reduce among the workers); the tables give",
            "each point's SGD mode.",
            "",
        ]
    if not points:
        text.append("No measured point: set `validation.points` (see config/README.md).")
    else:
        n, mape, worst = overall if overall else (0, 0.0, 0.0)
        text += [f"**All {n} points: MAPE {mape:.1f} %, max error {worst:.1f} %.**", ""]
        text += stolen
        if band and band[0]:
            text += [
                "Inside the predicted phase band (asynchronous workers in lockstep … the "
                "bottleneck bound, `predictions.steps_per_s_lo` … `_hi`): "
                f"{band[1]} of the {band[0]} points that have one.",
                "",
            ]
        if uncaptured and uncaptured[0]:
            k, a, x, a_cap, x_cap = uncaptured
            text += [
                f"Without the join capture (the {k} asynchronous points with N > 1 predicted "
                "with a capture, predicted again without it, as the grid predicts a network "
                "that names no joins; `validation.profile_only_error_pct`): MAPE "
                f"{a:.1f} %, max error {x:.1f} % (with the capture: {a_cap:.1f} %, "
                f"{x_cap:.1f} %).",
                "",
            ]
        text += _interval_lines(points)
        text += _launch_line(points)
        if several:
            text += [
                f"- {m}: {k} point{'' if k == 1 else 's'}, MAPE {a:.1f} %, max error {x:.1f} %"
                for m, k, a, x in per_mode
            ]
            text.append("")
        text += [
            "## Per mode, model, policy and network"
            if several
            else "## Per model, policy and network",
            "",
            markdown_table(
                [*by, "model", "policy", "network", "points", "MAPE %", "max error %"],
                [(*keep(r[:4]), r[4], f"{r[5]:.1f}", f"{r[6]:.1f}") for r in summary],
            ),
            "",
            "## Saturation",
            "",
            f"Saturated at N: the smallest N that no larger measured N beats by "
            f"{SATURATION_GAIN - 1:.0%} throughput or more (— = still growing at the largest N).",
            "",
        ]
        groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for r in points:
            groups.setdefault((r[_MODE], *r[:3]), []).append(r)
        sat_rows = []
        for key, rows in groups.items():
            ns = [r[3] for r in rows]
            meas = saturation_n(ns, [r[4] for r in rows])
            pred = saturation_n(ns, [r[6] for r in rows])
            sat_rows.append(
                (*keep(key), "—" if meas is None else meas, "—" if pred is None else pred)
            )
        text += [
            markdown_table(
                [
                    *by,
                    "model",
                    "network",
                    "policy",
                    "measured saturation N",
                    "predicted saturation N",
                ],
                sat_rows,
            ),
            "",
            "## Every point",
            "",
            markdown_table(
                [
                    *by,
                    *_POINT_COLUMNS,
                    "measured steps/s",
                    "± std",
                    *(["interval"] if steady else []),
                    *(["launches: lowest–highest"] if relaunched else []),
                    "predicted steps/s",
                    *(["± over starts"] if spread else []),
                    "error %",
                    *(["phase measured / simulated"] if phased else []),
                    "CPU busy / stolen %",
                ],
                [
                    (
                        *keep((r[_MODE], *r[:4])),
                        r[4],
                        r[5],
                        *([_interval_cell(r)] if steady else []),
                        *([_launches_cell(r[_LAUNCHES])] if relaunched else []),
                        r[6],
                        *([_spread_cell(r[_SPREAD])] if spread else []),
                        f"{r[7]:+.1f}",
                        *([_phase_cell(r[_PHASE], r[_PHASE + 1])] if phased else []),
                        _busy_steal(r[11], r[12]),
                    )
                    for r in points
                ],
            ),
            "",
            *_protocol_notes(protocols),
            *(
                [
                    "Phase measured / simulated (steady, N > 1): the median time from a "
                    "worker's step end to the nearest step end of another, in steps: 0 = "
                    "in phase (every worker pulling and pushing with the others), 1/N = "
                    "evenly spread (two workers alternating: 0.5). The simulated one is the "
                    "prediction's first run; the expected value averages runs from random "
                    "start phases (docs/steady-state.md).",
                    "",
                ]
                if phased
                else []
            ),
            *(
                [
                    "Interval (steady): the half-width of the measured rate's batch-means "
                    "confidence interval (`steady.confidence`), as a share of the rate; cut: "
                    "the window reached `steady.max_s` before it was within "
                    "`steady.rel_half_width`. Of a point launched several times, the mean's: "
                    "Student's t over its launches' rates, cut unless every launch met the rule.",
                    "",
                ]
                if steady
                else []
            ),
            *(
                [
                    "± over starts: the standard deviation of the prediction's runs, each "
                    "from its own random start phases. Asynchronous workers keep much of the "
                    "phase their first steps give them, so one launch of a job is one draw "
                    "of the regime those steps pick (docs/steady-state.md).",
                    "",
                ]
                if spread
                else []
            ),
            *(
                [
                    "Launches: a point launched k times (fresh processes, `validation.points[]"
                    ".runs`) is measured as the mean of its k launches' rates; the column gives "
                    "k and their range, and ± std is over all their windows.",
                    "",
                ]
                if relaunched
                else []
            ),
            *(
                [
                    "Synchronous modes (sync_ps, allreduce): workers in lockstep have no phase "
                    "to draw; ± is over a run's 4 equal sub-windows (steady: its batches).",
                    "",
                ]
                if any(r[_MODE] != "async" for r in points)
                else []
            ),
            "CPU busy / stolen: share of this machine's CPU time that was busy, and that the "
            "hypervisor took for other tenants, over the measured window (`/proc/stat`).",
        ]
        if any(r[10] for r in points):
            text += ["", "Points marked loopback ran unshaped on 127.0.0.1 (no root)."]
        text += phases + replays + captures
    if skipped:
        text += [
            "",
            "## Skipped",
            "",
            markdown_table(
                [*by, "model", "network", "policy", "N", "reason"],
                [keep(r) for r in skipped],
            ),
        ]
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text("\n".join(text) + "\n")


def phase_bin_names() -> list[str]:
    """Labels of the phase bins of :func:`sgdsim.protocol.phase_profile`
    (``0.0–0.1`` … ``0.4–0.5``, fractions of a step)."""
    w = 0.5 / PHASE_BINS
    return [f"{b * w:.1f}–{(b + 1) * w:.1f}" for b in range(PHASE_BINS)]


@dataclass(frozen=True)
class PhaseSplit:
    """One steady asynchronous pair (N = 2) split by phase, measured against simulated.

    Each tuple has :data:`sgdsim.protocol.PHASE_BINS` entries, one per phase bin
    (:func:`phase_bin_names`; 0 in phase, 0.5 the two workers alternating):
    shares of the stepping time (sum 1) and the pair's steps/s in that bin
    (None: no step there). Measured: every launch pooled; simulated shares:
    the prediction's first run; simulated rates: the pair run from every start
    phase (``testbed_predictions.steps_per_s_by_phase``) where stored, else the
    first run's. docs/steady-state.md, "Throughput by phase".
    """

    model: str
    network: str
    policy: str
    workers: int
    measured_shares: tuple[float, ...]
    measured_rates: tuple[float | None, ...]
    simulated_shares: tuple[float, ...]
    simulated_rates: tuple[float | None, ...]

    @property
    def priced_steps_per_s(self) -> float | None:
        """The measured phases at the simulated rates (steps/s): the pair's rate if
        the simulated step met the measured phases; None where the simulation never
        stepped at a phase the measurement spent time in."""
        pairs = list(zip(self.measured_shares, self.simulated_rates, strict=True))
        if any(s > 0 and x is None for s, x in pairs):
            return None
        return sum(s * (x or 0.0) for s, x in pairs)


#: Each measurement beside its testbed prediction (SQL FROM clause, aliases m and p).
_STEADY_PAIRS = """FROM measurements m
        JOIN testbed_predictions p
          ON p.model = m.model AND p.hardware = m.hardware AND p.network = m.network
         AND p.mode = m.mode AND p.policy = m.policy AND p.workers = m.workers"""


def phase_splits(con: Any, model: str | None = None) -> list[PhaseSplit]:
    """The steady asynchronous pairs (N = 2) of a store split by phase
    (:func:`sgdsim.protocol.phase_profile`), ordered by model, bandwidth, network
    and policy; only ``model``'s when given. Empty for a store without step ends
    or without such points.

    Args:
        con: an open DuckDB connection to the store (read-only is enough).
        model: keep only this model's pairs (None: every model).
    """
    if not (
        _has_column(con, "measurements", "step_end_times")
        and _has_column(con, "testbed_predictions", "step_end_times")
    ):
        return []
    launches = _column_or_null(con, "measurements", "run_step_end_times", "DOUBLE[][][]", "m.")
    by_phase = _column_or_null(con, "testbed_predictions", "steps_per_s_by_phase", "DOUBLE[]", "p.")
    rows = con.execute(
        f"""
        SELECT m.model, m.network, m.policy, m.workers, m.step_end_times, m.window_s,
               {launches}, p.step_end_times, p.window_s, {by_phase}
        {_STEADY_PAIRS}
        WHERE m.status = 'ok' AND m.workers = 2 AND m.protocol = 'steady'
          AND p.protocol = 'steady' AND {_mode(con, "measurements", "m.")} = 'async'
          AND (? IS NULL OR m.model = ?)
        ORDER BY m.model, m.bandwidth_bps, m.network, m.policy
        """,
        [model, model],
    ).fetchall()
    split = []
    for r in rows:
        if not (r[4] and r[5] and r[7] and r[8]):
            continue
        # the first launch is scored over its window; the others up to their first
        # worker's last step end, as summarize scores a window
        runs = [(r[4], r[5])]
        runs += [(e, min(w[-1] if w else 0.0 for w in e)) for e in (r[6] or [])[1:] if e]
        measured = phase_profile(runs)
        simulated = phase_profile([(r[7], r[8])])
        if measured is not None and simulated is not None:
            rates = tuple(r[9]) if r[9] else simulated[1]
            split.append(
                PhaseSplit(r[0], r[1], r[2], r[3], measured[0], measured[1], simulated[0], rates)
            )
    return split


def _phase_section(con: Any) -> list[str]:
    """:func:`phase_splits` of the store as Markdown lines; none without such pairs."""
    split = phase_splits(con)
    if not split:
        return []

    def share(x: float) -> str:
        return f"{100 * x:.0f}"

    def rate(x: float | None) -> str:
        return "—" if x is None else f"{x:.3g}"

    def key(s: PhaseSplit) -> tuple[Any, ...]:
        return (s.model, s.network, s.policy, s.workers)

    bins = phase_bin_names()
    return [
        "",
        "## Throughput by phase (N = 2)",
        "",
        "Share of the window (%) the pair spent at each phase, measured (every launch) / "
        "simulated (the prediction's first run):",
        "",
        markdown_table(
            [*_POINT_COLUMNS, *bins],
            [
                (
                    *key(s),
                    *(
                        f"{share(a)} / {share(b)}"
                        for a, b in zip(s.measured_shares, s.simulated_shares, strict=True)
                    ),
                )
                for s in split
            ],
        ),
        "",
        "Steps/s of the pair at each phase, measured / simulated (the pair run from every "
        "start phase), and the measured phases at the simulated rates:",
        "",
        markdown_table(
            [*_POINT_COLUMNS, *bins, "simulated rates, measured phases"],
            [
                (
                    *key(s),
                    *(
                        f"{rate(a)} / {rate(b)}"
                        for a, b in zip(s.measured_rates, s.simulated_rates, strict=True)
                    ),
                    "—" if s.priced_steps_per_s is None else f"{s.priced_steps_per_s:.3g}",
                )
                for s in split
            ],
        ),
        "",
        "Phase: the time from a step's end to the nearest step end of another worker, as "
        "a fraction of the step (0 in phase, 0.5 two workers alternating). Where the "
        "rates agree bin by bin and the shares do not, the miss is where the phases went "
        "(the dynamics), not the step at a given phase; the last column is the point's "
        "rate if the simulated step met the measured phases (— where the simulation never "
        "stepped at a phase the measurement spent time in; docs/steady-state.md, "
        '"Throughput by phase").',
    ]


def _group_section(con: Any) -> list[str]:
    """The steady asynchronous points of three or more workers, their phase beside
    their spread (:func:`sgdsim.protocol.phase_spread`), measured against
    simulated, as Markdown lines; none without such points or step ends."""
    if not (
        _has_column(con, "measurements", "step_end_times")
        and _has_column(con, "testbed_predictions", "step_end_times")
    ):
        return []
    rows = con.execute(
        f"""
        SELECT m.model, m.network, m.policy, m.workers, m.steps_per_s, p.steps_per_s,
               m.step_end_times, m.window_s, p.step_end_times, p.window_s
        {_STEADY_PAIRS}
        WHERE m.status = 'ok' AND m.workers >= 3 AND m.protocol = 'steady'
          AND p.protocol = 'steady' AND {_mode(con, "measurements", "m.")} = 'async'
        ORDER BY m.model, m.bandwidth_bps, m.network, m.policy, m.workers
        """
    ).fetchall()
    table = []
    for r in rows:
        if not (r[4] and r[6] and r[7] and r[8] and r[9]):
            continue
        got = [
            f(e, w) for f in (phase_distance, phase_spread) for e, w in ((r[6], r[7]), (r[8], r[9]))
        ]
        table.append(
            (
                *r[:4],
                f"{100 * (r[5] - r[4]) / r[4]:+.1f}",
                f"{_phase_str(got[0])} / {_phase_str(got[1])}",
                f"{_phase_str(got[2])} / {_phase_str(got[3])}",
            )
        )
    if not table:
        return []
    return [
        "",
        "## Groups (N ≥ 3)",
        "",
        markdown_table(
            [
                *_POINT_COLUMNS,
                "error %",
                "phase measured / simulated",
                "spread measured / simulated",
            ],
            table,
        ),
        "",
        "Phase: the median time from a worker's step end to the nearest step end of another "
        "worker; spread: to the farthest of the others' nearest step ends; both as fractions "
        "of the step (0 … 0.5), over the window. One group: both near 0; groups taking turns "
        "at the PS: phase near 0, spread near 0.5; evenly spread: 1/N and 0.5. A measured "
        "spread above the simulated one is real workers splitting where the simulated ones "
        'move together (docs/steady-state-log.md, "The captures against their own simulation").',
    ]


def _phase_str(x: float | None) -> str:
    """A phase distance as a table shows it: two decimals, — for none."""
    return "—" if x is None else f"{x:.2f}"


def _replay_section(con: Any) -> list[str]:
    """The steady points' replays from their measured phases (view ``validation``'s
    ``replayed_*`` columns), as Markdown lines; none in a store without them."""
    if not _has_column(con, "validation", "replayed_steps_per_s"):
        return []
    rows = con.execute(
        """
        SELECT model, network, policy, workers, measured_steps_per_s, predicted_steps_per_s,
               error_pct, replayed_steps_per_s, replayed_error_pct, measured_phase_distance,
               predicted_phase_distance, replayed_phase_distance
        FROM validation WHERE replayed_steps_per_s IS NOT NULL
        ORDER BY model, bandwidth_bps, network, policy, workers
        """
    ).fetchall()
    if not rows:
        return []

    return [
        "",
        "## Replays from the measured phases",
        "",
        markdown_table(
            [
                *_POINT_COLUMNS,
                "measured steps/s",
                "predicted steps/s",
                "error %",
                "replayed steps/s",
                "replay error %",
                "phase measured / predicted / replayed",
            ],
            [
                (
                    *r[:6],
                    f"{r[6]:+.1f}",
                    r[7],
                    f"{r[8]:+.1f}",
                    " / ".join(_phase_str(x) for x in r[9:12]),
                )
                for r in rows
            ],
        ),
        "",
        "Replayed: the prediction started from the phases the measured workers left "
        "warm-up with (each launch's ends of its last warm-up step) instead of random "
        "ones; a diagnostic that reads the measurement, not a prediction. It takes the "
        "launch out of the error: what the replay still misses is the step model and "
        "how the phases move after warm-up; the difference between the two errors is "
        'the launch\'s part (docs/steady-state.md, "Replaying a launch").',
    ]


def _capture_section(con: Any) -> list[str]:
    """The skeleton captures against their own simulation (``testbed_predictions``'
    ``capture_*`` and ``skeleton_*`` columns), as Markdown lines; none in a store
    without them."""
    if not _has_column(con, "testbed_predictions", "skeleton_steps_per_s"):
        return []
    rows = con.execute(
        """
        SELECT model, network, policy, workers, capture_steps_per_s, skeleton_steps_per_s,
               100 * (skeleton_steps_per_s - capture_steps_per_s) / capture_steps_per_s,
               capture_phase_distance, skeleton_phase_distance
        FROM testbed_predictions
        WHERE skeleton_steps_per_s IS NOT NULL AND capture_steps_per_s > 0
        ORDER BY model, bandwidth_bps, network, policy, workers
        """
    ).fetchall()
    if not rows:
        return []
    mape = sum(abs(r[6]) for r in rows) / len(rows)
    worst = max(abs(r[6]) for r in rows)
    return [
        "",
        "## The join captures against their own simulation",
        "",
        f"{len(rows)} captures: MAPE {mape:.1f} %, max error {worst:.1f} %.",
        "",
        markdown_table(
            [
                *_POINT_COLUMNS,
                "captured steps/s",
                "simulated steps/s",
                "error %",
                "phase captured / simulated",
            ],
            [
                (
                    *r[:4],
                    f"{r[4]:.4g}",
                    f"{r[5]:.4g}",
                    f"{r[6]:+.1f}",
                    f"{_phase_str(r[7])} / {_phase_str(r[8])}",
                )
                for r in rows
            ],
        ),
        "",
        "Each N's joins and two-way share come from a capture of N processes running the "
        "skeleton of the profiled step (its transfers, its compute as waits); here that "
        "capture is simulated with what it gave, each worker on a node of its own. A "
        "calibration run, not a validated point: where the simulation misses it, the "
        "simulator's network dynamics miss before any model is trained (docs/validation.md).",
    ]


#: Share of the node's CPU time busy over a measured window from which the
#: accuracy report's section "CPU per step" lists the point: near the cores'
#: bound, where the CPU a step takes decides the rate.
CPU_BOUND_BUSY = 0.75


def _cpu_section(con: Any) -> list[str]:
    """The points whose measurement kept the node's cores at least
    :data:`CPU_BOUND_BUSY` busy, with the CPU seconds per step measured (by who
    spent them) against the model's, as Markdown lines; none in a store without
    the split or without such a point."""
    if not _has_column(con, "validation", "measured_worker_cpu_s_per_step"):
        return []
    rows = con.execute(
        """
        SELECT model, network, policy, workers, cpu_busy,
               measured_worker_cpu_s_per_step, measured_ps_cpu_s_per_step,
               measured_other_cpu_s_per_step, measured_cpu_s_per_step,
               modelled_cpu_s_per_step, error_pct
        FROM validation
        WHERE cpu_busy >= ? AND measured_cpu_s_per_step IS NOT NULL
        ORDER BY mode, model, bandwidth_bps, network, policy, workers
        """,
        [CPU_BOUND_BUSY],
    ).fetchall()
    if not rows:
        return []

    def ms(x: float | None) -> str:
        return "—" if x is None else f"{1e3 * x:.0f}"

    return [
        "",
        "## CPU per step",
        "",
        markdown_table(
            [
                *_POINT_COLUMNS,
                "CPU busy %",
                "measured ms/step (worker + PS + rest)",
                "the model's ms/step",
                "error %",
            ],
            [
                (
                    *r[:4],
                    f"{100 * r[4]:.0f}",
                    f"{ms(r[8])} ({ms(r[5])} + {ms(r[6])} + {ms(r[7])})",
                    ms(r[9]),
                    f"{r[10]:+.1f}",
                )
                for r in rows
            ],
        ),
        "",
        f"The points whose window kept the node's cores at least {100 * CPU_BOUND_BUSY:.0f} % "
        "busy, where the CPU a step takes decides the rate: the CPU seconds per step measured "
        "over the window (the worker processes, the PS, and the node's rest: softirqs and "
        "other load) against the model's (the profile's worker and PS CPU and the network's "
        "calibrated kernel CPU per byte; the node's cores over `cpu_bound_steps_per_s`). A "
        "point predicted too fast with the measured figure above the model's is short of CPU "
        "in the model; with the two close, the host's speed may have moved between the "
        "profile and the measurement, which the steal counter does not show "
        '(docs/steady-state-log.md, "CPU per step, measured by who spent it").',
    ]


def _steal_lines(con: Any) -> list[str]:
    """A warning paragraph naming the points with an input (the profile, a
    calibration, the measurement) taken while the hypervisor stole more than
    :data:`sgdsim.hostcpu.STEAL_WARN` of the CPU; empty when none was or the
    store predates the record."""
    from sgdsim.hostcpu import STEAL_WARN

    if not _has_column(con, "validation", "max_cpu_steal"):
        return []
    rows = con.execute(
        """
        SELECT model, network, workers, cpu_steal, profile_cpu_steal, calibration_cpu_steal
        FROM validation WHERE max_cpu_steal > ? ORDER BY model, network, workers
        """,
        [STEAL_WARN],
    ).fetchall()
    if not rows:
        return []

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:.0f}"

    named = "; ".join(
        f"{m} {net} N = {n} ({pct(a)} / {pct(b)} / {pct(c)} %)" for m, net, n, a, b, c in rows
    )
    return [
        f"**Warning: {len(rows)} point{'' if len(rows) == 1 else 's'} had an input taken while "
        f"the hypervisor stole more than {100 * STEAL_WARN:.0f} % of this machine's CPU** "
        "(measurement / profile / calibrations, view `validation`: `cpu_steal`, "
        "`profile_cpu_steal`, `calibration_cpu_steal`): a stage run under steal is slower "
        "than on a quiet host, so these errors are partly the host's, not the model's. "
        f"Run again on a quiet host for an accuracy figure. {named}.",
        "",
    ]


def _busy_steal(busy: float | None, steal: float | None) -> str:
    return "—" if busy is None or steal is None else f"{100 * busy:.0f} / {100 * steal:.0f}"


def accuracy_plot(db_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> None:
    """Write the predicted-vs-measured plot (self-contained Plotly HTML): left, each
    point against the diagonal with a ±10 % band; right, steps/s against N,
    measured (markers) and predicted (lines), per model, network and policy."""
    import plotly.colors
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    con = connect_read_only(db_path)
    try:
        points = _validation_rows(con)
    finally:
        con.close()
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Predicted vs measured", "Scaling with workers"),
        horizontal_spacing=0.12,
    )
    top = max([max(r[4], r[6]) for r in points], default=1.0) * 1.1
    fig.add_trace(
        go.Scatter(x=[0, top], y=[0, top], mode="lines", line={"color": "grey"}, name="exact"),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=[0, top, top, 0],
            y=[0, 1.1 * top, 0.9 * top, 0],
            fill="toself",
            mode="none",
            fillcolor="rgba(128,128,128,0.15)",
            name="±10 %",
        ),
        row=1,
        col=1,
    )
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for r in points:
        groups.setdefault((r[_MODE], *r[:3]), []).append(r)
    several = len({k[0] for k in groups}) > 1
    palette = plotly.colors.qualitative.D3
    for i, ((mode, model, network, policy), rows) in enumerate(groups.items()):
        color = palette[i % len(palette)]
        label = f"{model} · {network} · {policy}" + (f" · {mode}" if several else "")
        fig.add_trace(
            go.Scatter(
                x=[r[4] for r in rows],
                y=[r[6] for r in rows],
                mode="markers+text",
                text=[f"N={r[3]}" for r in rows],
                textposition="top center",
                marker={"color": color, "size": 9},
                name=label,
                legendgroup=label,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=[r[3] for r in rows],
                y=[r[4] for r in rows],
                error_y={"type": "data", "array": [r[5] or 0.0 for r in rows]},
                mode="markers",
                marker={"color": color, "size": 9},
                name=f"{label} measured",
                legendgroup=label,
                showlegend=False,
            ),
            row=1,
            col=2,
        )
        fig.add_trace(
            go.Scatter(
                x=[r[3] for r in rows],
                y=[r[6] for r in rows],
                mode="lines",
                line={"color": color, "dash": "dash"},
                name=f"{label} predicted",
                legendgroup=label,
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="measured steps/s", row=1, col=1)
    fig.update_yaxes(title_text="predicted steps/s", row=1, col=1)
    fig.update_xaxes(title_text="workers N", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="steps/s (markers measured, dashed predicted)", row=1, col=2)
    fig.update_layout(
        title="sgdsim measured validation" if points else "sgdsim: no measured point yet",
        template="plotly_white",
        height=560,
    )
    with atomic_path(out_path) as tmp:
        fig.write_html(str(tmp), include_plotlyjs=True, full_html=True)
