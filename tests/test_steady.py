"""The steady-state protocol end to end: the testbed's runner, its prediction, the queue buffer."""

from __future__ import annotations

import json
import subprocess

import pytest
from test_testbed import child_processes, lenet, one_tensor_workload, ours, testbed_ok

from sgdsim.protocol import SteadyRule, steady_stop
from sgdsim.testbed import Testbed
from sgdsim.testbed.netns import tbf_params

__all__ = ["testbed_ok"]  # the fixture, used by name


# ----------------------------------------------------------------- prediction


def test_simulated_steady_state_of_a_compute_bound_worker_by_hand():
    from sgdsim.simulation import Network
    from sgdsim.testbed.protocol import simulate_steady

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
    from sgdsim.testbed.protocol import simulate_steady

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


# ----------------------------------------------------------------- queue buffer


def test_buffer_bytes_sets_every_shaped_queue_limit(testbed_ok):
    assert tbf_params(100e6, 1500, 20_000)[1] == 20_000
    assert tbf_params(100e6, 1500)[1] == 625_000  # default: 50 ms at 12.5 MB/s
    with pytest.raises(ValueError, match="one frame"):
        tbf_params(100e6, 1500, 1000)
    burst = tbf_params(100e6, 1500)[0]
    for queue in ("fifo", "fair"):
        with Testbed(1, bandwidth_bps=100e6, mtu=1500, queue=queue, buffer_bytes=20_000) as tb:
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

    before = ours()
    rule = SteadyRule(warmup_steps=3, settle_s=1.0, min_steps=30, max_s=40, batches=10)
    r = run_steady_measurement(
        lenet(), 2, 100e6, rule=rule, mtu=1500, queue="fifo", buffer_bytes=30_000
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
    assert e.window_s <= 40 + 1e-6
    if e.converged:  # stopped early: shortly after the deciding window
        assert min(e.steps) >= 30 and e.rel_half_width <= 0.03
        assert max(max(t) for t in r.step_end_times) < e.window_s + 10
    else:
        assert e.window_s == pytest.approx(40)
    assert ours() == before
    assert child_processes() == []
