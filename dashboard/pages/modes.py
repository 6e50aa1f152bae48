"""Page: SGD modes compared at the same model, hardware, network and N
(view ``mode_comparison``)."""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.data import (
    cached_layout,
    distinct,
    has_table,
    mode_comparison,
    network_names,
    pick,
    search,
)
from dashboard.export import export_bar, register_export
from dashboard.figures import mode_figure
from dashboard.ui import control, dropdown, register_url_sync, table, url_sync

dash.register_page(__name__, path="/modes", name="Modes", title="sgdsim: SGD modes", order=1.5)


def rows(model: str | None, hardware: str | None, network: str | None) -> pl.DataFrame:
    """The page's rows: :func:`dashboard.data.mode_comparison`."""
    return mode_comparison(model, hardware, network)


@cached_layout
def layout(
    model: str | None = None,
    hardware: str | None = None,
    network: str | None = None,
    **_: Any,
) -> html.Div:
    models, hws, nets = distinct("model"), distinct("hardware"), network_names()
    model, hardware, network = pick(model, models), pick(hardware, hws), pick(network, nets)
    # the answer comes with the layout: no callback round trip or empty first draw
    fig, note, answer_table, query = update_modes(model, hardware, network)
    return html.Div(
        [
            *url_sync("modes", query),
            html.H2("SGD modes: which is faster, by how much?"),
            html.P(
                "Each SGD mode at its best policy (for allreduce: its best fusion rule) at "
                "every N, for one model, hardware and network; the table names the fastest "
                "mode at each N, its lead over the runner-up, and how far behind each other "
                "mode is (× its samples/s). SQL: view mode_comparison."
            ),
            html.Div(
                [
                    control("Model", dropdown("modes-model", models, model)),
                    control("Hardware", dropdown("modes-hardware", hws, hardware)),
                    control("Network", dropdown("modes-network", nets, network)),
                ],
                className="controls",
            ),
            html.P(note, id="modes-note"),
            dcc.Graph(id="modes-graph", figure=fig, config={"displaylogo": False}),
            html.Div(answer_table, id="modes-table"),
            export_bar("modes-export"),
        ]
    )


def comparison_table(df: pl.DataFrame) -> Any:
    """One row per N: the fastest mode and its lead, then each mode's best samples/s,
    its policy and how many times faster the fastest mode is."""
    modes = sorted(set(df["mode"].to_list()))
    body = []
    for (n,), g in df.group_by(["workers"], maintain_order=True):
        best = g.row(0, named=True)
        lead = (
            "–"
            if best["lead_ratio"] is None
            else f"×{best['lead_ratio']:.2f} (+{best['lead_pct']:.1f} %) over "
            f"{best['runner_up_mode']}"
        )
        cells = {
            r["mode"]: f"{r['samples_per_s']:,.4g} ({r['policy']})"
            + ("" if r["mode_rank"] == 1 else f", ×{r['fastest_ratio']:.2f} behind")
            for r in g.iter_rows(named=True)
        }
        body.append(
            [
                str(n),
                f"{best['mode']} ({best['policy']})",
                lead,
                *[cells.get(m, "–") for m in modes],
            ]
        )
    head = ["N", "fastest mode", "lead", *[f"{m} samples/s" for m in modes]]
    return table(head, body, "modes-answer")


@callback(
    Output("modes-graph", "figure"),
    Output("modes-note", "children"),
    Output("modes-table", "children"),
    Output("modes-query", "data"),
    Input("modes-model", "value"),
    Input("modes-hardware", "value"),
    Input("modes-network", "value"),
    prevent_initial_call=True,
)
def update_modes(model: str | None, hardware: str | None, network: str | None) -> Any:
    """Best samples/s per mode against N, the note, the comparison table and URL query."""
    df = rows(model, hardware, network)
    title = f"{model} on {hardware}, {network}"
    query = search(model=model, hardware=hardware, network=network)
    if df.is_empty():
        note = (
            "No predictions for this model, hardware and network."
            if has_table("mode_comparison")
            else "This store predates view mode_comparison: rebuild it (make run)."
        )
        return mode_figure(df, title), note, None, query
    present = sorted(set(df["mode"].to_list()))
    if len(present) == 1:
        note = (
            f"The store holds one SGD mode here ({present[0]}): add sync_ps and allreduce "
            "to the config's modes: to compare."
        )
    else:
        note = f"Best policy of each of {len(present)} modes at every N."
    return mode_figure(df, title), note, comparison_table(df), query


register_export(
    "modes-export",
    [
        State("modes-model", "value"),
        State("modes-hardware", "value"),
        State("modes-network", "value"),
    ],
    rows,
    lambda *key: "sgdsim-modes-" + "-".join(str(k) for k in key),
)
register_url_sync("modes")
