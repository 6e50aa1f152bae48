"""Measured validation of the synchronous modes: sync_ps and allreduce on real TensorFlow."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from test_testbed import child_processes, namespaces, testbed_ok

from sgdsim.testbed.sync import episode_measured, stop_count
from sgdsim.testbed.worker import stop_reached

pytestmark = pytest.mark.alone  # measures or times: `make test` runs it by itself (Makefile)

__all__ = ["testbed_ok"]  # the fixture, used by name

LENET = {"name": "LeNet5", "batch_size": 8, "image_size": 32, "classes": 10}


def lenet_config(**validation: Any) -> dict[str, Any]:
    """A config measuring LeNet5 on one emulated 100 Mbit/s network."""
    return {
        "seed": 3,
        "models": [LENET],
        "hardware": [{"name": "cpu", "intra_op_threads": 1, "inter_op_threads": 1}],
        "networks": [{"name": "1Gbps", "bandwidth_bps": 1e9}],
        "profile": {"warmup_steps": 2, "timed_steps": 3, "timeout_s": 300},
        "validation": {
            "hardware": "cpu",
            "duration_s": 2,
            "warmup_s": 0.5,
            "min_steps": 3,
            "networks": [{"name": "100Mbps", "bandwidth_bps": 1e8}],
            "points": [{"model": "LeNet5", "workers": [1, 2], "modes": ["sync_ps", "allreduce"]}],
            **validation,
        },
    }


def lenet_workload(compute_s: float = 0.02) -> Any:
    """Two compute segments, LeNet5's 0.25 MB of parameters as two tensors."""
    from sgdsim.simulation import Workload

    return Workload(
        seg_dur_s=np.array([0.4 * compute_s, 0.6 * compute_s]),
        pull_bytes=np.array([1.5e5, 1e5]),
        pull_gate=np.array([0, 1]),
        push_bytes=np.array([1e5, 1.5e5]),
        push_seg=np.array([0, 1]),
        push_update_s=np.array([1e-4, 1e-4]),
        overhead_s=0.003,
        pull_start_s=0.001,
        batch_size=8,
    )


def point(mode: str, workers: int) -> dict[str, str]:
    """The wildcards of a LeNet5 point on 100Mbps (an allreduce point's policy is its fusion)."""
    from sgdsim.config import TESTBED_FUSION

    policy = TESTBED_FUSION if mode == "allreduce" else "tf_default"
    return {
        "hardware": "cpu", "model": "LeNet5", "network": "100Mbps", "mode": mode,
        "policy": policy, "workers": str(workers),
    }  # fmt: skip


# ------------------------------------------------------------------ config


def test_points_expand_modes_and_allreduce_takes_the_testbed_fusion():
    from sgdsim.config import TESTBED_FUSION, validation_points

    cfg = {
        "validation": {
            "networks": [{"name": "a", "bandwidth_bps": 1e8}],
            "points": [
                {"model": "M", "workers": [1, 2], "policies": ["tf_default", "tictac"]},
                {"model": "M", "workers": [2], "modes": ["sync_ps", "allreduce"]},
                {"model": "M", "workers": [2], "modes": ["allreduce"], "policies": ["tictac"]},
            ],
        }
    }
    pts = {(p["mode"], p["policy"], p["workers"]) for p in validation_points(cfg)}
    assert TESTBED_FUSION == "single"
    assert pts == {
        ("async", "tf_default", 1),
        ("async", "tf_default", 2),
        ("async", "tictac", 1),
        ("async", "tictac", 2),
        ("sync_ps", "tf_default", 2),
        ("allreduce", "single", 2),  # once: the third entry names no new point
    }
    assert len(validation_points(cfg)) == len(pts)


def test_schema_accepts_modes_and_refuses_unknown_ones():
    from sgdsim.config import with_defaults
    from sgdsim.errors import ConfigError

    cfg = lenet_config()
    out = with_defaults(cfg)
    assert out["validation"]["points"][0]["modes"] == ["sync_ps", "allreduce"]
    cfg["validation"]["points"] = [{"model": "LeNet5", "workers": [1]}]
    assert with_defaults(cfg)["validation"]["points"][0]["modes"] == ["async"]
    cfg["validation"]["points"][0]["modes"] = ["ring"]
    with pytest.raises(ConfigError, match=r"validation\.points\[0\]\.modes"):
        with_defaults(cfg)


# ------------------------------------------------------- lockstep stop rule


