"""The general loop compiled (sgdsim.simulation.fast_general) against the Python
objects it mirrors (AsyncPSModel.run): every figure the same to the bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdsim.bench import synthetic_resnet50
from sgdsim.simulation import Network, Workload, async_ps, fast_general, policies
from sgdsim.simulation.async_ps import _run_model
from sgdsim.simulation.policies import PolicySizes

# every policy with a fixed pull order (fifo_random draws one per step: fast_run's)
POLICIES = ["tf_default", "tictac", "p3", "bytescheduler", "prophet"]


def _workload(seed: int, latency_free: bool) -> Workload:
    """Random steps: empty pulls and pushes, pushes at step start, some pushes
    matched to a pull (P3's pull after update), some not."""
    rng = np.random.default_rng(seed)
    s, p, q = (int(x) for x in rng.integers(1, 14, 3))
    perm = rng.permutation(p)
    param = perm[:q] if q <= p else np.concatenate([perm, [-1] * (q - p)])
    param = np.where(rng.random(q) < 0.2, -1, param)
    return Workload(
        seg_dur_s=rng.uniform(1e-3, 2e-2, s),
        pull_bytes=rng.uniform(1e3, 2e6, p) * (rng.random(p) > 0.1),
        pull_gate=rng.integers(0, s + 1, p),
        push_bytes=rng.uniform(1e3, 2e6, q) * (rng.random(q) > 0.1),
        push_seg=rng.integers(-1, s, q),
        push_update_s=rng.uniform(0, 2e-3, q),
        pull_start_s=0.0 if latency_free else 0.003,
        overhead_s=0.002,
        push_param=param.astype(np.int64),
    )


def _runs(workload, network, n, policy, seed, offsets, monkeypatch, sizes, gap=0.0, steps=6):
    """(compiled, Python) runs of one configuration in the general loop."""
    calls = []
    real = fast_general.run_model

    def spy(model):
        calls.append(model)
        return real(model)

    def run():
        return _run_model(
            workload, network, n, steps, policy, seed, offsets, None, 1, "fair", 1.0, 0.0,
            (0.0, 0.0), gap, False, sizes,
        )  # fmt: skip

    with monkeypatch.context() as m:
        m.setattr(async_ps, "_FAST_POLICIES", frozenset())  # whole-tensor FIFO too
        m.setattr(fast_general, "run_model", spy)
        compiled = run()
        assert calls, "the compiled loop did not run"
        m.setattr(fast_general, "_COMPILED", False)
        python = run()
    assert len(calls) == 1
    return compiled, python


def _same(a, b) -> None:
    for f in dataclasses.fields(a):
        assert getattr(a, f.name) == getattr(b, f.name), f.name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 10),
    bandwidth=st.sampled_from([1e6, 3e7, 1e9, 1e11]),
    latency_free=st.booleans(),
    together=st.booleans(),
    policy=st.sampled_from(POLICIES),
    piece=st.sampled_from([1e5, 4e5, 3e6]),
    credit=st.sampled_from([2e5, 1e6, 5e6]),
    gap=st.sampled_from([0.0, 2e-4, 3e-3]),
)
def test_compiled_general_loop_gives_the_python_loops_figures_bit_for_bit(
    seed, n, bandwidth, latency_free, together, policy, piece, credit, gap, monkeypatch
):
    # slices, partitions and credit windows that bind (units smaller than tensors,
    # credits of one to a few units), Prophet's blocks within the stage budgets,
    # P3's pulls released after each update; with and without a latency, from random
    # or equal start times (ties broken by the core's event order); one-at-a-time
    # policies with a pull gap as the grid runs them
    w = _workload(seed, latency_free)
    net = Network(bandwidth, 0.0 if latency_free else 1e-4)
    offsets = [0.0] * n if together else None
    gap = gap if policies.get_policy(policy).serial_pulls else 0.0
    sizes = PolicySizes(piece, piece, credit)
    a, b = _runs(w, net, n, policy, seed, offsets, monkeypatch, sizes, gap)
    _same(a, b)


@pytest.mark.parametrize("policy", POLICIES)
def test_compiled_general_loop_matches_over_fixed_seeds(policy, monkeypatch):
    # every policy on 16 random steps each, with a latency (pushes, pulls and P3's
    # released pulls join by events) and units smaller than most tensors
    gap = 2e-4 if policies.get_policy(policy).serial_pulls else 0.0
    for seed in range(16):
        w, net = _workload(seed, False), Network(1e9, 1e-4)
        sizes = PolicySizes(1e5, 1e5, 1e6)
        _same(*_runs(w, net, 3, policy, seed, None, monkeypatch, sizes, gap))


@pytest.mark.parametrize(
    ("n", "bandwidth", "policy", "sizes"),
    [(24, 1e9, "p3", PolicySizes(2e4)), (16, 1e10, "bytescheduler", PolicySizes(1e9, 5e4, 5e7)),
     (20, 1e9, "prophet", PolicySizes()), (12, 1e8, "p3", PolicySizes())],
)  # fmt: skip
def test_compiled_general_loop_matches_on_a_cnn_at_scale(n, bandwidth, policy, sizes, monkeypatch):
    # many workers and small units: the queues' heaps, the pools of events and runs
    # and ByteScheduler's rings of released units outgrow their first sizes
    a, b = _runs(synthetic_resnet50(), Network(bandwidth, 1e-4), n, policy, 3, None,
                 monkeypatch, sizes, steps=4)  # fmt: skip
    _same(a, b)


class _Lifo(policies.FifoQueue):
    """A queue the compiled loop does not know."""

    def take(self, budget):  # type: ignore[no-untyped-def]
        return self._q.pop() if self._q else None


@pytest.mark.parametrize(
    "case", ["trace", "join delay", "fifo discipline", "shared node", "quantum", "shards", "queue"]
)
def test_what_the_compiled_loop_does_not_model_runs_in_python(case, monkeypatch):
    # each of these needs the Python objects: the compiled loop must not run
    w = _workload(5, False)
    if case == "shards":
        w = dataclasses.replace(w, ps_tasks=2, pull_shard=np.arange(len(w.pull_bytes)) % 2)
    if case == "queue":
        spec = dataclasses.replace(policies.P3().spec(PolicySizes()), pull_queue=_Lifo)
        monkeypatch.setattr(policies.P3, "spec", lambda self, sizes: spec)
    kw = {"trace": None, "wpn": 1, "disc": "fair", "quantum": 0.0, "delays": (0.0, 0.0)}
    kw |= {"trace": {"trace": []}, "join delay": {"delays": (0.0, 1e-3)},
           "fifo discipline": {"disc": "fifo"}, "shared node": {"wpn": 2},
           "quantum": {"quantum": 1e5}}.get(case, {})  # fmt: skip

    def refuse(model):
        raise AssertionError("the compiled loop ran")

    monkeypatch.setattr(fast_general, "run_model", refuse)
    raw = _run_model(
        w, Network(1e8, 1e-4), 3, 3, "p3", 1, None, kw["trace"], kw["wpn"], kw["disc"], 1.0,
        kw["quantum"], kw["delays"], 0.0, False, PolicySizes(),
    )  # fmt: skip
    assert len(raw.step_ends) == 3 and all(len(e) == 3 for e in raw.step_ends)
