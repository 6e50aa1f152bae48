"""Safety of the user surfaces: the query sandbox, one-line errors, atomic outputs,
testbed leftovers, and fuzzing of the parsers (issue 17)."""

from __future__ import annotations

import os
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


# --------------------------------------------------------------------------- atomic outputs
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)
    return p.pid


def test_atomic_directory_replace_keeps_old_or_new_and_leaves_nothing(tmp_path: Path):
    from sgdsim.io import atomic_path

    out = tmp_path / "tables"
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "old.parquet").write_text("old")
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "new.parquet").write_text("half")
        raise RuntimeError("crash while writing")
    assert [p.name for p in out.iterdir()] == ["old.parquet"]
    with atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "new.parquet").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new.parquet"]
    assert [p.name for p in tmp_path.iterdir()] == ["tables"]


def test_atomic_replace_without_renameat2_renames_the_old_one_aside(tmp_path: Path, monkeypatch):
    from sgdsim import io

    monkeypatch.setattr(io, "_renameat2", lambda: None)
    renames: list[tuple[str, str]] = []
    real = os.replace
    monkeypatch.setattr(
        io.os, "replace", lambda a, b: (renames.append((Path(a).name, Path(b).name)), real(a, b))
    )
    out = tmp_path / "d"
    out.mkdir()
    (out / "old").write_text("old")
    with io.atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "new").write_text("new")
    pid = os.getpid()
    assert renames == [("d", f".d.old-{pid}"), (f".d.tmp-{pid}", "d")]
    assert [p.name for p in tmp_path.iterdir()] == ["d"] and (out / "new").is_file()


def test_outputs_and_their_directory_are_fsynced(tmp_path: Path, monkeypatch):
    from sgdsim import io

    synced: list[str] = []
    real_open, real_fsync = os.open, os.fsync
    names: dict[int, str] = {}

    def spy_open(p, flags, *a):
        fd = real_open(p, flags, *a)
        names[fd] = Path(p).name
        return fd

    def spy_fsync(fd):
        synced.append(names.get(fd, "?"))
        real_fsync(fd)

    monkeypatch.setattr(io.os, "open", spy_open)
    monkeypatch.setattr(io.os, "fsync", spy_fsync)
    with io.atomic_path(tmp_path / "out") as tmp:
        tmp.mkdir()
        (tmp / "a.parquet").write_text("a")
    pid = os.getpid()
    assert synced.index("a.parquet") < synced.index(f".out.tmp-{pid}")
    assert synced[-1] == tmp_path.name  # the parent, after the rename


def test_a_killed_writer_leaves_a_temporary_the_next_run_removes(tmp_path: Path):
    from sgdsim.io import atomic_path, remove_stale

    out = tmp_path / "w.json"
    out.write_text("old")
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sgdsim.io import atomic_path\n"
            "with atomic_path(sys.argv[1]) as t:\n"
            "    t.write_text('half'); print('ready', flush=True); time.sleep(60)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    live = tmp_path / f".w.json.tmp-{writer.pid}"
    assert live.is_file() and remove_stale(out) == [] and live.is_file()  # owner alive: kept
    writer.kill()
    writer.wait(timeout=30)
    assert live.is_file() and out.read_text() == "old"
    with atomic_path(out) as tmp:
        tmp.write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.json"]
    assert out.read_text() == "new"


def test_a_writer_killed_between_its_renames_gets_the_old_output_back(tmp_path: Path):
    from sgdsim.io import remove_stale

    dead = _dead_pid()
    (tmp_path / f".d.old-{dead}").mkdir()
    (tmp_path / f".d.old-{dead}" / "old").write_text("old")
    (tmp_path / f".d.tmp-{dead}").mkdir()
    assert len(remove_stale(tmp_path / "d")) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert (tmp_path / "d" / "old").read_text() == "old"


# --------------------------------------------------------------------------- testbed leftovers
def _namespaces() -> list[str]:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


