"""Sandboxed SQL over the store, for ``sgdsim query``/``tables`` and the dashboard's console.

:func:`connect` opens the store read-only with DuckDB's external access
disabled (no file, URL or other database reachable from SQL, no extension
installed or loaded), its configuration locked so SQL cannot undo that, a
memory limit and no spilling to disk. :func:`run` executes one read-only
statement under a time limit and returns at most ``max_rows`` rows. The DuckDB
settings used are documented at https://duckdb.org/docs/stable/configuration/overview
and https://duckdb.org/docs/stable/operations_manual/securing_duckdb/overview.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import duckdb

from sgdsim.errors import SgdsimError, StoreUnreadable

#: Statement types :func:`run` executes: they only read (SELECT covers DESCRIBE,
#: SHOW and SUMMARIZE; PRAGMA that would change a setting is refused by the lock).
ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN", "PRAGMA")

_SIZE = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)


class QueryRefused(SgdsimError):
    """A statement was refused by the sandbox or stopped at its time or memory limit."""


def connect(
    db_path: str | os.PathLike[str], *, memory_limit: str = "1GB", threads: int = 2
) -> duckdb.DuckDBPyConnection:
    """Open the sgdsim store at ``db_path`` read-only inside the sandbox.

    Settings: ``enable_external_access=false`` (no read_csv/COPY/ATTACH/INSTALL/
    LOAD of files, URLs or other databases), ``autoload_known_extensions``,
    ``autoinstall_known_extensions`` and ``allow_community_extensions`` false,
    ``temp_directory=''`` (nothing spilled to disk, so ``memory_limit`` is a
    hard cap), ``memory_limit`` and ``threads`` as given, then
    ``lock_configuration=true`` so no ``SET``/``PRAGMA``/``RESET`` can change them.

    Args:
        db_path: the DuckDB file written by publish (``results/sgdsim.duckdb``).
        memory_limit: DuckDB size string, e.g. ``"1GB"``, ``"512MB"``.
        threads: worker threads DuckDB may use (>= 1).

    Raises:
        StoreUnreadable: the file is missing, locked by a writing process,
            corrupt, not a DuckDB file, or a DuckDB file that is not an sgdsim
            store of schema version :data:`sgdsim.store.SCHEMA_VERSION`.
        ValueError: ``memory_limit`` is not a size or ``threads`` < 1.
    """
    from sgdsim.store import SCHEMA_VERSION

    if not _SIZE.match(memory_limit):
        raise ValueError(f"memory limit {memory_limit!r} is not a size such as 1GB or 512MB")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    path = Path(db_path)
    rebuild = "rebuild it with `make run` (snakemake --cores 8) or pass the right --db"
    if not path.is_file():
        raise StoreUnreadable(
            f"{db_path}: no sgdsim store here; run `make run` (snakemake --cores 8) first "
            "or pass the right --db"
        )
    config: dict[str, Any] = {
        "enable_external_access": False,
        "autoload_known_extensions": False,
        "autoinstall_known_extensions": False,
        "allow_community_extensions": False,
        "temp_directory": "",
        "memory_limit": memory_limit,
        "threads": threads,
        "lock_configuration": True,
    }
    try:
        con = duckdb.connect(str(path), read_only=True, config=config)
    except duckdb.Error as e:
        msg = _first_line(e)
        if "lock" in msg.lower():
            raise StoreUnreadable(
                f"{db_path}: locked by a process writing it ({msg}); wait for the pipeline's "
                "publish step to finish, or stop that process"
            ) from e
        raise StoreUnreadable(f"{db_path}: not a readable DuckDB file ({msg}); {rebuild}") from e
    try:
        version = con.execute("SELECT max(schema_version) FROM store_info").fetchone()
    except duckdb.CatalogException as e:
        con.close()
        raise StoreUnreadable(
            f"{db_path}: a DuckDB file but not an sgdsim store (no table store_info); {rebuild}"
        ) from e
    except duckdb.Error as e:
        con.close()
        raise StoreUnreadable(
            f"{db_path}: corrupt sgdsim store ({_first_line(e)}); {rebuild}"
        ) from e
    if version is None or version[0] != SCHEMA_VERSION:
        con.close()
        found = version[0] if version is not None else None
        raise StoreUnreadable(
            f"{db_path}: sgdsim store of schema version {found}, this sgdsim reads version "
            f"{SCHEMA_VERSION}; {rebuild}"
        )
    return con


def run(
    con: duckdb.DuckDBPyConnection, sql: str, *, timeout_s: float = 10.0, max_rows: int = 1000
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Execute ONE read-only statement on a :func:`connect` connection.

    A timer thread calls ``con.interrupt()`` after ``timeout_s`` seconds, which
    stops the statement (including the fetch of its rows). Rows are streamed
    and at most ``max_rows`` are fetched, so a huge result costs no more than
    the rows returned.

    Args:
        con: connection from :func:`connect`.
        sql: exactly one statement of a type in :data:`ALLOWED_STATEMENTS`.
        timeout_s: wall-clock limit in seconds (> 0).
        max_rows: rows returned at most (>= 0); the rest are discarded.

    Returns:
        ``(column names, rows)``: ``rows`` is a list of tuples, ``len(rows) <= max_rows``.

    Raises:
        QueryRefused: not exactly one statement, a statement that is not read-only,
            access outside the store, a locked setting, the time limit or the
            memory limit reached; the message is one line naming what and why.
        duckdb.Error: any other SQL error (syntax, unknown table or column).
        ValueError: ``timeout_s`` <= 0 or ``max_rows`` < 0.
    """
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, got {max_rows}")
    statements = con.extract_statements(sql)
    if len(statements) != 1:
        raise QueryRefused(
            f"refused: {len(statements)} statements given; run one statement at a time"
        )
    stmt = statements[0]
    kind = _kind(con, stmt)
    if kind not in ALLOWED_STATEMENTS:
        words = stmt.query.split()
        first = words[0].upper() if words else kind
        what = f"{first} statement" if first == kind else f"{first} that runs a {kind} statement"
        raise QueryRefused(
            f"refused: {what}; the store is read-only here and only "
            f"{', '.join(ALLOWED_STATEMENTS)} statements that read are allowed"
        )
    lock = threading.Lock()
    state = {"running": True, "fired": False}

    def stop() -> None:
        with lock:
            if state["running"]:
                state["fired"] = True
                con.interrupt()

    timer = threading.Timer(timeout_s, stop)
    timer.daemon = True
    timer.start()
    try:
        con.execute(stmt.query)
        columns = [d[0] for d in con.description or []]
        rows = con.fetchmany(max_rows) if max_rows > 0 else []
        if hasattr(con, "abort"):  # DuckDB >= 2 streams: drop the unread rest
            con.abort()
        return columns, rows
    except duckdb.InterruptException as e:
        raise QueryRefused(
            f"stopped: the statement ran longer than the time limit of {timeout_s:g} s "
            "(--timeout-s)"
        ) from e
    except duckdb.OutOfMemoryException as e:
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()
        raise QueryRefused(
            f"stopped: the statement needed more memory than the limit of "
            f"{limit[0] if limit else '?'} (--memory-limit)"
        ) from e
    except duckdb.PermissionException as e:
        raise QueryRefused(
            f"refused: {_first_line(e).removeprefix('Permission Error: ')}; only the "
            "store's own tables and views can be queried (no files, URLs, other "
            "databases or extensions)"
        ) from e
    except duckdb.InvalidInputException as e:
        if "configuration has been locked" not in str(e):
            raise
        raise QueryRefused(
            f"refused: {_first_line(e).removeprefix('Invalid Input Error: ')}; settings "
            "are fixed when the store is opened"
        ) from e
    finally:
        with lock:
            state["running"] = False
        timer.cancel()


_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(ANALY[SZ]E\s+)?(\([^)]*\)\s*)?", re.IGNORECASE)


def _kind(con: duckdb.DuckDBPyConnection, stmt: Any) -> str:
    """Type of ``stmt``; for EXPLAIN, ``"EXPLAIN"`` only when it explains a SELECT
    (``EXPLAIN ANALYZE`` runs the statement it explains)."""
    kind: str = stmt.type.name
    if kind != "EXPLAIN":
        return kind
    inner = _EXPLAIN.sub("", stmt.query, count=1)
    try:
        explained = con.extract_statements(inner)
    except duckdb.Error:
        return "unreadable EXPLAIN"
    if len(explained) != 1 or explained[0].type.name != "SELECT":
        return explained[0].type.name if len(explained) == 1 else "unreadable EXPLAIN"
    return kind


def _first_line(e: BaseException) -> str:
    """First line of an exception's message (DuckDB adds hints on later lines)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
