"""Read-only access to the store for the dashboard's pages."""

from __future__ import annotations

import os
from typing import Any

import polars as pl

from sgdsim.store import connect_read_only

DEFAULT_DB = "results/sgdsim.duckdb"


def db_path() -> str:
    """Store the app reads: ``$SGDSIM_DB`` or ``results/sgdsim.duckdb``."""
    return os.environ.get("SGDSIM_DB", DEFAULT_DB)


def store_problem(path: str | None = None) -> str | None:
    """Why the store cannot be shown, in one line with the fix, or None when it can.

    Opens it as :func:`sgdsim.sandbox.connect` does (read-only), which refuses
    a missing, locked, corrupt or foreign file and a store of another schema
    version.
    """
    from sgdsim.errors import StoreUnreadable
    from sgdsim.sandbox import connect

    try:
        connect(path or db_path(), memory_limit="256MB", threads=1).close()
    except StoreUnreadable as e:
        return str(e)
    return None


def fetch(sql: str, params: list[Any] | None = None) -> pl.DataFrame:
    """Run ``sql`` on a fresh read-only connection; return a polars DataFrame."""
    con = connect_read_only(db_path())
    try:
        cur = con.execute(sql, params or [])
        cols = [d[0] for d in cur.description or []]
        return pl.DataFrame(cur.fetchall(), schema=cols, orient="row")
    finally:
        con.close()


def model_names() -> list[str]:
    """Models with predictions, sorted."""
    return fetch("SELECT DISTINCT model FROM predictions ORDER BY model")["model"].to_list()


def network_names() -> list[str]:
    """Networks with predictions, slowest first."""
    return fetch(
        "SELECT network, min(bandwidth_bps) AS b FROM predictions GROUP BY network ORDER BY b"
    )["network"].to_list()
