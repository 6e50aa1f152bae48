"""Page: the sizing answer, best N per model × hardware × network for a mode and policy."""

from __future__ import annotations

import functools
from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html, no_update

from dashboard.analysis import BOTTLENECKS, CURVE, NEAR_PEAK, best_points
from dashboard.data import (
    DEFAULT_MODE,
    cached_layout,
    distinct,
    fetch,
    network_names,
    pick,
    pick_policy,
    prices,
    search,
    store_version,
)
from dashboard.export import export_bar, register_export
from dashboard.figures import sizing_heatmap
from dashboard.ui import (
    POLICY_LABEL,
    control,
    dropdown,
    fmt,
    register_mode_policies,
    register_url_sync,
    table,
    url_sync,
)

dash.register_page(__name__, path="/", name="Sizing", title="sgdsim: sizing", order=0)


#: The ``predictions`` columns :func:`dashboard.analysis.best_points` reads (a sweep's
#: store has 10,000 rows of 35 columns per mode and policy; the page needs these).
COLUMNS = [
    *CURVE,
    "workers",
    "workers_per_node",
    "samples_per_s",
    "steps_per_s",
    "sim_steps_per_s",
    "cpu_bound_steps_per_s",
    "ps_down_util",
    "ps_up_util",
    "blocked_fraction",
]


def rows(mode: str | None, policy: str | None) -> pl.DataFrame:
    """Predictions of one mode and policy (:data:`COLUMNS`) with the profile's PS task count."""
    cols = ", ".join(f"p.{c}" for c in COLUMNS)
    return fetch(
        f"SELECT {cols}, coalesce(f.ps_tasks, 1) AS ps_tasks FROM predictions p "
        "LEFT JOIN profiles f ON f.profile_id = p.hardware || '/' || p.model "
        "WHERE p.mode = ? AND p.policy = ? ORDER BY p.model, p.hardware, p.network, p.workers",
        [mode or "", policy or ""],
    )


def answer(mode: str | None, policy: str | None) -> pl.DataFrame:
    """:func:`dashboard.analysis.best_points` of one mode and policy, priced (cached
    per store version, as :func:`dashboard.data.fetch`)."""
    return _answer(store_version(), mode or "", policy or "")


@functools.lru_cache(maxsize=64)
def _answer(_version: tuple[str, int], mode: str, policy: str) -> pl.DataFrame:
    order = {n: i for i, n in enumerate(network_names())}
    best = best_points(rows(mode, policy), prices()[0])
    return best.sort(
        "model", "hardware", pl.col("network").replace_strict(order, default=len(order))
    )


def detail_href(model: str, hardware: str, mode: str, policy: str) -> str:
    """The Scaling page of one model and hardware (every network, for comparison)."""
    return "/scaling" + search(model=model, hardware=hardware, mode=mode, policy=policy)


def time_href(model: str, hardware: str, network: str, mode: str, policy: str) -> str:
    """The Where-the-time-goes page of one curve."""
    return "/time" + search(
        model=model, hardware=hardware, network=network, mode=mode, policy=policy
    )


@cached_layout
def layout(mode: str | None = None, policy: str | None = None, **_: Any) -> html.Div:
    modes = distinct("mode")
    mode = pick(mode, modes, DEFAULT_MODE)
    policies, policy = pick_policy(policy, mode)
    # the answer comes with the layout: no callback round trip or empty first draw
    heatmap, answer_table, query = update_sizing(mode, policy)
    return html.Div(
        [
            *url_sync("sizing", query),
            dcc.Location(id="sizing-nav", refresh="callback-nav"),
            html.H2("How many workers?"),
            html.P(
                "For each model, hardware and network: the best number of workers N (the "
                f"smallest within {100 - 100 * NEAR_PEAK:.0f} % of the peak throughput: more "
                "workers buy little), the throughput and parallel efficiency there, what "
                "limits it, and the cost per million samples when the config prices nodes "
                "(cost:). Click a cell for the scaling curve."
            ),
            html.Div(
                [
                    control("SGD mode", dropdown("sizing-mode", modes, mode)),
                    control(POLICY_LABEL, dropdown("sizing-policy", policies, policy)),
                ],
                className="controls",
            ),
            dcc.Graph(id="sizing-heatmap", figure=heatmap, config={"displaylogo": False}),
            html.Div(answer_table, id="sizing-table"),
            export_bar("sizing-export"),
            html.Details(
                [
                    html.Summary("What the bottleneck names mean"),
                    html.Ul([html.Li(f"{k}: {v}") for k, v in BOTTLENECKS.items()]),
                ]
            ),
        ]
    )


