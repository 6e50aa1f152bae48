"""Page: each transmission policy's predicted throughput against a baseline, and SGD modes."""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.analysis import baseline_policy
from dashboard.data import (
    DEFAULT_MODE,
    cached_layout,
    distinct,
    fetch,
    mode_comparison,
    mode_policies,
    network_names,
    pick,
    search,
)
from dashboard.export import export_bar, register_export
from dashboard.figures import mode_figure, policy_figure
from dashboard.ui import control, dropdown, register_url_sync, url_sync

dash.register_page(
    __name__, path="/policies", name="Policies", title="sgdsim: policies and modes", order=3
)


def policy_rows(
    model: str | None, hardware: str | None, network: str | None, mode: str | None
) -> pl.DataFrame:
    """Predicted steps/s of every policy for one model, hardware, network and mode."""
    return fetch(
        "SELECT model, hardware, network, mode, policy, workers, steps_per_s, samples_per_s, "
        "steps_per_s_std FROM predictions "
        "WHERE model = ? AND hardware = ? AND network = ? AND mode = ? ORDER BY policy, workers",
        [model or "", hardware or "", network or "", mode or ""],
    )


def mode_rows(model: str | None, hardware: str | None, network: str | None) -> pl.DataFrame:
    """Every SGD mode at its best policy (allreduce: its best fusion) at each N, for one
    model, hardware and network (view ``mode_comparison``; the Modes page has more)."""
    return mode_comparison(model, hardware, network)


@cached_layout
def layout(
    model: str | None = None,
    hardware: str | None = None,
    network: str | None = None,
    mode: str | None = None,
    baseline: str | None = None,
    **_: Any,
) -> html.Div:
    models, hws, nets = distinct("model"), distinct("hardware"), network_names()
    modes = distinct("mode")
    mode = pick(mode, modes, DEFAULT_MODE)
    policies = mode_policies(mode)
    model, hardware, network = pick(model, models), pick(hardware, hws), pick(network, nets)
    baseline = pick(baseline, policies, baseline_policy(policies))
    # the figures come with the layout: no callback round trip or empty first draw
    fig, note, modes_fig, modes_note, query = update_policies(
        model, hardware, network, mode, baseline
    )
    return html.Div(
        [
            *url_sync("policies", query),
            html.H2("Transmission policies"),
            html.Div(
                [
                    control("Model", dropdown("policies-model", models, model)),
                    control("Hardware", dropdown("policies-hardware", hws, hardware)),
                    control("Network", dropdown("policies-network", nets, network)),
                    control("SGD mode", dropdown("policies-mode", modes, mode)),
                    control("Baseline", dropdown("policies-baseline", policies, baseline)),
                ],
                className="controls",
            ),
            html.P(note, id="policies-note"),
            dcc.Graph(id="policies-graph", figure=fig, config={"displaylogo": False}),
            export_bar("policies-export"),
            html.H2("SGD modes"),
            html.P(modes_note, id="policies-modes-note"),
            dcc.Graph(id="policies-modes", figure=modes_fig, config={"displaylogo": False}),
            export_bar("policies-modes-export"),
        ]
    )


@callback(
    Output("policies-graph", "figure"),
    Output("policies-note", "children"),
    Output("policies-modes", "figure"),
    Output("policies-modes-note", "children"),
    Output("policies-query", "data"),
    Input("policies-model", "value"),
    Input("policies-hardware", "value"),
    Input("policies-network", "value"),
    Input("policies-mode", "value"),
    Input("policies-baseline", "value"),
    prevent_initial_call=True,
)
def update_policies(
    model: str | None,
    hardware: str | None,
    network: str | None,
    mode: str | None,
    baseline: str | None,
) -> Any:
    """Policy figure with gains against the baseline, the mode comparison, notes, URL."""
    df = policy_rows(model, hardware, network, mode)
    present = sorted(set(df["policy"].to_list()))
    notes = []
    if baseline not in present:
        baseline = baseline_policy(present)
    if "fifo_random" not in present and baseline:
        notes.append(
            "fifo_random (the baseline of TicTac's evaluation) is not in this store; "
            f"gains are against {baseline}."
        )
    else:
        notes.append(f"Gains (in the hover) are against {baseline}.")
    if len(present) == 1:
        notes.append(" Only one policy was simulated: add policies to the config to compare.")
    title = f"{model} on {hardware}, {network} ({mode})"
    modes = mode_rows(model, hardware, network)
    n_modes = len(set(modes["mode"].to_list())) if not modes.is_empty() else 0
    mode_note: Any = (
        f"The store holds one SGD mode ({mode}); synchronous modes appear here once the "
        "grid's modes include them."
        if n_modes <= 1
        else [
            "Each SGD mode at its best policy (allreduce: its best fusion) at every N; "
            "the fastest mode and by how much: ",
            dcc.Link(
                "Modes", href="/modes" + search(model=model, hardware=hardware, network=network)
            ),
            ".",
        ]
    )
    return (
        policy_figure(df, title, baseline),
        "".join(notes),
        mode_figure(modes, f"{model} on {hardware}, {network}"),
        mode_note,
        search(model=model, hardware=hardware, network=network, mode=mode, baseline=baseline),
    )


_KEY = [
    State("policies-model", "value"),
    State("policies-hardware", "value"),
    State("policies-network", "value"),
]
register_export(
    "policies-export",
    [*_KEY, State("policies-mode", "value")],
    policy_rows,
    lambda *key: "sgdsim-policies-" + "-".join(str(k) for k in key),
)
register_export(
    "policies-modes-export",
    _KEY,
    mode_rows,
    lambda *key: "sgdsim-modes-" + "-".join(str(k) for k in key),
)


@callback(
    Output("policies-baseline", "options"),
    Output("policies-baseline", "value"),
    Input("policies-mode", "value"),
    State("policies-baseline", "value"),
    prevent_initial_call=True,
)
def baselines_of_mode(mode: str | None, current: str | None) -> tuple[list[str], Any]:
    """The policies (allreduce: fusions) of the chosen mode as baselines; the current
    one when the mode has it, else :func:`dashboard.analysis.baseline_policy`."""
    options = mode_policies(mode)
    return options, pick(current, options, baseline_policy(options))


register_url_sync("policies")
