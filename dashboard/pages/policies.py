"""Page: predicted throughput of each transmission policy, per model and network."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, callback, dcc, html

from dashboard.data import fetch, model_names, network_names
from dashboard.figures import policy_figure

dash.register_page(__name__, path="/policies", name="Policies", title="sgdsim: policies")


def layout(**_: Any) -> html.Div:
    models = model_names()
    nets = network_names()
    return html.Div(
        [
            html.H2("Transmission policies"),
            html.Div(
                [
                    html.Label("Model", htmlFor="policies-model"),
                    dcc.Dropdown(
                        models, models[0] if models else None, id="policies-model", clearable=False
                    ),
                    html.Label("Network", htmlFor="policies-network"),
                    dcc.Dropdown(
                        nets, nets[0] if nets else None, id="policies-network", clearable=False
                    ),
                ],
                style={"maxWidth": "640px"},
            ),
            dcc.Graph(id="policies-graph"),
        ]
    )


@callback(
    Output("policies-graph", "figure"),
    Input("policies-model", "value"),
    Input("policies-network", "value"),
)
def update_policies(model: str | None, network: str | None) -> Any:
    """Figure of every policy's predicted steps/s for the selected model and network."""
    df = fetch(
        "SELECT * FROM policy_gain WHERE model = ? AND network = ? AND mode = 'async' "
        "ORDER BY policy, workers",
        [model or "", network or ""],
    )
    return policy_figure(df, model or "no model", network or "no network")
