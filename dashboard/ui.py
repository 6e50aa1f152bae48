"""Small layout helpers shared by the pages."""

from __future__ import annotations

from typing import Any

from dash import dcc, html


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