@pytest.mark.timeout(180)
def test_a_sigkilled_testbed_run_is_swept_at_the_next_start(tmp_path: Path, monkeypatch):
    from sgdsim.testbed import netns

    reason = netns.check_available()
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.setenv("SGDSIM_TESTBED_STATE", str(tmp_path / "state"))
    # a measuring parent: a testbed, a child that dies with it and one that does not
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time\n"
            "from sgdsim.testbed.netns import Testbed\n"
            "tb = Testbed(1)\n"
            "tb.popen('w0', ['sleep', '171'])\n"
            "orphan = subprocess.Popen(tb.exec_argv('ps', ['sleep', '172']), "
            "start_new_session=True)\n"
            "print(tb.run_id, orphan.pid, flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        run_id, orphan = parent.stdout.readline().split()
    finally:
        parent.kill()  # SIGKILL: no handler, no atexit
        parent.wait(timeout=30)
    left = [n for n in _namespaces() if n.startswith(run_id + "-")]
    assert sorted(left) == sorted(f"{run_id}-{h}" for h in ("br", "ps", "w0"))
    assert Path(f"/proc/{orphan}").exists()  # the kill left a process in the testbed
    assert (tmp_path / "state" / f"{run_id}.json").is_file()
    with netns.Testbed(1) as live:  # the next start sweeps; a live run is left alone
        assert not [n for n in _namespaces() if n.startswith(run_id + "-")]
        assert netns.sweep_stale() == []
        assert all(ns in _namespaces() for ns in live.namespaces)
        assert [p.name for p in (tmp_path / "state").iterdir()] == [f"{live.run_id}.json"]
    deadline = time.monotonic() + 10
    while Path(f"/proc/{orphan}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # the orphan was SIGKILLed; it is reaped by init
    stat = Path(f"/proc/{orphan}/stat")
    assert not stat.exists() or stat.read_text().split(")")[1].split()[0] == "Z"
    assert list((tmp_path / "state").iterdir()) == []
    assert not [n for n in _namespaces() if n.startswith(live.run_id)]


def test_namespaces_without_a_record_or_of_a_live_owner_are_never_swept(
    tmp_path: Path, monkeypatch
):
    import json

    from sgdsim.testbed import netns

    reason = netns.check_available()
    if reason is not None:
        pytest.skip(reason)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("SGDSIM_TESTBED_STATE", str(state))
    ns = f"sgd-{os.urandom(3).hex()}-ps"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        run_id = ns.removesuffix("-ps")
        assert netns.sweep_stale() == []  # no record: not ours to judge
        me = os.getpid()
        (state / f"{run_id}.json").write_text(
            json.dumps({"run_id": run_id, "pid": me, "start": netns._start_ticks(me)})
        )
        assert netns.sweep_stale() == [] and ns in _namespaces()  # owner alive
        (state / f"{run_id}.json").write_text(
            json.dumps({"run_id": run_id, "pid": me, "start": 1})  # PID reused since
        )
        assert netns.sweep_stale() == [ns] and ns not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


# --------------------------------------------------------------------------- one-line errors
def _workload_dict() -> dict:
    return {
        "seg_dur_s": [0.01, 0.02],
        "pull_bytes": [1000.0, 2000.0],
        "pull_gate": [0, 1],
        "push_bytes": [1000.0, 2000.0],
        "push_seg": [1, 0],
        "push_update_s": [1e-4, 1e-4],
        "batch_size": 4,
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-b", "-5"], ["--bandwidth-bps", "-5", "bit/s"]),
        (["-b", "nan"], ["--bandwidth-bps", "nan"]),
        (["-b", "inf"], ["--bandwidth-bps", "inf"]),
        (["-n", "100000"], ["--workers", "100000", "4096"]),
        (["-n", "0"], ["--workers", "0"]),
        (["--latency-s", "-1"], ["--latency-s", "-1"]),
        (["--steps", "1"], ["--steps", "1"]),
        (["--replications", "0"], ["--replications", "0"]),
        (["--workers-per-node", "0"], ["--workers-per-node", "0"]),
        (["--policy", "nope"], ["--policy", "nope"]),
    ],
)
def test_predict_range_checks_are_one_line_in_the_units_typed(
    tmp_path: Path, args: list[str], words: list[str]
):
    import json

    w = tmp_path / "w.json"
    w.write_text(json.dumps(_workload_dict()))
    r = sgdsim("predict", "--workload", str(w), *args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert "0.625" not in lines[0]  # not converted to bytes/s


def test_predict_on_a_corrupt_workload_is_one_line(tmp_path: Path):
    import json

    w = tmp_path / "w.json"
    for content in ('{"seg_dur_s": [0.01', "[]", json.dumps({**_workload_dict(), "pull_gate": 3})):
        w.write_text(content)
        r = sgdsim("predict", "--workload", str(w), "-n", "1")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and str(w) in lines[0], r.stderr
        assert "Traceback" not in r.stderr and "normalize" in lines[0]
    w.write_text(json.dumps(_workload_dict()))
    ok = sgdsim("predict", "--workload", str(w), "-n", "1", "-n", "2", "--steps", "4")
    assert ok.returncode == 0 and ok.stdout.count("| 1e+09 |") == 2, ok.stderr


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seg_dur_s": [float("inf")]}, "seg_dur_s"),
        ({"seg_dur_s": "0.1"}, "seg_dur_s"),
        ({"pull_gate": [0.5, 1]}, "pull_gate"),
        ({"pull_bytes": [10**400, 1]}, "pull_bytes"),
        ({"batch_size": True}, "batch_size"),
        ({"worker_cpu_s": "fast"}, "worker_cpu_s"),
        ({"meta": []}, "meta"),
        ({"push_seg": [5, 0]}, "push_seg"),
        ({"pull_orders": [0, 1, 1, 1]}, "pull_orders"),  # 2nd row not a permutation
        ({"pull_orders": [1, 0, 1]}, "pull_orders"),  # not whole rows of the 2 pulls
        ({"pull_orders": [0.0, 1.0]}, "pull_orders"),
    ],
)
def test_workload_fields_are_checked_by_name(change: dict, field: str):
    from sgdsim.errors import WorkloadError
    from sgdsim.simulation import Workload

    with pytest.raises(WorkloadError, match=field):
        Workload.from_dict({**_workload_dict(), **change})


