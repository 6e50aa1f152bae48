"""The sgdsim dashboard: ``python -m dashboard.app [--db results/sgdsim.duckdb] [--port 8050]``.

Binds to 127.0.0.1 only and opens the store read-only, so it can run while
the pipeline is writing a new store (publish replaces the file atomically).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
from pathlib import Path

import dash
from dash import Dash, html

from dashboard.data import store_problem


def create_app(db: str | None = None) -> Dash:
    """Build the Dash app over the store at ``db`` (default ``$SGDSIM_DB`` or results/)."""
    if db is not None:
        os.environ["SGDSIM_DB"] = str(db)
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).parent / "pages"),
        title="sgdsim",
        # the pages' layouts read the store; Dash's start-up check of every
        # layout would turn a bad store into a bare HTTP 500 on every request
        suppress_callback_exceptions=True,
        on_error=_on_error,
    )
    app.layout = _layout
    return app


def _layout() -> html.Div:
    """The frame of every page, with the store's problem (if any) on top."""
    return html.Div(
        [
            html.H1("sgdsim: distributed SGD throughput predictions"),
            html.Div(_status(_store_message(store_problem())), id=STATUS_ID, role="alert"),
            html.Nav(
                [dash.dcc.Location(id="app-url"), html.Div(nav_links("/"), id="app-nav")],
            ),
            dash.page_container,
        ],
        style={"fontFamily": "sans-serif", "margin": "1em 2em"},
    )


#: Id of the in-page message shown when the store cannot be read.
STATUS_ID = "store-status"


def _store_message(problem: str | None) -> str | None:
    return None if problem is None else f"The store cannot be read: {problem}"


def _status(text: str | None) -> list[html.P]:
    style = {"color": "#a00", "border": "1px solid #a00", "padding": "0.5em"}
    return [] if text is None else [html.P(text, style=style)]


def _on_error(err: Exception) -> None:
    """A callback failed: say why on the page (the store, else the error) instead of a 500."""
    traceback.print_exception(err, file=sys.stderr)  # the server log keeps the details
    text = _store_message(store_problem()) or (
        f"This page failed ({type(err).__name__}: {err}); the server log has the details"
    )
    dash.set_props(STATUS_ID, {"children": _status(text)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--db", default=os.environ.get("SGDSIM_DB", "results/sgdsim.duckdb"))
    p.add_argument("--port", type=int, default=8050)
    a = p.parse_args(argv)
    problem = store_problem(a.db)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    app = create_app(a.db)
    t0 = time.perf_counter()
    warm_up()
    print(
        f"sgdsim dashboard on http://127.0.0.1:{a.port}/ (store {a.db}, read-only; "
        f"default views read in {time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    app.run(host="127.0.0.1", port=a.port, debug=False)
    return 0


def warm_up() -> None:
    """Build every page's default view once before serving: views and the store's
    answers are kept per store version (:func:`dashboard.data.cached_layout`,
    :func:`dashboard.data.fetch`), so no first visit waits for DuckDB and polars
    (0.1-0.6 s a page on a 2-core machine)."""
    for page in dash.page_registry.values():
        # a page that cannot be built says why when it is visited
        with contextlib.suppress(Exception):
            page["layout"]()


def nav_links(pathname: str | None) -> list[dash.dcc.Link]:
    """One link per page in page order; the current page's has class ``active``."""
    return [
        dash.dcc.Link(
            p["name"],
            href=p["relative_path"],
            className="active" if p["relative_path"] == (pathname or "/") else "",
        )
        for p in dash.page_registry.values()
    ]


@dash.callback(dash.Output("app-nav", "children"), dash.Input("app-url", "pathname"))
def _mark_current_page(pathname: str | None) -> list[dash.dcc.Link]:
    return nav_links(pathname)


if __name__ == "__main__":
    sys.exit(main())