def test_episode_is_measured_once_every_worker_covered_the_window():
    # warm-up: 2 steps; window from 0.5 s after the last worker's 2nd step (1.0 + 0.5)
    a = [0.5, 1.0, 1.6, 2.0, 2.4, 2.8, 3.2, 3.6]
    b = [0.5, 0.9, 1.6, 2.0, 2.4, 2.8, 3.2]
    assert not episode_measured([a, b], 0.5, 2, 2.0, 3)  # b ends at 3.2 < 1.5 + 2.0
    assert episode_measured([a, [*b, 3.6]], 0.5, 2, 2.0, 3)
    # but not before min_steps steps of every worker are in the window
    assert not episode_measured([a, [*b, 3.6]], 0.5, 2, 2.0, 7)
    assert not episode_measured([a, []], 0.5, 2, 2.0, 0)  # a worker still warming up


def test_stop_count_leaves_a_second_of_steps_beyond_the_furthest_worker():
    ends = [[0.1 * k for k in range(1, 21)], [0.1 * k for k in range(1, 20)]]
    assert stop_count(ends) == 20 + 10 + 2  # 0.1 s steps: 10 in the second of slack
    assert stop_count([[1.0], [1.2]]) == 1 + 1 + 2  # no step time known yet: one step


def test_stop_file_holding_a_count_stops_at_that_step(tmp_path: Path):
    stop = tmp_path / "stop"
    assert not stop_reached(stop, 100) and not stop_reached(None, 100)
    stop.write_text("12\n")
    assert not stop_reached(stop, 11) and stop_reached(stop, 12) and stop_reached(stop, 13)
    stop.write_text("stop\n")  # the steady protocol's immediate stop
    assert stop_reached(stop, 1)


# ----------------------------------------------------------- sync-path step


def test_sync_path_workload_puts_the_measured_step_in_the_compute():
    from sgdsim.pipeline.validation import sync_path_workload

    w = lenet_workload(0.02)
    s = sync_path_workload(w, {"step_s": 0.05, "cpu_s": 0.07})
    assert float(s.seg_dur_s.sum()) == pytest.approx(0.05, rel=1e-12)
    # when each gradient is produced, relative to the step, is kept
    assert s.seg_dur_s[0] / s.seg_dur_s.sum() == pytest.approx(0.4, rel=1e-12)
    assert (s.overhead_s, s.pull_start_s, s.worker_cpu_s, s.ps_cpu_s) == (0.0, 0.0, 0.07, 0.0)
    assert list(s.push_update_s) == [0.0, 0.0]  # the measured step applies the update
    assert s.meta["profile_compute_s"] == pytest.approx(0.02)
    assert list(s.push_bytes) == list(w.push_bytes)
    with pytest.raises(ValueError, match="step time"):
        sync_path_workload(w, {"step_s": 0.0, "cpu_s": 0.0})


# ------------------------------------------------------- store and report


def _measurement(mode: str | None, workers: int, rate: float) -> dict[str, Any]:
    row = {
        "model": "LeNet5", "hardware": "cpu", "network": "100Mbps", "bandwidth_bps": 1e8,
        "latency_s": 0.0, "policy": "single" if mode == "allreduce" else "tf_default",
        "workers": workers, "batch_size": 8, "duration_s": 2.0, "warmup_s": 0.5,
        "status": "ok", "reason": "", "loopback": False, "steps_per_s": rate,
        "steps_per_s_std": 0.0, "cpu_busy": 0.5, "cpu_steal": 0.0,
    }  # fmt: skip
    if mode is not None:  # None: a shard written before measurements had a mode
        row["mode"] = mode
    return row


def _prediction(mode: str | None, workers: int, rate: float) -> dict[str, Any]:
    zeros = (
        "mean_step_s", "ps_down_util", "ps_up_util", "blocked_fraction", "sim_time_s",
        "bytes_pulled", "bytes_pushed", "sim_wall_s", "steps_per_s_std",
    )  # fmt: skip
    row: dict[str, Any] = {
        "model": "LeNet5", "hardware": "cpu", "network": "100Mbps", "bandwidth_bps": 1e8,
        "predicted_bandwidth_Bps": 1.2e7, "batch_size": 8, "workers": workers,
        "workers_per_node": workers, "steps_per_worker": 10, "warmup_steps": 2,
        "policy": "single" if mode == "allreduce" else "tf_default", "steps_per_s": rate,
        "samples_per_s": 8 * rate, "events": 1, "seed": 3, "replications": 1,
        **dict.fromkeys(zeros, 0.0),
    }  # fmt: skip
    if mode is not None:
        row["mode"] = mode
    return row


