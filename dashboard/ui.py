"""Small layout helpers shared by the pages."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, callback, clientside_callback, dcc, html

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


def table(head: list[str], rows: list[list[Any]], id_: str) -> html.Table:
    """A plain HTML table: header ``head``, one row per item of ``rows``."""
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h) for h in head])),
            html.Tbody([html.Tr([html.Td(c) for c in r]) for r in rows]),
        ],
        id=id_,
        className="data",
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


def url_sync(prefix: str) -> list[Any]:
    """Components that keep a page's selection in the address bar: a page callback
    writes the query string (``?a=1&b=2``) to ``{prefix}-query``'s ``data`` and
    :func:`register_url_sync` puts it in the URL with ``history.replaceState``
    (no new history entry, no page reload; the page's layout reads it back)."""
    return [dcc.Store(id=f"{prefix}-query"), html.Div(id=f"{prefix}-query-sync", hidden=True)]


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
