"""The fast loop's early path compiled as one run (sgdsim.simulation.fast_run)
against the Python loop it mirrors: every figure the same to the bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdsim.bench import synthetic_resnet50
from sgdsim.simulation import Network, Workload, fast_fifo
from sgdsim.simulation.async_ps import _run_model
from sgdsim.simulation.policies import PolicySizes


def _workload(seed: int, latency_free: bool) -> Workload:
    rng = np.random.default_rng(seed)
    s, p, q = (int(x) for x in rng.integers(1, 14, 3))
    # tf_default draws each step's order from the profiled ones, when there are any
    k = int(rng.integers(0, 4))
    orders = np.concatenate([rng.permutation(p) for _ in range(k)]) if k else None
    return Workload(
        seg_dur_s=rng.uniform(1e-3, 2e-2, s),
        pull_bytes=rng.uniform(1e3, 2e6, p) * (rng.random(p) > 0.1),  # some empty
        pull_gate=rng.integers(0, s + 1, p),
        push_bytes=rng.uniform(1e3, 2e6, q) * (rng.random(q) > 0.1),
        push_seg=rng.integers(-1, s, q),
        push_update_s=rng.uniform(0, 2e-3, q),
        pull_start_s=0.0 if latency_free else 0.003,
        overhead_s=0.002,
        pull_orders=orders,
    )


def _runs(workload, network, n, policy, seed, offsets, monkeypatch, gap=0.0):
    def run():
        return _run_model(
            workload, network, n, 6, policy, seed, offsets, None, 1, "fair", 1.0, 0.0,
            (0.0, 0.0), gap, False, PolicySizes(),
        )  # fmt: skip

    compiled = run()
    with monkeypatch.context() as m:
        m.setattr(fast_fifo, "_COMPILED", False)
        python = run()
    return compiled, python


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 12),
    bandwidth=st.sampled_from([1e6, 3e7, 1e9, 1e11]),
    latency_free=st.booleans(),
    together=st.booleans(),
    policy=st.sampled_from(["tf_default", "tictac", "fifo_random"]),
    gap=st.sampled_from([0.0, 0.0, 2e-4, 3e-3]),
)
def test_compiled_run_gives_the_python_loops_figures_bit_for_bit(
    seed, n, bandwidth, latency_free, together, policy, gap, monkeypatch
):
    # random steps (empty pulls and pushes, pushes at step start), with and
    # without a latency and pull start (pulls join at once or by an event), from
    # random or equal start times (ties broken by the core's event order); pull
    # groups, or with a pull gap one pull at a time (tictac and fifo_random, as
    # the grid runs them); fifo_random draws a pull order per step as its pulls join,
    # tf_default one of the workload's profiled orders when it has some
    w = _workload(seed, latency_free)
    net = Network(bandwidth, 0.0 if latency_free else 1e-4)
    offsets = [0.0] * n if together else None
    gap = gap if policy != "tf_default" else 0.0
    a, b = _runs(w, net, n, policy, seed, offsets, monkeypatch, gap)
    assert a.step_ends == b.step_ends
    assert (a.now, a.events, a.busy, a.nic) == (b.now, b.events, b.busy, b.nic)
    assert (a.bytes_pulled, a.bytes_pushed, a.down_busy_s, a.up_busy_s) == (
        b.bytes_pulled, b.bytes_pushed, b.down_busy_s, b.up_busy_s,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("n", "bandwidth", "policy", "gap"),
    [(8, 1e9, "tf_default", 0.0), (48, 1e10, "tf_default", 0.0), (64, 1e11, "tf_default", 0.0),
     (32, 1e9, "tictac", 4e-4), (24, 1e9, "fifo_random", 0.0), (40, 1e10, "fifo_random", 4e-4)],
)  # fmt: skip
def test_compiled_run_matches_on_a_cnn_at_scale(n, bandwidth, policy, gap, monkeypatch):
    # many workers: the pull clock's log is trimmed and grows, the push link's
    # records and log grow, and the PS settles large batches
    a, b = _runs(synthetic_resnet50(), Network(bandwidth, 1e-5), n, policy, 1, None,
                 monkeypatch, gap)  # fmt: skip
    assert a.step_ends == b.step_ends
    assert (a.now, a.events, a.nic) == (b.now, b.events, b.nic)


def test_random_orders_beyond_the_cap_run_in_the_python_loop(monkeypatch):
    # fifo_random draws a pull order per worker step before a compiled run; when
    # those rows would not fit the cap, the Python loop runs, with the same figures
    w, net = _workload(7, False), Network(1e9, 1e-4)
    a = _runs(w, net, 6, "fifo_random", 7, None, monkeypatch, 2e-4)[0]

    def refuse(*args):
        raise AssertionError("the compiled run must not run beyond the cap")

    monkeypatch.setattr(fast_fifo, "_MAX_ORDER_CELLS", 1)
    monkeypatch.setattr(fast_fifo.fast_run, "run", refuse)
    b = _runs(w, net, 6, "fifo_random", 7, None, monkeypatch, 2e-4)[0]
    assert a.step_ends == b.step_ends
    assert (a.now, a.events, a.nic) == (b.now, b.events, b.nic)
    # tf_default draws from profiled orders as fifo_random draws (the Python loop
    # here); with the workload's single order it still runs compiled under the cap
    assert w.pull_order_rows is not None
    _runs(w, net, 6, "tf_default", 7, None, monkeypatch)
    with pytest.raises(AssertionError, match="beyond the cap"):
        _runs(dataclasses.replace(w, pull_orders=None), net, 6, "tf_default", 7, None, monkeypatch)