def test_store_and_accuracy_report_keep_the_modes_apart(tmp_path: Path):
    import duckdb

    from sgdsim.pipeline.grid import publish_stage
    from sgdsim.reports import accuracy_report

    # async (stored without a mode column, as before) and allreduce at the same
    # model, network and N: errors 10 % and 5 % (async), 20 % and 0 % (allreduce)
    cases = [(None, 1, 10.0, 11.0), (None, 2, 20.0, 19.0)]
    cases += [("allreduce", 1, 10.0, 8.0), ("allreduce", 2, 16.0, 16.0)]
    meas, pred = [], []
    for i, (mode, n, m, p) in enumerate(cases):
        meas.append(str(tmp_path / f"m{i}.parquet"))
        pred.append(str(tmp_path / f"p{i}.parquet"))
        pl.DataFrame([_measurement(mode, n, m)]).write_parquet(meas[-1])
        pl.DataFrame([_prediction(mode, n, p)]).write_parquet(pred[-1])
    db = tmp_path / "s.duckdb"
    publish_stage(str(db), [], [], {}, measurement_files=meas, testbed_prediction_files=pred)
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT mode, workers, error_pct FROM validation ORDER BY mode, workers"
    ).fetchall()
    expected = [("allreduce", 1, -20.0), ("allreduce", 2, 0.0), ("async", 1, 10.0)]
    expected += [("async", 2, -5.0)]
    assert [(m, n) for m, n, _ in rows] == [(m, n) for m, n, _ in expected]  # no cross join
    assert [e for *_, e in rows] == pytest.approx([e for *_, e in expected])
    by_mode = con.execute("SELECT * FROM validation_by_mode ORDER BY mode").fetchall()
    assert by_mode == [
        ("allreduce", 2, pytest.approx(10.0), pytest.approx(20.0)),
        ("async", 2, pytest.approx(7.5), pytest.approx(10.0)),
    ]
    con.close()
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "- allreduce: 2 points, MAPE 10.0 %, max error 20.0 %" in text
    assert "- async: 2 points, MAPE 7.5 %, max error 10.0 %" in text
    assert "| allreduce | LeNet5 | single | 100Mbps | 2 | 10.0 | 20.0 |" in text
    assert "All 4 points: MAPE 8.8 %" in text
    assert "Synchronous modes (sync_ps, allreduce): workers in lockstep" in text


# ------------------------------------------------- predictions (simulator)


def _predict(tmp_path: Path, mode: str, workers: int, overhead_s: Any) -> dict[str, Any]:
    from sgdsim.pipeline.validation import predict_testbed_stage

    workload = tmp_path / "w.json"
    lenet_workload().save(str(workload))
    cal = tmp_path / f"cal{hash(json.dumps(overhead_s))}.json"
    cal.write_text(json.dumps({"network_cpu_s_per_byte": 0.0, "message_overhead_s": overhead_s}))
    step = tmp_path / "step.json"
    step.write_text(json.dumps({"step_s": 0.025, "cpu_s": 0.001}))
    out = tmp_path / f"{mode}{workers}{hash(json.dumps(overhead_s))}.parquet"
    wc = point(mode, workers)
    try:
        predict_testbed_stage(
            lenet_config(), str(workload), str(tmp_path), str(out), wc, str(cal), str(step)
        )
    except ValueError as e:
        if "not simulated yet" in str(e):
            pytest.skip(f"the synchronous simulator is not merged yet: {e}")
        raise
    return pl.read_parquet(out).to_dicts()[0]


def test_allreduce_prediction_uses_the_sync_path_step_and_the_ring_message_cost(
    tmp_path: Path,
):
    one = _predict(tmp_path, "allreduce", 1, 0.0)
    assert one["mode"] == "allreduce" and one["policy"] == "single"
    assert one["sync_step_s"] == 0.025 and one["profile_compute_s"] == pytest.approx(0.02)
    # one worker alone: its step is the all-reduce path's measured step, nothing to reduce
    assert one["steps_per_s"] == pytest.approx(1 / 0.025, rel=1e-3)
    fast, slow = (_predict(tmp_path, "allreduce", 2, a) for a in (0.0, 2e-3))
    assert slow["message_overhead_s"] == 2e-3
    assert slow["steps_per_s"] < fast["steps_per_s"] < 2 / 0.025
    # a calibration per N: each point takes its own N's cost, one worker none
    by_n = {"2": 2e-3, "3": 5e-3}
    two, three, alone = (_predict(tmp_path, "allreduce", n, by_n) for n in (2, 3, 1))
    assert (two["message_overhead_s"], three["message_overhead_s"]) == (2e-3, 5e-3)
    assert alone["message_overhead_s"] == 0.0
    assert two["steps_per_s"] == pytest.approx(slow["steps_per_s"], rel=1e-12)


