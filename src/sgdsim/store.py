"""The DuckDB store: one writer (publish), every other process reads it read-only."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from sgdsim.errors import StoreError
from sgdsim.io import atomic_path

#: Version of ``schema.sql`` and ``views.sql``; raise it when a table, view or column
#: changes, so readers (:func:`sgdsim.sandbox.connect`, the dashboard) refuse a store
#: of another layout.
SCHEMA_VERSION = 14

#: Parquet file of each profile table inside a normalized tables directory.
PROFILE_TABLES = {
    "profiles": "profile",
    "profile_steps": "steps",
    "ops": "ops",
    "transfers": "transfers",
    "params": "params",
}


def sql_text(name: str) -> str:
    """Text of ``schema.sql`` or ``views.sql`` shipped in the package."""
    return resources.files("sgdsim.sql").joinpath(name).read_text()


def imported_tables_dirs(out_root: str | os.PathLike[str] = "results/imported") -> list[Path]:
    """Complete imported tables directories ``{out_root}/tables/{hardware}/{model}``, sorted.

    A directory counts when it holds every table :func:`sgdsim.traces.normalize_profile`
    writes. Temporary names (a leading dot: an import still being written, or
    one that crashed) and incomplete directories are left out, so a store never
    loads half an import.
    """
    base = Path(out_root) / "tables"
    if not base.is_dir():
        return []
    return [
        d
        for d in sorted(base.glob("*/*"))
        if d.is_dir()
        and not d.name.startswith(".")
        and not d.parent.name.startswith(".")
        and all((d / f"{t}.parquet").is_file() for t in PROFILE_TABLES.values())
    ]


def _load_profiles(con: duckdb.DuckDBPyConnection, sources: Sequence[tuple[Path, str]]) -> None:
    """Insert the tables of each ``(directory, source)``; profile ids must be unique.

    One directory at a time, by column name: tables written before a column
    was added get its default (e.g. ``ps_tasks`` 1) or NULL.

    Raises:
        StoreError: two directories hold the same profile id (names both).
    """
    seen: dict[str, Path] = {}
    for d, source in sources:
        ids = con.execute(
            "SELECT profile_id FROM read_parquet(?)", [str(d / "profile.parquet")]
        ).fetchall()
        for (pid,) in ids:
            if pid in seen:
                fix = (
                    "re-import the trace under another --hardware or --model "
                    "(sgdsim import), or delete this import's tables directory"
                    if source == "imported"
                    else "give the hardware or model entry another name"
                )
                raise StoreError(
                    f"{d}: profile {pid!r} is also in {seen[pid]}; profile ids must be "
                    f"unique in the store: {fix}"
                )
            seen[pid] = d
    for d, source in sources:
        for table, stem in PROFILE_TABLES.items():
            file = str(d / f"{stem}.parquet")
            if table == "profiles":
                con.execute(
                    "INSERT INTO profiles BY NAME SELECT *, ? AS source FROM read_parquet(?)",
                    [source, file],
                )
            else:
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?)", [file])


def price_rows(config: dict[str, Any]) -> list[tuple[str, str, float, str]]:
    """Rows of table ``prices`` from the config's ``cost:``: ``(kind, name,
    per_node_hour, currency)``, kind ``hardware`` or ``network``; prices of 0
    are left out (0 means not priced)."""
    cost = config.get("cost") or {}
    currency = str(cost.get("currency", "USD"))
    return [
        (kind, str(name), float(price), currency)
        for kind, key in (("hardware", "hardware"), ("network", "networks"))
        for name, price in sorted((cost.get(key) or {}).items())
        if float(price) > 0
    ]


def publish(
    db_path: str | os.PathLike[str],
    tables_dirs: Sequence[Path],
    prediction_files: Sequence[Path],
    config_json: str = "{}",
    measurement_files: Sequence[Path] = (),
    testbed_prediction_files: Sequence[Path] = (),
    imported_dirs: Sequence[Path] = (),
    replay_files: Sequence[Path] = (),
) -> None:
    """Write a fresh DuckDB file at ``db_path`` from the Parquet shards.

    The database is built under a temporary name and renamed when complete, so
    readers never see a half-built store.

    Args:
        db_path: output DuckDB file.
        tables_dirs: normalized profile directories of the configured grid
            (``profile.parquet``, ``ops.parquet``, …); ``profiles.source`` = ``'profile'``.
        prediction_files: Parquet files of predictions, a row per grid point.
        measurement_files: one-row Parquet files, one per measured validation run.
        testbed_prediction_files: one-row Parquet files, the predictions of those runs.
        replay_files: one-row Parquet files, the steady points' replays from their
            measured phases (table ``testbed_replays``).
        config_json: the validated config, stored in table ``runs``; its ``cost:``
            fills table ``prices`` (see :func:`price_rows`).
        imported_dirs: tables directories written by ``sgdsim import``
            (see :func:`imported_tables_dirs`);
            ``profiles.source`` = ``'imported'``.

    Raises:
        StoreError: a profile id occurs twice (the old store is left as it was).
    """
    from sgdsim import __version__

    with atomic_path(db_path) as tmp:
        con = duckdb.connect(str(tmp))
        try:
            con.execute(sql_text("schema.sql"))
            _load_profiles(
                con,
                [(Path(d), "profile") for d in tables_dirs]
                + [(Path(d), "imported") for d in imported_dirs],
            )
            for table, shards in (
                ("predictions", prediction_files),
                ("measurements", measurement_files),
                ("testbed_predictions", testbed_prediction_files),
                ("testbed_replays", replay_files),
            ):
                if shards:
                    files = [str(p) for p in shards]
                    source = "read_parquet(?, union_by_name = true)"
                    cols = {
                        r[0]
                        for r in con.sql(
                            f"DESCRIBE SELECT * FROM {source}", params=[files]
                        ).fetchall()
                    }
                    # shards written before rows carried a mode are asynchronous
                    pick = "* REPLACE (coalesce(mode, 'async') AS mode)" if "mode" in cols else "*"
                    con.execute(f"INSERT INTO {table} BY NAME SELECT {pick} FROM {source}", [files])
            con.execute("INSERT INTO store_info VALUES (?)", [SCHEMA_VERSION])
            con.execute(
                "INSERT INTO runs VALUES (?, ?, ?)",
                [datetime.now(UTC).replace(tzinfo=None), __version__, config_json],
            )
            prices = price_rows(json.loads(config_json))
            if prices:
                con.executemany("INSERT INTO prices VALUES (?, ?, ?, ?)", prices)
            con.execute(sql_text("views.sql"))
            con.execute("CHECKPOINT")
        finally:
            con.close()


def connect_read_only(db_path: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """Open the store read-only.

    Raises:
        FileNotFoundError: no store at ``db_path`` yet (run the pipeline first).
    """
    if not Path(db_path).is_file():
        raise FileNotFoundError(
            f"{db_path}: no sgdsim store; run `make run` (snakemake --cores 8) first"
        )
    return duckdb.connect(str(db_path), read_only=True)
