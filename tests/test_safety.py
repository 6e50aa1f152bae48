"""Safety of the user surfaces: the query sandbox, one-line errors, atomic outputs,
testbed leftovers, and fuzzing of the parsers (issue 17)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from sgdsim import sandbox
from sgdsim.errors import SgdsimError, StoreUnreadable
from sgdsim.store import publish


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, empty sgdsim store written by publish."""
    db = tmp_path_factory.mktemp("store") / "sgdsim.duckdb"
    publish(db, [], [])
    return db


@pytest.fixture
def con(store: Path):
    c = sandbox.connect(store)
    yield c
    c.close()


def sgdsim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sgdsim.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


# --------------------------------------------------------------------------- sandbox
def test_reading_a_file_outside_the_store_is_refused(con):
    with pytest.raises(sandbox.QueryRefused, match="/etc/passwd") as e:
        sandbox.run(con, "SELECT * FROM read_csv('/etc/passwd')")
    assert "root:" not in str(e.value)
    for sql in ("SELECT * FROM read_text('/etc/hostname')", "SELECT * FROM glob('/etc/*')"):
        with pytest.raises(sandbox.QueryRefused, match="refused"):
            sandbox.run(con, sql)


def test_writing_a_file_is_refused(con, tmp_path: Path):
    out = tmp_path / "x.csv"
    with pytest.raises(sandbox.QueryRefused, match="COPY"):
        sandbox.run(con, f"COPY (SELECT 1) TO '{out}'")
    with pytest.raises(sandbox.QueryRefused):
        sandbox.run(con, f"EXPORT DATABASE '{tmp_path / 'exp'}'")
    assert list(tmp_path.iterdir()) == []


def test_attaching_and_changing_another_database_is_refused(con, tmp_path: Path):
    other = tmp_path / "other.duckdb"
    c = duckdb.connect(str(other))
    c.execute("CREATE TABLE keep (a INTEGER)")
    c.close()
    before = other.read_bytes()
    with pytest.raises(sandbox.QueryRefused, match="ATTACH"):
        sandbox.run(con, f"ATTACH '{other}' (READ_ONLY false)")
    with pytest.raises(sandbox.QueryRefused, match="refused"):
        sandbox.run(con, f"SELECT * FROM '{other}'")
    with pytest.raises(sandbox.QueryRefused, match="CREATE"):
        sandbox.run(con, "CREATE TABLE other.t (a INTEGER)")
    assert other.read_bytes() == before


@pytest.mark.parametrize(
    "sql",
    ["INSTALL httpfs", "LOAD httpfs", "LOAD parquet", "FORCE INSTALL httpfs"],
)
def test_extensions_are_neither_installed_nor_loaded(con, sql: str):
    with pytest.raises(sandbox.QueryRefused, match="refused"):
        sandbox.run(con, sql)


def test_external_access_is_off_even_for_statements_the_filter_lets_through(store: Path):
    """The statement filter is the first line; DuckDB's own settings are the second."""
    c = sandbox.connect(store)
    try:
        settings = dict(
            c.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN ("
                "'enable_external_access', 'autoload_known_extensions', "
                "'autoinstall_known_extensions', 'allow_community_extensions', "
                "'lock_configuration', 'temp_directory')"
            ).fetchall()
        )
        for sql in ("INSTALL httpfs", "SET memory_limit = '64GB'", "RESET memory_limit"):
            with pytest.raises(duckdb.Error):
                c.execute(sql)
    finally:
        c.close()
    assert settings == {
        "enable_external_access": "false",
        "autoload_known_extensions": "false",
        "autoinstall_known_extensions": "false",
        "allow_community_extensions": "false",
        "lock_configuration": "true",
        "temp_directory": "",
    }


@pytest.mark.parametrize(
    "sql",
    [
        "SET memory_limit = '64GB'",
        "PRAGMA memory_limit = '64GB'",
        "PRAGMA enable_profiling",
        "PRAGMA threads = 8",
        "CREATE TEMP TABLE z AS SELECT 1",
        "EXPLAIN ANALYZE CREATE TEMP TABLE z AS SELECT 1",
        "EXPLAIN CREATE TEMP VIEW scaling AS SELECT 1",
        "CALL checkpoint()",
        "SELECT 1; SELECT 2",
    ],
)
def test_settings_changes_writes_and_batches_are_refused(con, sql: str):
    with pytest.raises(sandbox.QueryRefused) as e:
        sandbox.run(con, sql)
    assert "\n" not in str(e.value)
    assert sandbox.run(con, "SELECT count(*) FROM duckdb_tables() WHERE temporary")[1] == [(0,)]
    assert sandbox.run(con, "SELECT current_setting('threads')")[1] == [(2,)]


