"""Asynchronous SGD with a parameter server, assembled on the event loop.

The parts (each in its module):

- :class:`~sgdsim.simulation.core.Simulation`: the event heap and loop;
- :class:`~sgdsim.simulation.topology.StarTopology`: hosts, NICs and the links
  that share them (PS shards and worker nodes around one switch);
  :class:`~sgdsim.simulation.topology.NodeCores`: a node's cores, when
  co-located workers (or the pull gap's control messages) share them;
- :class:`~sgdsim.simulation.connection.Connection`: a worker's channel to a
  PS shard in one direction, owning the policy's queue;
  :class:`~sgdsim.simulation.connection.ParameterServer`: a shard's CPU;
- :class:`~sgdsim.simulation.worker.Worker`: the step's state machine;
- :class:`StepPlan`: what a worker does every step, cut into the policy's units.

The policy (:mod:`sgdsim.simulation.policies`) decides the units, their order
and the queue; :class:`AsyncPSModel` builds the parts for one run and runs it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sgdsim.simulation import policies as pol
from sgdsim.simulation.chrome_trace import TraceRecord
from sgdsim.simulation.connection import (
    Connection,
    JoinDelay,
    ParameterServer,
    PullConnection,
    PushConnection,
)
from sgdsim.simulation.core import STEP_START, Simulation
from sgdsim.simulation.topology import DOWN, UP, NodeCores, StarTopology
from sgdsim.simulation.worker import STEP_SHIFT, Worker
from sgdsim.simulation.workload import Network, Workload


@dataclass
class RawRun:
    """What a run hands back for :func:`sgdsim.simulation.async_ps.simulate_async` to summarize.

    Attributes:
        step_ends: (N, steps) end time of each worker's steps, seconds.
        busy: (N,) seconds of compute each worker ran.
        now: time of the last event, seconds.
        events: events run.
        bytes_pulled, bytes_pushed: bytes carried PS → workers and back.
        down_busy_s, up_busy_s: seconds the PS NIC was busy per direction (mean over shards).
        nic: NIC name -> (bytes, busy seconds).
    """

    step_ends: list[list[float]]
    busy: list[float]
    now: float
    events: int
    bytes_pulled: float
    bytes_pushed: float
    down_busy_s: float
    up_busy_s: float
    nic: dict[str, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One worker's step cut into the policy's units, the same for every worker and step.

    Shapes: S segments, P pulls, Q pushes (as :class:`~sgdsim.simulation.workload.Workload`).

    Attributes:
        seg_dur: (S,) seconds of each segment.
        pull_gate, pull_shard: (P,) gating segment and PS shard of each pull.
        pull_pieces, push_pieces: bytes of each unit of each pull / push.
        push_piece_update_s: PS update seconds of each push unit (in proportion to bytes).
        push_shard, push_param: (Q,) PS shard and pulled parameter of each push (−1: none).
        pull_prio, push_prio: layer priority (smaller = more urgent): pulls by gate,
            pushes in reverse production order.
        pushes_after: (S + 1,) pushes issued at push slot ``j`` (after segment ``j − 1``).
        pull_order: the policy's issue order of the pulls.
        unmatched_pulls: P3: pulls issued at step start after the first step
            (those whose parameter no push updates), in issue order.
        matched_push: (Q,) P3: the push's update releases the next step's pull.
        release: P3: per push and push unit, the pull units of its parameter it releases.
        release_runs: P3: the same as runs ``(shard, priority, [(bytes, items)])``, None
            where a push unit releases nothing.
        n_gating: pushes that hold the step's end.
        gradient_push: (Q,) the push updates a pulled parameter (a gradient), where
            the others update state no step pulls (a batch-normalization layer's
            moving statistics, sent during the forward pass; the global step). All
            True where the workload maps no push to a pull.
        base_pending: (S + 1,) pulls gated on each segment; ``base_pieces``: (P,) units per pull.
        stage_budget: (S + 1,) Prophet's block budget after each push slot, bytes.
        n_seg, n_pull: S and P.
        pull_items, push_items: per tensor and unit, the unit's items ``((tensor, unit),)``.
        first_pulls, next_pulls: the pulls of the first step (``pull_order``) and of the
            later ones (``unmatched_pulls``) as runs ``(shard, priority, [(bytes, items)])``:
            the units of consecutive tensors with one shard and priority, in issue order.
        pull_runs: (P,) each pull's units as one run.
        push_runs: (S + 1,) the pushes of each push slot as runs.
        orders: (K, P) the pull orders a step draws from (K = 0: a uniform
            permutation, ``fifo_random``; ``tf_default``: the profiled ones,
            :meth:`~sgdsim.simulation.policies.Policy.draw_orders`), or None:
            ``first_pulls`` and ``next_pulls`` every step.
        latency_s, pull_start_s, overhead_s: as the workload and network give them.
    """

    seg_dur: list[float]
    pull_gate: list[int]
    pull_shard: list[int]
    pull_pieces: list[list[float]]
    push_pieces: list[list[float]]
    push_piece_update_s: list[list[float]]
    push_shard: list[int]
    push_param: list[int]
    pull_prio: list[int]
    push_prio: list[int]
    pushes_after: list[list[int]]
    pull_order: list[int]
    unmatched_pulls: list[int]
    matched_push: list[bool]
    release: list[list[list[int]]]
    release_runs: list[list[Run | None]]
    n_gating: int
    gradient_push: list[bool]
    base_pending: list[int]
    base_pieces: list[int]
    stage_budget: list[float]
    orders: np.ndarray | None
    latency_s: float
    pull_start_s: float
    overhead_s: float

    n_seg: int
    n_pull: int
    pull_items: list[list[tuple[tuple[int, int]]]]
    push_items: list[list[tuple[tuple[int, int]]]]
    first_pulls: list[Run]
    next_pulls: list[Run]
    pull_runs: list[Run]
    push_runs: list[list[Run]]

    @classmethod
    def build(
        cls,
        workload: Workload,
        network: Network,
        policy: pol.Policy,
        spec: pol.PolicySpec,
        pull_order: list[int],
    ) -> StepPlan:
        """Cut the workload's tensors into the policy's units (:func:`.policies.split_bytes`).

        Raises:
            ValueError: 2**23 segments or more (the queues' keys hold a priority in 23 bits).
        """
        seg_dur = workload.seg_dur_s.tolist()
        n_seg = len(seg_dur)
        orders = policy.draw_orders(workload)
        if n_seg >= 1 << (STEP_SHIFT - 1):  # the queues' int keys hold a priority in 23 bits
            raise ValueError(f"{n_seg} segments: at most {(1 << (STEP_SHIFT - 1)) - 1}")
        pull_gate = workload.pull_gate.tolist()
        push_bytes = workload.push_bytes.tolist()
        push_seg = workload.push_seg.tolist()
        pull_pieces = [pol.split_bytes(b, spec.pull_piece) for b in workload.pull_bytes.tolist()]
        push_pieces = [pol.split_bytes(b, spec.push_piece) for b in push_bytes]
        piece_update = [
            [u * (x / b) for x in pieces] if b > 0 else [u] + [0.0] * (len(pieces) - 1)
            for b, u, pieces in zip(
                push_bytes, workload.push_update_s.tolist(), push_pieces, strict=True
            )
        ]
        push_param = workload.pushes_param.tolist()
        matched_push, matched_pull, release = _pull_after_update(
            spec.pull_after_update, push_param, pull_pieces, push_pieces
        )
        base_pending = [0] * (n_seg + 1)
        for g in pull_gate:
            base_pending[g] += 1
        pushes_after: list[list[int]] = [[] for _ in range(n_seg + 1)]
        for q, s in enumerate(push_seg):
            pushes_after[s + 1].append(q)
        pull_shard = workload.pulls_shard.tolist()
        push_shard = workload.pushes_shard.tolist()
        pull_items = [[((t, i),) for i in range(len(x))] for t, x in enumerate(pull_pieces)]
        push_items = [[((t, i),) for i in range(len(x))] for t, x in enumerate(push_pieces)]
        pulls = (pull_shard, pull_gate, pull_pieces, pull_items)
        pushes = (push_shard, [-s for s in push_seg], push_pieces, push_items)
        unmatched_pulls = [p for p in pull_order if not matched_pull[p]]
        return cls(
            seg_dur=seg_dur,
            pull_gate=pull_gate,
            pull_shard=pull_shard,
            pull_pieces=pull_pieces,
            push_pieces=push_pieces,
            push_piece_update_s=piece_update,
            push_shard=push_shard,
            push_param=push_param,
            pull_prio=pull_gate,
            push_prio=[-s for s in push_seg],
            pushes_after=pushes_after,
            pull_order=pull_order,
            unmatched_pulls=unmatched_pulls,
            matched_push=matched_push,
            release=release,
            release_runs=[
                [_runs([p], *pulls, pieces)[0] if pieces else None for pieces in rel]
                for p, rel in zip(push_param, release, strict=True)
            ],
            n_gating=sum(1 for m in matched_push if not m),
            # a workload that maps no push to a pull: every push counts as a gradient
            gradient_push=[p >= 0 or max(push_param, default=-1) < 0 for p in push_param],
            base_pending=base_pending,
            base_pieces=[len(x) for x in pull_pieces],
            stage_budget=_stage_budget(seg_dur, pushes_after, network.bandwidth_Bps),
            orders=orders,
            latency_s=network.latency_s,
            pull_start_s=workload.pull_start_s,
            overhead_s=workload.overhead_s,
            n_seg=n_seg,
            n_pull=len(pull_gate),
            pull_items=pull_items,
            push_items=push_items,
            first_pulls=_runs(pull_order, *pulls),
            next_pulls=_runs(unmatched_pulls, *pulls),
            pull_runs=[_runs([p], *pulls)[0] for p in range(len(pull_gate))],
            push_runs=[_runs(qs, *pushes) for qs in pushes_after],
        )


