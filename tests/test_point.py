"""One way to predict a point: the config's defaults, SimParams and predict_point."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from click.testing import CliRunner

from sgdsim.cli import main
from sgdsim.config import check_config, defaults, schema, with_defaults
from sgdsim.errors import ConfigError
from sgdsim.pipeline.grid import chrome_trace_stage, simulate_stage
from sgdsim.simulation import POLICIES, Workload
from sgdsim.simulation.point import SimParams, grid_network, predict_point


def _workload(tmp_path: Path) -> str:
    rng = np.random.default_rng(3)
    w = Workload(
        seg_dur_s=rng.uniform(1e-3, 1e-2, 6),
        pull_bytes=rng.uniform(1e4, 4e5, 7),
        pull_gate=rng.integers(0, 6, 7),
        push_bytes=rng.uniform(1e4, 4e5, 5),
        push_seg=rng.integers(2, 6, 5),
        push_update_s=rng.uniform(0, 1e-3, 5),
        pull_start_s=0.002,
        overhead_s=0.003,
        rpc_rtt_s=4e-4,
        batch_size=8,
    )
    path = tmp_path / "w.json"
    w.save(str(path))
    return str(path)


CONFIG = {
    "seed": 7,
    "models": [{"name": "LeNet5"}],
    "hardware": [{"name": "cpu"}],
    "networks": [{"name": "n", "bandwidth_bps": 2e8, "latency_s": 2e-4}],
    "simulation": {"steps_per_worker": 9, "warmup_steps": 2, "replications": 3},
}
WILDCARDS = {"hardware": "cpu", "model": "LeNet5", "network": "n", "mode": "async", "workers": "3"}


@pytest.mark.parametrize("policy", ["tf_default", "tictac"])
def test_cli_predict_gives_the_pipelines_figures_for_the_same_point(tmp_path, policy):
    workload = _workload(tmp_path)
    out = tmp_path / "p.parquet"
    config = {**CONFIG, "workers": [1, 3], "policies": [policy]}
    simulate_stage(config, workload, str(out), WILDCARDS)
    rows = pl.read_parquet(out)
    assert rows.height == 2  # the batch: every N of the grid
    row = rows.filter(pl.col("workers") == 3).row(0, named=True)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    args = ["predict", "--workload", workload, "--configfile", str(cfg), "-b", "2e8"]
    args += ["--latency-s", "2e-4", "-n", "3", "--policy", policy, "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    cli = json.loads(r.output.strip().splitlines()[-1])
    for key in ("steps_per_s", "sim_steps_per_s", "mean_step_s", "pull_gap_s", "replications"):
        assert cli[key] == row[key], key
    assert row["replications"] == 3 and row["pull_gap_s"] == pytest.approx(4e-4 + 2 * 2e-4)


def test_grid_predicts_async_points_by_the_steady_rule_and_publishes_its_estimate(tmp_path):
    """simulation.protocol steady (the default): an async point with N > 1 runs until
    the config's rule decides and records its estimate; N = 1 and sync_ps run the
    configured steps; protocol steps gives the fixed-step figure; the store keeps it."""
    import duckdb

    from sgdsim.pipeline.grid import publish_stage

    workload = _workload(tmp_path)
    rule = {"min_steps": 50, "batches": 12, "settle_s": 0.5}
    sim = CONFIG["simulation"] | {"steady": rule}
    config = {**CONFIG, "workers": [1, 3], "modes": ["async", "sync_ps"], "simulation": sim}
    out, again = tmp_path / "p.parquet", tmp_path / "again.parquet"
    simulate_stage(config, workload, str(out), WILDCARDS)
    simulate_stage(config, workload, str(again), WILDCARDS)
    rows = pl.read_parquet(out)
    # same inputs and seed, same rows (but the simulator's own wall time)
    assert rows.drop("sim_wall_s").equals(pl.read_parquet(again).drop("sim_wall_s"))
    by = {(r["mode"], r["workers"]): r for r in rows.iter_rows(named=True)}
    steady = by["async", 3]
    assert steady["protocol"] == "steady" and steady["replications"] == 3
    # the config's rule, not the schema's: 12 batches, 50 steps per worker at least
    assert len(steady["steps_per_s_windows"]) == 12
    first = sum(steady["steps_per_s_windows"]) / 12  # the first run's estimate
    assert first * steady["window_s"] >= 3 * 50
    assert steady["converged"] is True and steady["rel_half_width"] <= 0.03
    assert steady["steps_per_worker"] > sim["steps_per_worker"]
    for key in ("async", 1), ("sync_ps", 1), ("sync_ps", 3):
        r = by[key]
        assert r["protocol"] == "steps" and r["window_s"] is None, key
        assert r["steps_per_worker"] == sim["steps_per_worker"], key
    # protocol steps: the fixed-step figure of the same point
    steps = tmp_path / "steps.parquet"
    simulate_stage(
        {**config, "simulation": sim | {"protocol": "steps"}}, workload, str(steps), WILDCARDS
    )
    fixed = pl.read_parquet(steps).filter(mode="async", workers=3).row(0, named=True)
    params = SimParams.from_config(with_defaults(config))
    net = grid_network(2e8, 2e-4)
    want = predict_point(Workload.load(workload), net, 3, "tf_default", params)
    assert fixed["protocol"] == "steps" and fixed["steps_per_s"] == want["steps_per_s"]
    assert fixed["steps_per_s"] != steady["steps_per_s"]
    db = tmp_path / "sgdsim.duckdb"
    publish_stage(str(db), [], [str(out)], config)
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(
            "SELECT protocol, converged, window_s, len(steps_per_s_windows) FROM predictions "
            "WHERE mode = 'async' AND workers = 3"
        ).fetchone()
    finally:
        con.close()
    assert got == ("steady", True, steady["window_s"], 12)


def test_cli_predict_defaults_are_the_schemas(tmp_path):
    workload = _workload(tmp_path)

    def predict(*args: str) -> dict:
        r = CliRunner().invoke(main, ["predict", "--workload", workload, "--json", *args])
        assert r.exit_code == 0, r.output
        return json.loads(r.output.strip())

    sim = schema()["properties"]["simulation"]["properties"]
    rule = schema()["$defs"]["steady_rule"]["properties"]
    steady, steps = predict("-n", "2"), predict("-n", "2", "--protocol", "steps")
    assert sim["protocol"]["default"] == "steady" == steady["protocol"]
    # the schema's rule decided: converged within its half-width, after its min_steps
    assert steady["converged"] is True
    assert steady["rel_half_width"] <= rule["rel_half_width"]["default"]
    assert steady["window_s"] >= rule["check_every_s"]["default"]
    assert steady["steps_per_worker"] > rule["min_steps"]["default"]
    assert steps["protocol"] == "steps" and "window_s" not in steps
    assert steps["steps_per_worker"] == sim["steps_per_worker"]["default"]
    for row in (steady, steps):
        assert row["replications"] == sim["replications"]["default"]
        assert row["seed"] == schema()["properties"]["seed"]["default"]
    # the table says how the long run was scored at N = 2, nothing at N = 1
    r = CliRunner().invoke(main, ["predict", "--workload", workload, "-n", "1", "-n", "2"])
    assert r.exit_code == 0, r.output
    lines = {int(x.split("|")[2]): x for x in r.output.splitlines() if x.startswith("| 1e+09")}
    assert "long run" in r.output.splitlines()[0]
    assert lines[1].rstrip().endswith("|  |")
    assert f"± {100 * steady['rel_half_width']:.1f} % after {steady['window_s']:.0f} s" in lines[2]


def test_cli_predict_refuses_out_of_range_options_in_the_users_units(tmp_path):
    workload = _workload(tmp_path)
    for bad in (["-b", "-5"], ["-n", "100000"], ["--steps", "1"]):
        r = CliRunner().invoke(main, ["predict", "--workload", workload, *bad])
        assert r.exit_code != 0
        assert "Traceback" not in r.output and bad[1] in r.output, r.output


def _joins_file(path: Path, bandwidth_bps: float = 2e8) -> Path:
    """A joins JSON as sgdsim calibrate-joins writes it: at N = 2 every join 50 ms
    late and each direction at half its rate while the other carries data; at
    N = 4 joins on time and directions independent."""

    def at(n: int, delay_s: float) -> dict:
        row = {"workers": n, "draw": "gamma", "steps_per_s": 1.0}
        for name in ("push", "pull"):
            row |= {
                f"{name}_join_delay_s": [delay_s] * (n - 1),
                f"{name}_join_sd_s": [0.0] * (n - 1),
                f"{name}_join_growth_s": {"1": [delay_s] * 5},
            }
        return row

    joins = {
        "status": "ok",
        "method": "skeleton capture",
        "network": {"bandwidth_bps": bandwidth_bps, "queue": "fifo", "mtu": 1500},
        "joins_at": {"2": at(2, 0.05), "4": at(4, 0.0)},
        "two_way_share": {"2": [0.5, 0.5], "4": [1.0, 1.0]},
    }
    path.write_text(json.dumps(joins))
    return path


def test_a_grid_network_takes_the_joins_it_names_as_predict_joins_does(tmp_path):
    """networks[].joins: the async points with N > 1 of every model take the file's
    joins at N (the one named for the model), as sgdsim predict --joins predicts
    them; a missing file or one of another rate is one line naming the entry."""
    workload = _workload(tmp_path)
    _joins_file(tmp_path / "LeNet5.joins.json")
    net = {"name": "n", "bandwidth_bps": 2e8, "latency_s": 2e-4}
    joined = {**net, "joins": str(tmp_path / "{model}.joins.json")}
    config = {**CONFIG, "workers": [1, 2], "networks": [joined]}
    out, bare_out = tmp_path / "p.parquet", tmp_path / "bare.parquet"
    simulate_stage(config, workload, str(out), WILDCARDS)
    simulate_stage({**config, "networks": [net]}, workload, str(bare_out), WILDCARDS)
    rows = {r["workers"]: r for r in pl.read_parquet(out).iter_rows(named=True)}
    bare = {r["workers"]: r for r in pl.read_parquet(bare_out).iter_rows(named=True)}
    assert rows[2]["joins_path"] == str(tmp_path / "LeNet5.joins.json")
    assert rows[1]["joins_path"] is None and bare[2]["joins_path"] is None
    assert rows[1]["steps_per_s"] == bare[1]["steps_per_s"]  # one worker joins no one
    # late joins and a two-way share of a half slow the network-bound pair down
    assert rows[2]["steps_per_s"] < 0.97 * bare[2]["steps_per_s"]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({**config, "networks": [net]}))
    args = ["predict", "--workload", workload, "--configfile", str(cfg), "-n", "2", "--json"]
    args += ["--latency-s", "2e-4", "--joins", str(tmp_path / "LeNet5.joins.json")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip())["steps_per_s"] == rows[2]["steps_per_s"]
    # a file missing for a model, and one captured at another rate
    other = {**config, "models": [{"name": "LeNet5"}, {"name": "MobileNetV2"}]}
    with pytest.raises(
        ConfigError, match=r"networks\[0\]\.joins \(n\): .*MobileNetV2\.joins\.json"
    ):
        check_config(other)
    _joins_file(tmp_path / "LeNet5.joins.json", bandwidth_bps=1e9)
    with pytest.raises(ConfigError, match=r"networks\[0\]\.joins .*captured at 1e\+09 bit/s"):
        simulate_stage(config, workload, str(out), WILDCARDS)
    # ... unless the entry says it takes joins captured at that rate
    at_1g = {**joined, "joins_bandwidth_bps": 1e9}
    simulate_stage({**config, "networks": [at_1g]}, workload, str(out), WILDCARDS)
    moved = {r["workers"]: r for r in pl.read_parquet(out).iter_rows(named=True)}
    assert moved[2]["joins_path"] == str(tmp_path / "LeNet5.joins.json")
    assert (moved[2]["joins_bandwidth_bps"], rows[2]["joins_bandwidth_bps"]) == (1e9, 2e8)
    assert moved[1]["joins_bandwidth_bps"] is None  # one worker takes no joins
    assert moved[2]["steps_per_s"] == pytest.approx(rows[2]["steps_per_s"])  # same joins
    with pytest.raises(ConfigError, match=r"joins_bandwidth_bps 2e\+08 bit/s"):
        simulate_stage(
            {**config, "networks": [{**at_1g, "joins_bandwidth_bps": 2e8}]},
            workload,
            str(out),
            WILDCARDS,
        )
    with pytest.raises(ConfigError, match=r"networks\[0\]\.joins_bandwidth_bps \(n\).*set joins"):
        check_config({**config, "networks": [{**net, "joins_bandwidth_bps": 1e9}]})


def test_cli_predict_takes_captured_joins_at_each_n_and_refuses_a_file_that_does_not_fit(
    tmp_path,
):
    workload = _workload(tmp_path)
    path = _joins_file(tmp_path / "joins.json")

    def steps(*args: str) -> dict[int, float]:
        r = CliRunner().invoke(main, ["predict", "--workload", workload, "--json", *args])
        assert r.exit_code == 0, r.output
        rows = [json.loads(line) for line in r.output.splitlines()]
        assert {x["bandwidth_bps"] for x in rows} == {2e8}  # the capture's rate
        return {x["workers"]: x["steps_per_s"] for x in rows}

    bare = steps("-b", "2e8", "-n", "2", "-n", "4")
    joined = steps("--joins", str(path), "-n", "2", "-n", "4")
    # N = 2 (network-bound): late joins and a two-way share of a half slow it down;
    # N = 4 takes its own capture, whose joins are on time and directions independent
    assert joined[2] < 0.97 * bare[2]
    assert joined[4] == pytest.approx(bare[4])
    # N = 3 was not captured: it takes the nearest capture, the larger on a tie (N = 4's)
    three = steps("--joins", str(path), "-n", "3")[3]
    assert three == pytest.approx(steps("-b", "2e8", "-n", "3")[3])
    # a rate the joins were not captured at, a preset, another mode, a file without joins:
    # one line each
    # --joins-other-rates takes them at another rate too: the same joins, another link
    args = ["--json", "--joins", str(path), "--joins-other-rates", "-b", "1e8", "-n", "2"]
    r = CliRunner().invoke(main, ["predict", "--workload", workload, *args])
    assert r.exit_code == 0, r.output
    slow = json.loads(r.output.strip())
    assert slow["bandwidth_bps"] == 1e8 and slow["steps_per_s"] < 0.9 * joined[2]
    for args, said in (
        (["--joins", str(path), "-b", "1e9"], "captured at 2e+08 bit/s"),
        (["--joins", str(path), "--mode", "sync_ps"], "not to mode sync_ps"),
        (["--joins", str(path), "-p", "10gbe"], "give it with -b, not a preset"),
        (["-b", "1e9", "--joins-other-rates"], "needs --joins"),
    ):
        r = CliRunner().invoke(main, ["predict", "--workload", workload, *args])
        assert r.exit_code == 2 and said in r.output, r.output
    path.write_text(json.dumps({"status": "skipped", "reason": "no root"}))
    r = CliRunner().invoke(main, ["predict", "--workload", workload, "--joins", str(path)])
    assert r.exit_code == 2 and "write it with sgdsim calibrate-joins" in r.output, r.output


def test_chrome_trace_is_of_the_point_the_grid_predicts(tmp_path):
    workload = _workload(tmp_path)
    cfg = with_defaults(CONFIG)
    cfg["simulation"]["chrome_traces"] = [
        {"model": "LeNet5", "hardware": "cpu", "network": "n", "workers": 3, "policy": "tictac"}
    ]
    out = tmp_path / "t.json"
    chrome_trace_stage(cfg, workload, str(out), {**WILDCARDS, "policy": "tictac"})
    trace = json.loads(out.read_text())
    steps = with_defaults(cfg)["simulation"]["chrome_traces"][0]["steps"]
    params = SimParams.from_config(cfg, steps_per_worker=steps + 1, warmup_steps=1, replications=1)
    untraced = predict_point(Workload.load(workload), grid_network(2e8, 2e-4), 3, "tictac", params)
    meta = trace["otherData"]
    assert meta["steps_per_s"] == pytest.approx(untraced["steps_per_s"], rel=1e-9)
    # the enforced order's round trip separates a worker's pulls in the trace too
    pulls = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "pull" and e["pid"] == 1
    )
    assert pulls, "no pulls of worker 0 in the trace"
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(pulls)]
    assert max(gaps) >= untraced["pull_gap_s"] * 1e6 * 0.99


def test_schema_policy_enum_is_the_registry():
    items = schema()["properties"]["policies"]["items"]
    assert tuple(items["enum"]) == POLICIES


def test_defaults_fill_nested_entries_and_errors_name_the_key():
    cfg = with_defaults(CONFIG)
    net = schema()["properties"]["networks"]["items"]["properties"]
    assert (
        cfg["hardware"][0]["ps_tasks"]
        == schema()["properties"]["hardware"]["items"]["properties"]["ps_tasks"]["default"]
    )
    assert "latency_s" in cfg["networks"][0] and "latency_s" in net
    assert CONFIG["hardware"] == [{"name": "cpu"}]  # the input is not changed
    with pytest.raises(ConfigError, match=r"simulation.replications"):
        with_defaults({**CONFIG, "simulation": {"replications": 0}})
    sim = schema()["properties"]["simulation"]["properties"]
    assert SimParams.from_config(defaults()).warmup_steps == sim["warmup_steps"]["default"]


@pytest.mark.parametrize(("policy", "workers", "bandwidth_bps"), [
    ("tf_default", 2, 1e8), ("tf_default", 6, 1e8), ("tictac", 4, 1e9), ("p3", 3, 3e8),
])  # fmt: skip
def test_phase_band_holds_every_phasing_below_its_upper_end(
    tmp_path, policy, workers, bandwidth_bps
):
    """The band's upper end bounds every phasing: no run from random start phases is
    faster (within 1 %: a finite run's window estimate), and it is at most N times one
    worker's rate and the PS NIC's capacity over the bytes of a step."""
    workload = Workload.load(_workload(tmp_path))
    network = grid_network(bandwidth_bps, 1e-4)
    sim = {**CONFIG["simulation"], "steps_per_worker": 60, "replications": 1, "phase_band": True}
    params = SimParams.from_config(with_defaults({**CONFIG, "simulation": sim}))
    row = predict_point(workload, network, workers, policy, params)
    lo, v, hi = row["steps_per_s_lo"], row["steps_per_s"], row["steps_per_s_hi"]
    assert lo <= v <= hi
    link = network.bandwidth_Bps / max(workload.pull_bytes.sum(), workload.push_bytes.sum())
    alone = predict_point(workload, network, 1, policy, params)["steps_per_s"]
    assert hi <= max(min(link, workers * alone), v) * (1 + 1e-9)
    rng = np.random.default_rng(11)
    for _ in range(6):
        offsets = rng.uniform(0, 1 / alone, (1, workers)).tolist()
        x = predict_point(workload, network, workers, policy, params, start_offsets_s=offsets)
        assert x["sim_steps_per_s"] <= hi * 1.01


@pytest.mark.parametrize("workers", [2, 5])
def test_lockstep_is_the_run_of_workers_started_together_on_a_fair_ps(tmp_path, workers):
    """With no PS update queue to tell them apart, N tf_default workers started at once
    stay in lockstep: their simulated rate is the single-worker lockstep figure."""
    from sgdsim.simulation.async_ps import simulate_async
    from sgdsim.simulation.point import _sim_kwargs, lockstep_steps_per_s

    w = Workload.load(_workload(tmp_path))
    workload = dataclasses.replace(w, push_update_s=np.zeros_like(w.push_update_s))
    network = grid_network(1e8, 1e-4)
    params = SimParams.from_config(with_defaults(CONFIG))
    kw = _sim_kwargs(workload, network, "tf_default", params, "async")
    steps, warm = params.steps_per_worker, params.warmup_steps
    log: list[list[float]] = []
    simulate_async(
        workload, network, workers, steps, warm, start_offsets_s=[0.0] * workers, step_log=log,
        **kw,
    )  # fmt: skip
    # each worker's own rate (the common window's count is ±1 step on simultaneous ends)
    together = sum((steps - warm) / (e[-1] - e[warm - 1]) for e in log)
    assert max(e[-1] for e in log) - min(e[-1] for e in log) < 1e-9  # they kept together
    lock = lockstep_steps_per_s(workload, network, workers, params, kw, 1.0)
    assert lock == pytest.approx(together, rel=1e-9)
    alone = simulate_async(workload, network, 1, steps, warm, start_offsets_s=[0.0], **kw)
    assert lock < workers * alone.steps_per_s  # sharing the PS NIC costs the lockstep


def test_a_steady_prediction_replays_the_start_phases_it_is_given(tmp_path):
    """Under the steady rule, ``start_offsets_s`` replaces the seeded starts (one
    run per row): all-zero offsets give the figure of ``start_window_s: 0``."""
    from sgdsim.protocol import SteadyRule

    w = Workload.load(_workload(tmp_path))
    workload = dataclasses.replace(w, push_update_s=np.zeros_like(w.push_update_s))
    network = grid_network(1e8, 1e-4)
    sim = {**CONFIG["simulation"], "phase_band": False}
    rule = SteadyRule(warmup_steps=2, settle_s=1.0, min_steps=20, max_s=60)
    together = SimParams.from_config(
        with_defaults({**CONFIG, "simulation": sim | {"start_window_s": 0}})
    )
    spread = SimParams.from_config(with_defaults({**CONFIG, "simulation": sim}))
    a = predict_point(workload, network, 3, "tf_default", together, steady=rule)
    b = predict_point(workload, network, 3, "tf_default", spread, steady=rule)
    replay = predict_point(
        workload, network, 3, "tf_default", spread, steady=rule, start_offsets_s=[[0.0] * 3]
    )
    assert replay["replications"] == 1 and b["replications"] == spread.replications > 1
    assert replay["steps_per_s"] == pytest.approx(a["steps_per_s"], rel=1e-12)
    assert b["steps_per_s"] > a["steps_per_s"] * 1.05


def test_a_job_started_together_is_predicted_in_lockstep_and_records_its_start(tmp_path):
    """simulation.start_window_s: 0 starts every worker with the first (the figures of
    workers started at one instant, which keep together on a fair PS without update
    queue); null (independent launches) draws the starts over a step and predicts
    faster."""
    w = Workload.load(_workload(tmp_path))
    workload = dataclasses.replace(w, push_update_s=np.zeros_like(w.push_update_s))
    network = grid_network(1e8, 1e-4)
    sim = {**CONFIG["simulation"], "steps_per_worker": 40, "phase_band": False}
    together = SimParams.from_config(
        with_defaults({**CONFIG, "simulation": sim | {"start_window_s": 0}})
    )
    spread = SimParams.from_config(with_defaults({**CONFIG, "simulation": sim}))
    assert (together.start_window_s, spread.start_window_s) == (0.0, None)
    a = predict_point(workload, network, 3, "tf_default", together)
    b = predict_point(workload, network, 3, "tf_default", spread)
    assert (a["start_window_s"], b["start_window_s"]) == (0.0, None)
    at_once = predict_point(
        workload, network, 3, "tf_default", spread, start_offsets_s=[[0.0] * 3] * 3
    )
    assert a["steps_per_s"] == at_once["steps_per_s"]
    assert b["steps_per_s"] > a["steps_per_s"] * 1.05
    # the CLI's option gives the config's figure (over the same steps)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({**CONFIG, "simulation": sim}))
    path = tmp_path / "flat.json"
    workload.save(str(path))
    args = ["predict", "--workload", str(path), "--configfile", str(cfg), "-b", "1e8"]
    args += ["--latency-s", "1e-4", "-n", "3", "--start-window-s", "0", "--json"]
    args += ["--protocol", "steps"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    cli = json.loads(r.output.strip().splitlines()[-1])
    assert cli["start_window_s"] == 0.0 and cli["steps_per_s"] == a["steps_per_s"]


def test_step_jitter_is_a_config_switch_of_async_points_only(tmp_path):
    """``simulation.step_jitter`` reaches the async runs (off by default) and moves
    workers started together out of lockstep; the synchronous modes take no such
    argument."""
    from sgdsim.simulation.point import _sim_kwargs

    w = Workload.load(_workload(tmp_path))
    workload = dataclasses.replace(w, step_scale=np.array([0.9, 1.0, 1.1]))
    network = grid_network(1e8, 1e-4)
    off = SimParams.from_config(with_defaults(CONFIG))
    on = SimParams.from_config(
        with_defaults({**CONFIG, "simulation": {**CONFIG["simulation"], "step_jitter": True}})
    )
    assert (off.step_jitter, on.step_jitter) == (False, True)
    assert _sim_kwargs(workload, network, "tf_default", on, "async")["step_jitter"] is True
    assert "step_jitter" not in _sim_kwargs(workload, network, "tf_default", on, "sync_ps")
    rows = [
        predict_point(workload, network, 3, "tf_default", p, start_offsets_s=[[0.0] * 3])
        for p in (off, on)
    ]
    assert rows[0]["steps_per_s"] != rows[1]["steps_per_s"]


def test_a_steady_pair_records_its_simulated_step_at_every_phase(tmp_path):
    """``steps_per_s_by_phase``: the pair run from every start phase. Started together
    it stays in lockstep (bin 0.0–0.1 is the lockstep figure); half a step apart on a
    network-bound step it takes turns at the PS NIC, faster, and no bin beats the
    band's upper end. Other worker counts get no such column."""
    from sgdsim.protocol import PHASE_BINS, SteadyRule
    from sgdsim.simulation.point import _sim_kwargs, lockstep_steps_per_s

    w = Workload.load(_workload(tmp_path))
    workload = dataclasses.replace(w, push_update_s=np.zeros_like(w.push_update_s))
    network = grid_network(1e8, 1e-4)
    sim = {**CONFIG["simulation"], "steps_per_worker": 30, "replications": 1}
    params = SimParams.from_config(with_defaults({**CONFIG, "simulation": sim}))
    rule = SteadyRule(warmup_steps=2, settle_s=1.0, min_steps=20, max_s=60)
    row = predict_point(workload, network, 2, "tf_default", params, steady=rule)
    rates = row["steps_per_s_by_phase"]
    assert len(rates) == PHASE_BINS
    kw = _sim_kwargs(workload, network, "tf_default", params, "async")
    lock = lockstep_steps_per_s(workload, network, 2, params, kw, 1.0)
    assert rates[0] == pytest.approx(lock, rel=0.02)
    assert rates[-1] > 1.3 * rates[0]
    assert max(x for x in rates if x is not None) <= row["steps_per_s_hi"] * 1.01
    three = predict_point(workload, network, 3, "tf_default", params, steady=rule)
    assert "steps_per_s_by_phase" not in three


def test_capture_workers_of_the_grid_are_its_n_from_2_up_to_4():
    from sgdsim.pipeline.grid import capture_workers_grid

    assert capture_workers_grid({"workers": [1, 2, 4, 8, 16]}) == [2, 4]
    assert capture_workers_grid({"workers": [3, 64]}) == [3, 4]
    assert capture_workers_grid({"workers": [8, 16]}) == [4]
    assert capture_workers_grid({"workers": [1]}) == []


def _capture_config() -> dict:
    net = {"name": "n", "bandwidth_bps": 2e8, "latency_s": 2e-4, "joins": "capture"}
    return {**CONFIG, "workers": [1, 2], "networks": [net]}


def test_joins_capture_names_the_rule_s_file_and_needs_no_file_beforehand():
    from sgdsim.pipeline.grid import joins_path

    cfg = _capture_config()
    check_config(cfg)  # the capture writes the file; nothing to find before the run
    assert joins_path(cfg, "n", "LeNet5", "cpu") == "results/joins/cpu/LeNet5/n.json"
    # a grid without async points with N > 1 takes no joins, so captures none
    assert joins_path({**cfg, "workers": [1]}, "n", "LeNet5", "cpu") is None
    assert joins_path({**cfg, "modes": ["allreduce"]}, "n", "LeNet5", "cpu") is None


def test_a_port_described_without_joins_capture_is_refused():
    cfg = _capture_config()
    cfg["networks"][0] |= {"joins": None, "queue": "fifo"}
    with pytest.raises(ConfigError, match=r"networks\[0\]\.queue \(n\).*set joins: capture"):
        check_config(cfg)
    cfg["networks"][0]["joins"] = "capture"
    check_config(cfg)


def test_joins_capture_without_the_testbed_stops_with_one_line(monkeypatch, tmp_path):
    import sgdsim.testbed
    from sgdsim.pipeline.grid import capture_joins_stage

    monkeypatch.setattr(sgdsim.testbed, "check_available", lambda: "no root here")
    out = tmp_path / "joins.json"
    with pytest.raises(ConfigError) as e:
        capture_joins_stage(_capture_config(), "unused.json", str(out), "n", "cpu", "LeNet5")
    msg = str(e.value)
    assert "networks[0].joins" in msg and "no root here" in msg and "\n" not in msg
    assert not out.exists()
