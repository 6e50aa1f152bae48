"""Read-only access to the store for the dashboard's pages."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import polars as pl

from sgdsim.reports import PhaseSplit
from sgdsim.reports import phase_splits as _store_phase_splits
from sgdsim.store import connect_read_only

DEFAULT_DB = "results/sgdsim.duckdb"


def db_path() -> str:
    """Store the app reads: ``$SGDSIM_DB`` or ``results/sgdsim.duckdb``."""
    return os.environ.get("SGDSIM_DB", DEFAULT_DB)


def store_problem(path: str | None = None) -> str | None:
    """Why the store cannot be shown, in one line with the fix, or None when it can.

    Opens it as :func:`sgdsim.sandbox.connect` does (read-only), which refuses
    a missing, locked, corrupt or foreign file and a store of another schema
    version. A file version (path, modification time) found readable is not
    opened again: every page load asks, and opening takes ~50 ms.
    """
    from sgdsim.errors import StoreUnreadable
    from sgdsim.sandbox import connect

    version = store_version(path)
    if version in _READABLE:
        return None
    try:
        connect(version[0], memory_limit="256MB", threads=1).close()
    except StoreUnreadable as e:
        return str(e)
    _READABLE.add(version)
    return None


#: Store versions (:func:`store_version`) :func:`store_problem` found readable.
_READABLE: set[tuple[str, int]] = set()


def fetch(sql: str, params: list[Any] | None = None) -> pl.DataFrame:
    """Rows of ``sql`` on the store, read-only, as a polars DataFrame.

    Answers are cached per store file and modification time (publish replaces
    the file, so a new store is read afresh); list parameters count by value.

    Raises:
        FileNotFoundError: no store at :func:`db_path`.
    """
    key = tuple(tuple(p) if isinstance(p, list) else p for p in params or [])
    return _fetch(*store_version(), sql, key)


def cached_layout(layout: Callable[..., Any]) -> Callable[..., Any]:
    """A page's ``layout`` (called with the URL's query) cached per store version
    (:func:`store_version`) and query: a page's view is a function of the two, and
    building it (queries, figures) took 15-50 ms of every visit. Keeps the last 64."""
    views: dict[tuple[tuple[str, int], str], Any] = {}

    @functools.wraps(layout)
    def cached(**query: Any) -> Any:
        key = (store_version(), json.dumps(query, sort_keys=True, default=str))
        if key not in views:
            if len(views) >= 64:
                views.clear()
            views[key] = layout(**query)
        return views[key]

    return cached


def store_version(path: str | None = None) -> tuple[str, int]:
    """The store's path (``path`` or :func:`db_path`) and modification time (ns; 0 when
    missing): a cache key that changes when publish replaces the file."""
    path = path or db_path()
    return path, Path(path).stat().st_mtime_ns if Path(path).is_file() else 0


@functools.lru_cache(maxsize=512)
def _fetch(path: str, _mtime: int, sql: str, params: tuple[Any, ...]) -> pl.DataFrame:
    con = connect_read_only(path)
    try:
        cur = con.execute(sql, [list(p) if isinstance(p, tuple) else p for p in params])
        cols = [d[0] for d in cur.description or []]
        return pl.DataFrame(cur.fetchall(), schema=cols, orient="row", infer_schema_length=None)
    finally:
        con.close()


def phase_splits(model: str | None) -> list[PhaseSplit]:
    """The model's steady asynchronous pairs split by phase
    (:func:`sgdsim.reports.phase_splits`; empty when the store has none), cached
    like :func:`fetch`."""
    return list(_phase_splits(*store_version(), model or ""))


@functools.lru_cache(maxsize=64)
def _phase_splits(path: str, _mtime: int, model: str) -> tuple[PhaseSplit, ...]:
    con = connect_read_only(path)
    try:
        return tuple(_store_phase_splits(con, model))
    finally:
        con.close()


def has_table(name: str) -> bool:
    """Whether the store has a table or view ``name`` (older stores lack newer ones)."""
    return (
        fetch("SELECT count(*) AS n FROM information_schema.tables WHERE table_name = ?", [name])[
            "n"
        ][0]
        > 0
    )


def distinct(column: str, table: str = "predictions") -> list[str]:
    """Sorted distinct values of ``column`` in ``table`` (names from this module only)."""
    return fetch(f"SELECT DISTINCT {column} AS v FROM {table} ORDER BY v")["v"].to_list()


#: The SGD mode a page starts at when the URL names none (the store's other modes are a click away).
DEFAULT_MODE = "async"

#: The policy a page starts at in each SGD mode (allreduce rows carry their fusion rule).
DEFAULT_POLICY = {"async": "tf_default", "sync_ps": "tf_default", "allreduce": "buckets"}


def mode_policies(mode: str | None) -> list[str]:
    """Sorted policies the store predicts in ``mode`` (for ``allreduce``: its fusion
    rules); every policy of the store when ``mode`` has none (or is None)."""
    got = fetch(
        "SELECT DISTINCT policy AS v FROM predictions WHERE mode = ? ORDER BY v", [mode or ""]
    )["v"].to_list()
    return got or distinct("policy")


def pick_policy(value: Any, mode: str | None) -> tuple[list[str], str | None]:
    """The policy choices of ``mode`` and the one to show: ``value`` when the mode
    has it, else the mode's :data:`DEFAULT_POLICY`, else its first."""
    options = mode_policies(mode)
    return options, pick(value, options, DEFAULT_POLICY.get(mode or "", "tf_default"))