def test_a_missing_workload_field_is_named():
    from sgdsim.errors import WorkloadError
    from sgdsim.simulation import Workload

    d = _workload_dict()
    del d["push_update_s"]
    with pytest.raises(WorkloadError, match="'push_update_s' is missing"):
        Workload.from_dict(d)


def test_check_config_names_the_file_line_and_key(tmp_path: Path):
    repo = Path(__file__).resolve().parents[1]
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nworkers: [1, 2\nmodels:\n  - name: x\n")
    r = sgdsim("check-config", str(bad), cwd=repo)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert f"{bad}:3:" in lines[0] and "line 2" in lines[0]
    bad.write_text("workers: [1, -2]\n")
    r = sgdsim("check-config", str(bad), cwd=repo)
    assert r.returncode == 1 and "workers[1]: -2 is less than the minimum of 1" in r.stderr
    ok = sgdsim("check-config", ".test/config.yaml", cwd=repo)
    assert ok.returncode == 0 and ok.stdout.startswith("ok:"), ok.stderr


def test_import_errors_advise_the_import_not_the_profile_stage(tmp_path: Path):
    empty = tmp_path / "t.pb"
    empty.write_bytes(b"")
    for trace, word in ((tmp_path / "none.pb", "not found"), (empty, "empty")):
        r = sgdsim(
            "import", str(trace), "--model", "M", "--hardware", "h", "--out", str(tmp_path / "o")
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and word in lines[0], r.stderr
        assert "profile stage" not in lines[0] and str(trace) in lines[0]


def test_a_stage_failure_is_one_line_in_its_log_and_on_the_console(tmp_path: Path):
    log = tmp_path / "stage.log"
    script = (
        "import sys\n"
        f"sys.stderr = open({str(log)!r}, 'w', buffering=1)\n"
        "from sgdsim.errors import TraceError, stage_errors\n"
        "with stage_errors('normalize'):\n"
        "    raise TraceError('results/profiles/cpu/M/trace_0.pb: trace file is empty')\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    for text in (log.read_text(), r.stderr):
        lines = text.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error in normalize: results/"), text
    debug = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SGDSIM_DEBUG": "1"},
    )
    assert debug.returncode == 1 and "Traceback" in log.read_text()


# --------------------------------------------------------------------------- dashboard
def _start_dashboard(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    import urllib.request

    from sgdsim.profiling.procs import free_ports, spawn

    (port,) = free_ports(1)
    root = Path(__file__).resolve().parents[1]
    proc = spawn(
        [sys.executable, "-m", "dashboard.app", "--db", str(db), "--port", str(port)],
        {**os.environ, "PYTHONPATH": str(root)},
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_dashboard_refuses_a_corrupt_or_foreign_store_at_start(tmp_path: Path, store: Path):
    root = Path(__file__).resolve().parents[1]
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"\0garbage" * 512)
    foreign = tmp_path / "foreign.duckdb"
    duckdb.connect(str(foreign)).close()
    for db, word in ((bad, "not a readable DuckDB file"), (foreign, "not an sgdsim store")):
        r = subprocess.run(
            [sys.executable, "-m", "dashboard.app", "--db", str(db), "--port", "9"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and word in lines[0], r.stderr


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_dashboard_says_so_on_the_page_when_the_store_goes_bad(tmp_path: Path, store: Path):
    import urllib.request

    from sgdsim.profiling.procs import stop

    for exe in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not Path(exe).exists():
            pytest.skip(f"{exe} not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    db = tmp_path / "sgdsim.duckdb"
    db.write_bytes(store.read_bytes())
    proc, url = _start_dashboard(db)
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chrome'}")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.set_page_load_timeout(60)
        driver.get(url)
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "h2"))
        assert driver.find_element(By.ID, "store-status").text == ""
        garbage = tmp_path / "new"
        garbage.write_bytes(b"\0garbage" * 512)
        os.replace(garbage, db)  # the store goes bad while the dashboard runs
        driver.find_element(By.LINK_TEXT, "Policies").click()  # a callback reads the store
        wait.until(lambda d: "cannot be read" in d.find_element(By.ID, "store-status").text)
        assert "not a readable DuckDB file" in driver.find_element(By.ID, "store-status").text
        driver.get(url)  # a fresh load: the message is in the page, not a bare 500
        wait.until(lambda d: "cannot be read" in d.find_element(By.ID, "store-status").text)
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
    finally:
        driver.quit()
        stop(proc)


# --------------------------------------------------------------------------- fuzzing
# Each input must give a result or one of sgdsim's own errors, never another exception.
# Hypothesis reports the inputs tried with --hypothesis-show-statistics.
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)
PS_DEV = "/job:ps/replica:0/task:0/device:CPU:0"
W_DEV = "/job:worker/replica:0/task:0/device:CPU:0"


def _mutate(data: st.DataObject, obj: object, depth: int = 0, pool: tuple[str, ...] = ()) -> object:
    """``obj`` with one drawn change: a value replaced, a key or item dropped, or a key added.

    Replacements are random JSON or, with ``pool``, one of its strings (names
    used elsewhere in ``obj``, which makes cross-references go wrong).
    """

    def values(current: object = None) -> st.SearchStrategy:
        """Random JSON, or (half the time) a value of the same type: a near miss."""
        like: st.SearchStrategy = JSON
        if isinstance(current, str):
            like = st.sampled_from(pool) if pool else st.text(max_size=12)
        elif isinstance(current, bool):
            like = st.booleans()
        elif isinstance(current, int):
            like = st.integers(-3, 5000)
        elif isinstance(current, float):
            like = st.floats(-1.0, 1e12) | st.floats()
        return like | JSON

    if isinstance(obj, dict) and obj and depth < 5:
        key = data.draw(st.sampled_from(sorted(obj, key=str)))
        action = data.draw(st.sampled_from(["descend", "replace", "drop", "add"]))
        out = dict(obj)
        if action == "descend":
            out[key] = _mutate(data, obj[key], depth + 1, pool)
        elif action == "replace":
            out[key] = data.draw(values(obj[key]))
        elif action == "drop":
            del out[key]
        else:
            out[data.draw(st.text(max_size=8))] = data.draw(JSON)
        return out
    if isinstance(obj, list) and obj and depth < 5:
        i = data.draw(st.integers(0, len(obj) - 1))
        action = data.draw(st.sampled_from(["descend", "replace", "drop", "append"]))
        out_l = list(obj)
        if action == "descend":
            out_l[i] = _mutate(data, obj[i], depth + 1, pool)
        elif action == "replace":
            out_l[i] = data.draw(values(obj[i]))
        elif action == "drop":
            del out_l[i]
        else:
            out_l.append(data.draw(JSON))
        return out_l
    return data.draw(values(obj))


def _mutate_bytes(data: st.DataObject, blob: bytes) -> bytes:
    b = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "flip", "insert", "delete", "truncate"]))
        i = data.draw(st.integers(0, max(len(b) - 1, 0)))
        if kind == "flip" and b:
            b[i] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            b[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and b:
            del b[i : i + data.draw(st.integers(1, 16))]
        elif kind == "truncate":
            del b[i:]
    return bytes(b)


def _run_metadata(nodes: list[tuple[str, str, str, int, int, int | None]] | None = None):
    """A RunMetadata of one step of a worker and a PS (TensorFlow's layout, see parse.py)."""
    from tensorflow.core.protobuf import config_pb2

    md = config_pb2.RunMetadata()
    if nodes is None:
        nodes = [
            (PS_DEV, "w/read", "w/read = ReadVariableOp(w)", 1000, 5, None),
            (W_DEV, "RecvTensor", f"[1024B] [1Gb/s] edge_1_w/read from {PS_DEV} to {W_DEV}",
             1010, 40, 1024),
            (W_DEV, "conv", "conv = Conv2D(x, w/read_S1)", 1060, 300, None),
            (W_DEV, "grad", "grad = Conv2DBackpropFilter(x, conv)", 1370, 200, None),
            (PS_DEV, "RecvTensor", f"[1.0KB] [1Gb/s] edge_2_grad from {W_DEV} to {PS_DEV}",
             1580, 30, 1024),
            (PS_DEV, "update", "update = ResourceApplyGradientDescent(w, lr, grad_S9)", 1615, 12,
             None),
        ]  # fmt: skip
    devs: dict[str, object] = {}
    for dev, name, label, start, dur, out_bytes in nodes:
        d = devs.setdefault(dev, md.step_stats.dev_stats.add(device=dev))
        ns = d.node_stats.add(  # type: ignore[attr-defined]
            node_name=name, timeline_label=label, all_start_micros=start, all_end_rel_micros=dur
        )
        if out_bytes is not None:
            ns.output.add().tensor_description.allocation_description.requested_bytes = out_bytes
    g = md.partition_graphs.add()
    for name, op, dev, tensor, inputs in (
        ("w/read_S1", "_Recv", W_DEV, b"edge_1_w/read", []),
        ("w/read_S0", "_Send", PS_DEV, b"edge_1_w/read", ["w/read"]),
        ("grad_S9", "_Recv", PS_DEV, b"edge_2_grad", []),
        ("grad_S8", "_Send", W_DEV, b"edge_2_grad", ["grad"]),
    ):
        n = g.node.add(name=name, op=op, device=dev, input=inputs)
        n.attr["tensor_name"].s = tensor
        n.attr["send_device"].s = (PS_DEV if tensor == b"edge_1_w/read" else W_DEV).encode()
        n.attr["recv_device"].s = (W_DEV if tensor == b"edge_1_w/read" else PS_DEV).encode()
    return md


def _parse_all(md) -> None:
    from sgdsim.traces.parse import parse_step, transfer_records

    st_ = parse_step(md, 0, "fuzz.pb")
    assert st_.ops.height + st_.transfers.height <= len(md.step_stats.dev_stats[0].node_stats) * 64
    recorded, expected = transfer_records(md)
    assert recorded >= 0 and expected >= 0


def test_the_synthetic_trace_parses():
    from sgdsim.traces.parse import parse_step

    st_ = parse_step(_run_metadata(), 0)
    assert sorted(st_.transfers["direction"].to_list()) == ["pull", "push"]
    assert st_.transfers["bytes"].to_list() == [1024, 1024]


@FUZZ
@given(data=st.data())
def test_fuzz_trace_file_bytes(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory):
    from sgdsim.errors import TraceError
    from sgdsim.traces.parse import load_run_metadata

    blob = _mutate_bytes(data, _run_metadata().SerializeToString(deterministic=True))
    path = tmp_path_factory.getbasetemp() / "fuzz-trace.pb"
    path.write_bytes(blob)
    try:
        _parse_all(load_run_metadata(path))
        event("parsed")
    except TraceError as e:
        event("TraceError")
        assert "fuzz" in str(e)


DEVICES = st.sampled_from([PS_DEV, W_DEV, "/job:ps/task:99999999999", W_DEV + "/stream:all", ""])
LABEL_PARTS = st.sampled_from(
    [
        "[1.5MB] ",
        "[1.2.3KB] ",
        "[99999999999999999999GB] ",
        "[1Gb/s] ",
        "edge_7_x ",
        "from ",
        "to ",
        f"{PS_DEV} ",
        f"{W_DEV} ",
        "/job:ps/task:99999999999999999999 ",
        "n = ",
        "Op(",
        "a, ^b:1",
        ")",
        "",
    ]
)


@FUZZ
@given(
    nodes=st.lists(
        st.tuples(
            DEVICES | st.text(max_size=20),
            st.sampled_from(["RecvTensor", "conv", "update"]) | st.text(max_size=8),
            st.lists(LABEL_PARTS | st.text(max_size=6), max_size=8).map("".join),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.none() | st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=8,
    )
)
def test_fuzz_trace_step_stats(nodes: list) -> None:
    from sgdsim.errors import TraceError

    try:
        _parse_all(_run_metadata(nodes))
        event("parsed")
    except TraceError as e:
        event("TraceError")
        assert "\n" not in str(e)


@FUZZ
@given(data=st.data())
def test_fuzz_workload_loader(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory):
    import json

    from sgdsim.errors import WorkloadError
    from sgdsim.simulation import Workload

    d = _workload_dict()
    for _ in range(data.draw(st.integers(1, 3))):
        d = _mutate(data, d)  # type: ignore[assignment]
    try:
        w = Workload.from_dict(d)
    except WorkloadError:
        event("from_dict: WorkloadError")
    else:
        event("from_dict: loaded")
        assert len(w.seg_dur_s) >= 1 and np_all_finite(w.seg_dur_s)
    path = tmp_path_factory.getbasetemp() / "fuzz-workload.json"
    path.write_bytes(_mutate_bytes(data, json.dumps(_workload_dict()).encode()))
    try:
        Workload.load(str(path))
        event("load: loaded")
    except WorkloadError as e:
        event("load: WorkloadError")
        assert "fuzz-workload.json" in str(e)


def np_all_finite(a) -> bool:
    import numpy as np

    return bool(np.all(np.isfinite(a)))


@pytest.fixture(scope="module")
def base_config() -> tuple[dict, dict]:
    from sgdsim.config import load_yaml

    root = Path(__file__).resolve().parents[1]
    return load_yaml(root / "config/config.yaml"), load_yaml(
        root / "workflow/schemas/config.schema.yaml"
    )


def _strings(obj: object) -> set[str]:
    if isinstance(obj, str):
        return {obj}
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else []
    return set().union(*(_strings(x) for x in items))


@settings(FUZZ, max_examples=1500)  # cheap; most inputs stop at the schema
@given(data=st.data())
def test_fuzz_config_checker(data: st.DataObject, base_config: tuple[dict, dict]):
    from sgdsim.config import validate_config
    from sgdsim.errors import ConfigError

    config, schema = base_config
    pool = tuple(sorted(_strings(config)))
    for _ in range(data.draw(st.integers(1, 3))):
        config = _mutate(data, config, pool=pool)  # type: ignore[assignment]
    try:
        validate_config(config, schema, "fuzz.yaml")
        event("valid")
    except ConfigError as e:
        event(
            "ConfigError (schema)"
            if "see config/README.md" in str(e)
            else "ConfigError (relations)"
        )
        assert str(e).startswith("fuzz.yaml") and "\n" not in str(e)


@FUZZ
@given(data=st.data())
def test_fuzz_config_file_text(
    data: st.DataObject, base_config: tuple[dict, dict], tmp_path_factory: pytest.TempPathFactory
):
    from sgdsim.config import load_yaml, validate_config
    from sgdsim.errors import ConfigError

    root = Path(__file__).resolve().parents[1]
    path = tmp_path_factory.getbasetemp() / "fuzz-config.yaml"
    path.write_bytes(_mutate_bytes(data, (root / ".test/config.yaml").read_bytes()))
    try:
        validate_config(load_yaml(path), base_config[1], str(path))
        event("valid")
    except ConfigError as e:
        event("ConfigError (YAML)" if "YAML" in str(e) else "ConfigError (content)")
        assert str(path) in str(e)


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--timeout-s", "nan"], "--timeout-s"),
        (["--timeout-s", "0"], "--timeout-s"),
        (["--memory-limit", "lots"], "--memory-limit"),
        (["--max-rows", "0"], "--max-rows"),
    ],
)
def test_query_limits_are_range_checked(store: Path, args: list[str], word: str):
    r = sgdsim("query", "--db", str(store), *args, "SELECT 1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and word in lines[0], r.stderr
