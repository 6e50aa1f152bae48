"""Figures of the dashboard, as plain functions of data (tested without a browser)."""

from __future__ import annotations

import plotly.colors
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


def validation_figure(df: pl.DataFrame, model: str) -> go.Figure:
    """Measured and predicted steps/s against workers for one model: per network and
    policy, the measurements as markers with their standard deviation over episodes
    and the prediction as a dashed line of the same colour.

    Args:
        df: rows of the ``validation`` view for one model (columns network,
            bandwidth_bps, policy, workers, measured_steps_per_s,
            measured_steps_per_s_std, predicted_steps_per_s).
        model: model name, for the title.
    """
    palette = plotly.colors.qualitative.D3
    fig = go.Figure()
    groups = (
        df.select("network", "bandwidth_bps", "policy").unique().sort("bandwidth_bps", "policy")
    )
    for i, (network, _, policy) in enumerate(groups.iter_rows()):
        d = df.filter((pl.col("network") == network) & (pl.col("policy") == policy)).sort("workers")
        color = palette[i % len(palette)]
        label = f"{network} · {policy}"
        errors = d["ape_pct"].to_list() if "ape_pct" in d.columns else [None] * d.height
        fig.add_trace(
            go.Scatter(
                x=d["workers"].to_list(),
                y=d["measured_steps_per_s"].to_list(),
                error_y={"array": d["measured_steps_per_s_std"].fill_null(0).to_list()},
                mode="markers",
                marker={"color": color, "size": 9},
                name=f"{label} measured",
                customdata=[[e if e is not None else float("nan")] for e in errors],
                hovertemplate="N=%{x}<br>measured %{y:.3g} steps/s"
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
    fig.update_layout(
        title=f"{model}: measured (markers) and predicted (dashed) steps/s on the testbed",
        xaxis={"title": "workers N", "dtick": 1},
        yaxis={"title": "Throughput (steps/s, all workers)", "rangemode": "tozero"},
        legend={"title": "network · policy"},
        showlegend=True,
        template="plotly_white",
        margin={"t": 60},
    )
    return fig
