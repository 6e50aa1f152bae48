"""Transmission policies (p3, bytescheduler, prophet) and PS shards, by hand and by property."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

from sgdsim.simulation import POLICIES, Network, Workload, async_ps, simulate_async
from sgdsim.simulation.chrome_trace import chrome_trace
from sgdsim.simulation.link import MaxMinLink
from sgdsim.simulation.policies import CreditQueue, split_bytes

f = np.asarray
NET = Network(1e7, 0.0)  # 10 MB/s: 1 MB takes 0.1 s, 0.5 MB 0.05 s; no latency


def two_params(push_param: list[int] | None = None) -> Workload:
    """Two layers; a (layer 1) and b (layer 2), 1 MB each, both directions.

    Segments: forward 1 (0.05 s, reads a), forward 2 (0.05 s, reads b),
    backward 2 (0.05 s, then pushes gradient gb), backward 1 (0.04 s, then
    pushes ga). The trace delivered b before a (pulls in workload order b, a).
    Updating a costs the PS 0.05 s, b nothing.
    """
    return Workload(
        seg_dur_s=f([0.05, 0.05, 0.05, 0.04]),
        pull_bytes=f([1e6, 1e6]),  # [b, a]
        pull_gate=f([1, 0]),
        push_bytes=f([1e6, 1e6]),  # [gb, ga]
        push_seg=f([2, 3]),
        push_update_s=f([0.0, 0.05]),
        push_param=None if push_param is None else f(push_param),
    )


def step_ends(w: Workload, policy: str, seed: int = 0, net: Network = NET, **kw) -> list[float]:
    log: list[list[float]] = []
    simulate_async(w, net, 1, 2, 0, policy=policy, seed=seed, step_log=log, **kw)
    return log[0]


def test_split_bytes():
    assert split_bytes(1e6, 4e5) == [4e5, 4e5, 2e5]
    assert split_bytes(1e6, 5e5) == [5e5, 5e5]
    assert split_bytes(3e5, 5e5) == [3e5]
    assert split_bytes(0.0, 5e5) == [0.0]
    assert split_bytes(7.0, float("inf")) == [7.0]


def test_whole_tensor_policies_by_hand_on_two_params():
    w = two_params()
    # tf_default, pulls b then a: b 0-0.1, a 0.1-0.2 s; fwd1 0.20-0.25, fwd2 0.25-0.30,
    # bwd2 0.30-0.35, gb on the wire 0.35-0.45; bwd1 0.35-0.39, ga waits for gb:
    # 0.45-0.55, its update 0.55-0.60. Step 0.60 s; the second the same.
    assert step_ends(w, "tf_default") == pytest.approx([0.60, 1.20])
    # tictac, a then b: a at 0.1, b at 0.2; fwd1 0.10-0.15, fwd2 0.20-0.25, bwd2
    # 0.25-0.30, gb 0.30-0.40; bwd1 0.30-0.34; ga 0.40-0.50, update 0.50-0.55.
    assert step_ends(w, "tictac") == pytest.approx([0.55, 1.10])
    # fifo_random: one of the two orders per step
    seen = {tuple(round(t, 9) for t in step_ends(w, "fifo_random", s)) for s in range(12)}
    assert seen <= {(0.55, 1.10), (0.55, 1.15), (0.60, 1.15), (0.60, 1.20)} and len(seen) > 1


def test_tf_default_draws_each_steps_pull_order_from_the_profiled_ones():
    # the same two layers as above, with profiled orders [b, a] (index 0 then 1:
    # the workload's own order) and [a, b]: each step takes one of the two
    # hand-computed steps (0.60 s, or 0.55 s as tictac's order gives it)
    both = dataclasses.replace(two_params(), pull_orders=np.array([0, 1, 1, 0]))
    seen = {tuple(round(t, 9) for t in step_ends(both, "tf_default", s)) for s in range(12)}
    assert seen <= {(0.55, 1.10), (0.55, 1.15), (0.60, 1.15), (0.60, 1.20)} and len(seen) > 1
    assert step_ends(both, "tf_default", 3) == step_ends(both, "tf_default", 3)  # seeded
    # one profiled order, not the workload's: every step takes it
    a_first = dataclasses.replace(two_params(), pull_orders=np.array([1, 0]))
    assert step_ends(a_first, "tf_default") == pytest.approx([0.55, 1.10])
    # tictac keeps its forward order whatever the profile saw
    assert step_ends(both, "tictac") == pytest.approx([0.55, 1.10])


def test_p3_by_hand_on_two_params():
    w = two_params()
    # Slices of 0.5 MB (0.05 s each). Pulls go in layer order: a 0-0.1, b 0.1-0.2 s;
    # compute as tictac up to bwd2 (0.25-0.30). gb0 0.30-0.35 on the wire; bwd1
    # (0.30-0.34) issues ga, which outranks gb (earlier layer): at 0.35 ga0 goes
    # before gb1 (no interruption of gb0): ga0 0.35-0.40 (update 0.40-0.425), ga1
    # 0.40-0.45 (0.45-0.475), gb1 0.45-0.50 (update 0). Step ends 0.50, not 0.55.
    assert step_ends(w, "p3", p3_slice_bytes=5e5) == pytest.approx([0.50, 1.00])
    # One slice per tensor: tictac's order, whole tensors (0.55).
    assert step_ends(w, "p3", p3_slice_bytes=1e6) == pytest.approx([0.55, 1.10])


def test_p3_pull_after_update_by_hand_on_two_params():
    # Same, and the PS knows gb updates pull 0 (b), ga pull 1 (a): each updated
    # slice goes back at once as the next step's pull.
    w = two_params(push_param=[0, 1])
    # Step 0 as above up to the pushes: gb0 at the PS 0.35 (update 0) -> pull b0 for
    # step 1 on the wire 0.35-0.40; ga0 arrives 0.40, updated 0.40-0.425 -> pull a0
    # 0.425-0.475; ga1 arrives 0.45, updated 0.45-0.475 -> pull a1 0.475-0.525;
    # gb1 arrives 0.50 -> pull b1 queued behind a1 (a is more urgent, and on the
    # wire anyway): 0.525-0.575. Step 0 ends when its compute ends, 0.34 s: its
    # pushes now hold step 1 through step 1's pulls, not step 0's end.
    # Step 1 (from 0.34 s, no pulls of its own to issue): fwd1 waits for a (0.525):
    # 0.525-0.575; fwd2 for b (0.575): 0.575-0.625; bwd2 0.625-0.675; bwd1
    # 0.675-0.715. Last step: no next pulls, ends with its compute at 0.715 s.
    assert step_ends(w, "p3", p3_slice_bytes=5e5) == pytest.approx([0.34, 0.715])


def test_bytescheduler_by_hand_on_two_params():
    w = two_params()
    # Partitions of 0.5 MB, credit 1 MB (two partitions released and undelivered).
    # Pulls in layer order: a 0-0.1, b 0.1-0.2; compute as tictac. At 0.30 gb0 and
    # gb1 are released (credit full), gb0 0.30-0.35; ga0, ga1 come at 0.34 and
    # wait. At 0.35 gb0 is delivered, ga0 released behind gb1: gb1 0.35-0.40; ga0
    # 0.40-0.45 (update 0.45-0.475), ga1 0.45-0.50 (update 0.50-0.525). Step 0.525:
    # the urgent ga waited one credit, not the whole of gb.
    kw = {"bytescheduler_partition_bytes": 5e5, "bytescheduler_credit_bytes": 1e6}
    assert step_ends(w, "bytescheduler", **kw) == pytest.approx([0.525, 1.05])
    # A credit of one partition: ga0 follows gb0 at once, as in p3 (0.50).
    kw["bytescheduler_credit_bytes"] = 5e5
    assert step_ends(w, "bytescheduler", **kw) == pytest.approx([0.50, 1.00])


def test_prophet_by_hand():
    # Five gradients over three backward stages, no pulls. Segments 0.05, 0.09,
    # 0.05 s; after segment 0: c1, c2, c3 (0.5 MB each); after 1: a (1 MB, update
    # 0.05 s, the most urgent so far); after 2: d (0.1 MB, most urgent).
    w = Workload(
        seg_dur_s=f([0.05, 0.09, 0.05]),
        pull_bytes=f([]),
        pull_gate=f([], np.int64),
        push_bytes=f([5e5, 5e5, 5e5, 1e6, 1e5]),
        push_seg=f([0, 0, 0, 1, 2]),
        push_update_s=f([0, 0, 0, 0.05, 0]),
    )
    # Budgets: stage 1 (gap 0.09 s to the next) (0.09 + 0.001) x 10 MB/s = 0.91 MB;
    # stage 2 (gap 0.05 s) 0.51 MB; stage 3 is the last: no limit.
    # 0.05: block [c1] (c1 + c2 = 1 MB > 0.91): 0.05-0.10; 0.10: [c2] 0.10-0.15;
    # a comes at 0.14 and waits (no preemption); 0.15: block [a] (the most urgent;
    # a + c3 > 0.51 MB) 0.15-0.25, update 0.25-0.30; d comes at 0.19 (compute
    # done); 0.25: no limit after the last stage: block [d, c3] 0.6 MB 0.25-0.31.
    # Step ends 0.31 s.
    assert step_ends(w, "prophet") == pytest.approx([0.31, 0.62])
    # tf_default: c1, c2, c3 0.05-0.20, a 0.20-0.30 (update 0.30-0.35), d 0.30-0.31.
    assert step_ends(w, "tf_default") == pytest.approx([0.35, 0.70])
    # two whole-tensor pulls go in layer order under prophet: as tictac
    assert step_ends(two_params(), "prophet") == pytest.approx([0.55, 1.10])


def test_general_loop_reproduces_the_fast_loop_on_whole_tensor_policies(monkeypatch):
    # The policies of the fast loop, run through the general one (per-connection
    # queues handing the link one tensor at a time) give the same figures.
    rng = np.random.default_rng(5)
    w = Workload(
        seg_dur_s=rng.uniform(1e-3, 2e-2, 7),
        pull_bytes=rng.uniform(1e4, 2e6, 9),
        pull_gate=rng.integers(0, 8, 9),
        push_bytes=rng.uniform(1e4, 2e6, 6),
        push_seg=rng.integers(-1, 7, 6),
        push_update_s=rng.uniform(0, 2e-3, 6),
        pull_start_s=0.003,
        overhead_s=0.002,
    )
    fields = ("steps_per_s", "mean_step_s", "sim_time_s", "bytes_pulled", "ps_up_util")
    for policy, (n, per_node, disc) in itertools.product(
        ("tf_default", "tictac", "fifo_random"),
        ((1, 1, "fair"), (5, 1, "fair"), (6, 2, "fair"), (4, 1, "fifo")),
    ):
        kw = {"policy": policy, "seed": 3, "workers_per_node": per_node, "ps_discipline": disc}
        fast = simulate_async(w, Network(2e7, 1e-4), n, 8, 2, **kw)
        with monkeypatch.context() as m:
            m.setattr(async_ps, "_FAST_POLICIES", frozenset())
            general = simulate_async(w, Network(2e7, 1e-4), n, 8, 2, **kw)
        for name in fields:
            assert getattr(general, name) == pytest.approx(getattr(fast, name), rel=1e-9)


def test_tictac_and_p3_never_slower_than_fifo_random_on_average_when_communication_bound():
    rng = np.random.default_rng(0)
    n = 12
    sizes = rng.uniform(1e5, 2e6, n)
    order = rng.permutation(n)  # traced arrival order unrelated to the forward order
    # pull i carries the variable of layer order[i]; its gradient is push order[i]
    w = Workload(
        seg_dur_s=f([0.004] * n),
        pull_bytes=sizes[order],
        pull_gate=order,
        push_bytes=sizes,
        push_seg=f(list(range(n - 1, -1, -1))),
        push_update_s=f([1e-4] * n),
        push_param=np.argsort(order),
    )
    net = Network.from_bits(1e8, 1e-4)
    for workers in (1, 2, 4):
        rand = np.mean(
            [
                simulate_async(w, net, workers, 12, 2, policy="fifo_random", seed=s).steps_per_s
                for s in range(8)
            ]
        )
        for policy in ("tictac", "p3"):
            r = np.mean(
                [
                    simulate_async(w, net, workers, 12, 2, policy=policy, seed=s).steps_per_s
                    for s in range(8)
                ]
            )
            assert r >= rand * (1 - 1e-9), (policy, workers, r, rand)


def test_maxmin_link_by_hand():
    # NICs 0, 1: two PS shards; 2, 3, 4: workers' NICs; 10 MB/s each, 1 MB flows.
    # Worker 0 pulls from both shards, workers 1 and 2 from shard 0 only.
    link = MaxMinLink(1e7, 5)
    link.add(0.0, 1e6, "w0a", conn=("w0", 0), route=(0, 2))
    link.add(0.0, 1e6, "w0b", conn=("w0", 1), route=(1, 2))
    link.add(0.0, 1e6, "w1a", conn=("w1", 0), route=(0, 3))
    link.add(0.0, 1e6, "w2a", conn=("w2", 0), route=(0, 4))
    # Water-filling: shard 0 (3 flows) fills first at 10/3 MB/s each; worker 0's NIC
    # then has 10 - 10/3 left for w0b, which shard 1 would allow: w0b at 20/3 MB/s
    # leaves at 1 / (20/3) = 0.15 s; the shard-0 flows have 0.5 MB left at 0.15 s,
    # still at 10/3 MB/s (shard 0 binds): they leave at 0.15 + 0.15 = 0.30 s.
    done = {}
    while link.active:
        t = link.next_departure()
        assert t is not None
        payload, _, _ = link.pop_next(t)
        done[payload] = t
    assert done == pytest.approx({"w0b": 0.15, "w0a": 0.30, "w1a": 0.30, "w2a": 0.30})
    assert link.nic_bytes == pytest.approx([3e6, 1e6, 2e6, 1e6, 1e6])
    assert link.busy_s == pytest.approx([0.30, 0.15, 0.30, 0.30, 0.30])
    with pytest.raises(ValueError, match="already"):
        link.add(1.0, 1.0, "x", conn="c", route=(0, 2))
        link.add(1.0, 1.0, "y", conn="c", route=(0, 2))


def sharded_pulls(k: int) -> Workload:
    # one 1 ms segment reading two 1 MB pulls, a from shard 0 and b from shard k - 1
    return Workload(
        seg_dur_s=f([0.001]),
        pull_bytes=f([1e6, 1e6]),
        pull_gate=f([0, 0]),
        push_bytes=f([]),
        push_seg=f([], np.int64),
        push_update_s=f([]),
        pull_shard=f([0, k - 1]),
        push_shard=f([], np.int64),
        ps_tasks=k,
    )


def test_two_shards_one_worker_the_worker_nic_binds():
    # One PS: a then b on one connection, 0.1 s each: segment 0.200-0.201 s.
    assert step_ends(sharded_pulls(1), "tf_default") == pytest.approx([0.201, 0.402])
    # Two shards: a and b travel at once on two connections, each shard NIC could
    # give 10 MB/s but the worker's NIC carries both: 5 MB/s each, both at 0.2 s.
    log: list[list[float]] = []
    nic: dict[str, tuple[float, float]] = {}
    simulate_async(sharded_pulls(2), NET, 1, 2, 0, step_log=log, nic_stats=nic)
    assert log[0] == pytest.approx([0.201, 0.402])
    assert nic["node0.in"] == pytest.approx((4e6, 0.4))  # worker NIC busy all the time
    assert nic["ps0.out"] == pytest.approx((2e6, 0.4))  # shards at half rate throughout
    assert nic["ps1.out"] == pytest.approx((2e6, 0.4))


def test_two_shards_four_workers_each_shard_nic_binds():
    # Four workers start together; each pulls 1 MB from each shard. Shard NICs carry
    # 4 flows each (10/4 = 2.5 MB/s per flow), a worker's NIC only 2 x 2.5 = 5 MB/s:
    # the shards bind, every pull lands at 1 / 2.5 = 0.4 s; step 0.401 s.
    log: list[list[float]] = []
    r = simulate_async(sharded_pulls(2), NET, 4, 1, 0, start_offsets_s=[0] * 4, step_log=log)
    assert log == [pytest.approx([0.401])] * 4
    # One PS: 8 MB over one NIC, each worker's two pulls one after another: 0.801 s.
    log = []
    simulate_async(sharded_pulls(1), NET, 4, 1, 0, start_offsets_s=[0] * 4, step_log=log)
    assert log == [pytest.approx([0.801])] * 4
    assert r.bytes_pulled == pytest.approx(8e6)


def test_each_shard_has_its_own_ps_cpu():
    # Two 1-byte pushes after the only segment (0.01 s), each costing its PS 0.1 s.
    def w(k: int) -> Workload:
        return Workload(
            seg_dur_s=f([0.01]),
            pull_bytes=f([]),
            pull_gate=f([], np.int64),
            push_bytes=f([1.0, 1.0]),
            push_seg=f([0, 0]),
            push_update_s=f([0.1, 0.1]),
            pull_shard=f([], np.int64),
            push_shard=f([0, k - 1]),
            ps_tasks=k,
        )

    net = Network(1e12, 0.0)
    # one PS CPU: the updates run one after the other, 0.01 + 0.2 s
    assert step_ends(w(1), "tf_default", net=net) == pytest.approx([0.21, 0.42])
    # two shards: in parallel, 0.01 + 0.1 s
    assert step_ends(w(2), "tf_default", net=net) == pytest.approx([0.11, 0.22])


@pytest.mark.parametrize("policy", POLICIES)
def test_chrome_trace_stays_serialized_per_track_for_every_policy_and_shards(policy):
    rng = np.random.default_rng(2)
    w = Workload(
        seg_dur_s=f([0.01, 0.02, 0.01, 0.01]),
        pull_bytes=f([1e5, 4e5, 3e5]),
        pull_gate=f([0, 1, 2]),
        push_bytes=f([3e5, 1e5, 5e5]),
        push_seg=f([1, 2, 3]),
        push_update_s=f([1e-3, 2e-3, 1e-3]),
        push_param=f([2, 1, 0]),
        pull_shard=f([0, 1, 1]),
        push_shard=f([1, 1, 0]),
        ps_tasks=2,
    )
    for ps_w in (w, dataclasses.replace(w, ps_tasks=1, pull_shard=None, push_shard=None)):
        records: list = []
        simulate_async(
            ps_w,
            Network(1e7, 1e-4),
            3,
            4,
            1,
            policy=policy,
            seed=int(rng.integers(100)),
            trace=records,
            p3_slice_bytes=1e5,
            bytescheduler_partition_bytes=2e5,
            bytescheduler_credit_bytes=3e5,
        )
        tr = chrome_trace(records, 3, {"policy": policy})
        spans = [e for e in tr["traceEvents"] if e["ph"] == "X"]
        assert {e["cat"] for e in spans} == {"compute", "pull", "push", "update"}
        assert sum(e["cat"] == "compute" for e in spans) == 3 * 4 * 4
        by_track: dict = {}
        for e in spans:
            assert e["dur"] >= 0 and e["ts"] >= 0
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        for iv in by_track.values():
            iv.sort()
            assert all(a[1] <= b[0] + 1e-6 for a, b in itertools.pairwise(iv))
        named = {(e["pid"], e["tid"]) for e in tr["traceEvents"] if e["name"] == "thread_name"}
        assert set(by_track) <= named  # every span on a named thread
        json.dumps(tr)


def test_bad_policy_sizes_and_push_param_are_refused():
    w = two_params()
    with pytest.raises(ValueError, match="p3_slice_bytes"):
        simulate_async(w, NET, 1, 2, 0, policy="p3", p3_slice_bytes=0)
    with pytest.raises(ValueError, match="bytescheduler_credit_bytes"):
        simulate_async(w, NET, 1, 2, 0, policy="bytescheduler", bytescheduler_credit_bytes=-1)
    with pytest.raises(ValueError, match="push_param"):
        two_params(push_param=[0, 0])  # one pull for two pushes
    with pytest.raises(ValueError, match="push_param"):
        two_params(push_param=[0, 2])  # no pull 2


def test_push_param_round_trips_and_old_files_load():
    w = two_params(push_param=[0, 1])
    back = Workload.from_dict(json.loads(json.dumps(w.to_dict())))
    assert back.pushes_param.tolist() == [0, 1]
    old = w.to_dict()
    del old["push_param"]
    assert Workload.from_dict(old).pushes_param.tolist() == [-1, -1]
    # pull orders: (K, P) rows in memory, flat in the file; absent in old files
    o = dataclasses.replace(w, pull_orders=np.array([0, 1, 1, 0]))
    back = Workload.from_dict(json.loads(json.dumps(o.to_dict())))
    assert back.pull_order_rows is not None
    assert back.pull_order_rows.tolist() == [[0, 1], [1, 0]]
    del old["pull_orders"]
    assert Workload.from_dict(old).pull_order_rows is None


def test_documented_policy_example_by_hand(monkeypatch):
    # The worked example of docs/policies.md ("Adding a policy"), run as written there.
    from pathlib import Path

    from sgdsim.simulation import policies

    doc = (Path(__file__).parents[1] / "docs" / "policies.md").read_text()
    section = doc.split("## Adding a policy", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace = dict(vars(policies))
    exec(code, namespace)
    cls = namespace["PushPriority"]
    monkeypatch.setitem(policies.REGISTRY, cls.name, cls())
    w = two_params()
    # pulls a 0-0.1, b 0.1-0.2 s; fwd1 0.10-0.15, fwd2 0.20-0.25, bwd2 0.25-0.30;
    # gb0 (0.5 MB) 0.30-0.35; bwd1 0.30-0.34 issues ga, which overtakes gb1:
    # ga0 0.35-0.40 (update 0.40-0.425), ga1 0.40-0.45 (0.45-0.475), gb1 0.45-0.50.
    assert step_ends(w, "push_priority") == pytest.approx([0.50, 1.00])
    assert step_ends(w, "tictac") == pytest.approx([0.55, 1.10])


def _queue_ops():
    # a sequence of ("put", key, n units) and ("take",) operations
    from hypothesis import strategies as st

    put = st.tuples(st.just("put"), st.integers(-3, 3), st.integers(1, 3))
    return st.lists(st.one_of(put, st.just(("take",))), max_size=40)


def _settings():
    from hypothesis import settings

    return settings(max_examples=150, deadline=None)


def _replay(queue, ops, many: bool, deliver: bool = False) -> list:
    """Run ``ops`` on ``queue``: units (bytes, worker, step, items) numbered in put
    order; ``many``: a put of n units is one put_many, else n puts; ``deliver``:
    each unit taken is done before the next operation. Returns the units taken."""
    taken, k = [], 0
    for op in ops:
        if op[0] == "put":
            units = [(1e6 * (1 + (k + i) % 5), 0, 0, ((k + i, 0),)) for i in range(op[2])]
            k += op[2]
            if many:
                queue.put_many(op[1], units)
            else:
                for u in units:
                    queue.put(op[1], u)
        else:
            u = queue.take(lambda w: float("inf"))
            taken.append(u)
            if u is not None and deliver:
                queue.done(u)
    return taken


def test_priority_queue_takes_by_key_then_put_order():
    from hypothesis import given

    from sgdsim.simulation.policies import PriorityQueue

    @_settings()
    @given(ops=_queue_ops())
    def check(ops):
        # reference: a sorted list of (key, put number)
        ref, taken, k = [], [], 0
        for op in ops:
            if op[0] == "put":
                ref += [(op[1], k + i) for i in range(op[2])]
                k += op[2]
            else:
                ref.sort()
                taken.append(ref.pop(0)[1] if ref else None)
        got = _replay(PriorityQueue(), ops, many=True)
        assert [None if u is None else u[3][0][0] for u in got] == taken

    check()


def test_credit_queue_put_many_releases_as_one_put_at_a_time():
    from hypothesis import given

    from sgdsim.simulation.policies import CreditQueue

    @_settings()
    @given(ops=_queue_ops())
    def check(ops):
        # a 2.5 MB credit against units of 1-5 MB: the window both stops and starts
        one = _replay(CreditQueue(2.5e6), ops, many=False, deliver=True)
        many = _replay(CreditQueue(2.5e6), ops, many=True, deliver=True)
        assert one == many

    check()


def test_credit_window_empties_without_a_rounding_residue():
    # 0.1 + 0.2 − 0.1 − 0.2 is 2.8e-17, not 0: once both are delivered nothing is in
    # flight, and a waiting partition larger than the credit must be released (a
    # residue held it back for ever, and the run stopped short)
    q = CreditQueue(0.35)
    units = [(b, 0, 0, ((i, 0),)) for i, b in enumerate((0.1, 0.2, 0.5))]
    q.put_many(0, units)
    for _ in range(2):
        q.done(q.take(lambda w: float("inf")))
    assert q.take(lambda w: float("inf")) == units[2]
    assert q.in_flight == 0.5  # released from an empty window
