"""Download buttons for a figure's data (CSV or Parquet), shared by every page."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import polars as pl
from dash import Input, Output, State, callback, ctx, dcc, html, no_update


def export_bar(prefix: str) -> html.Div:
    """Buttons ``{prefix}-csv`` and ``{prefix}-parquet`` and the ``{prefix}-download``
    component that :func:`register_export` serves."""
    return html.Div(
        [
            html.Span("Data of this figure: "),
            html.Button("CSV", id=f"{prefix}-csv", n_clicks=0, className="export"),
            html.Button("Parquet", id=f"{prefix}-parquet", n_clicks=0, className="export"),
            dcc.Download(id=f"{prefix}-download"),
        ],
        className="export-bar",
    )


def to_bytes(df: pl.DataFrame, fmt: str) -> bytes:
    """``df`` as CSV (list columns joined as text) or Parquet bytes.

    Raises:
        ValueError: ``fmt`` is neither ``csv`` nor ``parquet``.
    """
    buf = io.BytesIO()
    if fmt == "csv":
        flat = df.with_columns(
            [
                pl.col(c).cast(pl.List(pl.String)).list.join(";")
                for c, t in df.schema.items()
                if isinstance(t, pl.List)
            ]
        )
        flat.write_csv(buf)
    elif fmt == "parquet":
        df.write_parquet(buf)
    else:
        raise ValueError(f"unknown export format {fmt!r}; csv or parquet")
    return buf.getvalue()


def register_export(
    prefix: str, states: list[State], data: Callable[..., pl.DataFrame], name: Callable[..., str]
) -> None:
    """Serve ``data(*state values)`` when one of :func:`export_bar`'s buttons is clicked.

    Args:
        prefix: the :func:`export_bar` prefix.
        states: the controls the figure is drawn from, in ``data``'s argument order.
        data: the figure's rows for those control values.
        name: file name stem for those values.
    """

    @callback(
        Output(f"{prefix}-download", "data"),
        Input(f"{prefix}-csv", "n_clicks"),
        Input(f"{prefix}-parquet", "n_clicks"),
        *states,
        prevent_initial_call=True,
    )
    def _download(_csv: int, _parquet: int, *values: Any) -> Any:
        if ctx.triggered_id is None:
            return no_update
        fmt = "csv" if ctx.triggered_id == f"{prefix}-csv" else "parquet"
        stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name(*values))
        return dcc.send_bytes(to_bytes(data(*values), fmt), f"{stem}.{fmt}")