#: A run of units that join one connection's queue under one priority, in order:
#: ``(shard, priority, [(bytes, items), ...])``.
Run = tuple[int, int, list[tuple[float, tuple[tuple[int, int]]]]]


def _runs(
    tensors: list[int],
    shard: list[int],
    prio: list[int],
    pieces: list[list[float]],
    items: list[list[tuple[tuple[int, int]]]],
    only: list[int] | None = None,
) -> list[Run]:
    """The units of ``tensors`` (in that order) as runs: consecutive tensors with the
    same shard and priority join one run, so a queue takes them in one ``put_many``
    exactly as it would take them one by one. ``only``: just these units of each."""
    runs: list[Run] = []
    for t in tensors:
        units = list(zip(pieces[t], items[t], strict=True))
        if only is not None:
            units = [units[i] for i in only]
        if runs and runs[-1][0] == shard[t] and runs[-1][1] == prio[t]:
            runs[-1][2].extend(units)
        else:
            runs.append((shard[t], prio[t], units))
    return runs


def _pull_after_update(
    enabled: bool,
    push_param: list[int],
    pull_pieces: list[list[float]],
    push_pieces: list[list[float]],
) -> tuple[list[bool], list[bool], list[list[list[int]]]]:
    """P3: which pushes and pulls are matched, and the pull pieces each push piece
    releases (pull piece ``i`` of ``n_pull`` with push piece ``i·n_push // n_pull``)."""
    n_push = len(push_pieces)
    matched_push = [False] * n_push
    matched_pull = [False] * len(pull_pieces)
    release: list[list[list[int]]] = [[] for _ in range(n_push)]
    if not enabled:
        return matched_push, matched_pull, release
    for q, p in enumerate(push_param):
        if p < 0:
            continue
        matched_push[q] = matched_pull[p] = True
        nq, np_ = len(push_pieces[q]), len(pull_pieces[p])
        rel: list[list[int]] = [[] for _ in range(nq)]
        for i in range(np_):
            rel[i * nq // np_].append(i)
        release[q] = rel
    return matched_push, matched_pull, release


def _stage_budget(
    seg_dur: list[float], pushes_after: list[list[int]], bandwidth_Bps: float
) -> list[float]:
    """Prophet (Zhang et al., ICPP 2021): the bytes of a block formed after each push
    slot, ``(compute time to the next slot + slack) × bandwidth``; inf after the last."""
    budget = [math.inf] * (len(seg_dur) + 1)
    slots = [s for s, pushes in enumerate(pushes_after) if pushes]
    for s, nxt in itertools.pairwise(slots):
        budget[s] = (sum(seg_dur[s:nxt]) + pol.PROPHET_SLACK_S) * bandwidth_Bps
    return budget


def single_step_estimate(workload: Workload, network: Network) -> float:
    """Contention-free step time in seconds: compute, overhead, pull offset, and all
    pulled and pushed bytes at full NIC capacity, plus two latencies."""
    moved = float(workload.pull_bytes.sum() + workload.push_bytes.sum())
    return (
        workload.compute_s
        + workload.overhead_s
        + workload.pull_start_s
        + moved / network.bandwidth_Bps
        + 2 * network.latency_s
    )


class AsyncPSModel:
    """One run of N asynchronous workers against the PS shards.

    Arguments as :func:`sgdsim.simulation.async_ps.simulate_async` (checked
    there); ``spec`` is the policy's units and queues with the pull gap set,
    ``pull_order`` its issue order, ``t1`` the window (s) over which the random
    start offsets are drawn (the contention-free step time, or ``start_window_s``),
    ``step_scale`` the measured step ratios each step's compute is stretched by
    (one drawn per worker and step; None: none).
    """

    __slots__ = (
        "_start_offsets",
        "_t1",
        "conns",
        "cores",
        "fifo",
        "hosts",
        "join_delay_s",
        "plan",
        "ps",
        "pull_gap_cpu",
        "pull_gap_s",
        "push_join_delay_s",
        "rng",
        "sharded",
        "shared_cpu",
        "sim",
        "step_scale",
        "steps_per_worker",
        "topology",
        "trace",
        "workers",
        "workers_per_node",
    )

    def __init__(
        self,
        workload: Workload,
        network: Network,
        workers: int,
        steps_per_worker: int,
        policy: str,
        spec: pol.PolicySpec,
        seed: int,
        pull_order: list[int],
        start_offsets_s: Sequence[float] | None,
        t1: float,
        trace: list[TraceRecord] | None,
        workers_per_node: int,
        ps_discipline: str,
        compute_slots: float = 1.0,
        link_quantum_bytes: float = 0.0,
        pull_join_delay_s: float | JoinDelay = 0.0,
        push_join_delay_s: float | JoinDelay = 0.0,
        step_scale: Sequence[float] | None = None,
    ) -> None:
        self.plan = StepPlan.build(workload, network, pol.get_policy(policy), spec, pull_order)
        self.rng = np.random.default_rng(seed)
        self.sim = Simulation()
        self.steps_per_worker = steps_per_worker
        self.trace = trace
        self.fifo = ps_discipline == "fifo"
        self.pull_gap_s = spec.pull_gap_s
        self.pull_gap_cpu = spec.pull_gap_s > 0 and spec.pull_gap_cpu
        self.join_delay_s = JoinDelay.of(pull_join_delay_s)
        self.push_join_delay_s = JoinDelay.of(push_join_delay_s)
        self.step_scale = None if step_scale is None else [float(x) for x in step_scale]
        self.workers_per_node = workers_per_node
        self.shared_cpu = workers_per_node > 1 or self.pull_gap_cpu
        shards = workload.ps_tasks
        self.sharded = shards > 1
        n_nodes = -(-workers // workers_per_node)
        solo = self.fifo or workers == 1  # one connection per shard and direction
        self.topology = StarTopology(self.sim, network, shards, n_nodes, link_quantum_bytes, solo)
        # a node's cores are modelled when workers share them or the pull gap runs on them
        n_cores = n_nodes if self.shared_cpu else 0
        self.cores = [NodeCores(self.sim, compute_slots) for _ in range(n_cores)]
        # the topology's host of each worker's node
        self.hosts = [shards + w // workers_per_node for w in range(workers)]
        self.ps = [ParameterServer(s) for s in range(shards)]
        self.workers = [Worker(self, w) for w in range(workers)]
        self.conns = [self._connections(d, spec, workers) for d in (DOWN, UP)]
        self._start_offsets = start_offsets_s
        self._t1 = t1

    def _connections(self, d: int, spec: pol.PolicySpec, workers: int) -> list[list[Connection]]:
        """Per shard, the connection of each worker (one shared one under ``fifo``)."""
        make = spec.pull_queue if d == DOWN else spec.push_queue
        cls = PullConnection if d == DOWN else PushConnection
        if self.fifo:
            return [[cls(self, ps, make())] * workers for ps in self.ps]
        return [[cls(self, ps, make()) for _ in range(workers)] for ps in self.ps]

    def connection(self, d: int, shard: int, w: int) -> Connection:
        """Worker ``w``'s connection to ``shard`` in direction ``d``."""
        return self.conns[d][shard][w]

    def node_host(self, w: int) -> int:
        """The topology's host of worker ``w``'s node."""
        return self.hosts[w]

    def cores_of(self, w: int) -> NodeCores:
        """The cores of worker ``w``'s node."""
        return self.cores[w // self.workers_per_node]

    def draw_step_scale(self) -> float:
        """The factor one step's compute runs at: a measured step ratio drawn
        uniformly (``step_scale``), or 1 without one."""
        if self.step_scale is None:
            return 1.0
        return self.step_scale[int(self.rng.integers(len(self.step_scale)))]

    def block_budget(self, w: int) -> float:
        """Prophet's byte budget for worker ``w``'s next block."""
        return self.workers[w].block_budget()

    def run(self) -> RawRun:
        """Start every worker (worker 0 at 0, the others at seeded offsets) and run."""
        for worker in self.workers:
            if self._start_offsets is not None:
                start = float(self._start_offsets[worker.index])
            else:
                start = 0.0 if worker.index == 0 else float(self.rng.uniform(0.0, self._t1))
            self.sim.schedule(start, STEP_START, worker.start_step)
        now = self.sim.run()
        topo = self.topology
        return RawRun(
            step_ends=[w.step_ends for w in self.workers],
            busy=[w.busy_s for w in self.workers],
            now=now,
            events=self.sim.events,
            bytes_pulled=topo.bytes_done(DOWN),
            bytes_pushed=topo.bytes_done(UP),
            down_busy_s=topo.ps_busy_s(DOWN),
            up_busy_s=topo.ps_busy_s(UP),
            nic=topo.nic_stats(),
        )
