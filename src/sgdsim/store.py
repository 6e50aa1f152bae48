"""The DuckDB store: one writer (publish), every other process reads it read-only."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import duckdb

from sgdsim.io import atomic_path

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


def publish(
    db_path: str | os.PathLike[str],
    tables_dirs: Sequence[Path],
    prediction_files: Sequence[Path],
    config_json: str = "{}",
    measurement_files: Sequence[Path] = (),
    testbed_prediction_files: Sequence[Path] = (),
) -> None:
    """Write a fresh DuckDB file at ``db_path`` from the Parquet shards.

    The database is built under a temporary name and renamed when complete, so
    readers never see a half-built store.

    Args:
        db_path: output DuckDB file.
        tables_dirs: normalized profile directories (``profile.parquet``, ``ops.parquet``, …).
        prediction_files: one-row Parquet files, one per grid point.
        measurement_files: one-row Parquet files, one per measured validation run.
        testbed_prediction_files: one-row Parquet files, the predictions of those runs.
        config_json: the validated config, stored in table ``runs``.
    """
    from sgdsim import __version__

    with atomic_path(db_path) as tmp:
        con = duckdb.connect(str(tmp))
        try:
            con.execute(sql_text("schema.sql"))
            for table, stem in PROFILE_TABLES.items():
                files = [str(d / f"{stem}.parquet") for d in tables_dirs]
                if files:
                    con.execute(
                        f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?)", [files]
                    )
            for table, shards in (
                ("predictions", prediction_files),
                ("measurements", measurement_files),
                ("testbed_predictions", testbed_prediction_files),
            ):
                if shards:
                    con.execute(
                        f"INSERT INTO {table} BY NAME "
                        "SELECT * FROM read_parquet(?, union_by_name = true)",
                        [[str(p) for p in shards]],
                    )
            con.execute(
                "INSERT INTO runs VALUES (?, ?, ?)",
                [datetime.now(UTC).replace(tzinfo=None), __version__, config_json],
            )
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
