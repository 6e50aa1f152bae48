"""The simulator core's objects on their own: event loop, topology, node cores, step plan."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sgdsim.simulation.core import DEPART, JOIN, SEG_END, STEP_START, Simulation
from sgdsim.simulation.engine import StepPlan
from sgdsim.simulation.policies import PROPHET_SLACK_S, REGISTRY, PolicySizes
from sgdsim.simulation.topology import NodeCores, StarTopology
from sgdsim.simulation.workload import Network, Workload


def test_events_run_by_time_then_priority_then_scheduling_order():
    sim = Simulation()
    seen: list[str] = []
    log = lambda now, name: seen.append(f"{name}@{now}")
    sim.schedule(2.0, JOIN, log, "late")
    sim.schedule(1.0, SEG_END, log, "seg")
    sim.schedule(1.0, JOIN, log, "join-a")
    sim.schedule(1.0, JOIN, log, "join-b")
    sim.schedule(1.0, DEPART, log, "depart")
    assert sim.run() == 2.0
    assert seen == ["depart@1.0", "join-a@1.0", "join-b@1.0", "seg@1.0", "late@2.0"]
    assert sim.events == 5


def test_stale_events_advance_the_clock_but_are_not_counted():
    sim = Simulation()
    sim.schedule(1.0, JOIN, lambda now, arg: None)
    sim.schedule(3.0, DEPART, lambda now, arg: True)  # stale
    assert sim.run() == 3.0
    assert sim.events == 1


def test_an_action_may_schedule_at_the_current_time():
    # a join scheduled for now by a step start runs after it, at the same time
    sim = Simulation()
    seen: list[tuple[str, float]] = []

    def start(now: float, _: object) -> None:
        seen.append(("start", now))
        sim.schedule(now, JOIN, lambda t, a: seen.append(("join", t)))

    sim.schedule(0.5, STEP_START, start)
    sim.run()
    assert seen == [("start", 0.5), ("join", 0.5)]


class _Sink:
    def __init__(self) -> None:
        self.arrivals: list[tuple[float, object]] = []

    def on_arrival(self, now: float, unit: object) -> None:
        self.arrivals.append((now, unit))


def test_star_topology_one_shard_shares_the_ps_nic_fairly():
    # 10 MB/s: two 1 MB pulls to two workers share the PS NIC: both arrive at 0.2 s;
    # a 1 MB push at the same time has the other direction to itself: 0.1 s.
    sim = Simulation()
    topo = StarTopology(sim, Network(1e7), shards=1, nodes=2, quantum_bytes=0)
    a, b, c = _Sink(), _Sink(), _Sink()
    topo.transfer(0.0, 0, 1, 1e6, "pull-a", a)
    topo.transfer(0.0, 0, 2, 1e6, "pull-b", b)
    topo.transfer(0.0, 1, 0, 1e6, "push", c)
    sim.run()
    assert a.arrivals == [(pytest.approx(0.2), "pull-a")]
    assert b.arrivals == [(pytest.approx(0.2), "pull-b")]
    assert c.arrivals == [(pytest.approx(0.1), "push")]
    assert topo.bytes_done(0) == 2e6 and topo.bytes_done(1) == 1e6
    assert topo.nic_stats()["ps0.out"] == (2e6, pytest.approx(0.2))


def test_star_topology_two_way_share_slows_a_direction_while_the_other_carries_data():
    # 10 MB/s; the pull direction sends at half the rate while a push is on the wire.
    # A 1 MB pull and a 1 MB push at 0: the push alone in its direction ends at 0.1 s,
    # the pull has 0.5 MB by then and the rest at the full rate: 0.15 s. A second
    # push at 0.2 s, with no pull on the wire, goes at the full rate: 0.3 s.
    sim = Simulation()
    net = Network(1e7, two_way_share=(0.5, 1.0))
    topo = StarTopology(sim, net, shards=1, nodes=1, quantum_bytes=0, solo=True)
    pull, push = _Sink(), _Sink()
    topo.transfer(0.0, 0, 1, 1e6, "pull", pull)
    topo.transfer(0.0, 1, 0, 1e6, "push-1", push)
    sim.schedule(0.2, JOIN, lambda now, _: topo.transfer(now, 1, 0, 1e6, "push-2", push))
    sim.run()
    assert pull.arrivals == [(pytest.approx(0.15), "pull")]
    assert push.arrivals == [(pytest.approx(0.1), "push-1"), (pytest.approx(0.3), "push-2")]
    # the fair link of several connections: two 1 MB pulls at 0, a 0.5 MB push
    # from 0.05 to its end: pulls at 2.5 MB/s each meanwhile
    sim = Simulation()
    topo = StarTopology(sim, net, shards=1, nodes=2, quantum_bytes=0)
    a, b, c = _Sink(), _Sink(), _Sink()
    topo.transfer(0.0, 0, 1, 1e6, "pull-a", a)
    topo.transfer(0.0, 0, 2, 1e6, "pull-b", b)
    sim.schedule(0.05, JOIN, lambda now, _: topo.transfer(now, 1, 0, 5e5, "push", c))
    sim.run()
    # by 0.05: 0.25 MB each; push alone upstream ends at 0.1 (0.125 MB more each);
    # the last 0.625 MB each at 5 MB/s: 0.125 s more
    assert c.arrivals == [(pytest.approx(0.1), "push")]
    assert a.arrivals[0][0] == pytest.approx(0.225) and b.arrivals[0][0] == pytest.approx(0.225)
    assert topo.nic_stats()["ps0.out"] == (2e6, pytest.approx(0.225))


def test_a_two_way_share_must_be_in_0_1_and_needs_one_shard():
    with pytest.raises(ValueError, match="two_way_share"):
        Network(1e7, two_way_share=(0.0, 1.0))
    with pytest.raises(ValueError, match="two_way_share"):
        Network(1e7, two_way_share=(1.2, 1.0))
    with pytest.raises(ValueError, match="one PS shard"):
        StarTopology(Simulation(), Network(1e7, two_way_share=(0.9, 0.9)), 2, 1, 0)


def test_star_topology_shards_route_over_the_node_nic():
    # Two shards (hosts 0, 1), one node (host 2): pulls from both shards to the node
    # share the node's NIC in (10 MB/s): 1 MB each arrive at 0.2 s; the push to
    # shard 1 crosses the node's NIC out alone: 0.1 s.
    sim = Simulation()
    topo = StarTopology(sim, Network(1e7), shards=2, nodes=1, quantum_bytes=0)
    a, b, c = _Sink(), _Sink(), _Sink()
    topo.transfer(0.0, 0, 2, 1e6, "from-0", a)
    topo.transfer(0.0, 1, 2, 1e6, "from-1", b)
    topo.transfer(0.0, 2, 1, 1e6, "to-1", c)
    sim.run()
    assert a.arrivals[0][0] == pytest.approx(0.2) and b.arrivals[0][0] == pytest.approx(0.2)
    assert c.arrivals[0][0] == pytest.approx(0.1)
    nic = topo.nic_stats()
    assert nic["node0.in"] == (2e6, pytest.approx(0.2)) and nic["ps1.in"][0] == 1e6


def test_node_cores_limited_processor_sharing():
    # 1.5 slots: two 0.3 s jobs run at 0.75 each until the first ends at 0.4 s,
    # the later one started 0.1 s late alone at full speed from then on.
    sim = Simulation()
    cores = NodeCores(sim, 1.5)
    ends: dict[str, float] = {}
    cores.run(0.0, 0.3, lambda t: ends.setdefault("a", t), "a")
    sim.schedule(
        0.1, JOIN, lambda now, _: cores.run(now, 0.3, lambda t: ends.setdefault("b", t), "b")
    )
    sim.run()
    # a alone 0-0.1 (0.1 done), both at 0.75 from 0.1: a needs 0.2 more -> 0.1 + 0.2/0.75
    t_a = 0.1 + 0.2 / 0.75
    assert ends["a"] == pytest.approx(t_a)
    # b did 0.75 * (t_a - 0.1) = 0.2 by then, 0.1 left at full speed
    assert ends["b"] == pytest.approx(t_a + 0.1)


def _two_layers() -> Workload:
    # pulls b (1 MB, read by segment 1) and a (0.25 MB, segment 0); gradients gb
    # (1 MB, after segment 2, parameter b) and ga (0.5 MB, after segment 3, parameter a)
    return Workload(
        seg_dur_s=np.array([0.05, 0.05, 0.05, 0.04]),
        pull_bytes=np.array([1e6, 2.5e5]),
        pull_gate=np.array([1, 0]),
        push_bytes=np.array([1e6, 5e5]),
        push_seg=np.array([2, 3]),
        push_update_s=np.array([0.0, 0.05]),
        push_param=np.array([0, 1]),
    )


def _plan(policy: str, sizes: PolicySizes) -> StepPlan:
    w, pol = _two_layers(), REGISTRY[policy]
    return StepPlan.build(w, Network(1e7), pol, pol.spec(sizes), pol.pull_order(w))


def test_step_plan_cuts_p3_slices_and_maps_each_push_slice_to_the_pulls_it_releases():
    plan = _plan("p3", PolicySizes(p3_slice_bytes=4e5))
    assert plan.pull_pieces == [[4e5, 4e5, 2e5], [2.5e5]]
    assert plan.push_pieces == [[4e5, 4e5, 2e5], [4e5, 1e5]]
    # the PS update time is shared in proportion to bytes: 0.05 s over 0.4 + 0.1 MB
    assert plan.push_piece_update_s[1] == pytest.approx([0.04, 0.01])
    # gb's three slices release b's three one by one; ga's first slice releases a
    assert plan.release == [[[0], [1], [2]], [[0], []]]
    assert plan.matched_push == [True, True]
    assert plan.n_gating == 0 and plan.unmatched_pulls == []
    assert plan.pull_order == [1, 0]  # first use in the forward pass
    assert plan.push_prio == [-2, -3]  # the later layer's gradient (ga) is more urgent


def test_step_plan_prophet_budget_is_the_gap_to_the_next_backward_stage():
    plan = _plan("prophet", PolicySizes())
    # push slots 3 (after segment 2) and 4 (after segment 3, the last): a block formed
    # after slot 3 may hold (segment 3 + 1 ms slack) at 10 MB/s; no limit after the last
    assert plan.stage_budget[3] == pytest.approx((0.04 + PROPHET_SLACK_S) * 1e7)
    assert all(math.isinf(b) for i, b in enumerate(plan.stage_budget) if i != 3)
    # whole tensors, and without pull after update every push holds the step's end
    assert plan.pull_pieces == [[1e6], [2.5e5]] and plan.n_gating == 2


class _Sender:
    """A connection with units ``(bytes, name)`` to send one after another;
    ``hand_back``: it returns the next unit from ``on_arrival`` (the topology puts it
    on the link), otherwise it starts the transfer itself."""

    def __init__(self, topo: StarTopology, route: tuple[int, int], sizes, hand_back: bool):
        self.topo, self.src_dst, self.hand_back = topo, route, hand_back
        self.todo = [(b, i) for i, b in enumerate(sizes)]
        self.arrivals: list[float] = []

    def start(self, now: float) -> None:
        unit = self.todo.pop(0)
        self.topo.transfer(now, *self.src_dst, unit[0], unit, self)

    def route(self, unit: object) -> tuple[int, int]:
        return self.src_dst

    def on_arrival(self, now: float, unit: object) -> object:
        self.arrivals.append(now)
        if not self.todo:
            return None
        if self.hand_back:
            return self.todo.pop(0)
        self.start(now)
        return None


@pytest.mark.parametrize("shards", [1, 2])
def test_a_unit_handed_back_on_arrival_follows_on_the_link_as_if_sent_then(shards):
    # 10 MB/s: a sends 3 × 1 MB back to back, b 2 MB at once: both at 5 MB/s, a's
    # first at 0.2 s, its second and b at 0.4 s, a's third alone at 0.5 s. The
    # departure loop puts a handed-back unit on the link itself: same times to the bit.
    runs = []
    for hand_back in (True, False):
        sim = Simulation()
        topo = StarTopology(sim, Network(1e7), shards=shards, nodes=2, quantum_bytes=0)
        a = _Sender(topo, (0, shards), [1e6, 1e6, 1e6], hand_back)
        b = _Sender(topo, (0, shards + 1), [2e6], hand_back)
        a.start(0.0)
        b.start(0.0)
        sim.run()
        runs.append((a.arrivals, b.arrivals))
    assert runs[0] == runs[1]
    assert runs[0][0] == pytest.approx([0.2, 0.4, 0.5])
    assert runs[0][1] == pytest.approx([0.4])