def test_sync_ps_prediction_is_stored_with_its_mode(tmp_path: Path):
    row = _predict(tmp_path, "sync_ps", 2, 0.0)
    assert row["mode"] == "sync_ps" and row["policy"] == "tf_default" and row["steps_per_s"] > 0
    assert "sync_step_s" not in row  # the PS path is the profile's own


# ----------------------------------------------- real runs (TensorFlow, testbed)


def _measure(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    workers: int,
    launches: int = 1,
) -> dict[str, Any]:
    import sgdsim.testbed.netns as netns
    from sgdsim.pipeline.validation import measure_stage

    # this test's own testbed records: others' testbeds may run at the same time
    state = tmp_path / "testbeds"
    monkeypatch.setenv("SGDSIM_TESTBED_STATE", str(state))
    runs: list[str] = []
    claim = netns._claim

    def record(run_id: str) -> Path:
        runs.append(run_id)
        return claim(run_id)

    monkeypatch.setattr(netns, "_claim", record)

    out = tmp_path / f"{mode}{workers}.parquet"
    wc = point(mode, workers)
    config = lenet_config()
    config["validation"]["points"][0]["runs"] = launches
    measure_stage(config, "unused.json", str(tmp_path), str(out), wc)
    # a testbed deletes its record once its namespaces are removed
    assert child_processes() == [] and list(state.glob("sgd-*.json")) == []
    # one testbed (fresh processes) per launch, besides the availability probes
    assert len({r for r in runs if not r.startswith("sgd-probe-")}) == launches
    assert runs and not {n for n in namespaces() if n.startswith(tuple(runs))}
    return pl.read_parquet(out).to_dicts()[0]


def _assert_lockstep(row: dict[str, Any]) -> None:
    a, b = row["step_end_times"]
    assert len(a) == len(b)  # every worker stopped after the same step
    gap = statistics.median(y - x for x, y in itertools.pairwise(a))
    # each synchronous step ends on both workers within one step of each other
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < gap
    r0, r1 = row["per_worker_steps_per_s"]
    assert r0 == pytest.approx(r1, rel=0.05)
    assert row["steps_per_s"] == pytest.approx(r0 + r1)
    assert row["samples_per_s"] == pytest.approx(8 * row["steps_per_s"])
    inside = [sum(t >= 0 for t in w) for w in row["step_end_times"]]
    assert min(inside) >= 3 and row["window_s"] >= 2.0  # duration_s and min_steps


@pytest.mark.slow
def test_sync_ps_point_is_measured_with_sync_replicas(testbed_ok, tmp_path: Path, monkeypatch):
    row = _measure(tmp_path, monkeypatch, "sync_ps", 2)
    assert (row["status"], row["mode"], row["policy"], row["episodes"]) == (
        "ok",
        "sync_ps",
        "tf_default",
        1,
    )
    assert row["allreduces_per_step"] is None
    _assert_lockstep(row)


@pytest.mark.slow
def test_a_sync_point_averages_its_launches(testbed_ok, tmp_path: Path, monkeypatch):
    row = _measure(tmp_path, monkeypatch, "allreduce", 1, launches=2)
    assert (row["status"], row["runs"], len(row["run_steps_per_s"])) == ("ok", 2, 2)
    assert row["steps_per_s"] == pytest.approx(statistics.fmean(row["run_steps_per_s"]))
    assert row["samples_per_s"] == pytest.approx(8 * row["steps_per_s"])
    # each launch's sub-windows are kept: 4 per launch
    assert len(row["steps_per_s_windows"]) == 8


