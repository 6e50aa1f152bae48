"""Page: predicted throughput vs workers, per model, one line per network."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, callback, dcc, html

from dashboard.data import fetch, model_names, network_names
from dashboard.figures import METRICS, scaling_figure

dash.register_page(__name__, path="/", name="Scaling", title="sgdsim: scaling")


def layout(**_: Any) -> html.Div:
    models = model_names()
    policies = fetch("SELECT DISTINCT policy FROM predictions ORDER BY policy")["policy"].to_list()
    default_policy = (
        "tf_default" if "tf_default" in policies else (policies[0] if policies else None)
    )
    nets = network_names()
    return html.Div(
        [
            html.H2("Throughput vs workers"),
            html.Div(
                [
                    html.Label("Model", htmlFor="scaling-model"),
                    dcc.Dropdown(
                        models, models[0] if models else None, id="scaling-model", clearable=False
                    ),
                    html.Label("Transmission policy", htmlFor="scaling-policy"),
                    dcc.Dropdown(policies, default_policy, id="scaling-policy", clearable=False),
                    html.Label("Networks"),
                    dcc.Checklist(nets, nets, id="scaling-networks", inline=True),
                    html.Label("Metric"),
                    dcc.RadioItems(
                        [{"label": v, "value": k} for k, v in METRICS.items()],
                        "samples_per_s",
                        id="scaling-metric",
                    ),
                ],
                style={"maxWidth": "640px"},
            ),
            dcc.Graph(id="scaling-graph"),
        ]
    )


@callback(
    Output("scaling-graph", "figure"),
    Input("scaling-model", "value"),
    Input("scaling-policy", "value"),
    Input("scaling-networks", "value"),
    Input("scaling-metric", "value"),
)
def update_scaling(
    model: str | None, policy: str | None, networks: list[str] | None, metric: str
) -> Any:
    """Figure for the selected model, policy, networks and metric (async SGD)."""
    if not model or not policy:
        return scaling_figure(fetch("SELECT * FROM scaling WHERE false"), "no model", metric)
    df = fetch(
        "SELECT * FROM scaling WHERE model = ? AND policy = ? AND mode = 'async' "
        "AND list_contains(?, network) ORDER BY workers",
        [model, policy, list(networks or [])],
    )
    return scaling_figure(df, f"{model} ({policy})", metric)
