"""Figures of the dashboard, as plain functions of data (tested without a browser)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl

from dashboard.analysis import NEAR_PEAK, best_index, bottleneck, finite, with_band
from sgdsim.protocol import describe_window, still_moving
from sgdsim.reports import PhaseSplit, phase_bin_names

METRICS = {
    "samples_per_s": "Throughput (samples/s, all workers)",
    "steps_per_s": "Throughput (steps/s, all workers)",
    "speedup": "Speedup over 1 worker",
    "efficiency": "Parallel efficiency",
}

PALETTE = plotly.colors.qualitative.D3
#: Colours of the timeline's span kinds.
KIND_COLORS = {
    "compute": "#2ca02c",
    "pull": "#1f77b4",
    "push": "#ff7f0e",
    "update": "#9467bd",
    "waiting": "#c7c7c7",
}
_LOG2_TICK = math.log10(2)
#: Shortest idle time drawn as waiting on the timeline (shorter: rounding of µs times).
GAP_S = 1e-7
#: Every figure's look. Set as Plotly's default, which a new figure takes without
#: validating it again: naming it per figure (``template=``) deep-copied and
#: validated it each time, 20-27 ms of a callback's answer per figure.
TEMPLATE = "plotly_white"
pio.templates.default = TEMPLATE
_BASE_LAYOUT: dict[str, Any] = {
    "margin": {"t": 60, "l": 70, "r": 20},
    "showlegend": True,
}


def colors_for(names: Sequence[str]) -> dict[str, str]:
    """A colour per name, by its position in ``names`` (give every name the store
    holds, so a line keeps its colour when others are hidden)."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A figure with no axes that says ``message`` in its middle."""
    fig = go.Figure()
    fig.update_layout(
        title=title,
        xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[
            {
                "text": message,
                "showarrow": False,
                "font": {"size": 16},
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
            }
        ],
        meta={"empty": message},
    )
    return fig


def _rgba(color: str, alpha: float) -> str:
    r, g, b = plotly.colors.hex_to_rgb(color)
    return f"rgba({r},{g},{b},{alpha})"


#: Most points of a scaling curve drawn with a marker on each: a sweep's curves of
#: N = 1-50 are lines (their 400 markers were a quarter of the figure's first draw).
MARKED_POINTS = 16


def window_notes(df: pl.DataFrame) -> list[str]:
    """Per row of ``predictions``, how its rate was simulated, for a hover line
    (:func:`sgdsim.protocol.describe_window`: a steady row's interval and
    window; where the store has ``joins_path``, whether an async row with N > 1
    took a network's join capture, ``networks[].joins``, or is the bare
    simulator's, whose workers drift into phase and read low where real ones
    alternate: docs/model.md); "" for other rows and for a store written before
    the columns."""
    notes = [""] * df.height
    if "protocol" in df.columns:
        cols = df.select("protocol", "converged", "rel_half_width", "window_s").iter_rows()
        notes = [f"<br>long-run rate: {d}" if (d := describe_window(*r)) else "" for r in cols]
    if {"joins_path", "mode"} <= set(df.columns):
        rows = df.select("mode", "workers", "joins_path").iter_rows()
        for i, (mode, n, path) in enumerate(rows):
            if mode == "async" and n > 1:
                said = (
                    f"captured ({Path(path).name})"
                    if path
                    else "none, bare simulator (may read low)"
                )
                notes[i] += f"<br>joins: {said}"
    return notes