@pytest.mark.slow
def test_allreduce_point_is_measured_on_the_ring_and_no_faster_than_its_wire(
    testbed_ok, tmp_path: Path, monkeypatch
):
    from test_allreduce_testbed import lenet_gradient_bytes

    from sgdsim.simulation.bounds import tbf_payload_fraction
    from sgdsim.simulation.dag import ring_allreduce_s

    row = _measure(tmp_path, monkeypatch, "allreduce", 2)
    assert (row["status"], row["mode"], row["policy"]) == ("ok", "allreduce", "single")
    # TensorFlow packs every gradient into one all-reduce per step: fusion single
    assert row["allreduces_per_step"] == 1
    _assert_lockstep(row)
    # every iteration all-reduces the gradients over the shaped ring (fusion single)
    beta = 1 / (1e8 / 8 * tbf_payload_fraction(row["mtu"]))
    wire = ring_allreduce_s(lenet_gradient_bytes(), 2, 0.0, beta)
    assert row["steps_per_s"] <= 2 / wire


@pytest.mark.slow
def test_profile_allreduce_pools_fresh_runs_of_one_worker_of_the_sync_path(tmp_path: Path):
    from sgdsim.pipeline.validation import MIN_ALLREDUCE_STEPS, profile_allreduce_stage

    out = tmp_path / "step.json"
    config = lenet_config()
    config["profile"]["runs"] = 2
    config["profile"]["min_timed_s"] = 0.5
    profile_allreduce_stage(config, "cpu", "LeNet5", str(out))
    step = json.loads(out.read_text())
    # each run: max(2 x profile.timed_steps, MIN_ALLREDUCE_STEPS) steps at least, and
    # more until its timed steps span profile.min_timed_s; the pooled mean of all gaps
    gaps, runs = step["step_times_s"], step["run_step_s"]
    assert len(runs) == 2
    assert step["step_s"] == pytest.approx(statistics.fmean(gaps), rel=1e-9)
    assert sum(step["run_gaps"]) == len(gaps)
    per_run = max(2 * 3, MIN_ALLREDUCE_STEPS) - 1
    at = 0
    for n, run_s in zip(step["run_gaps"], runs, strict=True):
        run_gaps, at = gaps[at : at + n], at + n
        # timed until the gaps between its step ends add up to min_timed_s
        assert n >= per_run and sum(run_gaps) >= 0.5 - 1e-9
        assert run_s == pytest.approx(statistics.fmean(run_gaps), rel=1e-9)
    assert min(step["run_step_s"]) <= step["step_s"] <= max(step["run_step_s"])
    assert 0 < step["step_s"] < 5 and step["cpu_s"] > 0
    assert (step["intra_op_threads"], step["batch_size"]) == (1, 8)
    assert child_processes() == []


@pytest.mark.slow
def test_ring_step_cost_is_what_a_training_step_adds_per_ring_step(testbed_ok):
    from sgdsim.testbed.calibrate import ring_step_overhead

    r = ring_step_overhead(1e8, 0.0, workers=3, steps=40, warmup_steps=5)
    assert r.workers == 3 and r.alone_s > 0
    # a step with two peers to reduce with is slower than alone, by 2 (P - 1) ring steps
    assert r.step_s > r.alone_s
    assert r.message_s == pytest.approx((r.step_s - r.alone_s) / 4, rel=1e-12)
    assert r.overhead_s == r.message_s  # no emulated latency: all of it is software
    assert r.message_s < 0.05
    assert child_processes() == []


@pytest.mark.slow
def test_ring_message_cost_includes_the_network_latency(testbed_ok):
    from sgdsim.testbed import check_available
    from sgdsim.testbed.calibrate import ring_message_overhead
    from sgdsim.testbed.netns import tbf_params

    latency = 0.002 if check_available(need_netem=True) is None else 0.0
    r = ring_message_overhead(1e8, latency, calls=5, repeats=6)
    assert len(r.samples_s) == 5 and r.workers == 2
    assert r.message_s == pytest.approx(r.allreduce_s / 2)
    # each of the ring's 2 (P - 1) steps crosses the link once at least
    assert r.message_s >= latency and r.message_s < latency + 0.05
    assert r.overhead_s == pytest.approx(max(0.0, r.message_s - latency))
    # a 400 kB tensor: each of the two ring steps sends half of it over the 100 Mbit/s
    # link, less the token bucket's burst, which an idle link lets through at once
    big = ring_message_overhead(1e8, latency, calls=3, repeats=3, floats=100_000)
    burst, _ = tbf_params(1e8)
    assert big.allreduce_s >= 2 * (latency + (200_000 - burst) / (1e8 / 8))
    assert child_processes() == []
