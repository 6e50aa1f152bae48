"""Page: measured against predicted throughput on the emulated-network testbed."""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.data import fetch, pick, search
from dashboard.export import export_bar, register_export
from dashboard.figures import validation_figure
from dashboard.ui import control, dropdown, register_url_sync, url_sync

dash.register_page(
    __name__, path="/validation", name="Validation", title="sgdsim: validation", order=4
)

_EMPTY = (
    "No measured validation in this store: the testbed needs root and iproute2 "
    "(points are then recorded as skipped; see results/reports/accuracy.md), or the "
    "config's validation.points is empty."
)


def rows(model: str | None) -> pl.DataFrame:
    """Measured and predicted steps/s of one model at every measured point."""
    return fetch(
        "SELECT * FROM validation WHERE model = ? ORDER BY network, policy, workers",
        [model or ""],
    )


def layout(model: str | None = None, **_: Any) -> html.Div:
    models = fetch("SELECT DISTINCT model FROM validation ORDER BY model")["model"].to_list()
    if not models:
        return html.Div([html.H2("Measured validation"), html.P(_EMPTY, id="validation-empty")])
    return html.Div(
        [
            *url_sync("validation"),
            html.H2("Measured validation"),
            html.P(
                "Real asynchronous TensorFlow training (one PS, N workers, each in its own "
                "network namespace, every NIC shaped by tc tbf) against the prediction from "
                "the single-worker profile for the same placement."
            ),
            html.Div(
                [control("Model", dropdown("validation-model", models, pick(model, models)))],
                className="controls",
            ),
            dcc.Graph(id="validation-graph", config={"displaylogo": False}),
            export_bar("validation-export"),
            html.Div(id="validation-summary"),
        ]
    )


@callback(
    Output("validation-graph", "figure"),
    Output("validation-summary", "children"),
    Output("validation-query", "data"),
    Input("validation-model", "value"),
)
def update_validation(model: str | None) -> Any:
    """The model's measured-vs-predicted figure and its MAPE / max error table."""
    df = rows(model)
    summary = fetch(
        "SELECT network, mode, policy, points, mape_pct, max_ape_pct FROM validation_summary "
        "WHERE model = ? ORDER BY network, mode, policy",
        [model or ""],
    )
    head = ["network", "mode", "policy", "points", "MAPE %", "max error %"]
    table = html.Table(
        [html.Tr([html.Th(h) for h in head])]
        + [
            html.Tr(
                [
                    *(html.Td(c) for c in (net, mode, pol, n)),
                    html.Td(f"{m:.1f}"),
                    html.Td(f"{x:.1f}"),
                ]
            )
            for net, mode, pol, n, m, x in summary.iter_rows()
        ],
        id="validation-table",
        className="data",
    )
    return validation_figure(df, model or "no model"), table, search(model=model)


register_export(
    "validation-export",
    [State("validation-model", "value")],
    rows,
    lambda model: f"sgdsim-validation-{model}",
)
register_url_sync("validation")
