"""Small layout helpers shared by the pages."""

from __future__ import annotations

import html as html_text
from typing import Any

from dash import MATCH, Input, Output, State, callback, clientside_callback, dcc, html

from dashboard.data import pick_policy

#: Label of the policy dropdowns: ``allreduce`` rows carry their fusion rule in ``policy``.
POLICY_LABEL = "Policy (allreduce: fusion)"


def control(label: str, component: Any) -> html.Div:
    """``component`` with a label above it, laid out in a row of controls."""
    return html.Div(
        [html.Label(label, htmlFor=getattr(component, "id", None)), component],
        className="control",
    )


def dropdown(id_: str, options: list[str], value: str | None) -> dcc.Dropdown:
    """A single-choice dropdown that cannot be cleared."""
    return dcc.Dropdown(options, value, id=id_, clearable=False)


#: A table cell: its text, or ``(text, href)`` for a link, or ``(text, href, title)``.
Cell = Any


def _escape(text: Any) -> str:
    # line breaks as character references: one line of markup per table
    return html_text.escape(str(text)).replace("\n", "&#10;")


def _cell(c: Cell) -> str:
    if isinstance(c, tuple):
        text, href, *title = c
        tip = f' title="{_escape(title[0])}"' if title else ""
        return f'<a href="{_escape(href)}"{tip}>{_escape(text)}</a>'
    return _escape(c)


def table(head: list[str], rows: list[list[Cell]], id_: str) -> html.Div:
    """A plain HTML table with id ``id_``: header ``head``, one row per item of ``rows``
    (cells: text, or ``(text, href)`` for a link).

    Drawn by the browser from one HTML string (every text and link escaped here),
    which :data:`_SET_TABLE` puts in its host ``div``: a Dash component per cell
    took 4-6 s for the SQL console's 200-row answer, and a ``dcc.Markdown`` of the
    same HTML 130 ms more than this for the sizing page's 25 rows (it loads and
    runs 470 kB of parser and highlighter; headless Chromium, 2-core machine).
    """
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    head_row = "".join(f"<th>{_escape(h)}</th>" for h in head)
    markup = (
        f'<table id="{_escape(id_)}" class="data"><thead><tr>{head_row}</tr>'
        f"</thead><tbody>{body}</tbody></table>"
    )
    attrs: dict[str, Any] = {"data-html": markup, "data-table": id_}
    return html.Div(id={"type": TABLE_HOST, "table": id_}, **attrs)


#: Type of the pattern-matching id of :func:`table`'s host ``div``.
TABLE_HOST = "html-table"

#: Puts a :func:`table`'s HTML in its host once Dash has drawn the host (React
#: leaves the children it did not make alone; the host has none of its own).
_SET_TABLE = """
function (markup) {
    const name = window.dash_clientside.callback_context.outputs_list.id.table;
    const selector = '[data-table="' + CSS.escape(name) + '"]';
    let frames = 0;
    const put = () => {
        const host = document.querySelector(selector);
        if (host) { host.innerHTML = markup || ""; }
        else if (++frames < 120) { requestAnimationFrame(put); }
    };
    put();
    return window.dash_clientside.no_update;
}
"""
clientside_callback(
    _SET_TABLE,
    Output({"type": TABLE_HOST, "table": MATCH}, "title"),
    Input({"type": TABLE_HOST, "table": MATCH}, "data-html"),
)


def fmt(x: Any, spec: str = ".3g") -> str:
    """``x`` formatted with ``spec``, or an en dash when missing."""
    return "–" if x is None else format(x, spec)


_REPLACE_QUERY = """
function (query) {
    if (typeof query !== "string") { return window.dash_clientside.no_update; }
    const loc = window.location;
    if (query !== loc.search) {
        window.history.replaceState(window.history.state, "", loc.pathname + query + loc.hash);
    }
    return window.dash_clientside.no_update;
}
"""


def url_sync(prefix: str, query: str | None = None) -> list[Any]:
    """Components that keep a page's selection in the address bar: a page callback
    writes the query string (``?a=1&b=2``) to ``{prefix}-query``'s ``data`` and
    :func:`register_url_sync` puts it in the URL with ``history.replaceState``
    (no new history entry, no page reload; the page's layout reads it back).
    ``query``: the layout's own selection, put in the URL as the page loads."""
    return [
        dcc.Store(id=f"{prefix}-query", data=query),
        html.Div(id=f"{prefix}-query-sync", hidden=True),
    ]


def register_url_sync(prefix: str) -> None:
    """The browser-side callback of :func:`url_sync` (call once per page module)."""
    clientside_callback(
        _REPLACE_QUERY,
        Output(f"{prefix}-query-sync", "children"),
        Input(f"{prefix}-query", "data"),
    )


def register_mode_policies(prefix: str, policy_id: str | None = None) -> None:
    """Keep ``{prefix}-policy`` (or ``policy_id``) to the policies the store predicts
    in the mode chosen in ``{prefix}-mode``: ``allreduce`` rows carry fusion rules,
    the other modes transmission policies. The layout sets the first choices, so
    this runs only when the mode changes (no extra round trip on a page load).
    """
    target = policy_id or f"{prefix}-policy"

    @callback(
        Output(target, "options"),
        Output(target, "value"),
        Input(f"{prefix}-mode", "value"),
        State(target, "value"),
        prevent_initial_call=True,
    )
    def _policies_of_mode(mode: str | None, current: str | None) -> tuple[list[str], Any]:
        return pick_policy(current, mode)