#: Rows of the answer table drawn on the page (the heatmap and the export have every curve):
#: a few hundred rows of links took over a second to draw.
TABLE_ROWS = 25


def _table(best: pl.DataFrame, currency: str) -> Any:
    """The answer table's first :data:`TABLE_ROWS` curves, and a note when there are more."""
    priced = best["cost_per_m_samples"].is_not_null().any()
    head = [
        "model",
        "hardware",
        "network",
        "best N",
        "samples/s at best N",
        "peak samples/s",
        "efficiency",
        "bottleneck",
    ]
    if priced:
        head.append(f"cost per million samples ({currency})")
    body = []
    for r in best.head(TABLE_ROWS).iter_rows(named=True):
        key = (r["model"], r["hardware"], r["network"], r["mode"], r["policy"])
        href, where = (
            detail_href(r["model"], r["hardware"], r["mode"], r["policy"]),
            time_href(*key),
        )
        cells: list[Any] = [
            (r["model"], href),
            (r["hardware"], href),
            (r["network"], href),
            (str(r["best_workers"]), href),
            (f"{r['samples_per_s']:,.0f}", href),
            (f"{r['peak_samples_per_s']:,.0f}", href),
            (fmt(r["efficiency"], ".0%"), href),
            (r["bottleneck"], where, "where the time goes"),
        ]
        if priced:
            cells.append((fmt(r["cost_per_m_samples"], ",.3g"), href))
        body.append(cells)
    note = (
        html.P(
            f"The first {TABLE_ROWS} of {best.height} curves; the heatmap shows every one, "
            "and the export below has the whole table.",
            id="sizing-more",
        )
        if best.height > TABLE_ROWS
        else None
    )
    return [table(head, body, "sizing-answer"), note]


@callback(
    Output("sizing-heatmap", "figure"),
    Output("sizing-table", "children"),
    Output("sizing-query", "data"),
    Input("sizing-mode", "value"),
    Input("sizing-policy", "value"),
    prevent_initial_call=True,
)
def update_sizing(mode: str | None, policy: str | None) -> Any:
    """Heatmap and table of the best N for the selected mode and policy; URL query."""
    best = answer(mode, policy)
    if best.is_empty():
        answer_table: Any = html.P("No predictions for this mode and policy.", id="sizing-empty")
    else:
        answer_table = _table(best, prices()[1])
    return sizing_heatmap(best, network_names()), answer_table, search(mode=mode, policy=policy)


@callback(
    Output("sizing-nav", "href"),
    Input("sizing-heatmap", "clickData"),
    State("sizing-mode", "value"),
    State("sizing-policy", "value"),
    prevent_initial_call=True,
)
def open_detail(click: dict[str, Any] | None, mode: str, policy: str) -> Any:
    """Go to the scaling detail of the clicked heatmap cell."""
    if not click or not click.get("points"):
        return no_update
    model, _, hardware = str(click["points"][0]["y"]).rpartition(" · ")
    return detail_href(model, hardware, mode, policy)


register_export(
    "sizing-export",
    [State("sizing-mode", "value"), State("sizing-policy", "value")],
    answer,
    lambda mode, policy: f"sgdsim-sizing-{mode}-{policy}",
)

register_mode_policies("sizing")
register_url_sync("sizing")
