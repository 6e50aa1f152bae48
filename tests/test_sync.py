"""Synchronous SGD: the simulated modes against the DAG model's closed forms, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from sgdsim.simulation import Workload
from sgdsim.simulation.dag import mgwfbp_groups, ring_allreduce_s, wfbp_iteration
from sgdsim.simulation.point import SimParams, predict_point
from sgdsim.simulation.sync import (
    CollectiveSettings,
    Group,
    Ring,
    gradients,
    run_allreduce,
    simulate,
)
from sgdsim.simulation.workload import Network

MB = 1e6


def layers(forward_s: float, tb: list[float], nbytes: list[float], update_s: float = 0.0):
    """A step of one forward segment, then the backward of layers L−1 … 0 (``tb`` and
    ``nbytes`` in forward order), each pushing its gradient when done."""
    n = len(tb)
    back = list(range(n - 1, -1, -1))
    return Workload(
        seg_dur_s=np.array([forward_s] + [tb[i] for i in back]),
        pull_bytes=np.array([b for b in nbytes]),
        pull_gate=np.zeros(n, np.int64),
        push_bytes=np.array([nbytes[i] for i in back]),
        push_seg=np.arange(1, n + 1, dtype=np.int64),
        push_update_s=np.full(n, update_s / n),
    )


def period(ends: list[float]) -> float:
    return ends[-1] - ends[-2]


@pytest.mark.parametrize("p", [2, 3, 8, 64])
def test_one_tensor_all_reduce_is_the_ring_closed_form(p):
    net = Network(1.25e8, 2e-5)
    settings = CollectiveSettings(message_overhead_s=3e-5)
    w = layers(0.1, [0.2], [40 * MB])
    ends, _, _ = run_allreduce(w, net, p, 5, "none", settings)
    ring = ring_allreduce_s(40 * MB, p, 2e-5 + 3e-5, 1 / 1.25e8)
    assert period(ends) == pytest.approx(0.3 + ring, rel=1e-9)
    assert Ring(p, net, settings).allreduce_s(40 * MB) == pytest.approx(ring, rel=1e-12)


@pytest.mark.parametrize("p", [2, 5, 16])
def test_wfbp_iteration_is_the_dag_models(p):
    # no contention, one channel: the step is the DAG's iteration (τc[0] + tc[0],
    # the update and the next forward); compute-bound and communication-bound layers
    tb = [0.03, 0.01, 0.05, 0.02, 0.04]
    nbytes = [2 * MB, 9 * MB, 0.5 * MB, 6 * MB, 1 * MB]
    net = Network(1e8, 1e-4)
    w = layers(0.07, tb, nbytes, update_s=0.012)
    ends, _, _ = run_allreduce(w, net, p, 4, "none", CollectiveSettings())
    tc = [ring_allreduce_s(b, p, 1e-4, 1e-8) for b in nbytes]
    dag = wfbp_iteration(tb, tc, update_s=0.012, forward_s=0.07)
    assert period(ends) == pytest.approx(dag.iteration_s, rel=1e-9)


def test_single_fusion_waits_for_back_propagation():
    tb, nbytes = [0.03, 0.01, 0.05], [2 * MB, 9 * MB, 0.5 * MB]
    net = Network(1e8, 1e-4)
    ends, _, _ = run_allreduce(layers(0.07, tb, nbytes), net, 4, 3, "single", CollectiveSettings())
    assert period(ends) == pytest.approx(0.07 + 0.09 + ring_allreduce_s(11.5 * MB, 4, 1e-4, 1e-8))


def test_mgwfbp_fusion_uses_the_papers_groups():
    # MG-WFBP's own worked rule on the step: the simulated period is the DAG
    # iteration of its groups (each group's bytes on its lowest layer)
    tb = [0.02, 0.002, 0.03, 0.001, 0.02]
    nbytes = [3 * MB, 1 * MB, 4 * MB, 0.2 * MB, 2 * MB]
    net, p = Network(1e8, 2e-3), 8
    ring = Ring(p, net, CollectiveSettings())
    w = layers(0.05, tb, nbytes)
    ends, _, _ = run_allreduce(w, net, p, 4, "mgwfbp", CollectiveSettings())
    groups = mgwfbp_groups(tb, nbytes, ring.allreduce_s, 2 * (p - 1) * 2e-3)
    assert any(len(g) > 1 for g in groups)  # the example merges something
    tc = [0.0] * len(tb)
    for g in groups:
        tc[min(g)] = ring.allreduce_s(sum(nbytes[i] for i in g))
    dag = wfbp_iteration(tb, tc, forward_s=0.05)
    assert period(ends) == pytest.approx(dag.iteration_s, rel=1e-9)
    none, _, _ = run_allreduce(w, net, p, 4, "none", CollectiveSettings())
    assert period(ends) < period(none)


def test_ddp_buckets_reduce_each_bucket_when_its_last_gradient_is_in():
    # production order 0.6, 0.3, 0.9, 2 MB, one every 10 ms: the first bucket
    # (cap 1 MiB) closes at 1.8 MB, when the third is in (30 ms); the second
    # (cap 1.1 MB) holds the 2 MB (40 ms)
    tb, nbytes = [0.01, 0.01, 0.01, 0.01], [2e6, 0.9e6, 0.3e6, 0.6e6]
    s = CollectiveSettings(bucket_bytes=1.1e6, first_bucket_bytes=2**20)
    net, p = Network(1e8, 0.0), 2
    ends, _, _ = run_allreduce(layers(0.0, tb, nbytes), net, p, 3, "buckets", s)
    c1, c2 = (ring_allreduce_s(b, p, 0.0, 1e-8) for b in (1.8e6, 2e6))
    assert period(ends) == pytest.approx(max(0.03 + c1, 0.04) + c2, rel=1e-9)


def test_horovod_fuses_what_is_ready_at_each_cycle():
    # 5 ms cycles; gradients ready at 3 ms (two of 1 MB), 12 ms (1 MB): the first
    # cycle (5 ms) sends both together, the third (15 ms) the last
    w = Workload(
        seg_dur_s=np.array([0.003, 0.009]),
        pull_bytes=np.array([1.0]),
        pull_gate=np.array([0]),
        push_bytes=np.array([1 * MB, 1 * MB, 1 * MB]),
        push_seg=np.array([0, 0, 1]),
        push_update_s=np.zeros(3),
    )
    net, p = Network(1e9, 0.0), 2
    s = CollectiveSettings(horovod_cycle_s=0.005, horovod_fusion_bytes=64 * MB)
    ends, _, _ = run_allreduce(w, net, p, 1, "horovod", s)
    c1, c2 = (ring_allreduce_s(b, p, 0.0, 1e-9) for b in (2 * MB, 1 * MB))
    assert ends[0] == pytest.approx(max(0.005 + c1, 0.015) + c2, rel=1e-9)
    # a fusion buffer smaller than two gradients sends them one by one
    small = CollectiveSettings(horovod_cycle_s=0.005, horovod_fusion_bytes=1.5 * MB)
    ends, _, _ = run_allreduce(w, net, p, 1, "horovod", small)
    assert ends[0] == pytest.approx(max(0.005 + 2 * c2, 0.015) + c2, rel=1e-9)


def test_hierarchical_all_reduce_by_hand():
    # 8 workers, 4 per node, 2 nodes: 2·3 intra hops of b/4 and 2·1 inter hops of b/2
    nic, link = Network(1e9, 1e-5), Network(1e10, 2e-6)
    s = CollectiveSettings(algorithm="hierarchical", gpus_per_node=4, intra_node=link)
    b = 64 * MB
    want = 6 * (2e-6 + b / 4 / 1e10) + 2 * (1e-5 + b / 2 / 1e9)
    assert Ring(8, nic, s).allreduce_s(b) == pytest.approx(want, rel=1e-12)
    # a flat ring on the same nodes: 14 steps, each as slow as its NIC hop
    flat = CollectiveSettings(gpus_per_node=4, intra_node=link)
    assert Ring(8, nic, flat).allreduce_s(b) == pytest.approx(14 * (1e-5 + b / 8 / 1e9))
    # one node: every hop on the interconnect
    assert Ring(4, nic, flat).allreduce_s(b) == pytest.approx(6 * (2e-6 + b / 4 / 1e10))


def test_sync_ps_one_tensor_by_hand():
    # pull, compute, push; N flows share the PS NIC (b/(B/N) each way), N
    # accumulations and one apply of u on the PS, then the step's overhead
    n, b, bw, lat, u = 4, 5 * MB, 1e8, 1e-3, 0.004
    w = Workload(
        seg_dur_s=np.array([0.05]),
        pull_bytes=np.array([b]),
        pull_gate=np.array([0]),
        push_bytes=np.array([b]),
        push_seg=np.array([0]),
        push_update_s=np.array([u]),
        overhead_s=0.002,
    )
    log: list[list[float]] = []
    r = simulate(w, Network(bw, lat), n, 6, 2, "tf_default", mode="sync_ps", step_log=log)
    step = (lat + n * b / bw) + 0.05 + (lat + n * b / bw) + n * u + u + 0.002
    assert period(log[0]) == pytest.approx(step, rel=1e-9)
    assert len(log) == n and log[1] == log[0]
    assert r.steps_per_s == pytest.approx(n / step, rel=1e-9)
    # a token bucket of 100 kB before the PS NIC: the N flows that start together
    # share its burst, so the pull and the push each end 100 kB / B sooner
    log.clear()
    burst = Network(bw, lat, burst_bytes=1e5)
    simulate(w, burst, n, 6, 2, "tf_default", mode="sync_ps", step_log=log)
    assert period(log[0]) == pytest.approx(step - 2 * 1e5 / bw, rel=1e-9)


def test_one_worker_needs_no_communication():
    w = layers(0.1, [0.2, 0.3], [10 * MB, 20 * MB], update_s=0.01)
    for fusion in ("single", "none", "buckets", "mgwfbp"):
        ends, _, _ = run_allreduce(w, Network(1e6, 1e-3), 1, 3, fusion, CollectiveSettings())
        assert period(ends) == pytest.approx(0.61, rel=1e-12)
    # Horovod's loop still hands the last gradient over at the next 5 ms cycle
    ends, _, _ = run_allreduce(w, Network(1e6, 1e-3), 1, 3, "horovod", CollectiveSettings())
    assert period(ends) == pytest.approx(0.615, rel=1e-9)


def test_gradients_in_production_order():
    w = layers(0.1, [0.2, 0.3], [10 * MB, 20 * MB])
    assert gradients(w) == [Group(pytest.approx(0.4), 20 * MB), Group(pytest.approx(0.6), 10 * MB)]
    assert gradients(w, 0.5)[0].ready_s == pytest.approx(0.8)


def test_predict_point_modes_and_errors():
    w = layers(0.1, [0.2, 0.3], [10 * MB, 20 * MB], update_s=0.01)
    params = SimParams(steps_per_worker=8, warmup_steps=2, replications=2, seed=0,
                       workers_per_node=1, ps_discipline="fair")  # fmt: skip
    net = Network(1.25e8, 1e-4)
    a = predict_point(w, net, 4, "tf_default", params)
    s = predict_point(w, net, 4, "tf_default", params, mode="sync_ps")
    r = predict_point(w, net, 4, "buckets", params, mode="allreduce")
    assert s["steps_per_s"] > 0 and r["steps_per_s"] > 0 and a["steps_per_s"] > 0
    assert r["policy"] == "buckets" and r["cpu_bound_steps_per_s"] is None
    with pytest.raises(ValueError, match="fusion"):
        predict_point(w, net, 4, "tf_default", params, mode="allreduce")
    with pytest.raises(ValueError, match="mode"):
        predict_point(w, net, 4, "tf_default", params, mode="bogus")
    sharded = Workload(**{**w.__dict__, "ps_tasks": 2})
    with pytest.raises(ValueError, match="one PS shard"):
        predict_point(sharded, net, 4, "tf_default", params, mode="sync_ps")


def test_sync_modes_are_deterministic_and_fast_at_64_workers():
    w = layers(0.1, [0.01] * 50, [2 * MB] * 50, update_s=0.01)
    params = SimParams(steps_per_worker=50, warmup_steps=3, replications=5, seed=1,
                       workers_per_node=1, ps_discipline="fair")  # fmt: skip
    net = Network(1.25e9, 2e-5)
    for mode, pol in (("sync_ps", "tf_default"), ("allreduce", "horovod")):
        one = predict_point(w, net, 64, pol, params, mode=mode)
        two = predict_point(w, net, 64, pol, params, mode=mode)
        assert one["steps_per_s"] == two["steps_per_s"]
        assert one["events"] < 50 * 500  # one representative worker, not 64
