"""Page: measured against predicted throughput on the emulated-network testbed."""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.data import cached_layout, fetch, has_column, phase_splits, pick, search
from dashboard.export import export_bar, register_export
from dashboard.figures import phase_figure, validation_figure
from dashboard.ui import control, dropdown, register_url_sync, table, url_sync

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


@cached_layout
def layout(model: str | None = None, mode: str | None = None, **_: Any) -> html.Div:
    models = fetch("SELECT DISTINCT model FROM validation ORDER BY model")["model"].to_list()
    if not models:
        return html.Div([html.H2("Measured validation"), html.P(_EMPTY, id="validation-empty")])
    modes = measured_modes()
    model, mode = pick(model, models), pick(mode, modes, "async")
    # the answer comes with the layout: no callback round trip or empty first draw
    fig, summary, query, phases = update_validation(model, mode)
    return html.Div(
        [
            *url_sync("validation", query),
            html.H2("Measured validation"),
            html.P(
                "Real TensorFlow training on the emulated-network testbed (N workers, each "
                "in its own network namespace, every NIC shaped by tc tbf; asynchronous and "
                "sync_ps with one PS, allreduce among the workers) against the prediction "
                "from the single-worker profile for the same placement."
            ),
            html.Div(
                [
                    control("Model", dropdown("validation-model", models, model)),
                    control("SGD mode", dropdown("validation-mode", modes, mode)),
                ],
                className="controls",
            ),
            dcc.Graph(id="validation-graph", figure=fig, config={"displaylogo": False}),
            export_bar("validation-export"),
            html.Div(summary, id="validation-summary"),
            html.Div(phases, id="validation-phases"),
        ]
    )


def _pct(x: float | None, of: float | None) -> str:
    """``x`` in steps/s with its error against ``of`` in %, — where missing."""
    if x is None:
        return "—"
    if not of:
        return f"{x:.3g}"
    return f"{x:.3g} ({100 * (x - of) / of:+.0f} %)"


def phase_section(model: str | None, mode: str | None, df: pl.DataFrame) -> list[Any]:
    """The model's steady asynchronous pairs split by phase (figure and table), or
    nothing when the mode is not async or the store has no such pair.

    Args:
        model: model name.
        mode: SGD mode shown (pairs have a phase only in ``async``).
        df: the model's rows of view ``validation`` in that mode (:func:`rows`),
            for the pairs' measured and predicted steps/s.
    """
    splits = phase_splits(model) if mode == "async" else []
    if not splits:
        return []
    head = ["network", "policy", "measured steps/s", "predicted"]
    head.append("simulated rates, measured phases")
    body = []
    for s in splits:
        d = df.filter(
            (pl.col("network") == s.network)
            & (pl.col("policy") == s.policy)
            & (pl.col("workers") == s.workers)
        )
        measured = d["measured_steps_per_s"][0] if d.height else None
        predicted = d["predicted_steps_per_s"][0] if d.height else None
        body.append(
            [
                s.network,
                s.policy,
                "—" if measured is None else f"{measured:.3g}",
                _pct(predicted, measured),
                _pct(s.priced_steps_per_s, measured),
            ]
        )
    return [
        html.H3("Throughput by phase (N = 2)"),
        html.P(
            "Asynchronous workers drift in and out of phase (0: both pull and push together; "
            "0.5: one pulls while the other pushes). Left: the share of the window the pair "
            "spent at each phase, measured over every launch and in the prediction's first "
            "run. Right: the pair's steps/s at each phase, measured and simulated from every "
            "start phase. Where the rates agree and the shares do not, the miss is the phase "
            "dynamics, not the step; the last column prices the measured phases at the "
            'simulated rates (docs/steady-state.md, "Throughput by phase").'
        ),
        dcc.Graph(
            id="validation-phase-graph",
            figure=phase_figure(splits, model or ""),
            config={"displaylogo": False},
        ),
        table(head, body, "validation-phase-table"),
    ]


@callback(
    Output("validation-graph", "figure"),
    Output("validation-summary", "children"),
    Output("validation-query", "data"),
    Output("validation-phases", "children"),
    Input("validation-model", "value"),
    Input("validation-mode", "value"),
    prevent_initial_call=True,
)
def update_validation(model: str | None, mode: str | None = "async") -> Any:
    """The model's measured-vs-predicted figure in one mode, its MAPE / max error table,
    the page's URL query and the pairs' split by phase (:func:`phase_section`)."""
    df = rows(model, mode)
    # stores written before the measured interval was recorded have no such column
    beyond = (
        "avg(ape_beyond_interval_pct), max(ape_beyond_interval_pct)"
        if has_column("validation", "ape_beyond_interval_pct")
        else "NULL::DOUBLE, NULL::DOUBLE"
    )
    summary = fetch(
        "SELECT network, policy, count(*) AS points, avg(ape_pct) AS mape_pct, "
        "max(ape_pct) AS max_ape_pct, avg(profile_only_ape_pct) AS profile_only_mape, "
        f"max(profile_only_ape_pct) AS profile_only_max, {beyond} "
        f"FROM validation WHERE model = ? AND {_mode_sql()} = ? "
        "GROUP BY network, policy ORDER BY network, policy",
        [model or "", mode or ""],
    )
    # the points predicted with a join capture, predicted again without it as the
    # grid predicts (docs/validation.md, "From the profile alone") and the error
    # beyond each steady measurement's own batch-means interval
    head = ["network", "policy", "points", "MAPE %", "max error %", "without the join capture"]
    head.append("beyond the measured interval")

    def alone(m: float | None, x: float | None) -> str:
        return "—" if m is None or x is None else f"{m:.1f} / {x:.1f}"

    summary_table = html.Table(
        [html.Tr([html.Th(h) for h in head])]
        + [
            html.Tr(
                [
                    *(html.Td(v) for v in (net, pol, n, f"{m:.1f}", f"{x:.1f}")),
                    html.Td(alone(am, ax), title="MAPE / max error %, N > 1"),
                    html.Td(alone(bm, bx), title="MAPE / max error % less the interval"),
                ]
            )
            for net, pol, n, m, x, am, ax, bm, bx in summary.iter_rows()
        ],
        id="validation-table",
        className="data",
    )
    title = f"{model or 'no model'} ({mode})"
    phases = phase_section(model, mode, df)
    return validation_figure(df, title), summary_table, search(model=model, mode=mode), phases


register_export(
    "validation-export",
    [State("validation-model", "value"), State("validation-mode", "value")],
    rows,
    lambda model, mode: f"sgdsim-validation-{model}-{mode}",
)
register_url_sync("validation")