def has_column(table: str, column: str) -> bool:
    """Whether ``table`` (or view) of the store has ``column`` (older stores lack newer ones)."""
    return (
        fetch(
            "SELECT count(*) AS n FROM information_schema.columns "
            "WHERE table_name = ? AND column_name = ?",
            [table, column],
        )["n"][0]
        > 0
    )


def mode_comparison(model: str | None, hardware: str | None, network: str | None) -> pl.DataFrame:
    """Rows of view ``mode_comparison`` for one model, hardware and network, by N and
    rank (every mode at its best policy; empty when the store predates the view)."""
    if not has_table("mode_comparison"):
        return pl.DataFrame()
    return fetch(
        "SELECT * FROM mode_comparison WHERE model = ? AND hardware = ? AND network = ? "
        "ORDER BY workers, mode_rank",
        [model or "", hardware or "", network or ""],
    )


def model_names() -> list[str]:
    """Models with predictions, sorted."""
    return distinct("model")


def network_names() -> list[str]:
    """Networks with predictions, slowest first."""
    return fetch(
        "SELECT network, min(bandwidth_bps) AS b FROM predictions GROUP BY network ORDER BY b"
    )["network"].to_list()


def prices() -> tuple[dict[tuple[str, str], float], str]:
    """``(kind, name) -> price per node-hour`` from table ``prices`` and its currency
    (empty and ``''`` when nothing is priced or the store predates the table)."""
    if not has_table("prices"):
        return {}, ""
    df = fetch("SELECT kind, name, per_node_hour, currency FROM prices")
    cur = df["currency"][0] if df.height else ""
    return {(k, n): float(p) for k, n, p, _ in df.iter_rows()}, cur


def traces_dir() -> Path:
    """Directory of the synthetic Chrome traces next to the store (``results/chrome_traces``)."""
    return Path(db_path()).resolve().parent / "chrome_traces"


def trace_files() -> list[str]:
    """Chrome trace files under :func:`traces_dir`, as sorted relative POSIX paths."""
    base = traces_dir()
    if not base.is_dir():
        return []
    return sorted(
        p.relative_to(base).as_posix()
        for p in base.rglob("*.json")
        if not any(part.startswith(".") for part in p.relative_to(base).parts)
    )


def trace_path(rel: str) -> Path:
    """Absolute path of the trace ``rel`` (one of :func:`trace_files`).

    Raises:
        ValueError: ``rel`` is not a listed trace (keeps requests inside the directory).
    """
    if rel not in trace_files():
        raise ValueError(f"{rel!r} is not a trace under {traces_dir()}")
    return traces_dir() / rel


def pick(value: Any, options: Sequence[str], default: str | None = None) -> str | None:
    """``value`` if it is one of ``options``, else ``default`` if it is, else the first
    option (None without options): a URL's query may name anything."""
    if isinstance(value, str) and value in options:
        return value
    if default in options:
        return default
    return options[0] if options else None


def search(**params: Any) -> str:
    """URL query string of the non-empty ``params`` (lists joined by commas)."""
    clean = {
        k: ",".join(v) if isinstance(v, list | tuple) else v
        for k, v in params.items()
        if v not in (None, "", [])
    }
    return "?" + urlencode(clean) if clean else ""
