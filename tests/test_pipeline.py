"""Real Snakemake runs: the tiny pipeline end to end, config refusal, bad traces."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml
from conftest import ROOT, copy_workflow, snakemake

from sgdsim.simulation import Workload


def tiny_config() -> dict:
    return yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())


@pytest.mark.slow
def test_tiny_pipeline_publishes_one_prediction_per_grid_point(tiny_run: Path):
    cfg = tiny_config()
    db = tiny_run / "results" / "sgdsim.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    # allreduce points take the fusion rules in place of the policies
    schedules = [
        (p, m)
        for m in cfg["modes"]
        for p in (cfg["fusions"] if m == "allreduce" else cfg["policies"])
    ]
    assert {m for _, m in schedules} == {"async", "sync_ps", "allreduce"}
    grid = {
        (model, hw, net, n, p, m)
        for model, hw, net, n, (p, m) in itertools.product(
            [m["name"] for m in cfg["models"]],
            [h["name"] for h in cfg["hardware"]],
            [n["name"] for n in cfg["networks"]],
            cfg["workers"],
            schedules,
        )
    }
    rows = con.execute(
        "SELECT model, hardware, network, workers, policy, mode FROM predictions"
    ).fetchall()
    assert set(rows) == grid and len(rows) == len(grid)
    assert {"p3", "bytescheduler", "prophet"} <= {r[4] for r in rows}
    # simulated in batches: one file (and job) per workload and network, with progress
    files = sorted((tiny_run / "results" / "predictions").rglob("*.parquet"))
    assert len(files) == len(cfg["models"]) * len(cfg["hardware"]) * len(cfg["networks"])
    log = (tiny_run / "results" / "logs" / "simulate" / "cpu" / "LeNet5").glob("*.log")
    assert all(f"{len(grid) // len(files)}/{len(grid) // len(files)}" in p.read_text() for p in log)
    assert con.execute(
        "SELECT DISTINCT ps_discipline, workers_per_node FROM predictions"
    ).fetchall() == [("fair", 1)]
    assert con.execute("SELECT count(*) FROM profiles").fetchone()[0] == 1
    # the profile's host: how much of the node the hypervisor stole while it ran
    steal = con.execute("SELECT host_cpu_steal FROM profiles").fetchone()[0]
    assert steal is not None and 0 <= steal <= 1
    assert con.execute("SELECT count(*) FROM ops").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM transfers WHERE direction = 'pull'").fetchone()[0] > 0
    # p3's pull after update: the workload maps each trainable variable's push to its pull
    (trainable,) = con.execute(
        "SELECT count(*) FROM params WHERE trainable AND pull_tensor IS NOT NULL "
        "AND gradient_tensor IS NOT NULL"
    ).fetchone()
    w = Workload.load(str(tiny_run / "results" / "workloads" / "cpu" / "LeNet5.json"))
    assert trainable == 10 and int((w.pushes_param >= 0).sum()) == trainable
    # throughput never decreases when bandwidth grows
    for n, (policy, mode) in itertools.product(cfg["workers"], schedules):
        by_bw = con.execute(
            "SELECT steps_per_s FROM predictions WHERE workers = ? AND policy = ? AND mode = ? "
            "ORDER BY bandwidth_bps",
            [n, policy, mode],
        ).fetchall()
        assert len(by_bw) == len(cfg["networks"])
        assert [r[0] for r in by_bw] == sorted(r[0] for r in by_bw)
    # on the slowest network, throughput saturates: sub-linear scaling at the largest N
    slow = min(cfg["networks"], key=lambda n: n["bandwidth_bps"])["name"]
    n_max = max(cfg["workers"])
    eff = con.execute(
        "SELECT efficiency FROM scaling "
        "WHERE network = ? AND workers = ? AND policy = 'tf_default' AND mode = 'async'",
        [slow, n_max],
    ).fetchone()[0]
    assert eff < 0.8
    speedup = dict(
        con.execute(
            "SELECT workers, speedup FROM scaling "
            "WHERE network = '1Gbps' AND policy = 'tictac' AND mode = 'async'"
        ).fetchall()
    )
    assert speedup[1] == pytest.approx(1.0)
    con.close()


@pytest.mark.slow
def test_tiny_pipeline_writes_the_listed_chrome_trace_and_policy_gains(tiny_run: Path):
    cfg = tiny_config()
    (t,) = cfg["simulation"]["chrome_traces"]
    path = (
        tiny_run
        / "results"
        / "chrome_traces"
        / t["hardware"]
        / t["model"]
        / t["network"]
        / t["policy"]
        / "async"
        / f"w{t['workers']}.json"
    )
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1, 2}  # PS and two workers
    assert all(e["dur"] >= 0 for e in spans)
    # every policy of the config (p3, bytescheduler and prophet too) has a gain over
    # fifo_random at every N and network, in the view and in the report
    assert {"p3", "bytescheduler", "prophet", "fifo_random"} <= set(cfg["policies"])
    con = duckdb.connect(str(tiny_run / "results" / "sgdsim.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT policy, network, workers, gain_vs_fifo_random, gain_vs_tf_default "
        "FROM policy_gain WHERE model = 'LeNet5' AND hardware = 'cpu' AND mode = 'async'"
    ).fetchall()
    grid = itertools.product(cfg["policies"], [n["name"] for n in cfg["networks"]], cfg["workers"])
    assert sorted(r[:3] for r in rows) == sorted(grid)
    assert all(g is not None and g > 0 for r in rows for g in r[3:])
    assert all(r[3] == 1.0 for r in rows if r[0] == "fifo_random")
    con.close()
    report = (tiny_run / "results" / "reports" / "policy_gain.md").read_text()
    slow = min(cfg["networks"], key=lambda n: n["bandwidth_bps"])["name"]
    for net in cfg["networks"]:
        for policy in cfg["policies"]:
            line = f"| LeNet5 | cpu | {net['name']} | async | {policy} |"
            if policy == "fifo_random":  # the baseline: gain 1 by definition, not listed
                assert line not in report
                continue
            (row,) = [r for r in report.splitlines() if r.startswith(line)]
            mean, lo, hi, n = (c.strip() for c in row[len(line) :].strip(" |").split("|"))
            assert 0 < float(lo) <= float(mean) <= float(hi) and int(n) == len(cfg["workers"])
            if policy == "p3" and net["name"] == slow:
                # pull after update (push_param from the profile) pays off when
                # communication dominates, as in test_traces on the same model
                assert float(mean) >= 1.0


@pytest.mark.slow
def test_tiny_pipeline_measures_the_validation_points_and_reports_accuracy(tiny_run: Path):
    from sgdsim.config import validation_points
    from sgdsim.testbed import check_available

    cfg = tiny_config()
    points = {
        (p["model"], p["network"], p["mode"], p["policy"], p["workers"])
        for p in validation_points(cfg)
    }
    assert {p[2] for p in points} == {"async", "sync_ps", "allreduce"}  # every mode
    con = duckdb.connect(str(tiny_run / "results" / "sgdsim.duckdb"), read_only=True)
    measured = con.execute(
        "SELECT model, network, mode, policy, workers, status, reason, steps_per_s "
        "FROM measurements"
    ).fetchall()
    assert {r[:5] for r in measured} == points and len(measured) == len(points)
    report = (tiny_run / "results" / "reports" / "accuracy.md").read_text()
    html = (tiny_run / "results" / "reports" / "accuracy.html").read_text()
    assert "plotly" in html.lower()
    why = check_available()
    if why is not None:  # not root: every point is recorded as skipped, with the reason
        assert {r[5] for r in measured} == {"skipped"}
        assert {r[6] for r in measured} == {why}
        assert "## Skipped" in report and why in report
        pytest.skip(f"measured validation needs the testbed: {why}")
    assert {r[5] for r in measured} == {"ok"}
    assert all(r[7] > 0 for r in measured)
    rows = con.execute(
        "SELECT model, network, mode, policy, workers, measured_steps_per_s, "
        "predicted_steps_per_s, ape_pct FROM validation"
    ).fetchall()
    assert {r[:5] for r in rows} == points
    for *_, meas, pred, ape in rows:
        assert ape == pytest.approx(100 * abs(pred - meas) / meas)
    (n, mape) = con.execute("SELECT count(*), avg(ape_pct) FROM validation").fetchone()
    assert f"All {n} points: MAPE {mape:.1f} %" in report
    # every run's CPU per step, split by who spent it, adds up to the node's busy time
    split = con.execute(
        "SELECT mode, worker_cpu_s_per_step, ps_cpu_s_per_step, other_cpu_s_per_step, "
        "steps_per_s, cpu_busy FROM measurements"
    ).fetchall()
    for mode, worker, ps, other, rate, busy in split:
        assert worker > 0 and (ps is None) == (mode == "allreduce"), (mode, worker, ps)
        spent = (worker + (ps or 0.0) + other) * rate
        assert spent == pytest.approx(busy * os.cpu_count(), rel=0.1), (mode, spent, busy)
    assert con.execute(
        "SELECT bool_and(measured_cpu_s_per_step > 0 AND modelled_cpu_s_per_step > 0) "
        "FROM validation WHERE mode = 'async'"
    ).fetchone()[0]
    # the testbed places every worker on this node: the prediction shares its cores
    placed = "SELECT bool_and(workers_per_node = workers) FROM testbed_predictions"
    assert con.execute(placed).fetchone()[0]
    # each network's calibrated kernel CPU per byte reaches its predictions
    for net in cfg["validation"]["networks"]:
        cal_path = tiny_run / "results" / "validation" / "calibration" / f"{net['name']}.json"
        cal = json.loads(cal_path.read_text())
        assert cal["status"] == "ok" and cal["testbed_s_per_byte"] > 0
        used = con.execute(
            "SELECT DISTINCT network_cpu_s_per_byte FROM testbed_predictions WHERE network = ?",
            [net["name"]],
        ).fetchall()
        assert used == [(cal["network_cpu_s_per_byte"],)]
        # the calibrations record the hypervisor's steal; a point carries the larger
        push = json.loads((cal_path.parent / net["name"] / "cpu" / "LeNet5.push.json").read_text())
        stolen = con.execute(
            "SELECT DISTINCT calibration_cpu_steal FROM testbed_predictions "
            "WHERE network = ? AND mode = 'async'",
            [net["name"]],
        ).fetchall()
        assert stolen == [(max(cal["host_cpu_steal"], push["host_cpu_steal"]),)]
        # the two-way share the capture of the model's step skeleton gave at its async points' one
        # N >= 2 reaches them; the synchronous ones have none
        assert set(push["two_way_share"]) == set(push["joins_at"]) == {"2"}
        captured = push["two_way_share"]["2"]
        assert captured is None or all(0.5 < x <= 1.0 for x in captured)
        rows = con.execute(
            "SELECT mode, workers, two_way_share FROM testbed_predictions WHERE network = ?",
            [net["name"]],
        ).fetchall()
        assert {w for m, w, _ in rows if m == "async"} == {1, 2}
        for mode, _, share in rows:
            if mode == "async" and captured is not None:
                assert share == pytest.approx(captured)
            else:
                assert share is None
        # and its ring message cost, measured at each N > 1 of its allreduce points, those
        alpha = con.execute(
            "SELECT workers, message_overhead_s, sync_step_s > 0 FROM testbed_predictions "
            "WHERE network = ? AND mode = 'allreduce'",
            [net["name"]],
        ).fetchall()
        ring = {str(n) for n, _, _ in alpha if n > 1}
        assert ring and set(cal["message_overhead_s"]) == ring
        assert all(cal["ring_step_s"][n] > cal["ring_alone_step_s"][n] for n in ring)
        for n, used, sync_path in alpha:
            assert sync_path and used == (cal["message_overhead_s"][str(n)] if n > 1 else 0.0)
    # each async point's join delays are its model's own, from its largest N of
    # workers running its profiled step's skeleton on its network with the PS's port
    # captured (no N-worker training: the default calibration): per number of
    # transfers joined, the mean lateness of the joins (clipped at 0) and its sd
    pushes = con.execute(
        "SELECT DISTINCT model, hardware, network, push_join_delays_s, push_join_sd_s, "
        "pull_join_delays_s, pull_join_sd_s, push_join_delay_s "
        "FROM testbed_predictions WHERE mode = 'async'"
    ).fetchall()
    assert pushes
    for model, hardware, network, push, push_sd, pull, pull_sd, push_1 in pushes:
        cal_path = tiny_run / "results/validation/calibration" / network / hardware
        joins = json.loads((cal_path / f"{model}.push.json").read_text())
        assert joins["status"] == "ok" and joins["method"] == "skeleton capture"
        assert joins["steps_per_s"] > 0 and joins["workers"] >= 2
        assert push_1 == push[0] and len(push) == len(pull) == joins["workers"] - 1
        for mean, sd, name in ((push, push_sd, "push"), (pull, pull_sd, "pull")):
            g = joins[f"{name}_join_growth_s"].get("1", [])
            if len(g) >= 5:
                assert mean[0] == pytest.approx(max(0.0, statistics.fmean(g)))
                assert sd[0] == pytest.approx(statistics.pstdev(g))
            else:
                assert mean[0] == sd[0] == 0.0
            assert all(-1.0 < x < 1.0 for v in joins[f"{name}_join_growth_s"].values() for x in v)
    # each allreduce point is predicted from one worker timed alone by its own
    # measure job, right before the run (the VM's speed moves over minutes)
    steps = con.execute(
        "SELECT model, hardware, network, policy, workers, sync_step_s "
        "FROM testbed_predictions WHERE mode = 'allreduce'"
    ).fetchall()
    assert steps
    for model, hardware, network, policy, n, step_s in steps:
        point = f"{hardware}/{model}/{network}/{policy}/allreduce/w{n}"
        timed_path = tiny_run / "results/validation/allreduce_step" / f"{point}.json"
        timed = json.loads(timed_path.read_text())
        assert step_s == timed["step_s"] > 0
        log = (tiny_run / "results/logs/measure" / f"{point}.log").read_text()
        assert log.index("[profile_allreduce]") < log.index("allreduce worker(s) on")
    # every measured run recorded its step ends and the machine's CPU over the window
    runs = con.execute(
        "SELECT step_end_times, cpu_busy, cpu_steal, shaper_drops, background_busy "
        "FROM measurements"
    ).fetchall()
    for ends, busy, steal, drops, background in runs:
        assert all(sum(t >= 0 for t in w) >= 4 for w in ends)  # min_steps in the window
        assert 0 < busy <= 1 and 0 <= steal < 1 and drops >= 0 and 0 <= background <= 1
    con.close()


@pytest.mark.slow
def test_rerun_is_a_no_op_and_dry_run_lists_nothing(tiny_run: Path):
    r = snakemake(tiny_run, "--cores", "2", "--configfile", ".test/config.yaml", "-n")
    assert r.returncode == 0
    assert "Nothing to be done" in r.stdout + r.stderr


def test_dry_run_of_default_config_plans_the_whole_grid(tmp_path: Path):
    wd = copy_workflow(tmp_path)
    r = snakemake(wd, "--cores", "8", "-n", "--quiet", "rules")
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    # one simulate job per workload and network computes all its grid points
    jobs = len(cfg["models"]) * len(cfg["hardware"]) * len(cfg["networks"])
    out = r.stdout + r.stderr
    assert f"simulate {jobs}" in " ".join(out.split())


def test_steady_validation_config_plans_every_point(tmp_path: Path):
    """config/steady.yaml is accepted and plans one steady measurement per point."""
    wd = copy_workflow(tmp_path)
    r = snakemake(
        wd, "--cores", "2", "-n", "--quiet", "rules", "--configfile", "config/steady.yaml"
    )
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load((ROOT / "config" / "steady.yaml").read_text())
    assert cfg["validation"]["protocol"] == "steady"
    points = sum(len(p["workers"]) * len(p["networks"]) for p in cfg["validation"]["points"])
    out = " ".join((r.stdout + r.stderr).split())
    assert f"measure {points}" in out and f"predict_testbed {points}" in out
    # fair and FIFO queues, both MTUs, at least four models (the validation set)
    nets = cfg["validation"]["networks"]
    assert {n["queue"] for n in nets} == {"fair", "fifo"} and {n["mtu"] for n in nets} == {
        1500,
        9000,
    }
    assert len({p["model"] for p in cfg["validation"]["points"]}) >= 4


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"models": [{"name": "ResNet5O", "batch_size": 16}]}, "ResNet5O"),
        ({"models": [{"name": "LeNet5", "batch_size": -4}]}, "batch_size"),
        ({"policies": ["fastest"]}, "fastest"),
        ({"hardware": [{"name": "cpu", "ps_tasks": 0}]}, "ps_tasks"),
        ({"networks": [{"name": "slow", "bandwidth_bps": 0}]}, "bandwidth_bps"),
        ({"models": [{"name": "InceptionV3", "image_size": 32}]}, "image_size 32 is below"),
        (
            {"models": [{"name": "no_such_module:build"}]},
            "models[0].name: model 'no_such_module:build': cannot import module",
        ),
        (
            {"validation": {"buffer_bytes": 1000, "mtu": 1500}},
            "validation.buffer_bytes: 1000 does not hold one frame",
        ),
        (
            {
                "validation": {
                    "networks": [
                        {"name": "a", "bandwidth_bps": 1e8},
                        {"name": "jumbo", "bandwidth_bps": 1e8, "mtu": 9000, "buffer_bytes": 5000},
                    ]
                }
            },
            "validation.networks[1] (jumbo).buffer_bytes: 5000 does not hold one frame of MTU 9000",
        ),
        (
            {"validation": {"networks": [{"name": "a", "bandwidth_bps": 1e8, "queue": "red"}]}},
            "red",
        ),
        (
            {"simulation": {"steps_per_worker": 3, "warmup_steps": 3, "chrome_traces": []}},
            "warmup_steps",
        ),
        (
            {
                "simulation": {
                    "chrome_traces": [
                        {"model": "X", "hardware": "cpu", "network": "1Gbps", "workers": 2}
                    ]
                }
            },
            "chrome_traces[0].model: 'X' is not the name",
        ),
        (
            {
                "validation": {
                    "networks": [{"name": "n", "bandwidth_bps": 1.0e8}],
                    "points": [{"model": "ResNet50", "workers": [1]}],
                }
            },
            "validation.points[0].model: 'ResNet50' is not the name of a models entry",
        ),
        (
            {
                "validation": {
                    "networks": [{"name": "n", "bandwidth_bps": 1.0e8}],
                    "points": [{"model": "LeNet5", "workers": [1], "networks": ["m"]}],
                }
            },
            "validation.points[0].networks: 'm' is not the name",
        ),
        (
            {"validation": {"networks": [], "points": [{"model": "LeNet5", "workers": [1]}]}},
            "validation.networks is empty",
        ),
    ],
)
def test_invalid_config_is_refused_before_any_job(tmp_path: Path, patch: dict, message: str):
    wd = copy_workflow(tmp_path)
    cfg = tiny_config() | patch
    (wd / "bad.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake(wd, "--cores", "1", "--configfile", "bad.yaml")
    assert r.returncode != 0
    assert message in r.stdout + r.stderr
    assert not (wd / "results").exists()


@pytest.mark.slow
def test_truncated_trace_stops_normalize_and_leaves_no_partial_output(
    tiny_run: Path, tmp_path: Path
):
    wd = tmp_path / "wd"
    shutil.copytree(tiny_run, wd, ignore=shutil.ignore_patterns(".snakemake"))
    shutil.rmtree(wd / "results" / "tables")
    shutil.rmtree(wd / "results" / "workloads")
    (wd / "results" / "sgdsim.duckdb").unlink()
    trace = wd / "results" / "profiles" / "cpu" / "LeNet5" / "trace_0.pb"
    trace.write_bytes(trace.read_bytes()[:1000])
    # the profile is newer than nothing downstream: only normalize and later stages run
    r = snakemake(
        wd,
        "--cores",
        "2",
        "--configfile",
        ".test/config.yaml",
        "--touch",
        "results/profiles/cpu/LeNet5",
    )
    r = snakemake(wd, "--cores", "2", "--configfile", ".test/config.yaml")
    assert r.returncode != 0
    log = (wd / "results" / "logs" / "normalize" / "cpu" / "LeNet5.log").read_text()
    assert "trace_0.pb" in log and "error in normalize" in log and "Traceback" not in log
    assert not (wd / "results" / "workloads" / "cpu" / "LeNet5.json").exists()
    assert not (wd / "results" / "tables" / "cpu" / "LeNet5").exists()
    assert not (wd / "results" / "sgdsim.duckdb").exists()


@pytest.mark.slow
def test_imported_trace_reaches_the_store_on_the_next_run(tiny_run: Path, tmp_path: Path):
    wd = tmp_path / "wd"
    shutil.copytree(tiny_run, wd)
    prof = wd / "results" / "profiles" / "cpu" / "LeNet5"
    traces = [str(p) for p in sorted(prof.glob("trace_*.pb"))]
    imp = ["--model", "MyLeNet", "--hardware", "cluster", "--meta", str(prof / "meta.json")]
    r = subprocess.run(
        [sys.executable, "-m", "sgdsim.cli", "import", *traces, *imp],
        cwd=wd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    args = ("--cores", "2", "--configfile", ".test/config.yaml")
    dry = snakemake(wd, *args, "-n")
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out[-3000:]
    # only the store and what reads it are rebuilt
    assert "rule publish:" in out and "rule report:" in out
    assert not any(f"rule {x}:" in out for x in ("profile", "normalize", "simulate"))
    r = snakemake(wd, *args)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    sql = (
        "SELECT p.source, count(*) AS variables, sum(bytes) AS bytes FROM params "
        "JOIN profiles p USING (profile_id) "
        "WHERE profile_id = 'cluster/MyLeNet' AND trainable GROUP BY p.source"
    )
    q = subprocess.run(
        [sys.executable, "-m", "sgdsim.cli", "query", "--db", "results/sgdsim.duckdb", sql],
        cwd=wd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert q.returncode == 0, q.stderr
    param_bytes = 4 * json.loads((prof / "meta.json").read_text())["param_count"]
    assert "imported" in q.stdout and str(param_bytes) in q.stdout
    assert "Nothing to be done" in snakemake(wd, *args, "-n").stdout
    # removing the import rebuilds the store without it
    shutil.rmtree(wd / "results" / "imported" / "tables" / "cluster" / "MyLeNet")
    dry = snakemake(wd, *args, "-n")
    assert "rule publish:" in dry.stdout + dry.stderr


@pytest.mark.slow
def test_cli_query_prints_a_table(tiny_run: Path):
    db = tiny_run / "results" / "sgdsim.duckdb"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgdsim.cli",
            "query",
            "--db",
            str(db),
            "SELECT workers, round(speedup, 2) AS speedup FROM scaling "
            "WHERE network='1Gbps' ORDER BY workers",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "| workers | speedup |" in r.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "sgdsim.cli", "query", "--db", str(db), "SELECT * FROM nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "nope" in bad.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgdsim.cli",
            "query",
            "--db",
            str(db.with_name("x.duckdb")),
            "SELECT 1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode != 0 and "make run" in missing.stderr
    workload = tiny_run / "results" / "workloads" / "cpu" / "LeNet5.json"
    pred = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgdsim.cli",
            "predict",
            "--workload",
            str(workload),
            "-b",
            "1e8",
            "-b",
            "1e10",
            "-n",
            "1",
            "-n",
            "3",
            "--steps",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pred.returncode == 0, pred.stderr
    rows = [line for line in pred.stdout.splitlines() if line.startswith("| 1e+")]
    assert len(rows) == 4
    sps = {(r.split("|")[1].strip(), r.split("|")[2].strip()): float(r.split("|")[3]) for r in rows}
    assert sps[("1e+10", "3")] > sps[("1e+08", "3")]


def test_hardware_resources_reach_the_profile_job(tmp_path: Path):
    wd = copy_workflow(tmp_path)
    cfg = tiny_config()
    cfg["hardware"] = [
        {"name": "v100", "device": "gpu", "resources": {"mem_mb": 16000, "runtime": 90, "gpu": 1}},
        {"name": "a100", "device": "gpu", "resources": {"gpu": 2, "gres": "gpu:a100:2"}},
    ]
    cfg["simulation"]["chrome_traces"] = []
    cfg["validation"]["points"] = []  # the validation profiles hardware cpu, absent here
    cfg.pop("cost", None)  # prices hardware cpu, absent here
    (wd / "gpu.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake(wd, "--cores", "8", "--configfile", "gpu.yaml", "-n", "--resources", "gpu=2")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    lines = [x for x in out.splitlines() if "resources:" in x and "gpu=" in x]
    (v100,) = [x for x in lines if "gpu=1" in x]
    assert "runtime=90" in v100 and "mem_mb=16000" in v100
    # the SLURM executor asks for GPUs by GRES (--gres): gpu:N, or the entry's own
    assert "gres=gpu:1," in v100
    (a100,) = [x for x in lines if "gpu=2" in x]
    assert "gres=gpu:a100:2," in a100


@pytest.mark.slow
def test_grid_network_with_joins_capture_is_captured_and_predicted_with_them(
    tiny_run: Path, tmp_path: Path
):
    from sgdsim.testbed import check_available
    from sgdsim.testbed.capture import tcpdump_missing

    why = check_available() or tcpdump_missing()
    if why is not None:
        pytest.skip(f"the grid's own join capture needs the testbed: {why}")
    wd = tmp_path / "wd"
    shutil.copytree(tiny_run, wd)  # with .snakemake: the set of inputs is what changes
    cfg = tiny_config()
    # 100Mbps through a shallow FIFO switch port, its joins captured at 200 Mbit/s
    # (joins_bandwidth_bps); 1Gbps stays bare
    cfg["networks"][0] |= {
        "joins": "capture",
        "queue": "fifo",
        "buffer_bytes": 62_500,
        "joins_bandwidth_bps": 2e8,
    }
    (wd / "capture.yaml").write_text(yaml.safe_dump(cfg))
    gigabit = wd / "results" / "predictions" / "cpu" / "LeNet5" / "1Gbps.parquet"
    before = gigabit.stat().st_mtime_ns
    args = ("--cores", "2", "--configfile", "capture.yaml")
    dry = snakemake(wd, *args, "-n")
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out[-3000:]
    assert "rule capture_joins:" in out and "rule profile:" not in out
    r = snakemake(wd, *args)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    path = "results/joins/cpu/LeNet5/100Mbps.json"
    joins = json.loads((wd / path).read_text())
    assert joins["status"] == "ok" and joins["method"] == "skeleton capture"
    assert joins["network"] == {
        "bandwidth_bps": 2e8,
        "queue": "fifo",
        "buffer_bytes": 62_500,
        "mtu": 9000,  # validation's
        "congestion_control": None,
    }
    assert joins["draw"] == "joins"  # through a FIFO the measured joins themselves
    assert sorted(joins["joins_at"]) == ["2", "4"]  # every grid N >= 2 up to 4
    # a lone pull ran at the capture's emulated rate (25 MB/s, headers counted)
    assert 0.8 * 25e6 < joins["saturated_Bps"] < 1.2 * 25e6
    con = duckdb.connect(str(wd / "results" / "sgdsim.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT network, workers, joins_path, steps_per_s FROM predictions "
        "WHERE mode = 'async' AND policy = 'tf_default' ORDER BY network, workers"
    ).fetchall()
    old = duckdb.connect(str(tiny_run / "results" / "sgdsim.duckdb"), read_only=True)
    bare = dict(
        ((n, w), s)
        for n, w, s in old.execute(
            "SELECT network, workers, steps_per_s FROM predictions "
            "WHERE mode = 'async' AND policy = 'tf_default'"
        ).fetchall()
    )
    for network, workers, used, rate in rows:
        if network == "100Mbps" and workers > 1:
            assert used == path
        else:  # one worker joins no one; the other network names no joins
            assert used is None and rate == bare[(network, workers)]
    assert gigabit.stat().st_mtime_ns == before  # its simulate job did not run again
    assert "Nothing to be done" in snakemake(wd, *args, "-n").stdout
    # another port or capture rate is another capture: the rule runs again
    for change in ({"buffer_bytes": 125_000}, {"joins_bandwidth_bps": 1e8}):
        other = tiny_config()
        other["networks"][0] |= {**dict(cfg["networks"][0]), **change}
        (wd / "other.yaml").write_text(yaml.safe_dump(other))
        again = snakemake(wd, "--cores", "2", "--configfile", "other.yaml", "-n")
        out = again.stdout + again.stderr
        assert again.returncode == 0 and "rule capture_joins:" in out, (change, out[-2000:])