def test_a_runaway_query_stops_at_the_time_limit(con):
    t0 = time.monotonic()
    with pytest.raises(sandbox.QueryRefused, match="time limit of 1 s"):
        sandbox.run(con, "SELECT count(*) FROM range(20000000) a, range(20000000) b", timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert sandbox.run(con, "SELECT 42") == (["42"], [(42,)])  # the connection still works


def test_a_runaway_query_stops_at_the_memory_limit(store: Path):
    c = sandbox.connect(store, memory_limit="64MB")
    try:
        with pytest.raises(sandbox.QueryRefused, match="memory"):
            sandbox.run(c, "SELECT list(range) FROM range(100000000)", timeout_s=60)
    finally:
        c.close()


def test_rows_are_capped_without_computing_the_whole_result(con):
    t0 = time.monotonic()
    cols, rows = sandbox.run(con, "SELECT range AS i FROM range(10000000000)", max_rows=7)
    assert cols == ["i"] and rows == [(i,) for i in range(7)]
    assert time.monotonic() - t0 < 10


def test_reading_statements_work(con):
    _, tables = sandbox.run(con, "SHOW TABLES")
    assert ("predictions",) in tables and ("store_info",) in tables
    assert sandbox.run(con, "PRAGMA table_info('store_info')")[1][0][1] == "schema_version"
    assert sandbox.run(con, "EXPLAIN SELECT 1")[0][0] == "explain_key"


def test_missing_corrupt_foreign_and_old_stores_are_one_line_errors(tmp_path: Path, store: Path):
    cases = {}
    cases["missing"] = tmp_path / "none.duckdb"
    (tmp_path / "garbage.duckdb").write_bytes(bytes(range(256)) * 64)
    cases["garbage"] = tmp_path / "garbage.duckdb"
    (tmp_path / "empty.duckdb").write_bytes(b"")
    cases["empty"] = tmp_path / "empty.duckdb"
    truncated = tmp_path / "truncated.duckdb"
    truncated.write_bytes(store.read_bytes()[:5000])
    cases["truncated"] = truncated
    foreign = tmp_path / "foreign.duckdb"
    c = duckdb.connect(str(foreign))
    c.execute("CREATE TABLE runs (a INTEGER)")
    c.close()
    cases["foreign"] = foreign
    old = tmp_path / "old.duckdb"
    c = duckdb.connect(str(old))
    c.execute("CREATE TABLE store_info (schema_version INTEGER); INSERT INTO store_info VALUES (0)")
    c.close()
    cases["old"] = old
    words = {
        "missing": "no sgdsim store",
        "garbage": "not a readable DuckDB file",
        "empty": "",
        "truncated": "",
        "foreign": "not an sgdsim store",
        "old": "schema version 0",
    }
    for name, path in cases.items():
        with pytest.raises(StoreUnreadable) as e:
            sandbox.connect(path)
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and words[name] in msg, (name, msg)
        assert "make run" in msg


def test_a_store_locked_by_a_writer_is_a_one_line_error(tmp_path: Path, store: Path):
    db = tmp_path / "locked.duckdb"
    db.write_bytes(store.read_bytes())
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', "
            "flush=True); time.sleep(60)",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreUnreadable, match="locked by a process writing it"):
            sandbox.connect(db)
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_cli_refusals_are_one_line_and_exit_nonzero(store: Path, tmp_path: Path):
    for sql, word in (
        ("SELECT * FROM read_csv('/etc/passwd')", "/etc/passwd"),
        (f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'", "COPY"),
        (f"ATTACH '{tmp_path / 'o.duckdb'}' (READ_ONLY false)", "ATTACH"),
        ("INSTALL httpfs", "INSTALL"),
        ("SELECT count(*) FROM range(20000000) a, range(20000000) b", "time limit"),
    ):
        r = sgdsim("query", "--db", str(store), "--timeout-s", "1", sql)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and word in lines[0], (sql, r.stderr)
        assert "root:" not in r.stdout
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "o.duckdb").exists()
    ok = sgdsim("query", "--db", str(store), "SELECT schema_version FROM store_info")
    assert ok.returncode == 0 and "| schema_version |" in ok.stdout
    tables = sgdsim("tables", "--db", str(store))
    assert tables.returncode == 0 and "store_info" in tables.stdout


def test_cli_debug_shows_the_traceback(tmp_path: Path):
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"not a database" * 100)
    plain = sgdsim("tables", "--db", str(bad))
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1
    debug = sgdsim("--debug", "tables", "--db", str(bad))
    assert (
        debug.returncode != 0 and "Traceback" in debug.stderr and "StoreUnreadable" in debug.stderr
    )


def test_query_refused_is_an_sgdsim_error():
    assert issubclass(sandbox.QueryRefused, SgdsimError)
