"""Figures of the dashboard, as plain functions of data (tested without a browser)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

METRICS = {
    "samples_per_s": "Throughput (samples/s, all workers)",
    "steps_per_s": "Throughput (steps/s, all workers)",
    "speedup": "Speedup over 1 worker",
    "efficiency": "Parallel efficiency",
}


def scaling_figure(df: pl.DataFrame, model: str, metric: str = "samples_per_s") -> go.Figure:
    """Throughput against workers for one model, one line per network.

    Args:
        df: rows of the ``scaling`` view (columns network, bandwidth_bps, workers, metric).
        model: model name, for the title.
        metric: a key of :data:`METRICS`.

    Raises:
        ValueError: unknown metric.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    fig = go.Figure()
    nets = df.select("network", "bandwidth_bps").unique().sort("bandwidth_bps")
    for net in nets["network"].to_list():
        d = df.filter(pl.col("network") == net).sort("workers")
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d[metric].to_list(),
                mode="lines+markers",
                name=net,
                hovertemplate="N=%{x}<br>%{y:.3g}<extra>" + net + "</extra>",
            )
        )
    fig.update_layout(
        title=f"{model}: predicted {METRICS[metric].split(' (')[0].lower()} vs workers",
        xaxis={"title": "workers N", "type": "log", "dtick": 0.30102999566},
        yaxis={"title": METRICS[metric]},
        legend={"title": "network"},
        showlegend=True,
        template="plotly_white",
        margin={"t": 60},
    )
    return fig


def policy_figure(df: pl.DataFrame, model: str, network: str) -> go.Figure:
    """Predicted steps/s against workers for one model and network, one line per policy.

    Args:
        df: rows of the ``policy_gain`` view (columns policy, workers, steps_per_s,
            gain_vs_fifo_random).
    """
    fig = go.Figure()
    for policy in sorted(set(df["policy"].to_list())):
        d = df.filter(pl.col("policy") == policy).sort("workers")
        gains = d["gain_vs_fifo_random"].to_list()
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d["steps_per_s"].to_list(),
                mode="lines+markers",
                name=policy,
                customdata=[[g if g is not None else float("nan")] for g in gains],
                hovertemplate="N=%{x}<br>%{y:.3g} steps/s<br>×%{customdata[0]:.3f} vs fifo_random"
                + "<extra>"
                + policy
                + "</extra>",
            )
        )
    fig.update_layout(
        title=f"{model} on {network}: predicted steps/s by transmission policy",
        xaxis={"title": "workers N", "type": "log", "dtick": 0.30102999566},
        yaxis={"title": "Throughput (steps/s, all workers)"},
        legend={"title": "policy"},
        showlegend=True,
        template="plotly_white",
        margin={"t": 60},
    )
    return fig
