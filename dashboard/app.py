"""The sgdsim dashboard: ``python -m dashboard.app [--db results/sgdsim.duckdb] [--port 8050]``.

Binds to 127.0.0.1 only and opens the store read-only, so it can run while
the pipeline is writing a new store (publish replaces the file atomically).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import dash
from dash import Dash, html


def create_app(db: str | None = None) -> Dash:
    """Build the Dash app over the store at ``db`` (default ``$SGDSIM_DB`` or results/)."""
    if db is not None:
        os.environ["SGDSIM_DB"] = str(db)
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).parent / "pages"),
        title="sgdsim",
    )
    app.layout = html.Div(
        [
            html.H1("sgdsim: distributed SGD throughput predictions"),
            html.Nav(
                [dash.dcc.Location(id="app-url"), html.Div(nav_links("/"), id="app-nav")],
            ),
            dash.page_container,
        ],
        style={"fontFamily": "sans-serif", "margin": "1em 2em"},
    )
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--db", default=os.environ.get("SGDSIM_DB", "results/sgdsim.duckdb"))
    p.add_argument("--port", type=int, default=8050)
    a = p.parse_args(argv)
    if not Path(a.db).is_file():
        print(f"error: {a.db}: no sgdsim store; run `make run` first", file=sys.stderr)
        return 2
    app = create_app(a.db)
    print(f"sgdsim dashboard on http://127.0.0.1:{a.port}/ (store {a.db}, read-only)", flush=True)
    app.run(host="127.0.0.1", port=a.port, debug=False)
    return 0


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
