"""Page: measured against predicted throughput on the emulated-network testbed."""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.data import fetch, has_column, pick, search
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


def _mode_sql() -> str:
    """SQL of a point's SGD mode: the store's ``mode`` column, or ``'async'`` in a
    store whose measurements do not carry it (NULL counts as async too)."""
    return "coalesce(mode, 'async')" if has_column("validation", "mode") else "'async'"


def measured_modes() -> list[str]:
    """SGD modes with measured points, sorted."""
    return fetch(f"SELECT DISTINCT {_mode_sql()} AS m FROM validation ORDER BY m")["m"].to_list()


def rows(model: str | None, mode: str | None = "async") -> pl.DataFrame:
    """Measured and predicted steps/s of one model in one SGD mode at every measured point."""
    return fetch(
        f"SELECT * FROM validation WHERE model = ? AND {_mode_sql()} = ? "
        "ORDER BY network, policy, workers",
        [model or "", mode or ""],
    )


def layout(model: str | None = None, mode: str | None = None, **_: Any) -> html.Div:
    models = fetch("SELECT DISTINCT model FROM validation ORDER BY model")["model"].to_list()
    if not models:
        return html.Div([html.H2("Measured validation"), html.P(_EMPTY, id="validation-empty")])
    modes = measured_modes()
    return html.Div(
        [
            *url_sync("validation"),
            html.H2("Measured validation"),
            html.P(
                "Real TensorFlow training on the emulated-network testbed (N workers, each "
                "in its own network namespace, every NIC shaped by tc tbf; asynchronous and "
                "sync_ps with one PS, allreduce among the workers) against the prediction "
                "from the single-worker profile for the same placement."
            ),
            html.Div(
                [
                    control("Model", dropdown("validation-model", models, pick(model, models))),
                    control(
                        "SGD mode", dropdown("validation-mode", modes, pick(mode, modes, "async"))
                    ),
                ],
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
    Input("validation-mode", "value"),
)
def update_validation(model: str | None, mode: str | None = "async") -> Any:
    """The model's measured-vs-predicted figure in one mode and its MAPE / max error table."""
    df = rows(model, mode)
    summary = fetch(
        "SELECT network, policy, count(*) AS points, avg(ape_pct) AS mape_pct, "
        f"max(ape_pct) AS max_ape_pct FROM validation WHERE model = ? AND {_mode_sql()} = ? "
        "GROUP BY network, policy ORDER BY network, policy",
        [model or "", mode or ""],
    )
    head = ["network", "policy", "points", "MAPE %", "max error %"]
    table = html.Table(
        [html.Tr([html.Th(h) for h in head])]
        + [
            html.Tr(
                [html.Td(net), html.Td(pol), html.Td(n), html.Td(f"{m:.1f}"), html.Td(f"{x:.1f}")]
            )
            for net, pol, n, m, x in summary.iter_rows()
        ],
        id="validation-table",
        className="data",
    )
    title = f"{model or 'no model'} ({mode})"
    return validation_figure(df, title), table, search(model=model, mode=mode)


register_export(
    "validation-export",
    [State("validation-model", "value"), State("validation-mode", "value")],
    rows,
    lambda model, mode: f"sgdsim-validation-{model}-{mode}",
)
register_url_sync("validation")
