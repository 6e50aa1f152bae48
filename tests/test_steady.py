"""The steady-state protocol end to end: the testbed's runner, its prediction, the queue buffer."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from test_testbed import child_processes, lenet, one_tensor_workload, testbed_ok

from sgdsim.protocol import SteadyRule, phase_distance, steady_stop
from sgdsim.testbed import Link, Testbed
from sgdsim.testbed.netns import tbf_params

pytestmark = pytest.mark.alone  # measures or times: `make test` runs it by itself (Makefile)

__all__ = ["testbed_ok"]  # the fixture, used by name


# ----------------------------------------------------------------- prediction


def test_simulated_steady_state_of_a_compute_bound_worker_by_hand():
    from sgdsim.simulation import Network
    from sgdsim.simulation.protocols import simulate_steady

    # one worker, 0.1 s compute, 1 kB each way on a 1 TB/s NIC: a step every 0.1 s,
    # so every batch holds 10 steps/s; the rule waits only for 30 steps in the window
    w = one_tensor_workload(0.1, 1e3, 0.0)
    rule = SteadyRule(warmup_steps=2, settle_s=0.5, min_steps=30, check_every_s=0.5, max_s=60)
    est: list = []
    log: list[list[float]] = []
    r = simulate_steady(w, Network(1e12, 0.0), 1, rule, estimate=est, step_log=log)
    (e,) = est
    assert e.converged and min(e.steps) >= 30
    assert r.steps_per_s == pytest.approx(10.0, rel=1e-3) == e.steps_per_s
    assert e.rel_half_width < 1e-3
    # the window: 0.5 s after the 2nd step end, up to the first check with 30 steps
    assert e.start == pytest.approx(log[0][1] + 0.5)
    assert e.window_s == pytest.approx(3.0)  # 30 steps of 0.1 s need 3.0 s, a multiple of 0.5
    assert steady_stop(log, rule) == e  # the same rule on the same step ends


def test_simulated_steady_state_runs_until_the_rule_decides():
    from sgdsim.simulation import Network
    from sgdsim.simulation.protocols import simulate_steady

    # communication-bound, two workers: the run is lengthened until the rule decides
    w = one_tensor_workload(0.01, 1e6, 0.0)
    rule = SteadyRule(warmup_steps=3, settle_s=1.0, min_steps=30, max_s=120)
    est: list = []
    log: list[list[float]] = []
    r = simulate_steady(w, Network(1e7, 0.0), 2, rule, seed=3, estimate=est, step_log=log)
    (e,) = est
    assert steady_stop(log, rule) == e
    assert e.converged == (min(e.steps) >= 30 and e.rel_half_width <= 0.03)
    assert e.converged or e.window_s == pytest.approx(120)
    # at most 10 MB/s each way, 1 MB per step: 10 steps/s of all workers at most
    assert 0 < r.steps_per_s <= 10.0 * 1.001
    again = simulate_steady(w, Network(1e7, 0.0), 2, rule, seed=3)
    assert again.steps_per_s == r.steps_per_s  # deterministic
    # the expected rate: the mean over runs from seeds 3, 4, 5, each scored alone
    est3: list = []
    three = simulate_steady(w, Network(1e7, 0.0), 2, rule, seed=3, estimate=est3, replications=3)
    rates = [simulate_steady(w, Network(1e7, 0.0), 2, rule, seed=s).steps_per_s for s in (3, 4, 5)]
    assert three.steps_per_s == pytest.approx(sum(rates) / 3, rel=1e-12)
    assert three.replications == 3 and est3 == est  # the first run's estimate
    assert simulate_steady(w, Network(1e7, 0.0), 1, rule, replications=3).replications == 1
    with pytest.raises(ValueError, match="replications"):
        simulate_steady(w, Network(1e7, 0.0), 2, rule, replications=0)


def test_simulated_steady_state_from_given_phases_by_hand():
    from sgdsim.simulation import Network
    from sgdsim.simulation.protocols import simulate_steady

    # two workers, 1 MB each way at 10 MB/s (0.1 s alone), 0.01 s compute. In phase
    # they share each direction: 0.2 + 0.01 + 0.2 s a step each, 2 / 0.41 steps/s.
    # Started 0.105 s apart one pulls while the other pushes and neither shares:
    # 0.21 s a step, 2 / 0.21 steps/s (a replay of a measured launch's phases).
    w = one_tensor_workload(0.01, 1e6, 0.0)
    net = Network(1e7, 0.0)
    rule = SteadyRule(warmup_steps=3, settle_s=1.0, min_steps=30, max_s=60)
    together = simulate_steady(w, net, 2, rule, start_offsets_s=[[0.0, 0.0]])
    apart = simulate_steady(w, net, 2, rule, start_offsets_s=[[0.0, 0.105]])
    assert together.steps_per_s == pytest.approx(2 / 0.41, rel=1e-3)
    assert apart.steps_per_s == pytest.approx(2 / 0.21, rel=1e-3)
    # one run per row, each from its own phases, averaged
    both = simulate_steady(w, net, 2, rule, start_offsets_s=[[0.0, 0.0], [0.0, 0.105]])
    assert both.replications == 2
    assert both.steps_per_s == pytest.approx((together.steps_per_s + apart.steps_per_s) / 2)
    with pytest.raises(ValueError, match="at least one row"):
        simulate_steady(w, net, 2, rule, start_offsets_s=[])


def test_the_testbed_prediction_sees_the_shapers_token_bucket():
    # the simulated NIC of a testbed network carries tbf's burst, less the same headers
    # as its rate; a network of the profile's loopback fit has none
    from sgdsim.config import with_defaults
    from sgdsim.pipeline.validation import _testbed_network
    from sgdsim.simulation.bounds import tbf_payload_fraction

    cfg = with_defaults(
        {
            "models": [{"name": "LeNet5"}],
            "hardware": [{"name": "cpu"}],
            "networks": [{"name": "n", "bandwidth_bps": 1e8}],
            "validation": {"unprivileged": "skip"},
        }
    )
    for mtu, rate in ((9000, 1e8), (1500, 1e8), (1500, 1e9)):
        net = {"name": "v", "bandwidth_bps": rate, "latency_s": 0.0, "mtu": mtu}
        got = _testbed_network(cfg, net, "unused")
        fraction = tbf_payload_fraction(mtu)
        assert got.bandwidth_Bps == pytest.approx(rate / 8 * fraction)
        assert got.burst_bytes == pytest.approx(tbf_params(rate, mtu)[0] * fraction)
    assert got.burst_bytes / got.bandwidth_Bps == pytest.approx(1e-3)  # 1 ms at the rate


def test_replay_offsets_are_each_launchs_phases_after_warm_up():
    from sgdsim.pipeline.validation import replay_offsets

    # step ends since the window started: warm-up steps 1-3 negative
    a = [[-9.0, -6.0, -3.0, 0.5], [-8.5, -7.0, -2.2, 1.0], [-9.5, -5.0, -1.0, 2.0]]
    b = [[-6.0, -4.0, -2.0, 0.0], [-6.0, -4.0, -2.5, 0.0], [-7.0, -5.0, -3.0, 0.0]]
    one = {"status": "ok", "step_end_times": a}
    assert replay_offsets(one, 3) == [pytest.approx([0.0, 0.8, 2.0])]
    assert replay_offsets(one, 0) == [pytest.approx([0.5, 1.0, 0.0])]  # the first step end
    # several launches: one row each, the first launch's ends also in step_end_times
    both = {"status": "ok", "step_end_times": a, "run_step_end_times": [a, b]}
    rows = replay_offsets(both, 3)
    assert rows is not None and len(rows) == 2
    assert rows[1] == pytest.approx([1.0, 0.5, 0.0])
    # nothing to replay
    assert replay_offsets({"status": "skipped", "step_end_times": None}, 3) is None
    assert replay_offsets({"status": "ok", "step_end_times": [a[0]]}, 3) is None  # N = 1
    short = {"status": "ok", "step_end_times": [a[0], a[1][:2]]}
    assert replay_offsets(short, 3) is None


# ----------------------------------------------------------------- queue buffer


def test_buffer_bytes_sets_every_shaped_queue_limit(testbed_ok):
    assert tbf_params(100e6, 1500, 20_000)[1] == 20_000
    assert tbf_params(100e6, 1500)[1] == 625_000  # default: 50 ms at 12.5 MB/s
    with pytest.raises(ValueError, match="one frame"):
        tbf_params(100e6, 1500, 1000)
    burst = tbf_params(100e6, 1500)[0]
    for queue in ("fifo", "fair"):
        link = Link(mtu=1500, queue=queue, buffer_bytes=20_000)
        with Testbed(1, bandwidth_bps=100e6, link=link) as tb:
            assert tb.queue_limit_bytes == 20_000
            for ns, dev in ((tb.namespace("w0"), "eth0"), (tb.bridge_namespace, "vps")):
                show = ["tc", "-n", ns, "-j", "qdisc", "show", "dev", dev]
                qs = json.loads(subprocess.run(show, capture_output=True, text=True).stdout)
                if queue == "fifo":  # tc shows tbf's limit as the latency it adds
                    (tbf,) = [q for q in qs if q["kind"] == "tbf"]
                    lat_us = (20_000 - burst) / 12.5e6 * 1e6
                    assert tbf["options"]["lat"] == pytest.approx(lat_us, abs=1), qs
                else:  # one bfifo per class: small packets, the rest, the peer
                    limits = [q["options"]["limit"] for q in qs if q["kind"] == "bfifo"]
                    assert limits == [20_000] * 3, qs


# ----------------------------------------------------------------- measurement


@pytest.mark.slow
def test_steady_measurement_stops_when_converged_and_keeps_every_step_end(testbed_ok):
    from sgdsim.testbed import run_steady_measurement

    rule = SteadyRule(warmup_steps=3, settle_s=1.0, min_steps=30, max_s=10, batches=10)
    r = run_steady_measurement(
        lenet(), 2, 100e6, rule=rule, link=Link(mtu=1500, queue="fifo", buffer_bytes=30_000)
    )
    e = r.steady
    assert e is not None
    print(r.steps_per_s, e)
    # every step end of both workers is kept, warm-up and settling before the window
    assert len(r.step_end_times) == 2
    for ends in r.step_end_times:
        assert list(ends) == sorted(ends)
        assert sum(t < 0 for t in ends) >= 3
    # scored by the pure rule from the recorded step ends
    again = steady_stop([[t + e.start for t in ends] for ends in r.step_end_times], rule)
    assert again is not None and again.steps_per_s == pytest.approx(e.steps_per_s)
    assert r.steps_per_s == e.steps_per_s and len(r.steps_per_s_windows) == 10
    assert e.window_s <= 10 + 1e-6
    if e.converged:  # stopped early: shortly after the deciding window
        assert min(e.steps) >= 30 and e.rel_half_width <= 0.03
        assert max(max(t) for t in r.step_end_times) < e.window_s + 10
    else:
        assert e.window_s == pytest.approx(10)
    # (namespaces: other testbeds on this machine may come and go meanwhile, so
    # only this process's own children are checked; Testbed's cleanup has its tests)
    assert child_processes() == []


@pytest.mark.slow
def test_a_whole_packet_capture_of_real_training_reads_every_step_of_every_worker(
    testbed_ok, tmp_path
):
    import polars as pl

    from sgdsim.testbed import run_steady_measurement
    from sgdsim.testbed.wire import tensor_timeline

    # two LeNet5 workers through a FIFO at MTU 1500: ~10k packets/s, where per-packet
    # writes of a niced tcpdump once lost packets in 2 of 3 runs
    rule = SteadyRule(warmup_steps=3, settle_s=1.0, min_steps=30, max_s=8, batches=10)
    pcap = tmp_path / "ps.pcap"
    r = run_steady_measurement(
        lenet(),
        2,
        100e6,
        rule=rule,
        link=Link(mtu=1500, queue="fifo", buffer_bytes=62_500),
        capture_path=str(pcap),
        capture_payload=True,
    )
    wire = tensor_timeline(pcap)
    assert r.steady is not None
    steps = (
        wire.tensors.group_by("worker", "direction", "step_id")
        .agg(pl.col("bytes").sum(), pl.len().alias("tensors"), pl.col("first_s").min())
        .filter(pl.col("tensors") == pl.col("tensors").max().over("direction"))
    )
    pulled = steps.filter(pl.col("direction") == "pull")
    pushed = steps.filter(pl.col("direction") == "push")
    # every tensor of every step up to the window's end was read (the capture stops
    # inside the workers' last steps; TensorFlow may give the first step's first
    # pull the step id of the session's start)
    for w, ends in enumerate(r.step_end_times):
        seen = pulled.filter(pl.col("worker") == w).height
        assert sum(t <= r.steady.window_s for t in ends) - 1 <= seen <= len(ends) + 1
        assert pushed.filter(pl.col("worker") == w).height >= seen - 1
    # each step pulls the same tensors and pushes as many bytes back (gradients of
    # the trainable variables: all but the global step); each worker's last step in
    # the capture may be cut inside its last tensor when the capture stops (once 1 of
    # 283 pulled steps, in CI-like runs): the last by time, since TensorFlow's step
    # ids are random (the largest is anywhere in the run)
    whole = pl.col("first_s") < pl.col("first_s").max().over("worker")
    pulled, pushed = pulled.filter(whole), pushed.filter(whole)
    assert pulled["bytes"].n_unique() == 1 and pushed["bytes"].n_unique() == 1, (
        pulled["bytes"].value_counts(),
        pushed["bytes"].value_counts(),
    )
    assert pushed["bytes"][0] == pytest.approx(pulled["bytes"][0], rel=0.01)
    assert child_processes() == []


# ----------------------------------------------------------------- pipeline


@pytest.mark.slow
def test_steady_point_goes_through_measure_predict_and_publish(testbed_ok, lenet_profile, tmp_path):
    import duckdb
    import yaml
    from conftest import ROOT

    from sgdsim.config import with_defaults
    from sgdsim.pipeline.grid import publish_stage
    from sgdsim.pipeline.validation import (
        measure_stage,
        predict_testbed_stage,
        replay_testbed_stage,
    )
    from sgdsim.traces import normalize_profile

    tables, workload = tmp_path / "tables", tmp_path / "w.json"
    normalize_profile(lenet_profile, tables, workload)
    config = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    config["validation"] |= {
        "protocol": "steady",
        "queue": "fifo",
        "mtu": 1500,
        "buffer_bytes": 40_000,
        "congestion_control": "reno",
        "steady": {"warmup_steps": 1, "settle_s": 1, "min_steps": 20, "max_s": 8, "batches": 10},
    }
    # the two-worker point launched twice (fresh processes), scored by their mean
    config["validation"]["points"] = [
        {"model": "LeNet5", "workers": [1], "policies": ["tf_default"]},
        {"model": "LeNet5", "workers": [2], "policies": ["tf_default"], "runs": 2},
    ]
    point = {"hardware": "cpu", "model": "LeNet5", "network": "100Mbps", "policy": "tf_default"}
    for n in (1, 2):
        wc = point | {"workers": str(n)}
        measure_stage(config, str(workload), str(tables), str(tmp_path / f"m{n}.parquet"), wc)
        predict_testbed_stage(
            config, str(workload), str(tables), str(tmp_path / f"p{n}.parquet"), wc
        )
        replay_testbed_stage(
            config, str(tmp_path / f"m{n}.parquet"), str(workload), str(tables),
            str(tmp_path / f"r{n}.parquet"), wc | {"mode": "async"},
        )  # fmt: skip
    db = tmp_path / "s.duckdb"
    publish_stage(
        str(db), [str(tables)], [], config,
        measurement_files=[str(tmp_path / f"m{n}.parquet") for n in (1, 2)],
        testbed_prediction_files=[str(tmp_path / f"p{n}.parquet") for n in (1, 2)],
        replay_files=[str(tmp_path / f"r{n}.parquet") for n in (1, 2)],
    )  # fmt: skip
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT workers, protocol, queue, buffer_bytes, mtu, converged, steps_per_s, "
        "rel_half_width, len(steps_per_s_windows), len(step_end_times), steps_in_window, "
        "window_s, runs, run_steps_per_s FROM measurements ORDER BY workers"
    ).fetchall()
    for n, row in zip((1, 2), rows, strict=True):
        w, proto, queue, buf, mtu, conv, rate, rel, b, workers, steps, window, runs, rates = row
        # every launch's batches are kept: 10 per launch
        assert (w, proto, queue, buf, mtu, b, workers) == (
            n, "steady", "fifo", 40_000, 1500, 10 * n, n
        )  # fmt: skip
        assert rate > 0 and window <= 8 + 1e-6 and len(steps) == n
        assert runs == n and len(rates) == n and rate == pytest.approx(sum(rates) / n)
        if n == 1:
            assert conv == (min(steps) >= 20 and rel <= 0.03)  # the launch's own estimate
        else:
            # two launches: the mean's interval is over them, t(0.975, 1 df) = 12.706 (a
            # t table) times their sd / √2 = |r1 − r2| / 2; converged only if both were
            assert rel == pytest.approx(12.706 * abs(rates[0] - rates[1]) / 2 / rate, rel=1e-3)
            assert not conv or min(steps) >= 20  # steps: the first launch's
    # the TCP the hosts used is recorded with each point
    assert con.execute("SELECT DISTINCT congestion_control FROM measurements").fetchall() == [
        ("reno",)
    ]
    # the view carries each launch's rate; its measured rate is their mean
    launched = con.execute(
        "SELECT measured_run_steps_per_s, measured_steps_per_s FROM validation WHERE workers = 2"
    ).fetchone()
    assert launched[0] == rows[1][13] and launched[1] == pytest.approx(sum(launched[0]) / 2)
    # every launch's step ends are kept, the first one's also as step_end_times
    ends, each = con.execute(
        "SELECT step_end_times, run_step_end_times FROM measurements WHERE workers = 2"
    ).fetchone()
    assert len(each) == 2 and each[0] == ends and [len(e) for e in each] == [2, 2]
    assert each[1] != each[0]  # a launch of its own
    # the steady rule's own warm-up, not the episodes' (validation.warmup_steps: 2)
    assert con.execute("SELECT DISTINCT warmup_steps FROM measurements").fetchall() == [(1,)]
    pred = con.execute(
        "SELECT workers, protocol, converged, steps_per_s, len(step_end_times), window_s "
        "FROM testbed_predictions ORDER BY workers"
    ).fetchall()
    assert [(r[0], r[1], r[4]) for r in pred] == [(1, "steady", 1), (2, "steady", 2)]
    assert all(r[3] > 0 and r[5] <= 8 + 1e-6 for r in pred)
    # the stored step ends and batch rates are the first run's, as the rule scored them:
    # rescoring the ends gives the mean of those batches
    ends, windows, reps = con.execute(
        "SELECT step_end_times, steps_per_s_windows, replications FROM testbed_predictions "
        "WHERE workers = 2"
    ).fetchone()
    rule = SteadyRule(warmup_steps=1, settle_s=1, min_steps=20, max_s=8)
    again = steady_stop(ends, rule)
    assert again is not None and again.start == pytest.approx(0.0, abs=1e-9)
    assert again.steps_per_s == pytest.approx(sum(windows) / len(windows), rel=1e-9)
    assert reps == with_defaults(config)["simulation"]["replications"]  # the rate: their mean
    assert con.execute("SELECT count(*) FROM validation").fetchone()[0] == 2
    # the replay: one run from each launch's phases after its (one) warm-up step
    replays = con.execute(
        "SELECT workers, replay_status, replay_offsets_s, replay_steps_per_s, replay_after_step "
        "FROM testbed_replays ORDER BY workers"
    ).fetchall()
    assert [(r[0], r[1]) for r in replays] == [(1, "skipped"), (2, "ok")]
    (why,) = con.execute("SELECT replay_reason FROM testbed_replays WHERE workers = 1").fetchone()
    assert why == "one worker has no phases to replay"
    offsets = replays[1][2]
    assert replays[1][4] == 1 and len(offsets) == 2  # two launches
    for row, launch in zip(offsets, each, strict=True):
        first = [e[0] for e in launch]
        assert row == pytest.approx([t - min(first) for t in first], abs=1e-9)
    shown = con.execute(
        "SELECT replayed_steps_per_s, replayed_error_pct, measured_steps_per_s "
        "FROM validation WHERE workers = 2"
    ).fetchone()
    assert shown[0] == replays[1][3] > 0
    assert shown[1] == pytest.approx(100 * (shown[0] - shown[2]) / shown[2])
    # how far apart the two workers stepped, measured and simulated; none for one worker
    phases = con.execute(
        "SELECT workers, measured_phase_distance, predicted_phase_distance FROM validation "
        "ORDER BY workers"
    ).fetchall()
    assert phases[0] == (1, None, None)
    assert all(x is not None and 0.0 <= x <= 0.5 for x in phases[1][1:])
    assert phases[1][2] == pytest.approx(phase_distance(ends, again.window_s))


def test_joins_through_a_fifo_are_captured_and_drawn_with_their_sign(
    testbed_ok, lenet_profile, tmp_path
):
    import json

    import yaml
    from conftest import ROOT

    from sgdsim.pipeline.validation import calibrate_push_join_stage, join_delay_in
    from sgdsim.traces import normalize_profile

    tables, workload = tmp_path / "tables", tmp_path / "w.json"
    normalize_profile(lenet_profile, tables, workload)
    config = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    net = dict(config["validation"]["networks"][0], queue="fifo", buffer_bytes=62_500)
    config["validation"] |= {"networks": [net], "join_capture_s": 10}
    out = tmp_path / "push.json"
    t0 = time.monotonic()
    calibrate_push_join_stage(config, str(workload), str(out), net["name"], "cpu", "LeNet5")
    assert time.monotonic() - t0 < 50  # a 10 s window: not the 60 s default (no convergence here)
    got = json.loads(out.read_text())
    # two real workers ran the profiled step's skeleton (the default calibration)
    # through the FIFO while the PS port was captured
    assert (got["status"], got["draw"], got["workers"]) == ("ok", "joins", 2)
    assert got["method"] == "skeleton capture"
    assert got["steps_per_s"] > 0
    # how far apart the pair stepped, from its step ends (0 in phase, 0.5 alternating)
    assert 0.0 <= got["joins_at"]["2"]["phase_distance"] <= 0.5
    # the node's CPU over the captures, the hypervisor's steal beside it
    assert 0 < got["host_cpu_busy"] <= 1 and 0 <= got["host_cpu_steal"] <= 1
    # the prediction draws the captured joins themselves, unclipped
    for name in ("push", "pull"):
        delay = join_delay_in(got, name)
        joins = got[f"{name}_join_growth_s"].get("1", [])
        if joins:  # every join counts, however few
            assert delay.joins_s == (tuple(joins),)
            assert delay.mean_s[0] == pytest.approx(sum(joins) / len(joins))
        else:
            assert delay.joins_s == ((0.0,),)
        # recorded beside them: each transfer's start over its share, alone ("0") or joined
        excess = got[f"{name}_start_excess_s"]
        assert set(excess) <= {"0", "1"} and all(
            isinstance(x, float) for v in excess.values() for x in v
        )
    assert got["boundary_s"] is None or 0.0 <= got["boundary_s"] < 1.0 / got["steps_per_s"]
    # and the joins' gains against the full link, taken where a lone pull gave its rate
    # (100 Mbit/s: 12.5 MB/s; LeNet5's short pulls also ride the shaper's bucket, once
    # measured at 12.65 MB/s)
    full = got["saturated_Bps"]
    assert full is None or 6e6 < full < 25e6
    for name in ("push", "pull"):
        gains = got[f"{name}_join_gain_s"]
        assert (full is None and gains == {}) or set(gains) <= {"1"}
        # each join's overlap, one per join of its lateness, in the capture's window
        windows = got[f"{name}_join_window_s"]
        joins = got[f"{name}_join_growth_s"]
        assert {k: len(v) for k, v in windows.items()} == {k: len(v) for k, v in joins.items()}
        assert all(0.0 < w < 60.0 for v in windows.values() for w in v)
    # and, from the same capture, each direction's rate beside the other over its rate
    # alone at the 2 workers it trained (null when it had too little of either)
    (share,) = got["two_way_share"].values()
    assert list(got["two_way_share"]) == ["2"]
    assert share is None or (len(share) == 2 and all(0.0 < s <= 1.0 for s in share))
    # the same past each transfer's start, and how far each join moved the pair's phases:
    # (growth, start lag), the start lag inside the capture's window
    (past,) = got["two_way_share_past_start"].values()
    assert past is None or (len(past) == 2 and all(0.0 < s <= 1.0 for s in past))
    lags = got["join_lag_s"]["2"]
    assert set(lags) == {"push", "pull"} and all(set(v) <= {"1"} for v in lags.values())
    joins = [x for v in lags.values() for j in v.values() for x in j]
    assert all(0.0 < lag < 60.0 and abs(growth) < 60.0 for growth, lag in joins)
    # each transfer's start deficit, captured ("0" alone, "1" joined) and simulated
    # for the same pair ([median, count])
    deficits = got["start_deficit_s"]["2"]
    assert set(deficits) == {"push", "pull", "push_simulated", "pull_simulated"}
    for name in ("push", "pull"):
        assert set(deficits[name]) <= {"0", "1"}
        assert all(abs(x) < 1.0 for v in deficits[name].values() for x in v)
        sim = deficits[f"{name}_simulated"]
        assert set(sim) <= {"0", "1"} and all(abs(m) < 1.0 and c >= 1 for m, c in sim.values())
    assert child_processes() == []


def test_calibrate_joins_captures_a_users_network_and_predict_reads_it(
    testbed_ok, lenet_profile, tmp_path
):
    import sys

    from sgdsim.traces import normalize_profile

    def sgdsim(*args: str) -> subprocess.CompletedProcess[str]:
        # a real process, as a user runs it: the testbed's children inherit its stderr
        argv = [sys.executable, "-m", "sgdsim.cli", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=240)

    workload, out = tmp_path / "w.json", tmp_path / "joins.json"
    normalize_profile(lenet_profile, tmp_path / "tables", workload)
    args = ["--workload", str(workload), "-b", "1e8", "--queue", "fifo", "--mtu", "1500"]
    r = sgdsim("calibrate-joins", *args, "--buffer-bytes", "62500", "-n", "2",
               "--capture-s", "4", "--runs", "2", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(out.read_text())
    # two skeleton workers ran through that FIFO, launched twice and their
    # captures pooled; the file says which network it was
    assert (got["status"], got["method"], got["capture_runs"]) == ("ok", "skeleton capture", 2)
    assert list(got["joins_at"]) == ["2"]
    launches = got["joins_at"]["2"]["run_steps_per_s"]
    assert len(launches) == 2 and min(launches) > 0
    assert got["joins_at"]["2"]["steps_per_s"] == pytest.approx(sum(launches) / 2)
    assert "capture 2 of 2" in r.stderr
    assert got["network"] == {
        "bandwidth_bps": 1e8, "queue": "fifo", "buffer_bytes": 62500, "mtu": 1500,
        "congestion_control": None,
    }  # fmt: skip
    assert got["joins_at"]["2"]["steps_per_s"] > 0 and "N = 2:" in r.stdout
    assert child_processes() == []
    r = sgdsim("predict", "--workload", str(workload), "--joins", str(out), "-n", "2", "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)
    assert row["bandwidth_bps"] == 1e8 and row["steps_per_s"] > 0
    # a bad network is one line, before anything is built
    r = sgdsim("calibrate-joins", *args, "--buffer-bytes", "100", "--out", str(tmp_path / "x.json"))
    assert r.returncode == 1 and "buffer_bytes" in r.stderr and not (tmp_path / "x.json").exists()


def test_joins_and_two_way_shares_are_captured_at_each_n_and_given_to_its_points(
    monkeypatch, tmp_path
):
    import polars as pl
    import yaml
    from conftest import ROOT

    import sgdsim.testbed
    import sgdsim.testbed.calibrate as calibrate
    import sgdsim.testbed.capture as capture
    from sgdsim.pipeline.validation import (
        calibrate_push_join_stage,
        join_delay_in,
        joins_at_n,
        predict_testbed_stage,
        two_way_share_at,
    )
    from sgdsim.simulation.connection import JoinDelay

    # which N the stage trains (or runs the skeleton at) and captures, and with which
    # workload's skeleton; the captures themselves have their tests
    trained: list[int] = []
    skeletons: list[str | None] = []
    shares = {2: (0.95, 0.9), 3: None, 4: (0.8, 0.7)}

    def joins(**kw):
        n = kw["workers"]
        trained.append(n)
        skeletons.append(kw["skeleton"])
        push, pull = JoinDelay((0.001 * n,), (0.0005,)), JoinDelay((0.002 * n,), (0.0,))
        return calibrate.TrainingJoins(
            push, pull, {1: (0.001 * n,)}, {}, 1.0 / n, n, two_way_share=shares[n],
            phase_distance=0.1 * n, lag_s={"push": {1: ((0.004 * n, 0.25),)}},
            two_way_share_past_start=shares[n] and (1.0, 0.99),
            start_deficit_s={"push": {1: (0.002 * n,)}},
        )  # fmt: skip

    monkeypatch.setattr(sgdsim.testbed, "check_available", lambda: None)
    monkeypatch.setattr(capture, "tcpdump_missing", lambda: None)
    monkeypatch.setattr(calibrate, "training_join_delays", joins)
    workload = tmp_path / "w.json"
    one_tensor_workload(0.1, 1e6, 0.01).save(workload)
    config = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    fifo = dict(config["validation"]["networks"][0], name="fifo", queue="fifo")
    config["validation"] |= {
        "networks": [config["validation"]["networks"][0], fifo],
        "points": [{"model": "LeNet5", "workers": [1, 2, 3, 4], "networks": ["fifo", "100Mbps"]}],
        "join_calibration": "training",
    }
    got = {}
    for name in ("fifo", "100Mbps"):
        out = tmp_path / f"{name}.json"
        calibrate_push_join_stage(config, str(workload), str(out), name, "cpu", "LeNet5")
        got[name] = json.loads(out.read_text())
    # on either queue every N >= 2 of the points is trained, the largest first
    assert trained == [4, 2, 3, 4, 2, 3] and skeletons == [None] * 6
    for cal in got.values():
        assert cal["method"] == "training capture"
        assert cal["two_way_share"] == {"2": [0.95, 0.9], "3": None, "4": [0.8, 0.7]}
        # recorded beside it for the study of the phases: each N's own
        assert cal["two_way_share_past_start"] == {"2": [1.0, 0.99], "3": None, "4": [1.0, 0.99]}
        assert cal["join_lag_s"]["3"] == {"push": {"1": [[0.012, 0.25]]}, "pull": {}}
        deficits = cal["start_deficit_s"]["3"]
        assert (deficits["push"], deficits["pull"]) == ({"1": [0.006]}, {})
        # beside them the simulator's own for 3 workers of the workload, alone or joining
        assert set(deficits["push_simulated"]) <= {"0", "1", "2"}
        assert all(c >= 1 for _, c in deficits["push_simulated"].values())
        assert set(cal["joins_at"]) == {"2", "3", "4"}
        # the top level stays the largest N's (the store's columns)
        assert (cal["workers"], cal["push_join_delay_s"]) == (4, [0.004])
        # a point takes its N's joins, else the nearest captured N's
        for n, captured in ((1, 2), (2, 2), (3, 3), (4, 4), (6, 4)):
            at = joins_at_n(cal, n)
            assert (at["workers"], at["steps_per_s"]) == (captured, 1.0 / captured)
            assert join_delay_in(at, "push").mean_s == (0.001 * captured,)
            assert join_delay_in(at, "pull").mean_s == (0.002 * captured,)
    # and its N's share, else the nearest captured N's; none where that capture
    # measured none (N = 3's), not another N's
    at = {n: two_way_share_at(got["fifo"], n) for n in (1, 2, 3, 4, 6)}
    assert at == {1: (0.95, 0.9), 2: (0.95, 0.9), 3: None, 4: (0.8, 0.7), 6: (0.8, 0.7)}
    assert two_way_share_at({"push_join_delay_s": 0.0}, 2) is None
    # a calibration without per-N joins (one capture, or a race's) serves every N
    old = {"push_join_delay_s": [0.003], "push_join_sd_s": [0.001], "workers": 2}
    assert joins_at_n(old, 4) is old
    # the prediction of a point at N = 3 takes N = 3's joins and no share (its
    # capture measured none)
    out = tmp_path / "p.parquet"
    wc = {"hardware": "cpu", "model": "LeNet5", "network": "fifo", "policy": "tf_default"}
    wc |= {"mode": "async", "workers": "3"}
    predict_testbed_stage(
        config, str(workload), str(tmp_path), str(out), wc,
        push_calibration_path=str(tmp_path / "fifo.json"),
    )  # fmt: skip
    row = pl.read_parquet(out).row(0, named=True)
    assert row["push_join_delays_s"] == pytest.approx([0.003])
    assert row["pull_join_delays_s"] == pytest.approx([0.006])
    assert row["two_way_share"] is None
    four = tmp_path / "p4.parquet"
    predict_testbed_stage(
        config, str(workload), str(tmp_path), str(four), wc | {"workers": "4"},
        push_calibration_path=str(tmp_path / "fifo.json"),
    )  # fmt: skip
    assert pl.read_parquet(four).row(0, named=True)["two_way_share"] == pytest.approx([0.8, 0.7])
    # beside it, the point predicted without the capture (the profile and the
    # network's calibration alone, as the grid predicts): the prediction made
    # without the capture's file, and not the captured one (joins move the phases)
    bare = tmp_path / "bare.parquet"
    predict_testbed_stage(config, str(workload), str(tmp_path), str(bare), wc)
    alone = pl.read_parquet(bare).row(0, named=True)
    assert alone["profile_only_steps_per_s"] is None  # no capture: nothing beside it
    assert row["profile_only_steps_per_s"] == alone["steps_per_s"]
    assert row["profile_only_steps_per_s"] != pytest.approx(row["steps_per_s"], rel=0.01)
    # one worker has no joins and shares: no second prediction
    one = tmp_path / "one.parquet"
    predict_testbed_stage(
        config, str(workload), str(tmp_path), str(one), wc | {"workers": "1"},
        push_calibration_path=str(tmp_path / "fifo.json"),
    )  # fmt: skip
    assert pl.read_parquet(one).row(0, named=True)["profile_only_steps_per_s"] is None
    # by default the same N run the skeleton of the model's profiled step (its
    # workload) instead of training it; its joins reach the point as a training
    # capture's do, and the point is predicted again without them, as the grid
    # predicts a network that names no joins
    trained.clear()
    del config["validation"]["join_calibration"]
    sk = tmp_path / "fifo-skeleton.json"
    calibrate_push_join_stage(config, str(workload), str(sk), "fifo", "cpu", "LeNet5")
    assert trained == [4, 2, 3] and skeletons[6:] == [str(workload.resolve())] * 3
    assert json.loads(sk.read_text())["method"] == "skeleton capture"
    predict_testbed_stage(
        config, str(workload), str(tmp_path), str(out), wc, push_calibration_path=str(sk)
    )
    by_skeleton = pl.read_parquet(out).row(0, named=True)
    assert by_skeleton["pull_join_delays_s"] == pytest.approx([0.006])
    assert by_skeleton["steps_per_s"] == row["steps_per_s"]
    assert by_skeleton["profile_only_steps_per_s"] == alone["steps_per_s"]
    # beside it, N = 3's own capture and that capture simulated: the workers on
    # nodes of their own, so no CPU shared (the point's three share one compute
    # slot: the workload measured no CPU), and faster than the point's prediction
    assert by_skeleton["capture_steps_per_s"] == pytest.approx(1 / 3)
    assert by_skeleton["capture_phase_distance"] == pytest.approx(0.3)
    assert by_skeleton["skeleton_steps_per_s"] > 1.1 * by_skeleton["steps_per_s"]
    # a training capture and a point at an N not captured have none
    assert row["capture_steps_per_s"] is None and row["skeleton_steps_per_s"] is None
    # validation.join_capture_workers captures only the N listed; N = 3 then
    # takes N = 4's joins and share (the nearest, the larger on a tie)
    trained.clear()
    config["validation"]["join_capture_workers"] = [2, 4, 8]
    two = tmp_path / "fifo-2-4.json"
    calibrate_push_join_stage(config, str(workload), str(two), "fifo", "cpu", "LeNet5")
    assert trained == [4, 2]
    assert set(json.loads(two.read_text())["joins_at"]) == {"2", "4"}
    predict_testbed_stage(
        config, str(workload), str(tmp_path), str(out), wc, push_calibration_path=str(two)
    )
    three = pl.read_parquet(out).row(0, named=True)
    assert three["pull_join_delays_s"] == pytest.approx([0.008])
    assert three["two_way_share"] == pytest.approx([0.8, 0.7])
    # a list none of the points' N is in captures the largest of them
    trained.clear()
    config["validation"]["join_capture_workers"] = [5]
    calibrate_push_join_stage(config, str(workload), str(two), "fifo", "cpu", "LeNet5")
    assert trained == [4]
    # validation.join_capture_runs launches and captures each N that many times
    # and pools their joins; each capture's rate is kept beside the pooled one
    trained.clear()
    config["validation"] |= {"join_capture_workers": [2, 4], "join_capture_runs": 2}
    calibrate_push_join_stage(config, str(workload), str(two), "fifo", "cpu", "LeNet5")
    assert trained == [4, 4, 2, 2]
    pooled = json.loads(two.read_text())
    assert pooled["capture_runs"] == 2
    assert pooled["joins_at"]["2"]["run_steps_per_s"] == [0.5, 0.5]
    assert pooled["joins_at"]["4"]["push_join_growth_s"] == {"1": [0.004, 0.004]}
    assert pooled["join_lag_s"]["4"]["push"] == {"1": [[0.016, 0.25]] * 2}


@pytest.mark.slow
def test_an_episodes_point_launched_twice_is_scored_by_the_mean_of_its_launches(
    testbed_ok, lenet_profile, tmp_path
):
    import polars as pl
    import yaml
    from conftest import ROOT

    from sgdsim.pipeline.validation import measure_stage
    from sgdsim.traces import normalize_profile

    tables, workload = tmp_path / "tables", tmp_path / "w.json"
    normalize_profile(lenet_profile, tables, workload)
    config = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    config["validation"]["points"] = [
        {"model": "LeNet5", "workers": [2], "policies": ["tf_default"], "runs": 2}
    ]
    wc = {"hardware": "cpu", "model": "LeNet5", "network": "100Mbps", "policy": "tf_default"}
    out = tmp_path / "m.parquet"
    measure_stage(config, str(workload), str(tables), str(out), wc | {"workers": "2"})
    row = pl.read_parquet(out).to_dicts()[0]
    episodes = config["validation"]["episodes"]
    assert (row["status"], row["runs"], row["episodes"]) == ("ok", 2, episodes)
    rates = row["run_steps_per_s"]
    assert len(rates) == 2 and row["steps_per_s"] == pytest.approx(sum(rates) / 2)
    # each launch runs every episode: their windows pooled, their step ends kept
    assert len(row["steps_per_s_windows"]) == 2 * episodes
    assert len(row["run_step_end_times"]) == 2
    assert row["run_step_end_times"][0] == row["step_end_times"]
    assert child_processes() == []


def test_the_skeleton_of_a_step_waits_its_compute_and_refuses_ps_shards(tmp_path):
    """A skeleton worker (loopback: one PS, one worker) takes the profiled compute
    per step as waits, plus its transfers; a workload with two PS tasks is refused."""
    import dataclasses

    import numpy as np

    from sgdsim.simulation import Workload
    from sgdsim.testbed import run_steady_measurement
    from sgdsim.testbed.skeleton import build_skeleton_graph

    # two pulls gating two segments (0.12 s and 0.08 s), two pushes after them
    w = Workload(
        seg_dur_s=np.array([0.12, 0.08]),
        pull_bytes=np.array([2e6, 1e6]),
        pull_gate=np.array([0, 1]),
        push_bytes=np.array([1e6, 2e6]),
        push_seg=np.array([0, 1]),
        push_update_s=np.array([0.001, 0.001]),
    )
    path = tmp_path / "w.json"
    w.save(path)
    rule = SteadyRule(warmup_steps=2, settle_s=0.0, min_steps=8, max_s=4.0)
    r = run_steady_measurement(lenet(), 1, None, rule=rule, loopback=True, skeleton=str(path))
    step_s = 1.0 / r.steps_per_s
    # the waits hold 0.2 s a step; 6 MB through loopback and TensorFlow's step
    # overhead add milliseconds to tens of them, not a model's training
    assert 0.2 <= step_s < 0.35
    assert child_processes() == []
    with pytest.raises(ValueError, match="one PS task"):
        build_skeleton_graph(
            dataclasses.replace(w, ps_tasks=2, pull_shard=np.array([0, 1]),
                                push_shard=np.array([0, 1])),
            {"ps": ["a:1", "b:1"], "worker": ["c:1"]},
            "/job:worker/task:0",
        )  # fmt: skip


def test_a_steady_point_launched_several_times_is_uncertain_by_its_launches():
    from types import SimpleNamespace

    from sgdsim.pipeline.validation import _steady_launch_columns

    def launch(rate: float, converged: bool) -> SimpleNamespace:
        return SimpleNamespace(steps_per_s=rate, steady=SimpleNamespace(converged=converged))

    # 1.8, 2.0, 2.2 steps/s: mean 2.0, sd 0.2; t(0.975, 2 df) = 4.303 (a t table)
    got = _steady_launch_columns([launch(1.8, True), launch(2.0, True), launch(2.2, True)], 0.95)
    assert got["steps_per_s_half_width"] == pytest.approx(4.303 * 0.2 / 3**0.5, rel=1e-3)
    assert got["rel_half_width"] == pytest.approx(got["steps_per_s_half_width"] / 2.0)
    assert got["converged"] is True
    # one launch cut at max_s: the mean is not converged
    cut = _steady_launch_columns([launch(1.8, True), launch(2.2, False)], 0.95)
    assert cut["converged"] is False
    # one launch keeps its own batch-means estimate
    assert _steady_launch_columns([launch(2.0, True)], 0.95) == {}