def scaling_figure(
    df: pl.DataFrame,
    title: str,
    metric: str = "samples_per_s",
    colors: dict[str, str] | None = None,
    log_y: bool = False,
) -> go.Figure:
    """Throughput against workers for one curve per network, with ideal scaling,
    the uncertainty band and the best N of each network marked.

    Args:
        df: ``scaling`` rows joined with the prediction's ``batch_size``,
            ``steps_per_s_std`` (optional ``steps_per_s_lo`` / ``_hi``) and the
            bottleneck columns, for one model, hardware, mode and policy
            (columns network, bandwidth_bps, workers, steps_per_s, samples_per_s,
            speedup, efficiency).
        title: what the curves are of (model, hardware, mode, policy).
        metric: a key of :data:`METRICS`.
        colors: network -> colour (default: by bandwidth order in ``df``).
        log_y: logarithmic throughput axis (ideal scaling is then a straight line);
            else linear from zero, cut at 1.15 × the highest prediction or band
            edge so the ideal lines do not squash the curves.

    Returns:
        Traces per network in order of bandwidth: band (two traces, when the
        spread is known), the line (named after the network), the ideal line;
        then one ``best N`` marker trace. An empty figure with a message when
        ``df`` has no rows.

    Raises:
        ValueError: unknown metric.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if df.is_empty():
        return empty_figure("No network selected, or no predictions for this selection.", title)
    nets = df.select("network", "bandwidth_bps").unique().sort("bandwidth_bps")["network"]
    colors = colors or colors_for(nets.to_list())
    df = with_band(df, metric)
    fig = go.Figure()
    best_x: list[int] = []
    best_y: list[float] = []
    best_c: list[str] = []
    best_text: list[str] = []
    for net in nets.to_list():
        d = df.filter(pl.col("network") == net).sort("workers")
        c = colors.get(net, PALETTE[0])
        x = d["workers"].to_list()
        if "band_lo" in d.columns:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=d["band_hi"].to_list(),
                    mode="lines",
                    line={"width": 0},
                    legendgroup=net,
                    showlegend=False,
                    hoverinfo="skip",
                    name=f"{net} band",
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=d["band_lo"].to_list(),
                    mode="lines",
                    line={"width": 0},
                    fill="tonexty",
                    fillcolor=_rgba(c, 0.18),
                    legendgroup=net,
                    showlegend=False,
                    hoverinfo="skip",
                    name=f"{net} band",
                )
            )
        per_worker = (d["steps_per_s"] / d["workers"]).to_list()
        custom = [
            [finite(s), finite(w), finite(e), note]
            for s, w, e, note in zip(
                d["samples_per_s"], per_worker, d["efficiency"], window_notes(d), strict=True
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=d[metric].to_list(),
                mode="lines+markers" if len(x) <= MARKED_POINTS else "lines",
                name=net,
                legendgroup=net,
                line={"color": c},
                marker={"color": c},
                customdata=custom,
                hovertemplate=(
                    f"<b>{net}</b>: %{{customdata[0]:,.4g}} samples/s · "
                    "%{customdata[1]:.3g} steps/s per worker · "
                    "efficiency %{customdata[2]:.0%}%{customdata[3]}<extra></extra>"
                ),
            )
        )
        if metric in ("samples_per_s", "steps_per_s"):
            one = d.filter(pl.col("workers") == 1)
            if one.height:
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=[one[metric][0] * n for n in x],
                        mode="lines",
                        line={"color": c, "dash": "dot", "width": 1},
                        name=f"{net} ideal",
                        legendgroup=net,
                        showlegend=False,
                        hoverinfo="skip",
                    )
                )
        if d.height:
            row = d.row(best_index(d["samples_per_s"].to_list()), named=True)
            best_x.append(int(row["workers"]))
            best_y.append(float(row[metric]))
            best_c.append(c)
            where = f" ({bottleneck(row)})" if "ps_down_util" in row else ""
            best_text.append(f"{net}: best N = {row['workers']}{where}")
    if metric in ("speedup", "efficiency"):
        xs = sorted(set(df["workers"].to_list()))
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[float(n) if metric == "speedup" else 1.0 for n in xs],
                mode="lines",
                line={"color": "#7f7f7f", "dash": "dot", "width": 1},
                name="ideal",
                hoverinfo="skip",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=best_x,
            y=best_y,
            mode="markers",
            marker={
                "symbol": "star",
                "size": 18,
                "color": best_c,
                "line": {"color": "black", "width": 1},
            },
            name=f"best N (within {100 - NEAR_PEAK * 100:.0f} % of peak)",
            text=best_text,
            hovertemplate="%{text}<extra></extra>",
        )
    )
    top = max(
        float(df[c].max())  # type: ignore[arg-type]
        for c in (metric, "band_hi")
        if c in df.columns and df[c].drop_nulls().len()
    )
    if metric == "efficiency":
        top = max(top, 1.0)
    yaxis: dict[str, Any] = {
        "title": METRICS[metric],
        "tickformat": ".0%" if metric == "efficiency" else None,
    }
    if log_y:
        yaxis["type"] = "log"
    else:
        yaxis["range"] = [0, 1.15 * top]
    fig.update_layout(
        **_BASE_LAYOUT,
        title=f"{title}: predicted {METRICS[metric].split(' (')[0].lower()} vs workers",
        xaxis={"title": "workers N", "type": "log", "dtick": _LOG2_TICK},
        yaxis=yaxis,
        legend={"title": "network"},
        hovermode="x unified",
    )
    return fig


def policy_figure(df: pl.DataFrame, title: str, baseline: str | None) -> go.Figure:
    """Predicted steps/s against workers, one line per policy, hover gain vs ``baseline``.

    Args:
        df: rows with columns policy, workers, steps_per_s (one model, hardware,
            network and mode).
        title: what the curves are of.
        baseline: policy the gains are relative to (must be in ``df``), or None.
    """
    if df.is_empty():
        return empty_figure("No predictions for this selection.", title)
    base = (
        df.filter(pl.col("policy") == baseline).select("workers", pl.col("steps_per_s").alias("b"))
        if baseline
        else pl.DataFrame(schema={"workers": pl.Int64, "b": pl.Float64})
    )
    df = df.join(base.cast({"workers": df.schema["workers"]}), on="workers", how="left")
    fig = go.Figure()
    for i, policy in enumerate(sorted(set(df["policy"].to_list()))):
        d = df.filter(pl.col("policy") == policy).sort("workers")
        gains = [
            finite(s / b if b else None) for s, b in zip(d["steps_per_s"], d["b"], strict=True)
        ]
        vs = f"×%{{customdata[0]:.3f}} vs {baseline}" if baseline else "no baseline"
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d["steps_per_s"].to_list(),
                mode="lines+markers",
                name=policy,
                line={"color": PALETTE[i % len(PALETTE)]},
                customdata=[[g] for g in gains],
                hovertemplate=f"<b>{policy}</b>: %{{y:.3g}} steps/s · {vs}<extra></extra>",
            )
        )
    fig.update_layout(
        **_BASE_LAYOUT,
        title=f"{title}: predicted steps/s by transmission policy",
        xaxis={"title": "workers N", "type": "log", "dtick": _LOG2_TICK},
        yaxis={"title": "Throughput (steps/s, all workers)", "rangemode": "tozero"},
        legend={"title": "policy"},
        hovermode="x unified",
    )
    return fig


def mode_figure(df: pl.DataFrame, title: str) -> go.Figure:
    """Predicted samples/s against workers, one line per SGD mode (columns mode,
    workers, samples_per_s; with a ``policy`` column the hover names each point's
    policy); a message when ``df`` is empty."""
    if df.is_empty():
        return empty_figure("No predictions for this selection.", title)
    fig = go.Figure()
    named = "policy" in df.columns
    for i, mode in enumerate(sorted(set(df["mode"].to_list()))):
        d = df.filter(pl.col("mode") == mode).sort("workers")
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d["samples_per_s"].to_list(),
                customdata=d["policy"].to_list() if named else None,
                mode="lines+markers",
                name=mode,
                line={"color": PALETTE[i % len(PALETTE)]},
                hovertemplate=f"<b>{mode}</b>: %{{y:,.4g}} samples/s"
                + (" (%{customdata})" if named else "")
                + "<extra></extra>",
            )
        )
    fig.update_layout(
        **_BASE_LAYOUT,
        title=f"{title}: predicted samples/s by SGD mode",
        xaxis={"title": "workers N", "type": "log", "dtick": _LOG2_TICK},
        yaxis={"title": "Throughput (samples/s, all workers)", "rangemode": "tozero"},
        legend={"title": "mode"},
        hovermode="x unified",
    )
    return fig


#: Most networks (columns) whose heatmap cells carry their text; wider maps show it on hover.
HEATMAP_TEXT_COLUMNS = 12


def sizing_heatmap(best: pl.DataFrame, networks: Sequence[str]) -> go.Figure:
    """Best N per model × hardware (rows) and network (columns), colour log2(N).

    Args:
        best: rows of :func:`dashboard.analysis.best_points` for one mode and policy.
        networks: column order (slowest first).

    Row labels are ``"{model} · {hardware}"`` (a click names its curve by them).
    """
    if best.is_empty():
        return empty_figure("No predictions for this mode and policy.")
    rows = best.select("model", "hardware").unique().sort("model", "hardware").rows()
    cols = [n for n in networks if n in set(best["network"].to_list())]
    cell = {(r["model"], r["hardware"], r["network"]): r for r in best.iter_rows(named=True)}
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    for model, hw in rows:
        zr: list[float | None] = []
        tr: list[str] = []
        for net in cols:
            r = cell.get((model, hw, net))
            if r is not None:
                n = int(r["best_workers"])
                zr.append(math.log2(n))
                tr.append(f"N = {n}<br>{r['samples_per_s']:,.0f} samples/s<br>{r['bottleneck']}")
            else:
                zr.append(None)
                tr.append("")
        z.append(zr)
        text.append(tr)
    top = max(v for r in z for v in r if v is not None)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=cols,
            y=[f"{m} · {h}" for m, h in rows],
            text=text,
            # in narrow cells the text is unreadable and costs most of the drawing
            texttemplate="%{text}" if len(cols) <= HEATMAP_TEXT_COLUMNS else None,
            hovertemplate="%{y} on %{x}<br>%{text}<br>click for the scaling detail<extra></extra>",
            colorscale="Blues",
            zmin=0,
            zmax=max(top, 1.0),
            textfont={"size": 14},
            colorbar={
                "title": "best N",
                "tickvals": list(range(int(top) + 1)),
                "ticktext": [str(2**k) for k in range(int(top) + 1)],
                "len": 1.0,
                "thickness": 18,
            },
            xgap=2,
            ygap=2,
        )
    )
    fig.update_layout(
        title="Best number of workers (smallest N within 5 % of peak throughput)",
        xaxis={
            "title": "network",
            "side": "top",
            # narrow columns: upright labels, set here because Plotly's choice of
            # angle lays every label out twice (half the first draw of 100 columns)
            "tickangle": -90 if len(cols) > HEATMAP_TEXT_COLUMNS else None,
        },
        yaxis={"title": "model · hardware", "autorange": "reversed"},
        margin={"t": 110, "l": 160, "b": 20},
        height=max(300, 140 + 100 * len(rows)),
    )
    return fig


def bottleneck_figure(df: pl.DataFrame, title: str) -> go.Figure:
    """PS link utilisation per direction, blocked fraction and the PS CPU's busy
    share against workers (all 0–1).

    Args:
        df: ``predictions`` rows of one curve (workers, steps_per_s, ps_down_util,
            ps_up_util, blocked_fraction; optional cpu_bound_steps_per_s: the PS
            CPU's busy share is steps_per_s / cpu_bound_steps_per_s, the
            utilization law of :mod:`sgdsim.simulation.bounds`).
    """
    if df.is_empty():
        return empty_figure("No predictions for this selection.", title)
    d = df.sort("workers")
    x = d["workers"].to_list()
    fig = go.Figure()
    series = [
        ("ps_down_util", "PS NIC out (pulls) busy", PALETTE[0], "solid"),
        ("ps_up_util", "PS NIC in (pushes) busy", PALETTE[1], "dot"),
        ("blocked_fraction", "worker time blocked on communication", PALETTE[3], "solid"),
    ]
    where = [bottleneck(r) for r in d.iter_rows(named=True)]
    for col, name, c, dash in series:
        last = col == "blocked_fraction"
        fig.add_trace(
            go.Scatter(
                x=x,
                y=d[col].to_list(),
                mode="lines+markers",
                name=name,
                line={"color": c, "dash": dash, "width": 3 if dash == "dot" else 2},
                text=where,
                hovertemplate=f"{name}: %{{y:.0%}}"
                + ("<br><b>bottleneck: %{text}</b>" if last else "")
                + "<extra></extra>",
            )
        )
    if "cpu_bound_steps_per_s" in d.columns:
        # utilization law U = X · D = X / (C / D): the rate over the CPU bound
        busy = [
            finite(x_ / b if b else None)
            for x_, b in zip(d["steps_per_s"], d["cpu_bound_steps_per_s"], strict=True)
        ]
        if any(not math.isnan(u) for u in busy):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=busy,
                    mode="lines+markers",
                    name="PS CPU busy (rate / CPU bound; 100 %: CPU limits)",
                    line={"color": PALETTE[4], "dash": "dash"},
                    hovertemplate="PS CPU busy: %{y:.0%}<extra></extra>",
                )
            )
    fig.update_layout(
        **_BASE_LAYOUT,
        title=f"{title}: where the time goes",
        xaxis={"title": "workers N", "type": "log", "dtick": _LOG2_TICK},
        yaxis={"title": "share", "tickformat": ".0%", "range": [0, 1.05]},
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def timeline_spans(trace: dict[str, Any]) -> pl.DataFrame:
    """Spans of a Chrome trace written by :mod:`sgdsim.simulation.chrome_trace`.

    Returns:
        Columns lane (``worker w · compute|pull|push``, ``PS · update``),
        kind (compute, pull, push, update, waiting), name, start_s, end_s, sorted
        by lane order (PS first, then workers). ``waiting`` spans are the gaps
        between consecutive compute spans of a worker: it waits for
        parameters, for its updates or for the next step's start.
    """
    procs: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    lane_of = {
        (pid, tid): f"{'PS' if pid == 0 else procs.get(pid, f'process {pid}')} · {name}"
        for (pid, tid), name in threads.items()
    }
    rows = [
        (
            lane_of.get((e["pid"], e["tid"]), f"process {e['pid']} · {e['tid']}"),
            e.get("cat", ""),
            e.get("name", ""),
            e["ts"] / 1e6,
            (e["ts"] + e["dur"]) / 1e6,
            e["pid"],
            e["tid"],
        )
        for e in events
    ]
    schema = {
        "lane": pl.String,
        "kind": pl.String,
        "name": pl.String,
        "start_s": pl.Float64,
        "end_s": pl.Float64,
        "pid": pl.Int64,
        "tid": pl.Int64,
    }
    df = pl.DataFrame(rows, schema=schema, orient="row")
    waits: list[tuple[str, str, str, float, float, int, int]] = []
    comp = df.filter(pl.col("kind") == "compute").sort("pid", "start_s")
    for (pid,), g in comp.group_by(["pid"], maintain_order=True):
        lane, tid = g["lane"][0], int(g["tid"][0])
        ends, starts = g["end_s"].to_list(), g["start_s"].to_list()
        for a, b in zip(ends[:-1], starts[1:], strict=True):
            if b - a > GAP_S:
                waits.append((lane, "waiting", "waiting", a, b, int(pid), tid))
    if waits:
        df = pl.concat([df, pl.DataFrame(waits, schema=schema, orient="row")])
    return df.sort("pid", "tid", "start_s")


def step_windows(spans: pl.DataFrame) -> list[tuple[float, float]]:
    """Time windows ``(start_s, end_s)`` of worker 0's steps in :func:`timeline_spans`:
    from the start of one of its ``segment 0`` compute spans (a step's first
    compute) to the next; empty when it has fewer than two."""
    starts = sorted(
        spans.filter(
            (pl.col("pid") == 1) & (pl.col("kind") == "compute") & (pl.col("name") == "segment 0")
        )["start_s"].to_list()
    )
    return list(itertools.pairwise(starts))


#: Spans closer than the time axis span over this many are drawn as one (below a pixel).
MERGE_PIXELS = 2000


def merge_spans(spans: pl.DataFrame, tolerance_s: float) -> pl.DataFrame:
    """Spans of one lane and kind that follow each other within ``tolerance_s``
    seconds, joined into one (named after the first, with the count): the chart
    draws the same at its resolution with far fewer points."""
    if spans.is_empty():
        return spans
    return (
        spans.sort("pid", "tid", "kind", "start_s")
        .with_columns(
            (
                (pl.col("start_s") - pl.col("end_s").shift(1).over("pid", "tid", "kind"))
                .fill_null(float("inf"))
                .gt(tolerance_s)
                .cum_sum()
                .over("pid", "tid", "kind")
            ).alias("_run")
        )
        .group_by("pid", "tid", "kind", "_run", maintain_order=True)
        .agg(
            pl.col("lane").first(),
            pl.col("name").first(),
            pl.len().alias("_n"),
            pl.col("start_s").min(),
            pl.col("end_s").max(),
        )
        .with_columns(
            pl.when(pl.col("_n") > 1)
            .then(pl.format("{} and {} more", pl.col("name"), pl.col("_n") - 1))
            .otherwise(pl.col("name"))
            .alias("name")
        )
        .select(spans.columns)
    )


def timeline_figure(
    spans: pl.DataFrame, title: str, window: tuple[float, float] | None = None
) -> go.Figure:
    """Gantt chart of :func:`timeline_spans`: one row per lane, one colour per kind.

    Each kind is one trace of line segments (start to end at the lane's row),
    so a trace of thousands of spans stays one SVG path. ``window``: draw only
    the spans overlapping ``(start_s, end_s)`` and zoom the time axis to it.
    """
    if spans.is_empty():
        return empty_figure("This trace has no spans.", title)
    lanes = spans.select("lane", "pid", "tid").unique().sort("pid", "tid")["lane"].to_list()
    if window is not None:
        spans = spans.filter((pl.col("end_s") > window[0]) & (pl.col("start_s") < window[1]))
    lo, hi = window or (float(spans["start_s"].min()), float(spans["end_s"].max()))  # type: ignore[arg-type]
    spans = merge_spans(spans, (hi - lo) / MERGE_PIXELS)
    fig = go.Figure()
    for kind, color in KIND_COLORS.items():
        d = spans.filter(pl.col("kind") == kind)
        if d.is_empty():
            continue
        # start, end, gap per span: one path per kind (NaN breaks the line)
        n = d.height
        x = np.column_stack(
            [d["start_s"].to_numpy(), d["end_s"].to_numpy(), np.full(n, np.nan)]
        ).ravel()
        lane = np.repeat(d["lane"].to_numpy().astype(object), 3)
        dur_ms = np.repeat(1e3 * (d["end_s"] - d["start_s"]).to_numpy(), 3)
        name = np.repeat(d["name"].to_numpy().astype(object), 3)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=lane,
                mode="lines",
                line={"color": color, "width": 14 if kind != "waiting" else 6},
                name=kind,
                customdata=np.column_stack([name, dur_ms]),
                hovertemplate="%{y}<br>%{customdata[0]} (%{customdata[1]:.2f} ms)"
                "<br>t = %{x:.4f} s<extra></extra>",
                connectgaps=False,
            )
        )
    fig.update_layout(
        **_BASE_LAYOUT,
        title=title,
        xaxis={"title": "simulated time (s)", "range": list(window) if window else None},
        yaxis={
            "categoryorder": "array",
            "categoryarray": lanes,
            "autorange": "reversed",
            "title": "",
        },
        height=max(320, 120 + 28 * len(lanes)),
        legend={"orientation": "h", "y": 1.0, "x": 1.0, "xanchor": "right", "yanchor": "bottom"},
        hovermode="closest",
    )
    return fig


def validation_figure(df: pl.DataFrame, model: str) -> go.Figure:
    """Measured and predicted steps/s against workers for one model: per network,
    SGD mode and policy, the measurements as markers with a bar of their own uncertainty (a
    steady point's batch-means interval, its half-width in steps/s; else the standard deviation
    over episodes or batches) and the prediction as a dashed line of the same colour; where a
    point was launched several times (``measured_run_steps_per_s``), each launch as a small
    open marker;
    where a steady point was replayed from its measured phases
    (``replayed_steps_per_s``, a diagnostic), the replay as a cross.

    Args:
        df: rows of the ``validation`` view for one model (columns network,
            bandwidth_bps, mode (``async`` when absent), policy, workers, measured_steps_per_s,
            measured_steps_per_s_std, predicted_steps_per_s; optional
            measured_run_steps_per_s, replayed_steps_per_s, measured_steps_per_s_half_width,
            measured_converged, measured_batch_steps_per_s: a note in the hover where
            :func:`sgdsim.protocol.still_moving` finds the batch rates still moving).
        model: model name, for the title.
    """
    fig = go.Figure()
    if "mode" not in df.columns:
        df = df.with_columns(mode=pl.lit("async"))
    groups = (
        df.select("network", "bandwidth_bps", "mode", "policy")
        .unique()
        .sort("bandwidth_bps", "mode", "policy")
    )
    for i, (network, _, mode, policy) in enumerate(groups.iter_rows()):
        d = df.filter(
            (pl.col("network") == network) & (pl.col("mode") == mode) & (pl.col("policy") == policy)
        ).sort("workers")
        color = PALETTE[i % len(PALETTE)]
        label = f"{network} · {mode} · {policy}"
        errors = d["ape_pct"].to_list() if "ape_pct" in d.columns else [None] * d.height
        half = (
            d["measured_steps_per_s_half_width"]
            if "measured_steps_per_s_half_width" in d.columns
            else pl.Series([None] * d.height, dtype=pl.Float64)
        )
        cut = (
            d["measured_converged"].to_list()
            if "measured_converged" in d.columns
            else [None] * d.height
        )
        bars = pl.select(pl.coalesce(half, d["measured_steps_per_s_std"], pl.lit(0.0))).to_series()
        batches = (
            d["measured_batch_steps_per_s"].to_list()
            if "measured_batch_steps_per_s" in d.columns
            else [None] * d.height
        )
        moves = [None if b is None else still_moving(b) for b in batches]
        notes = [
            (
                ""
                if h is None
                else f"<br>± {h:.3g} (batch-means interval{'' if c else ', cut at max_s'})"
            )
            + ("" if m is None else f"<br>still moving: {100 * m:+.0f} % across the window")
            for h, c, m in zip(half.to_list(), cut, moves, strict=True)
        ]
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d["measured_steps_per_s"].to_list(),
                error_y={"array": bars.to_list()},
                mode="markers",
                marker={"color": color, "size": 9},
                name=f"{label} measured",
                customdata=[[finite(e), n] for e, n in zip(errors, notes, strict=True)],
                hovertemplate="N=%{x}<br>measured %{y:.3g} steps/s%{customdata[1]}"
                + "<br>|error| %{customdata[0]:.1f} %"
                + f"<extra>{label}</extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d["predicted_steps_per_s"].to_list(),
                mode="lines",
                line={"color": color, "dash": "dash"},
                name=f"{label} predicted",
                hovertemplate="N=%{x}<br>predicted %{y:.3g} steps/s" + f"<extra>{label}</extra>",
            )
        )
        launches = (
            d["measured_run_steps_per_s"].to_list()
            if "measured_run_steps_per_s" in d.columns
            else [None] * d.height
        )
        runs = [
            (n, rates)
            for n, rates in zip(d["workers"].to_list(), launches, strict=True)
            if rates is not None and len(rates) > 1
        ]
        if runs:
            fig.add_trace(
                go.Scatter(
                    x=[n for n, rates in runs for _ in rates],
                    y=[float(v) for _, rates in runs for v in rates],
                    mode="markers",
                    marker={"color": color, "size": 6, "symbol": "circle-open"},
                    name=f"{label} launches",
                    hovertemplate="N=%{x}<br>one launch %{y:.3g} steps/s"
                    + f"<extra>{label}</extra>",
                )
            )
        replays = (
            d.filter(pl.col("replayed_steps_per_s").is_not_null())
            if "replayed_steps_per_s" in d.columns
            else d.clear()
        )
        if replays.height:
            fig.add_trace(
                go.Scatter(
                    x=replays["workers"].to_list(),
                    y=replays["replayed_steps_per_s"].to_list(),
                    mode="markers",
                    marker={
                        "color": color,
                        "size": 9,
                        "symbol": "x-thin",
                        "line": {"width": 2, "color": color},
                    },
                    name=f"{label} replayed from measured phases",
                    hovertemplate="N=%{x}<br>replayed %{y:.3g} steps/s (a diagnostic: the "
                    "prediction from the measured workers' phases)" + f"<extra>{label}</extra>",
                )
            )
    fig.update_layout(
        **_BASE_LAYOUT,
        title=f"{model}: measured (markers) and predicted (dashed) steps/s on the testbed",
        xaxis={"title": "workers N", "dtick": 1},
        yaxis={"title": "Throughput (steps/s, all workers)", "rangemode": "tozero"},
        legend={"title": "network · mode · policy"},
    )
    return fig


def phase_figure(splits: Sequence[PhaseSplit], model: str) -> go.Figure:
    """Steady asynchronous pairs of one model split by phase: per pair (one row
    per network and policy), the share of the window spent at each phase bin
    (bars, measured and simulated) and the pair's steps/s there (markers:
    measured, dashed line: simulated from every start phase).

    Args:
        splits: :func:`sgdsim.reports.phase_splits` of the model (not empty).
        model: model name, for the title.
    """
    from plotly.subplots import make_subplots

    bins = phase_bin_names()
    fig = make_subplots(
        rows=len(splits),
        cols=2,
        subplot_titles=[
            text
            for s in splits
            for text in (
                f"{s.network} · {s.policy}: time at each phase (%)",
                f"{s.network} · {s.policy}: steps/s at each phase",
            )
        ],
        horizontal_spacing=0.1,
        vertical_spacing=min(0.12, 0.5 / len(splits)),
    )
    for row, s in enumerate(splits, start=1):
        # measured: markers; simulated from every start phase: a dashed line
        sides = (
            ("measured", PALETTE[0], s.measured_shares, s.measured_rates, "markers"),
            ("simulated", PALETTE[1], s.simulated_shares, s.simulated_rates, "lines+markers"),
        )
        for name, color, shares, rates, mode in sides:
            fig.add_trace(
                go.Bar(
                    x=bins,
                    y=[100 * x for x in shares],
                    marker_color=color,
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1,
                    hovertemplate=f"phase %{{x}}<br>{name} %{{y:.0f}} % of the window"
                    + "<extra></extra>",
                ),
                row=row,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=bins,
                    y=list(rates),
                    mode=mode,
                    # measured drawn larger: the simulated marker must not hide it
                    marker={"color": color, "size": 12 if name == "measured" else 7},
                    line={"color": color, "dash": "dash"},
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    hovertemplate=f"phase %{{x}}<br>{name} %{{y:.3g}} steps/s<extra></extra>",
                ),
                row=row,
                col=2,
            )
        fig.update_yaxes(title_text="% of window", range=[0, 100], row=row, col=1)
        fig.update_yaxes(title_text="steps/s", rangemode="tozero", row=row, col=2)
    fig.update_xaxes(title_text="phase (0 in phase, 0.5 alternating)", row=len(splits))
    height = 150 + 300 * len(splits)
    margin = {"t": 90, "b": 60, "l": 70, "r": 20}
    fig.update_layout(
        **{**_BASE_LAYOUT, "margin": margin},
        title=f"{model}: where the pair's phases went, and its rate at each phase (N = 2)",
        barmode="group",
        height=height,
        # on the title's line, above the subplot titles
        legend={
            "orientation": "h",
            "x": 1,
            "xanchor": "right",
            "y": 1 + 45 / (height - margin["t"] - margin["b"]),
            "yanchor": "bottom",
        },
    )
    return fig
