"""Page: a read-only SQL console over the store, sandboxed as the query tool is."""

from __future__ import annotations

from typing import Any

import dash
import duckdb
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.data import db_path
from dashboard.export import export_bar, register_export
from dashboard.ui import table
from sgdsim import sandbox
from sgdsim.errors import SgdsimError

dash.register_page(__name__, path="/sql", name="SQL", title="sgdsim: SQL console", order=6)

#: Limits of one console query (the query tool's defaults).
TIMEOUT_S = 10.0
MAX_ROWS = 1000
#: Rows drawn on the page (the export has all :data:`MAX_ROWS`): hundreds of rows
#: took seconds to draw.
SHOWN_ROWS = 100

EXAMPLES = {
    "Best throughput per model and network": (
        "SELECT model, hardware, network, mode, policy,\n"
        "       arg_max(workers, samples_per_s) AS workers_at_peak,\n"
        "       round(max(samples_per_s), 1) AS peak_samples_per_s\n"
        "FROM predictions\n"
        "GROUP BY ALL\n"
        "ORDER BY model, peak_samples_per_s"
    ),
    "Parallel efficiency at every N": (
        "SELECT model, network, policy, workers, round(efficiency, 3) AS efficiency\n"
        "FROM scaling\n"
        "ORDER BY model, network, policy, workers"
    ),
    "PS link busy and blocked share": (
        "SELECT model, network, workers, round(ps_down_util, 2) AS ps_out,\n"
        "       round(ps_up_util, 2) AS ps_in, round(blocked_fraction, 2) AS blocked\n"
        "FROM predictions\n"
        "WHERE policy = 'tf_default'\n"
        "ORDER BY model, network, workers"
    ),
    "Bytes per step of each profile": (
        "SELECT profile_id, median(pull_bytes) AS pull_bytes, median(push_bytes) AS push_bytes\n"
        "FROM profile_steps\n"
        "GROUP BY profile_id\n"
        "ORDER BY profile_id"
    ),
    "Validation error": (
        "SELECT model, network, policy, points, round(mape_pct, 1) AS mape_pct,\n"
        "       round(max_ape_pct, 1) AS max_ape_pct\n"
        "FROM validation_summary\n"
        "ORDER BY model, network, policy"
    ),
    "Tables and views": (
        "SELECT table_name, table_type\nFROM information_schema.tables\nORDER BY table_name"
    ),
}


def run_query(sql: str | None) -> pl.DataFrame:
    """Rows of ``sql`` on the store through :mod:`sgdsim.sandbox` (read-only, no
    file or network access, at most :data:`TIMEOUT_S` seconds and :data:`MAX_ROWS`
    rows).

    Raises:
        sgdsim.sandbox.QueryRefused: the statement writes, reads files, or runs too long.
        duckdb.Error: the statement is not valid SQL for the store.
    """
    con = sandbox.connect(db_path())
    try:
        columns, rows = sandbox.run(con, sql or "", timeout_s=TIMEOUT_S, max_rows=MAX_ROWS)
    finally:
        con.close()
    names = [str(c) for c in columns]
    unique = [n if names.index(n) == i else f"{n}_{i}" for i, n in enumerate(names)]
    return pl.DataFrame(
        [[str(v) if isinstance(v, list | dict) else v for v in r] for r in rows],
        schema=unique,
        orient="row",
        infer_schema_length=None,
    )


def layout(**_: Any) -> html.Div:
    first = next(iter(EXAMPLES.values()))
    return html.Div(
        [
            html.H2("SQL console"),
            html.P(
                "Read-only SQL (DuckDB) over the store's tables and views: statements that "
                f"write, read files or reach the network are refused, and a query stops after "
                f"{TIMEOUT_S:.0f} s and {MAX_ROWS} rows."
            ),
            html.Div(
                [html.Span("Examples: ")]
                + [
                    html.Button(name, id={"type": "sql-example", "index": i}, n_clicks=0)
                    for i, name in enumerate(EXAMPLES)
                ],
                className="controls",
            ),
            dcc.Textarea(id="sql-query", value=first, rows=8, className="sql"),
            html.Div([html.Button("Run", id="sql-run", n_clicks=0)], className="controls"),
            html.P(id="sql-error", className="empty"),
            html.P(id="sql-status"),
            html.Div(id="sql-result"),
            export_bar("sql-export"),
        ]
    )


@callback(
    Output("sql-query", "value"),
    Input({"type": "sql-example", "index": dash.ALL}, "n_clicks"),
    prevent_initial_call=True,
)
def pick_example(_clicks: list[int]) -> Any:
    """Put the clicked example into the editor."""
    trig = dash.ctx.triggered_id
    if not isinstance(trig, dict) or not any(_clicks):
        return dash.no_update
    return list(EXAMPLES.values())[int(trig["index"])]


@callback(
    Output("sql-result", "children"),
    Output("sql-error", "children"),
    Output("sql-status", "children"),
    Input("sql-run", "n_clicks"),
    State("sql-query", "value"),
)
def run_console(_n: int, sql: str | None) -> Any:
    """The query's rows as a table, or the reason it was refused or failed."""
    try:
        df = run_query(sql)
    except (SgdsimError, duckdb.Error, ValueError) as e:
        return None, str(e).splitlines()[0] if str(e) else type(e).__name__, ""
    status = f"{df.height} rows" + (
        " (the limit: there may be more; add LIMIT / WHERE)" if df.height >= MAX_ROWS else ""
    )
    if df.height > SHOWN_ROWS:
        status += f"; the first {SHOWN_ROWS} shown, the export below has all"
    body = [["" if v is None else str(v) for v in r] for r in df.head(SHOWN_ROWS).iter_rows()]
    return table(df.columns, body, "sql-table"), "", status


register_export("sql-export", [State("sql-query", "value")], run_query, lambda _q: "sgdsim-query")
