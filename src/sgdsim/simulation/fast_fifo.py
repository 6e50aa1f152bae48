"""The loop specialised for whole-tensor first-in first-out policies on one PS.

``tf_default``, ``tictac`` and ``fifo_random`` with one PS shard, no join
delay and no round-robin quantum run here (with a pull gap only as a pure
delay on a fair PS NIC, see :meth:`FastFifoRun.release_pull`): the same model as
:class:`~sgdsim.simulation.engine.AsyncPSModel`, worked in bulk (see
:class:`FastFifoRun`), with figures equal to one event per tensor and segment
within rounding (``tests/test_simulator.py``, ``tests/test_policies.py``). It
runs on the same event loop (:class:`~sgdsim.simulation.core.Simulation`);
an event that would be the next one popped (a link's next departure, a
segment's end) is run at once, without the heap.

With a fair PS NIC, one worker per node and no trace, the whole run is
compiled instead (:mod:`sgdsim.simulation.fast_run`, the same figures to the
bit; a random pull order's permutations are drawn before the run, in the
order these handlers draw them); the handlers here are its reference and
serve shared cores, one FIFO queue and traces.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sgdsim.simulation import fast_run, push_link
from sgdsim.simulation.chains import quiet_arrivals
from sgdsim.simulation.chrome_trace import COMPUTE, PULL, PUSH, UPDATE, TraceRecord
from sgdsim.simulation.core import DEPART, JOIN, SEG_END, STEP_END, STEP_START, Simulation
from sgdsim.simulation.engine import RawRun, single_step_estimate
from sgdsim.simulation.link import PSLink
from sgdsim.simulation.policies import draw_pull_order, get_policy
from sgdsim.simulation.push_link import LAST, WAKE, BulkPushLink
from sgdsim.simulation.workload import Network, Workload

_DEPART, _JOIN, _SEG_END, _STEP_END, _STEP_START = DEPART, JOIN, SEG_END, STEP_END, STEP_START
_DOWN, _UP = 0, 1  # PS → workers (pulls), workers → PS (pushes)

#: A group of pull flows: (bytes of the step's flows up to its end, its bytes, its last flow).
Group = tuple[float, float, int]

# the fast loop works in bulk: each run of pulls that release the same segments
# is one flow (see _pull_flows), a worker's segments run ahead until one waits
# for a pull, and with a fair PS NIC pull flows whose arrival matters to no one
# else travel in groups, the pushes a connection carries back to back are one
# flow, and the PS applies pushes in batches (see FastFifoRun); tests switch it
# off to compare with one event per tensor and segment
_BULK = True
# the early path runs compiled (fast_run); tests switch it off
_COMPILED = True
# a random pull order runs compiled while its orders, drawn before the run (a row
# per worker step), hold at most this many cells (about 130 MB an array); beyond
# it (thousands of workers × steps) the Python loop draws them as it goes
_MAX_ORDER_CELLS = 1 << 24


def _pull_flows(
    order: npt.NDArray[np.int64],
    pull_bytes: npt.NDArray[np.float64],
    pull_gate: npt.NDArray[np.int64],
    n_seg: int,
    aggregate: bool,
) -> tuple[list[tuple[float, int]], list[int]]:
    """The flows that carry one step's pulls, issued in ``order``, and what gates on them.

    Within the connection the pulls arrive in issue order, so the pull at
    position ``k`` holds up segment ``s`` exactly when some pull at or after
    ``k`` has gate ``≤ s``: its effective gate is the minimum gate from ``k``
    on (non-decreasing along the order). Consecutive pulls with the same
    effective gate release nothing between them, so with ``aggregate`` they
    travel as one flow of their summed bytes, which leaves when the last of
    them would (the link serves a connection's flows back to back at its
    share, :class:`~sgdsim.simulation.link.PSLink`); otherwise one flow per pull.

    Returns:
        ``flows``: ``(bytes, label)`` in issue order, the label being the flow's
        index (aggregated) or the pull's index (one flow per pull);
        ``req``: (S + 1,) flows that must have arrived before segment ``s`` may
        start (``req[S]``: before the step may end).
    """
    if len(order) == 0:
        return [], [0] * (n_seg + 1)
    eff = np.minimum.accumulate(pull_gate[order][::-1])[::-1]
    if aggregate:
        starts = np.flatnonzero(np.concatenate(([True], eff[1:] != eff[:-1])))
        sizes = np.add.reduceat(pull_bytes[order], starts).tolist()
        flows = list(zip(sizes, range(len(sizes)), strict=True))
        eff = eff[starts]
    else:
        flows = list(zip(pull_bytes[order].tolist(), order.tolist(), strict=True))
    req = np.searchsorted(eff, np.arange(n_seg + 1), side="right").tolist()
    return flows, req


class FastFifoRun:
    """One run of the whole-tensor FIFO policies on one PS: state and event handlers.

    The PS NIC is :class:`~sgdsim.simulation.link.PSLink`'s virtual-time link
    inlined (same arithmetic: with ``_BULK`` off it gives the figures of one
    event per tensor and segment bit for bit); departures are taken without
    heap operations when nothing else comes first. In bulk (``_BULK``, no
    ``trace``):

    - each step's pulls travel as one flow per run of pulls that release the
      same segments (:func:`_pull_flows`);
    - a worker runs its segments at once until one waits for a pull that has
      not arrived (with shared cores, one event per segment as before).

    With a fair PS NIC and one worker per node ("early" below), the link's
    virtual clock does the rest. A connection serves its flows back to back
    at the link's one rate per busy connection, so a run of consecutive flows
    can travel as one flow that leaves when its last byte does: each flow in
    it leaves when the clock g(t) reaches its tag (virtual time at its last
    byte), at t = g⁻¹(tag), which the clock's breakpoints (t, g, busy
    connections) give after the fact. So only what others see is an event:

    - pushes: those a worker's segments issue are due one latency later; if
      its connection is idle, the first that are due join it then, as one
      flow (a "release", taken by the link's own event, not a JOIN event);
      while it is busy their join time does not matter, so all that are due
      when it empties join then, as one flow. The link takes its releases and
      departures in compiled code (:class:`~sgdsim.simulation.push_link.BulkPushLink`):
      at high bandwidth a connection empties before its next push is due, one
      release and one departure per push;
    - the PS CPU applies pushes later, in batches
      (:func:`~sgdsim.simulation.push_link.settle`): pushes leave in the
      order of their tags, each at g⁻¹(tag), and the PS serves them
      in that order, one FIFO server, by Lindley's recursion. A batch is
      settled whenever a worker's last push of a step has left, whose step
      end needs the time its last update ends: every push with a tag up to
      that one's, of every worker, in tag order;
    - pulls: a pull flow whose arrival lets only segments run that issue no
      push, other than the step's last flow, travels in one group with the
      flows after it (``pull_groups``); when the group leaves, its worker
      runs those segments from each flow's arrival g⁻¹(tag) on
      (``quiet_arrivals``).

    With one FIFO queue for all workers, or with shared cores, pulls and
    pushes stay one flow each (one JOIN event per batch of pushes issued
    together), and each push reaches the PS CPU on its own, in the order of
    arrival.

    With a pull gap (``pull_gap_s`` > 0: the one-at-a-time policies' control
    message per pull, a pure delay, fair PS NIC) every pull is its own flow
    and joins its connection one gap after the previous one arrived
    (:meth:`release_pull`), as in
    :class:`~sgdsim.simulation.connection.Connection`; the PS → workers link
    then takes its departures and the pulls due after their gap in time
    order in one loop (:meth:`_pull_link`), off the event heap, while the
    pushes work in bulk as above.
    """

    __slots__ = (
        "_actions",
        "aggregate",
        "arrived",
        "bulk",
        "busy",
        "cap",
        "compute_slots",
        "conn_free",
        "cores",
        "down_cum",
        "down_hint",
        "down_log",
        "down_n",
        "down_off",
        "down_tag0",
        "down_trim",
        "down_wake",
        "eager",
        "early",
        "ending",
        "fifo",
        "first_pos",
        "fixed_cum",
        "fixed_flows",
        "fixed_groups",
        "fixed_req",
        "fixed_req_a",
        "free_at",
        "gap",
        "grouped",
        "heaps",
        "hseq",
        "joined",
        "k_busy",
        "last_update",
        "latency",
        "link_version",
        "n_conn",
        "n_flows",
        "n_nodes",
        "n_pull",
        "n_push",
        "n_seg",
        "network",
        "nic_busy",
        "nic_bytes",
        "orders",
        "overhead",
        "policy",
        "pos_bytes",
        "pos_bytes_a",
        "pos_issue",
        "pos_update_a",
        "ps_discipline",
        "ps_free",
        "pull_bytes_a",
        "pull_gate_a",
        "pull_queue",
        "pull_rel",
        "pull_start",
        "pull_wire",
        "push_bytes",
        "push_flows",
        "push_joined",
        "push_order",
        "push_slots",
        "push_update",
        "pushes_after",
        "pushes_left",
        "queues",
        "random_order",
        "req",
        "req_a",
        "rng",
        "rseq",
        "running",
        "seed",
        "seg",
        "seg_dur",
        "seg_end",
        "seg_end_a",
        "seg_index",
        "seg_pushes",
        "seg_start",
        "shared_cpu",
        "sim",
        "start_offsets_s",
        "start_window_s",
        "step_ends",
        "steps_per_worker",
        "stride",
        "trace",
        "up",
        "up_wake",
        "vg",
        "vt",
        "workers",
        "workers_per_node",
        "workload",
    )

    def __init__(
        self,
        workload: Workload,
        network: Network,
        workers: int,
        steps_per_worker: int,
        policy: str,
        seed: int,
        start_offsets_s: Sequence[float] | None,
        trace: list[TraceRecord] | None,
        workers_per_node: int,
        ps_discipline: str,
        compute_slots: float = 1.0,
        pull_gap_s: float = 0.0,
        start_window_s: float | None = None,
    ) -> None:
        self.workload = workload
        self.network = network
        self.workers = workers
        self.steps_per_worker = steps_per_worker
        self.policy = policy
        self.seed = seed
        self.start_offsets_s = start_offsets_s
        self.trace = trace
        self.workers_per_node = workers_per_node
        self.ps_discipline = ps_discipline
        self.compute_slots = compute_slots
        self.gap = pull_gap_s
        self.start_window_s = start_window_s
        self._init_step()
        self._init_link()
        self._init_workers()

    def _init_step(self) -> None:
        """The step's arrays: segments, pull flows, pushes in issue order ("positions")."""
        self.rng = np.random.default_rng(self.seed)

        self.seg_dur = self.workload.seg_dur_s.tolist()
        self.n_seg = len(self.seg_dur)
        self.n_pull = len(self.workload.pull_bytes)
        self.push_bytes = self.workload.push_bytes.tolist()
        self.push_update = self.workload.push_update_s.tolist()
        self.n_push = len(self.push_bytes)
        self.pushes_after: list[list[int]] = [[] for _ in range(self.n_seg + 1)]  # index seg+1
        for q, s in enumerate(self.workload.push_seg.tolist()):
            self.pushes_after[s + 1].append(q)
        self.latency = self.network.latency_s
        self.pull_start = self.workload.pull_start_s
        self.overhead = self.workload.overhead_s
        self.bulk = _BULK and self.trace is None
        # with a pull gap every pull is its own flow, joining its connection one gap
        # after the previous one arrived (``pull_queue``, ``pull_rel``)
        self.aggregate = self.bulk and not self.gap
        self.orders = get_policy(self.policy).draw_orders(self.workload)
        self.random_order = self.orders is not None
        self.pull_bytes_a = np.asarray(self.workload.pull_bytes, np.float64)
        self.pull_gate_a = np.asarray(self.workload.pull_gate, np.int64)

        self.fixed_flows, self.fixed_req = self.chunks(
            np.asarray(get_policy(self.policy).pull_order(self.workload), np.int64)
        )

        self.shared_cpu = self.workers_per_node > 1
        self.n_nodes = -(-self.workers // self.workers_per_node)
        # the cores of each worker node, a link of capacity compute_slots, each
        # worker's compute served at most at 1 (one second of profiled compute per
        # second); index 2 + node in events
        self.cores = (
            [PSLink(self.compute_slots, 1.0) for _ in range(self.n_nodes)]
            if self.shared_cpu
            else []
        )
        # with one FIFO queue for all workers the link cannot tell flows apart by
        # connection, so each payload carries its worker: label + worker * stride
        self.fifo = self.ps_discipline == "fifo"
        self.stride = max(self.n_pull, self.n_push) + 1
        # segment chains run ahead of the clock (not with shared cores, whose speed
        # depends on the node's other workers), and their pushes join a busy
        # connection early, as one flow, the PS applying them in batches (not with
        # one FIFO queue, where others' pushes may join in between)
        self.eager = self.bulk and not self.shared_cpu
        self.early = self.eager and not self.fifo
        self.grouped = self.early and not self.gap  # pull flows travel in groups
        self.n_conn = 1 if self.fifo else self.workers
        # segment chains in bulk: seg_end[s] = the time the step's compute takes up
        # to the start of segment s (C_s = d_0 + … + d_{s−1})
        self.seg_end_a = np.concatenate(([0.0], np.cumsum(self.seg_dur)))
        self.seg_end = self.seg_end_a.tolist()
        # early: a step's pushes in issue order ("positions"), slot by slot; the
        # pushes of slots j_lo … j_hi − 1 are positions first_pos[j_lo] … first_pos[j_hi] − 1
        self.push_order = [q for slot in self.pushes_after for q in slot]
        self.first_pos = np.concatenate(
            ([0], np.cumsum([len(s) for s in self.pushes_after]))
        ).tolist()
        # at position p: C of its slot (its issue time, less the chain's start offset),
        # the bytes of positions < p, and its PS update time
        self.pos_issue = [
            self.seg_end[s + 1] for s in self.workload.push_seg[self.push_order].tolist()
        ]
        self.pos_bytes_a = np.concatenate(
            ([0.0], np.cumsum(self.workload.push_bytes[self.push_order]))
        )
        self.pos_bytes = self.pos_bytes_a.tolist()
        self.pos_update_a = np.asarray(self.workload.push_update_s, np.float64)[self.push_order]
        self.push_slots = [j for j, slot in enumerate(self.pushes_after) if slot]
        self.seg_pushes = np.array([bool(slot) for slot in self.pushes_after[1:]], bool)

        self.seg_index = np.arange(self.n_seg + 1)

    def _init_link(self) -> None:
        """The PS NIC (inlined virtual-time links), the event heap, trace bookkeeping."""
        # the PS NIC, per direction (_DOWN, _UP): PSLink's state, inlined. Each
        # connection queues (tag, bytes, payload), tag the virtual time g at which
        # the flow leaves; the heap holds (tag of the head flow, seq, connection)
        # of every busy connection.
        self.cap = float(self.network.bandwidth_Bps)
        self.queues: list[list[deque[tuple[float, float, int]]]] = [
            [deque() for _ in range(self.n_conn)] for _ in range(2)
        ]
        self.heaps: list[list[tuple[float, int, int]]] = [[], []]
        self.vg = [0.0, 0.0]  # virtual time: bytes served to each busy connection
        self.vt = [0.0, 0.0]  # real time vg was last advanced to
        self.k_busy = [0, 0]  # busy connections
        self.nic_busy = [0.0, 0.0]
        self.nic_bytes = [0.0, 0.0]
        self.hseq = 0

        self.link_version = [0] * (2 + self.n_nodes)
        self.seg_start = [0.0] * self.workers
        self.sim = Simulation()
        # the action of each event kind (kinds as priorities, see core)
        self._actions = (
            self._on_depart,
            self._on_join,
            self._on_segment_end,
            self._on_step_end,
            self._on_step_start,
        )
        # trace bookkeeping: when each flow joined, when each connection last freed up
        self.joined: list[list[float]] = [[0.0] * self.n_pull for _ in range(self.workers)]
        self.push_joined: list[list[float]] = [[0.0] * self.n_push for _ in range(self.workers)]
        self.conn_free = [[0.0] * self.workers, [0.0] * self.workers]

    def _init_workers(self) -> None:
        """Per-worker state, and the bookkeeping of pushes and pull groups in bulk."""
        # per-worker state
        self.seg = [0] * self.workers
        self.running = [False] * self.workers
        self.arrived = [0] * self.workers  # pull flows arrived this step
        self.n_flows = [
            len(self.fixed_flows)
        ] * self.workers  # pull flows this step (-1: not issued yet)
        self.req = [self.fixed_req] * self.workers
        self.fixed_req_a = np.asarray(self.fixed_req, np.int64)
        self.req_a = [self.fixed_req_a] * self.workers  # req as arrays (grouped pulls)
        self.last_update = [0.0] * self.workers
        self.ending = [False] * self.workers
        self.free_at = [
            0.0
        ] * self.workers  # when the worker's compute reaches seg[w] (eager chains)
        self.busy = [0.0] * self.workers
        self.step_ends: list[list[float]] = [[] for _ in range(self.workers)]
        self.ps_free = 0.0
        # pushes of the step not delivered, per worker (early: the push link's)
        self.pushes_left = np.zeros(self.workers, np.int64)
        self.rseq = 0
        self.up_wake = math.inf
        # early: each step's pull flows travel in groups (pull_groups): per worker the
        # step's cum, the virtual time its first flow started at, and the breakpoint
        # (absolute index) at which its head group started; breakpoints of the
        # PS → workers link's clock in down_log (down_off: entries dropped before
        # the head group of every busy connection)
        if self.grouped and self.n_pull:
            order = np.asarray(get_policy(self.policy).pull_order(self.workload))
            _, _, _, self.fixed_cum, self.fixed_groups = self.pull_groups(order)
        else:
            self.fixed_cum, self.fixed_groups = np.zeros(1), []
        self.down_cum = [self.fixed_cum] * self.workers
        self.down_tag0 = [0.0] * self.workers
        self.down_hint = [0] * self.workers
        self.down_log = np.zeros((3, 4096))  # breakpoints (t, g, k), down_n of them
        self.down_n = 1
        self.down_off = 0
        self.down_trim = max(4096, 16 * self.workers)

        self.push_flows = [[(self.push_bytes[q], q) for q in slot] for slot in self.pushes_after]
        self.pull_queue: list[list[tuple[float, int]]] = [[] for _ in range(self.workers)]
        # with a pull gap: (due, order, worker) of each connection's next pull, and
        # the time of the PS → workers link's scheduled event (its departure or a pull)
        self.pull_rel: list[tuple[float, int, int]] = [(math.inf, -1, -1)]  # + sentinel
        self.pull_wire: list[tuple[float, int, int, float, int]] = []
        self.down_wake = math.inf

    def _init_push_link(self) -> None:
        """The workers → PS link in bulk (early; :mod:`~sgdsim.simulation.push_link`),
        for the Python loop (the compiled run has its own): the pushes issued
        ahead by eager chains and not yet on the connection, per worker, as runs
        of positions; if the connection is idle, those due first join it when due
        (releases); while it is busy, all that are due join as one flow when it
        empties (the join time of a busy connection's tail does not matter). Its
        records are the pushes that joined and that the PS has not applied yet
        (settle); its log the breakpoints of the link's virtual clock."""
        self.up = BulkPushLink(
            self.workers,
            self.cap,
            np.asarray(self.pos_issue),
            self.pos_bytes_a,
            self.pos_update_a,
            self.n_seg + 2,
        )
        self.pushes_left = self.up.pushes_left

    def draw_order(self) -> npt.NDArray[np.int64]:
        """This step's pull order (:func:`~sgdsim.simulation.policies.draw_pull_order`)."""
        assert self.orders is not None
        return draw_pull_order(self.rng, self.orders)

    def chunks(self, order: npt.NDArray[np.int64]) -> tuple[list[tuple[float, int]], list[int]]:
        """A step's pull flows issued in ``order``, and what gates on them (_pull_flows)."""
        return _pull_flows(order, self.pull_bytes_a, self.pull_gate_a, self.n_seg, self.aggregate)

    def pull_groups(
        self,
        order: npt.NDArray[np.int64],
    ) -> tuple[
        list[int],
        npt.NDArray[np.int64],
        int,
        npt.NDArray[np.float64],
        list[tuple[float, float, int]],
    ]:
        """One step's pulls issued in ``order``, as :func:`_pull_flows` makes them
        flows, and those flows grouped for the link (early): a flow whose arrival
        lets only segments run that issue no push, and that is not the step's
        last, travels in one group with the flows after it (its arrival has no
        effect on anything but its worker's compute, which runs it later from
        the arrival time, see ``quiet_arrivals``).

        Returns:
            ``req`` (as a list and an array) and the number of flows F as
            :func:`_pull_flows`; ``cum``:
            (F + 1,) bytes of the flows before each flow; ``groups``: ``(cum at
            the group's end, bytes, index of its last flow)``.
        """
        eff = np.minimum.accumulate(self.pull_gate_a[order][::-1])[::-1]
        last_pull = np.flatnonzero(np.append(eff[1:] != eff[:-1], True))
        n = len(last_pull)
        cum = np.zeros(n + 1)
        cum[1:] = np.cumsum(self.pull_bytes_a[order])[last_pull]
        rq = np.searchsorted(eff[last_pull], self.seg_index, "right")
        loud = np.zeros(n + 1, bool)  # loud[i]: the segments the i-th arrival lets run push
        loud[rq[: self.n_seg][self.seg_pushes]] = True
        loud[n] = True
        ends = np.flatnonzero(loud[1:])
        at_end = cum[ends + 1].tolist()
        sizes = [b - a for a, b in zip([0.0, *at_end], at_end, strict=False)]
        groups = list(zip(at_end, sizes, ends.tolist(), strict=True))
        return rq.tolist(), rq, n, cum, groups

    def push_event(self, t: float, kind: int, a: int, b: int = 0) -> None:
        """Schedule an event of ``kind`` at ``t`` (s) for worker or link ``a``."""
        self.sim.schedule(t, kind, self._actions[kind], (a, b))

    def nic_add(self, d: int, now: float, flows: list[tuple[float, int]], conn: int) -> None:
        """Flows ``(bytes, payload)`` join connection ``conn`` of direction ``d`` at ``now``."""
        if not flows:
            return
        k = self.k_busy[d]
        if k:
            dt = now - self.vt[d]
            self.vg[d] += dt * self.cap / k
            self.nic_busy[d] += dt
        self.vt[d] = now
        q = self.queues[d][conn]
        if q:
            tag = q[-1][0]
            for size, payload in flows:
                tag += size
                q.append((tag, size, payload))
            return
        tag = self.vg[d]
        for size, payload in flows:
            tag += size
            q.append((tag, size, payload))
        self.k_busy[d] = k + 1
        heapq.heappush(self.heaps[d], (q[0][0], self.hseq, conn))
        self.hseq += 1
        # every departure time changed
        self.link_version[d] += 1
        gap = self.heaps[d][0][0] - self.vg[d]
        self.push_event(
            now + (gap if gap > 0.0 else 0.0) * (k + 1) / self.cap, _DEPART, d, self.link_version[d]
        )

    def reschedule_cores(self, li: int) -> None:
        """Schedule the next departure of the cores of node ``li − 2``."""
        self.link_version[li] += 1
        t = self.cores[li - 2].next_departure()
        if t is not None:
            self.push_event(t, _DEPART, li, self.link_version[li])

    def try_start(self, w: int, now: float) -> None:
        """Start worker ``w``'s next segment (or chain) if its pulls have arrived."""
        s = self.seg[w]
        if self.eager:
            if s < self.n_seg and self.arrived[w] >= self.req[w][s]:
                t = self.free_at[w]
                self.run_chain(w, t if t > now else now, now)
        elif not self.running[w] and s < self.n_seg and self.arrived[w] >= self.req[w][s]:
            self.running[w] = True
            if self.shared_cpu:
                self.seg_start[w] = now
                node = w // self.workers_per_node
                if self.cores[node].add(now, self.seg_dur[s], s, w):
                    self.reschedule_cores(2 + node)
            else:
                self.push_event(now + self.seg_dur[s], _SEG_END, w)

    def end_segment(self, w: int, now: float) -> None:
        """Segment ``seg[w]`` of worker ``w`` ends at ``now`` (shared-core mode)."""
        self.running[w] = False
        s = self.seg[w]
        self.busy[w] += self.seg_dur[s]
        if self.trace is not None:
            self.trace.append((COMPUTE, w, s, self.seg_start[w], now))
        self.issue_pushes(w, s + 1, now)
        self.seg[w] = s + 1
        if s + 1 < self.n_seg:
            self.try_start(w, now)
        else:
            self.check_end(w, now)

    def join_pulls(self, w: int, now: float) -> None:
        """Worker ``w``'s pulls of the step join its connection at ``now`` (with a pull
        gap, only the first: see :meth:`release_pull`)."""
        if self.grouped:
            self.join_pull_groups(w, now)
            return
        if self.random_order:
            flows, self.req[w] = self.chunks(self.draw_order())
            self.n_flows[w] = len(flows)
        else:
            flows = self.fixed_flows
        if self.gap:
            self.pull_queue[w] = flows
            self.release_pull(w, now)
            return
        if self.trace is not None:
            for _, p in flows:
                self.joined[w][p] = now
        if self.fifo:
            flows = [(b, p + w * self.stride) for b, p in flows]
        self.nic_add(_DOWN, now, flows, 0 if self.fifo else w)

    def release_pull(self, w: int, due: float) -> None:
        """Worker ``w``'s first pull of the step joins its connection at ``due`` (with
        a pull gap); each other one joins one gap after the previous one arrived
        (the control message by which TensorFlow enforces a pull order, see
        :func:`~sgdsim.simulation.async_ps.simulate_async`), queued by
        ``_pull_arrived``. The PS → workers link takes them in its own loop
        (``_pull_link``), woken at ``due`` unless it is due to run earlier."""
        heapq.heappush(self.pull_rel, (due, self.rseq, w))
        self.rseq += 1
        if due < self.down_wake:
            self.down_wake = due
            self.link_version[_DOWN] += 1
            self.push_event(due, _DEPART, _DOWN, self.link_version[_DOWN])

    def join_pull_groups(self, w: int, now: float) -> None:
        """Worker ``w``'s pulls of the step join its idle connection at ``now`` as
        groups (early; see ``pull_groups``)."""
        if self.random_order:
            self.req[w], self.req_a[w], self.n_flows[w], cum, groups = self.pull_groups(
                self.draw_order()
            )
        else:
            cum, groups = self.fixed_cum, self.fixed_groups
        k = self.k_busy[_DOWN]
        if k:
            dt = now - self.vt[_DOWN]
            self.vg[_DOWN] += dt * self.cap / k
            self.nic_busy[_DOWN] += dt
        self.vt[_DOWN] = now
        tag0 = self.vg[_DOWN]
        self.down_cum[w] = cum
        self.down_tag0[w] = tag0
        q = self.queues[_DOWN][w]
        q.extend([(tag0 + end, size, last) for end, size, last in groups])
        k += 1
        self.k_busy[_DOWN] = k
        h = self.heaps[_DOWN]
        heapq.heappush(h, (q[0][0], self.hseq, w))
        self.hseq += 1
        self._log_down(now, tag0, k)
        self.down_hint[w] = self.down_off + self.down_n - 1
        # every departure time changed
        self.link_version[_DOWN] += 1
        gap = h[0][0] - tag0
        self.push_event(
            now + (gap if gap > 0.0 else 0.0) * k / self.cap,
            _DEPART,
            _DOWN,
            self.link_version[_DOWN],
        )
        if self.down_n > self.down_trim:
            # drop the breakpoints before every busy connection's head group
            keep = min(self.down_hint[c] for c in range(self.workers) if self.queues[_DOWN][c])
            d, n = keep - self.down_off, self.down_n
            self.down_log[:, : n - d] = self.down_log[:, d:n].copy()
            self.down_n = n - d
            self.down_off = keep
            self.down_trim = max(4096, 16 * self.workers, 2 * self.down_n)

    def _log_down(self, t: float, g: float, k: int) -> None:
        """Log a breakpoint of the PS → workers clock (grouped pulls)."""
        n = self.down_n
        if n == self.down_log.shape[1]:
            self.down_log = np.concatenate((self.down_log, np.zeros_like(self.down_log)), axis=1)
        log = self.down_log
        log[0, n] = t
        log[1, n] = g
        log[2, n] = k
        self.down_n = n + 1

    def quiet_arrivals(self, w: int, last: int, now: float, hint: int) -> None:
        """The flows of worker ``w``'s group before its last, flow ``last``, arrived by
        ``now`` (early): each at g⁻¹(its tag) from the clock's breakpoints from
        ``hint`` on, when the group started (the connection was busy all along,
        so the clock rose), its worker's compute running the segments it lets
        run (they issue no push) from then on."""
        s, self.free_at[w], self.busy[w], t, f = quiet_arrivals(
            self.arrived[w], last, now, hint - self.down_off, self.down_tag0[w], self.seg[w],
            self.free_at[w], self.busy[w], self.down_cum[w], self.req_a[w], self.seg_end_a,
            self.down_log, self.down_n, self.cap,
        )  # fmt: skip
        self.seg[w] = s
        if f >= 0:  # the compute reached the step's end at t, flow f having arrived
            self.arrived[w] = f + 1
            self.check_end(w, t)
        self.arrived[w] = last

    def join_pushes(self, w: int, slot: int, now: float) -> None:
        """The pushes of ``slot`` of worker ``w`` join its connection at ``now``."""
        flows = self.push_flows[slot]
        if self.trace is not None:
            for _, q in flows:
                self.push_joined[w][q] = now
        if self.fifo:
            flows = [(b, q + w * self.stride) for b, q in flows]
        self.nic_add(_UP, now, flows, 0 if self.fifo else w)

    def run_chain(self, w: int, t: float, now: float) -> None:
        """Worker ``w`` runs its segments from ``seg[w]`` on, starting at ``t`` ≥ ``now``,
        until one waits for a pull that has not arrived or the step's compute ends.

        ``req`` does not decrease along the segments, so the chain ends at the
        first segment ``e`` > ``s`` that needs more pull flows than have
        arrived (or at the step's end); it takes ``C_e − C_s`` seconds, and
        the pushes of slot ``j`` (after segment ``j − 1``) are issued at
        ``t + C_j − C_s``.
        """
        s = self.seg[w]
        e = bisect_right(self.req[w], self.arrived[w], s + 1, self.n_seg)
        c0 = self.seg_end[s]
        span = self.seg_end[e] - c0
        self.busy[w] += span
        self.seg[w] = e
        self.free_at[w] = t + span
        if self.early:
            lo, hi = self.first_pos[s + 1], self.first_pos[e + 1]
            if hi > lo:
                self.issue_run(w, t - c0 + self.latency, lo, hi, now)
        else:
            for i in range(bisect_right(self.push_slots, s), bisect_right(self.push_slots, e)):
                j = self.push_slots[i]
                self.issue_pushes_at(w, j, t + (self.seg_end[j] - c0), now)
        if e == self.n_seg:
            self.check_end(w, now)

    def issue_pushes_at(self, w: int, slot: int, t: float, now: float) -> None:
        """The pushes of ``slot`` are issued at ``t`` ≥ ``now`` (eager chains, one FIFO queue)."""
        due = t + self.latency
        if due > now:
            self.push_event(due, _JOIN, w, (_UP << 30) + slot)
        else:
            self.join_pushes(w, slot, now)

    def issue_run(self, w: int, base: float, lo: int, hi: int, now: float) -> None:
        """Positions ``lo`` … ``hi − 1`` of worker ``w`` are issued, position ``p`` due
        at ``base + pos_issue[p]`` ≥ ``now`` (early)."""
        due = self.up.issue(w, base, lo, hi)
        if due == -math.inf:  # the connection is busy or has pushes pending
            return
        # the connection is idle: it joins the link when the first position is due
        if due < now:
            due = now
        if due < self.up_wake:
            self.up_wake = due
            self.link_version[_UP] += 1
            self.push_event(due, _DEPART, _UP, self.link_version[_UP])

    def check_end(self, w: int, now: float) -> None:
        """Schedule worker ``w``'s step end once compute, pulls and updates are done."""
        if (
            not self.ending[w]
            and self.seg[w] == self.n_seg
            and self.arrived[w] == self.n_flows[w]
            and self.pushes_left[w] == 0
        ):
            self.ending[w] = True
            self.push_event(max(now, self.last_update[w], self.free_at[w]), _STEP_END, w)

    def issue_pushes(self, w: int, slot: int, now: float) -> None:
        """Worker ``w`` pushes the gradients of ``slot`` at ``now`` (one latency to join)."""
        if not self.pushes_after[slot]:
            return
        if self.latency > 0:
            self.push_event(now + self.latency, _JOIN, w, (_UP << 30) + slot)
        else:
            self.join_pushes(w, slot, now)

    def run(self) -> RawRun:
        """Start every worker (worker 0 at 0, the others at seeded offsets) and run."""
        t1 = (
            single_step_estimate(self.workload, self.network)
            if self.start_window_s is None
            else self.start_window_s
        )
        starts = [
            float(self.start_offsets_s[w])
            if self.start_offsets_s is not None
            else 0.0
            if w == 0
            else float(self.rng.uniform(0.0, t1))
            for w in range(self.workers)
        ]
        if self.early and self.trace is None and _COMPILED and self._orders_fit():
            return self._run_compiled(starts)
        if self.early:
            self._init_push_link()
        for w, start in enumerate(starts):
            self.push_event(start, _STEP_START, w)
        now = self.sim.run()
        if self.early:
            self.nic_bytes[_UP] = self.up.bytes_done
            self.nic_busy[_UP] = self.up.busy_s
        return RawRun(
            step_ends=self.step_ends,
            busy=self.busy,
            now=now,
            events=self.sim.events,
            bytes_pulled=self.nic_bytes[_DOWN],
            bytes_pushed=self.nic_bytes[_UP],
            down_busy_s=self.nic_busy[_DOWN],
            up_busy_s=self.nic_busy[_UP],
            nic={
                "ps0.out": (self.nic_bytes[_DOWN], self.nic_busy[_DOWN]),
                "ps0.in": (self.nic_bytes[_UP], self.nic_busy[_UP]),
            },
        )

    def _run_compiled(self, starts: list[float]) -> RawRun:
        """The early path as one compiled run (:func:`~sgdsim.simulation.fast_run.run`):
        the same figures."""
        step_ends, busy, now, events, nic = fast_run.run(
            np.asarray(starts, np.float64),
            self.steps_per_worker,
            self.cap,
            self.latency,
            self.pull_start,
            self.overhead,
            float(self.gap),
            self.seg_end_a,
            np.asarray(self.first_pos, np.int64),
            self._pull_orders(),
            self.random_order,
            self.n_pull,
            (np.asarray(self.pos_issue, np.float64), self.pos_bytes_a, self.pos_update_a),
            # the rows of push records and columns of each clock's log at first
            (max(push_link.RECORDS0, 4 * self.workers), push_link.LOG0, push_link.LOG0),
        )
        (down_bytes, down_busy), (up_bytes, up_busy) = nic
        return RawRun(
            step_ends=step_ends.tolist(),
            busy=busy.tolist(),
            now=float(now),
            events=int(events),
            bytes_pulled=float(down_bytes),
            bytes_pushed=float(up_bytes),
            down_busy_s=float(down_busy),
            up_busy_s=float(up_busy),
            nic={
                "ps0.out": (float(down_bytes), float(down_busy)),
                "ps0.in": (float(up_bytes), float(up_busy)),
            },
        )

    def _orders_fit(self) -> bool:
        """Whether a random order's rows (:meth:`_pull_orders`) fit ``_MAX_ORDER_CELLS``
        (a fixed order's one row always does)."""
        rows = 1 + self.workers * self.steps_per_worker
        return (
            not self.random_order or rows * (max(self.n_pull, self.n_seg) + 1) <= _MAX_ORDER_CELLS
        )

    def _pull_orders(self) -> tuple[npt.NDArray[Any], ...]:
        """The pull flows of each pull order, a row per order, padded, as
        :func:`~sgdsim.simulation.fast_run.run` takes them: the policy's order,
        then with a random order the one of each worker step, drawn here in the
        order the event handlers draw them (one permutation per step, in the
        order the steps' pulls join; nothing else draws meanwhile)."""
        fixed = np.array([f[0] for f in self.fixed_flows], np.float64)
        draws = self.workers * self.steps_per_worker if self.random_order and self.n_pull else 0
        perms = [self.draw_order() for _ in range(draws)]
        d = 1 + draws
        req = np.empty((d, self.n_seg + 1), np.int64)
        req[0] = self.fixed_req_a
        n_flows = np.full(d, len(fixed), np.int64)
        if self.grouped:
            rows = [(self.fixed_cum, self.fixed_groups)]
            seen: dict[bytes, Any] = {}  # tf_default draws from a few profiled orders
            for i, perm in enumerate(perms, 1):
                key = perm.tobytes()
                if key not in seen:
                    seen[key] = self.pull_groups(perm)
                _, req[i], n_flows[i], cum, groups = seen[key]
                rows.append((cum, groups))
            width = max(len(g) for _, g in rows)
            cums = np.zeros((d, max(len(c) for c, _ in rows)))
            g_end, g_size = np.zeros((d, width)), np.zeros((d, width))
            g_last = np.zeros((d, width), np.int64)
            n_groups = np.zeros(d, np.int64)
            for i, (cum, groups) in enumerate(rows):
                cums[i, : len(cum)] = cum
                n_groups[i] = len(groups)
                for j, (end, size, last) in enumerate(groups):
                    g_end[i, j], g_size[i, j], g_last[i, j] = end, size, last
            flow_bytes = np.zeros((d, 1))
        else:
            # one flow per pull, in the drawn order (_pull_flows without aggregation)
            flow_bytes = np.zeros((d, max(len(fixed), self.n_pull)))
            flow_bytes[0, : len(fixed)] = fixed
            if perms:
                order = np.array(perms)
                flow_bytes[1:, : self.n_pull] = self.pull_bytes_a[order]
                eff = np.minimum.accumulate(self.pull_gate_a[order][:, ::-1], axis=1)[:, ::-1]
                for i, row in enumerate(eff, 1):
                    req[i] = np.searchsorted(row, self.seg_index, side="right")
            cums, g_end, g_size = np.zeros((d, 1)), np.zeros((d, 1)), np.zeros((d, 1))
            g_last, n_groups = np.zeros((d, 1), np.int64), np.zeros(d, np.int64)
        return req, cums, flow_bytes, n_flows, g_end, g_size, g_last, n_groups

    # -- the actions of the event kinds; time taken inline is handed back to the loop

    def _on_depart(self, now: float, arg: tuple[int, int]) -> bool:
        a, version = arg
        if version != self.link_version[a]:
            return True  # stale: the link changed since this was scheduled
        if a >= 2:  # a node's cores finished a segment
            self._cores_depart(a, now)
        elif self.early and a == _UP:
            self.sim.now = self._push_link(now)
        elif self.gap and a == _DOWN:
            self.sim.now = self._pull_link(now)
        else:
            self.sim.now = self._link_departures(a, now)
        return False

    def _on_join(self, now: float, arg: tuple[int, int]) -> None:
        w, code = arg
        li, slot = divmod(code, 1 << 30)
        if li == _DOWN:
            self.join_pulls(w, now)
        else:
            self.join_pushes(w, slot, now)

    def _on_segment_end(self, now: float, arg: tuple[int, int]) -> None:
        self.sim.now = self._segments_end(arg[0], now)

    def _on_step_end(self, now: float, arg: tuple[int, int]) -> None:
        self._step_end(arg[0], now)

    def _on_step_start(self, now: float, arg: tuple[int, int]) -> None:
        self._step_start(arg[0], now)

    def _cores_depart(self, li: int, now: float) -> None:
        """A node's cores finished a segment (shared-core mode)."""
        _, w, t_next = self.cores[li - 2].pop_next(now)
        self.link_version[li] += 1
        if t_next is not None:
            self.push_event(t_next, _DEPART, li, self.link_version[li])
        self.end_segment(w, now)

    def _push_link(self, now: float) -> float:
        """The workers → PS link in bulk ("early"): its departures and the idle
        connections whose pushes fall due, in time order, as long as they precede
        every other event (:func:`~sgdsim.simulation.push_link.advance`); returns
        the time of the last one taken. When a step's last push has left, the PS
        applies all that left by then (:func:`~sgdsim.simulation.push_link.settle`)
        and the link goes on."""
        horizon = self.sim.peek()
        self.up_wake = math.inf
        while True:
            why, c, now, t, taken = self.up.advance(now, horizon)
            self.sim.events += taken
            if why != LAST:
                break
            # c's last push of the step left, the PS has applied every push up to it:
            # the step may end when c's last update does
            if t > self.last_update[c]:
                self.last_update[c] = t
            self.check_end(c, now)
            horizon = self.sim.peek()
        self.link_version[_UP] += 1
        if why == WAKE:
            self.up_wake = t
            self.push_event(t, _DEPART, _UP, self.link_version[_UP])
        return now

    def _pull_link(self, now: float) -> float:
        """The PS → workers link with a pull gap: its departures and the pulls that
        join after their gap (``pull_rel``), in time order (a departure first at
        equal times), as long as they precede every other event; returns the time
        of the last one taken. A connection carries one pull at a time, so the
        pulls on the wire are one heap, ``(tag, order, worker, bytes, pull)``;
        ``pull_rel`` ends in a sentinel due at ``inf``. Only arrivals schedule
        events, so the time of the next other event is read again after each."""
        h = self.pull_wire
        rel = self.pull_rel
        cap = self.cap
        k = self.k_busy[_DOWN]
        g = self.vg[_DOWN]
        t_last = self.vt[_DOWN]
        nb = self.nic_busy[_DOWN]
        nbytes = self.nic_bytes[_DOWN]
        arrive = self._pull_arrived if self.trace is None else self._traced_pull_arrived
        joined = None if self.trace is None else self.joined
        queue, arrived = self.pull_queue, self.arrived
        horizon = self.sim.peek()
        taken = 0
        self.down_wake = -math.inf  # pulls released meanwhile are taken by this loop
        while True:
            t_next = math.inf
            if h:
                gap = h[0][0] - g
                t_next = t_last + gap * k / cap if gap > 0.0 else t_last
            depart = t_next <= rel[0][0]
            if not depart:
                t_next = rel[0][0]
            elif t_next == math.inf:  # nothing on the link, nothing to release
                self.down_wake = math.inf
                self.link_version[_DOWN] += 1
                break
            if t_next > now:
                if t_next >= horizon:
                    self.down_wake = t_next
                    self.link_version[_DOWN] += 1
                    self.push_event(t_next, _DEPART, _DOWN, self.link_version[_DOWN])
                    break
                now = t_next  # it precedes every pending event: take it now
                taken += 1
            if k:
                dt = now - t_last
                g += dt * cap / k
                nb += dt
            t_last = now
            if depart:
                _, _, w, size, p = heapq.heappop(h)
                k -= 1
                nbytes += size
                arrive(w, p, now, 0)
                horizon = self.sim.peek()
            else:  # worker w's next pull goes on the wire
                w = heapq.heappop(rel)[2]
                size, p = queue[w][arrived[w]]
                heapq.heappush(h, (g + size, self.hseq, w, size, p))
                self.hseq += 1
                k += 1
                if joined is not None:
                    joined[w][p] = now
        self.sim.events += taken
        self.k_busy[_DOWN] = k
        self.vg[_DOWN] = g
        self.vt[_DOWN] = t_last
        self.nic_busy[_DOWN] = nb
        self.nic_bytes[_DOWN] = nbytes
        return now

    def _traced_pull_arrived(self, w: int, p: int, now: float, hint: int) -> None:
        """As :meth:`_pull_arrived`, with the pull's trace record."""
        self._deliver(_DOWN, w, p, now, hint)

    def _link_departures(self, a: int, now: float) -> float:
        """Departures from link ``a`` (PS → workers, or workers → PS outside bulk) as
        long as the next one precedes every pending event; returns the last time."""
        h = self.heaps[a]
        qs = self.queues[a]
        k = self.k_busy[a]
        g = self.vg[a]
        t_last = self.vt[a]
        nb = self.nic_busy[a]
        nbytes = self.nic_bytes[a]
        while True:
            # advance the virtual clock to now and pop the head of the first connection
            dt = now - t_last
            g += dt * self.cap / k
            nb += dt
            t_last = now
            c = h[0][2]
            fq = qs[c]
            _, size, payload = fq.popleft()
            nbytes += size
            if fq:
                heapq.heapreplace(h, (fq[0][0], self.hseq, c))
                self.hseq += 1
            else:
                heapq.heappop(h)
                k -= 1
            hint = 0
            if self.grouped:  # the PS → workers link: log the clock; c's next group starts now
                hint = self.down_hint[c]
                self._log_down(now, g, k)
                if fq:
                    self.down_hint[c] = self.down_off + self.down_n - 1
            self._deliver(a, c, payload, now, hint)
            if h:
                gap = h[0][0] - g
                t_next = now + (gap if gap > 0.0 else 0.0) * k / self.cap
                if t_next < self.sim.peek():
                    # the link's next departure precedes every pending event: take it
                    # now, exactly as the queue would (no other event can come first)
                    now = t_next
                    self.sim.events += 1
                    continue
                self.link_version[a] += 1
                self.push_event(t_next, _DEPART, a, self.link_version[a])
            else:
                self.link_version[a] += 1
            break
        self.k_busy[a] = k
        self.vg[a] = g
        self.vt[a] = t_last
        self.nic_busy[a] = nb
        self.nic_bytes[a] = nbytes
        return now

    def _deliver(self, a: int, c: int, payload: int, now: float, hint: int) -> None:
        """A flow of connection ``c`` on link ``a`` arrived: a pull flow (group) at its
        worker, or a push at the PS CPU."""
        if self.fifo:
            w, idx = divmod(payload, self.stride)
        else:
            w, idx = c, payload
        if self.trace is not None:
            t_join = self.joined[w][idx] if a == _DOWN else self.push_joined[w][idx]
            begin = max(t_join, self.conn_free[a][c])
            self.trace.append((PULL if a == _DOWN else PUSH, w, idx, begin, now))
            self.conn_free[a][c] = now
        if a == _DOWN:
            self._pull_arrived(w, payload, now, hint)
            return
        start = now if now > self.ps_free else self.ps_free
        self.ps_free = start + self.push_update[idx]
        if self.trace is not None:
            self.trace.append((UPDATE, w, idx, start, self.ps_free))
        if self.ps_free > self.last_update[w]:
            self.last_update[w] = self.ps_free
        self.pushes_left[w] -= 1
        if not self.pushes_left[w]:
            self.check_end(w, now)

    def _pull_arrived(self, w: int, payload: int, now: float, hint: int) -> None:
        """Pull flow (group) ``payload`` of worker ``w`` arrived at ``now``: run what it
        lets run; with a pull gap, the next pull joins one gap later."""
        if self.grouped and payload > self.arrived[w]:
            self.quiet_arrivals(w, payload, now, hint)
        got = self.arrived[w] + 1
        self.arrived[w] = got
        s = self.seg[w]
        if s < self.n_seg:
            if not self.running[w] and got >= self.req[w][s]:
                self.try_start(w, now)
        elif got == self.n_flows[w]:
            self.check_end(w, now)
        if self.gap and got < self.n_flows[w]:
            # only _pull_link delivers pulls with a gap, and it takes those released
            # meanwhile itself (release_pull without the wake-up event)
            heapq.heappush(self.pull_rel, (now + self.gap, self.rseq, w))
            self.rseq += 1

    def _segments_end(self, w: int, now: float) -> float:
        """Worker ``w``'s segment ends at ``now``; the next ones that can start and end
        before every pending event run at once. Returns the last end time."""
        rw = self.req[w]
        while True:
            s = self.seg[w]
            self.busy[w] += self.seg_dur[s]
            if self.trace is not None:
                self.trace.append((COMPUTE, w, s, now - self.seg_dur[s], now))
            if self.pushes_after[s + 1]:
                self.issue_pushes(w, s + 1, now)
            s += 1
            self.seg[w] = s
            if s == self.n_seg:
                self.running[w] = False
                self.check_end(w, now)
            elif self.arrived[w] >= rw[s]:  # the next segment can start at once
                t_end = now + self.seg_dur[s]
                if t_end < self.sim.peek():
                    now = t_end  # and it ends before any pending event: run it now
                    self.sim.events += 1
                    continue
                self.push_event(t_end, _SEG_END, w)
            else:
                self.running[w] = False  # waits for a pull
            return now

    def _step_end(self, w: int, now: float) -> None:
        """Worker ``w``'s step ends; the next starts after the per-step overhead."""
        self.step_ends[w].append(now)
        if len(self.step_ends[w]) < self.steps_per_worker:
            self.push_event(now + self.overhead, _STEP_START, w)

    def _step_start(self, w: int, now: float) -> None:
        """Worker ``w`` starts a step: pushes due at once, the pulls, the first segments."""
        self.seg[w] = 0
        self.running[w] = False
        self.ending[w] = False
        self.arrived[w] = 0
        self.free_at[w] = now
        if self.random_order and self.n_pull:
            self.n_flows[w] = -1  # drawn when the pulls are issued
        self.pushes_left[w] = self.n_push
        self.last_update[w] = now
        if self.early:
            self.up.gone[w] = 0
            if self.first_pos[1]:
                self.issue_run(w, now + self.latency, 0, self.first_pos[1], now)
        elif self.eager:
            if self.pushes_after[0]:
                self.issue_pushes_at(w, 0, now, now)
        else:
            self.issue_pushes(w, 0, now)
        if self.n_pull:
            if self.pull_start > 0 or self.latency > 0:
                self.push_event(now + self.pull_start + self.latency, _JOIN, w, _DOWN << 30)
            else:
                self.join_pulls(w, now)
        self.try_start(w, now)
        self.check_end(w, now)
