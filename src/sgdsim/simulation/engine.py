"""The general event loop: any transmission policy, any number of PS shards.

:func:`sgdsim.simulation.async_ps.simulate_async` runs its own faster loop for
the whole-tensor first-in first-out policies on one PS, and this one otherwise.
The step model is the same (see :mod:`sgdsim.simulation.async_ps`); what this
loop adds:

- Per-connection queues (:mod:`sgdsim.simulation.policies`): every worker has
  one connection per PS shard and direction; the connection sends one unit
  (whole tensor, slice, partition or block) at a time, chosen by its queue
  when it falls idle.
- Several PS shards (``Workload.ps_tasks``): each shard is its own host with
  its own full-duplex NIC and its own PS CPU (one FIFO server applying
  updates); the network is shared max-min fairly across both the shards' and
  the workers' NICs (:class:`~sgdsim.simulation.link.MaxMinLink`). With one
  shard the PS NIC is the only bottleneck and the virtual-time
  :class:`~sgdsim.simulation.link.PSLink` gives the same rates faster.
- P3's pull after update: see :mod:`sgdsim.simulation.policies`.
- A step that starts on a busy PS (``pull_join_delay_s``): the first pull of
  a worker's step that is put on the wire while the PS NIC sends to another
  worker (of the same shard) waits that long before its first byte.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sgdsim.simulation import policies as pol
from sgdsim.simulation.chrome_trace import COMPUTE, PULL, PUSH, UPDATE, TraceRecord
from sgdsim.simulation.link import MaxMinLink, PSLink, RoundRobinLink
from sgdsim.simulation.workload import Network, Workload

# event kinds; the number is also the tie-break priority at equal times (as in async_ps)
_DEPART, _JOIN, _SEG_END, _STEP_END, _STEP_START = range(5)
_DOWN, _UP = 0, 1  # PS → workers (pulls), workers → PS (pushes)
# what a _JOIN event brings to the connections
_J_PULLS, _J_PUSHES, _J_RELEASE, _J_KICK, _J_WIRE = range(5)


@dataclass
class RawRun:
    """What the loop hands back for :func:`sgdsim.simulation.async_ps` to summarize."""

    step_ends: list[list[float]]
    busy: list[float]
    now: float
    events: int
    bytes_pulled: float
    bytes_pushed: float
    down_busy_s: float  # mean over the PS shards' NICs
    up_busy_s: float
    nic: dict[str, tuple[float, float]]  # NIC name -> (bytes, busy seconds)


def run_general(
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
    pull_join_delay_s: float = 0.0,
) -> RawRun:
    """Simulate; arguments as :func:`sgdsim.simulation.async_ps.simulate_async` (checked there).

    ``pull_order`` is the policy's issue order of the pulls, ``t1`` the
    contention-free step time the random start offsets are drawn over.
    """
    rng = np.random.default_rng(seed)
    seg_dur = workload.seg_dur_s.tolist()
    n_seg = len(seg_dur)
    pull_bytes = workload.pull_bytes.tolist()
    pull_gate = workload.pull_gate.tolist()
    n_pull = len(pull_bytes)
    push_bytes = workload.push_bytes.tolist()
    push_update = workload.push_update_s.tolist()
    push_seg = workload.push_seg.tolist()
    n_push = len(push_bytes)
    pull_shard = workload.pulls_shard.tolist()
    push_shard = workload.pushes_shard.tolist()
    k = workload.ps_tasks
    latency = network.latency_s
    pull_start = workload.pull_start_s
    overhead = workload.overhead_s
    fifo = ps_discipline == "fifo"
    shuffle = pol.get_policy(policy).shuffle_pulls
    pull_gap = spec.pull_gap_s

    # units: pieces of each tensor; PS update time in proportion to bytes
    pull_pieces = [pol.split_bytes(b, spec.pull_piece) for b in pull_bytes]
    push_pieces = [pol.split_bytes(b, spec.push_piece) for b in push_bytes]
    push_piece_upd = [
        [u * (x / b) for x in pieces] if b > 0 else [u] + [0.0] * (len(pieces) - 1)
        for b, u, pieces in zip(push_bytes, push_update, push_pieces, strict=True)
    ]
    # layer priority (smaller = more urgent): pulls by gate, pushes by reverse production
    pull_prio = pull_gate
    push_prio = [-s for s in push_seg]

    # P3: which pushes carry a pulled parameter; pull pieces released per push piece
    matched_push = [False] * n_push
    matched_pull = [False] * n_pull
    release: list[list[list[int]]] = [[] for _ in range(n_push)]
    push_param = workload.pushes_param.tolist()
    if spec.pull_after_update:
        for q, p in enumerate(push_param):
            if p < 0:
                continue
            matched_push[q] = matched_pull[p] = True
            nq, np_ = len(push_pieces[q]), len(pull_pieces[p])
            rel: list[list[int]] = [[] for _ in range(nq)]
            for i in range(np_):
                rel[i * nq // np_].append(i)
            release[q] = rel
    n_gating = sum(1 for q in range(n_push) if not matched_push[q])
    unmatched_pulls = [p for p in pull_order if not matched_pull[p]]
    base_pending = [0] * (n_seg + 1)
    for g in pull_gate:
        base_pending[g] += 1
    base_pieces = [len(x) for x in pull_pieces]
    pushes_after: list[list[int]] = [[] for _ in range(n_seg + 1)]  # index seg+1
    for q, s in enumerate(push_seg):
        pushes_after[s + 1].append(q)

    # Prophet: byte budget of a block formed after each backward stage (push slot)
    stage_budget = [math.inf] * (n_seg + 1)
    slots = [s for s in range(n_seg + 1) if pushes_after[s]]
    for s, nxt in itertools.pairwise(slots):
        gap = sum(seg_dur[s:nxt])
        stage_budget[s] = (gap + pol.PROPHET_SLACK_S) * network.bandwidth_Bps

    # network: links 0, 1 per direction; 2+ the cores of each worker node, modelled
    # when workers share them or the enforced order's control messages run on them
    gap_cpu = pull_gap > 0 and spec.pull_gap_cpu
    shared_cpu = workers_per_node > 1 or gap_cpu
    n_nodes = -(-workers // workers_per_node)
    multi = k > 1
    links: list[Any]
    if multi:
        # resources: shards 0..k-1, then worker nodes k..k+n_nodes-1
        links = [MaxMinLink(network.bandwidth_Bps, k + n_nodes) for _ in (_DOWN, _UP)]
    elif link_quantum_bytes > 0:
        links = [RoundRobinLink(network.bandwidth_Bps, link_quantum_bytes) for _ in (_DOWN, _UP)]
    else:
        links = [PSLink(network.bandwidth_Bps), PSLink(network.bandwidth_Bps)]
    if shared_cpu:
        links += [PSLink(compute_slots, 1.0) for _ in range(n_nodes)]
    link_version = [0] * len(links)

    # connections: (direction, shard, worker or -1 for the one FIFO queue per NIC)
    queues: dict[tuple[int, int, int], pol.Queue] = {}
    conn_busy: dict[tuple[int, int, int], bool] = {}
    conn_since: dict[tuple[int, int, int], float] = {}
    queue_factory = (spec.pull_queue, spec.push_queue)
    # units on the wire per (direction, shard), and the step whose first pull
    # each connection last put on the wire (for pull_join_delay_s)
    on_wire = [[0] * k for _ in (_DOWN, _UP)]
    joined_step: dict[tuple[int, int, int], int] = {}

    def conn_of(d: int, shard: int, w: int) -> tuple[int, int, int]:
        key = (d, shard, -1 if fifo else w)
        if key not in queues:
            queues[key] = queue_factory[d]()
            conn_busy[key] = False
        return key

    events: list[tuple[float, int, int, int, int, Any]] = []
    seq = 0
    n_events = 0

    def push_event(t: float, kind: int, a: int, b: int = 0, obj: Any = None) -> None:
        nonlocal seq
        heapq.heappush(events, (t, kind, seq, a, b, obj))
        seq += 1

    def reschedule(li: int) -> None:
        link_version[li] += 1
        t = links[li].next_departure()
        if t is not None:
            push_event(t, _DEPART, li, link_version[li])

    # links whose next departure changed while a departure is handled (None: not handling one)
    deferred: set[int] | None = None

    # per-worker state; "cur" counts belong to the running step, "nxt" to the next
    # (P3 delivers pulls of step k+1 while step k runs)
    step_no = [0] * workers
    seg = [0] * workers
    running = [False] * workers
    ending = [False] * workers
    pend_cur: list[list[int]] = [[] for _ in range(workers)]
    pend_nxt: list[list[int]] = [[] for _ in range(workers)]
    pieces_cur: list[list[int]] = [[] for _ in range(workers)]
    pieces_nxt: list[list[int]] = [[] for _ in range(workers)]
    left_cur = [0] * workers
    left_nxt = [0] * workers
    push_left: list[list[int]] = [[] for _ in range(workers)]  # pieces not yet at the PS
    gating_left = [0] * workers
    last_update = [0.0] * workers
    stage = [0] * workers  # latest push slot fired (Prophet)
    busy = [0.0] * workers
    seg_start = [0.0] * workers
    step_ends: list[list[float]] = [[] for _ in range(workers)]
    ps_free = [0.0] * k

    def budget(w: int) -> float:
        return math.inf if seg[w] >= n_seg else stage_budget[stage[w]]

    def kick(key: tuple[int, int, int], now: float) -> None:
        """Put the next unit of an idle connection on the wire."""
        if conn_busy[key]:
            return
        unit = queues[key].take(budget)
        if unit is None:
            return
        conn_busy[key] = True
        d, shard, _ = key
        if d == _DOWN and pull_join_delay_s > 0 and joined_step.get(key) != unit[2]:
            joined_step[key] = unit[2]  # the step's first pull
            if on_wire[d][shard]:  # the PS is sending to another worker
                push_event(now + pull_join_delay_s, _JOIN, unit[1], _J_WIRE, (key, unit))
                return
        wire(key, unit, now)

    def wire(key: tuple[int, int, int], unit: Any, now: float) -> None:
        """Put ``unit`` of connection ``key`` on its link."""
        conn_since[key] = now
        d, shard, _ = key
        on_wire[d][shard] += 1
        if multi:
            route = (shard, k + unit[1] // workers_per_node)
            links[d].add(now, unit[0], (key, unit), key, route)
        else:
            links[d].add(now, unit[0], (key, unit), key)
        if deferred is None:
            reschedule(d)
        else:
            deferred.add(d)  # rescheduled once when the departure is handled

    def try_start(w: int, now: float) -> None:
        s = seg[w]
        if not running[w] and s < n_seg and pend_cur[w][s] == 0:
            running[w] = True
            if shared_cpu:
                seg_start[w] = now
                li = 2 + w // workers_per_node
                if links[li].add(now, seg_dur[s], s, w):
                    reschedule(li)
            else:
                push_event(now + seg_dur[s], _SEG_END, w)

    def check_end(w: int, now: float) -> None:
        if not ending[w] and seg[w] == n_seg and left_cur[w] == 0 and gating_left[w] == 0:
            ending[w] = True
            push_event(max(now, last_update[w]), _STEP_END, w)

    def issue_pushes(w: int, slot: int, now: float) -> None:
        if not pushes_after[slot]:
            return
        stage[w] = slot
        if latency > 0:
            push_event(now + latency, _JOIN, w, _J_PUSHES, (slot, step_no[w]))
        else:
            join_pushes(w, slot, step_no[w], now)

    def join_pulls(w: int, gen: int, order: list[int], now: float) -> None:
        touched = []
        for p in order:
            key = conn_of(_DOWN, pull_shard[p], w)
            q = queues[key]
            prio = pull_prio[p]
            for i, b in enumerate(pull_pieces[p]):
                q.put((gen, prio) if not fifo else (prio,), (b, w, gen, ((p, i),)))
            if key not in touched:
                touched.append(key)
        for key in touched:
            kick(key, now)

    def join_pushes(w: int, slot: int, gen: int, now: float) -> None:
        touched = []
        for qi in pushes_after[slot]:
            key = conn_of(_UP, push_shard[qi], w)
            q = queues[key]
            prio = push_prio[qi]
            for i, b in enumerate(push_pieces[qi]):
                q.put((gen, prio) if not fifo else (prio,), (b, w, gen, ((qi, i),)))
            if key not in touched:
                touched.append(key)
        for key in touched:
            kick(key, now)

    def release_pulls(w: int, gen: int, p: int, pieces: list[int], now: float) -> None:
        key = conn_of(_DOWN, pull_shard[p], w)
        q = queues[key]
        prio = pull_prio[p]
        for i in pieces:
            q.put((gen, prio) if not fifo else (prio,), (pull_pieces[p][i], w, gen, ((p, i),)))
        kick(key, now)

    def pull_arrived(w: int, gen: int, items: tuple[tuple[int, int], ...], now: float) -> None:
        cur = gen == step_no[w]
        pieces = pieces_cur[w] if cur else pieces_nxt[w]
        for p, _ in items:
            pieces[p] -= 1
            if pieces[p]:
                continue
            g = pull_gate[p]
            if cur:
                pend_cur[w][g] -= 1
                left_cur[w] -= 1
                if g == seg[w]:
                    try_start(w, now)
                    check_end(w, now)
            else:
                pend_nxt[w][g] -= 1
                left_nxt[w] -= 1

    def push_arrived(
        w: int, gen: int, items: tuple[tuple[int, int], ...], shard: int, now: float
    ) -> None:
        for qi, i in items:
            start = now if now > ps_free[shard] else ps_free[shard]
            end = ps_free[shard] = start + push_piece_upd[qi][i]
            if trace is not None:
                trace.append(
                    (UPDATE, w, qi, start, end, shard) if multi else (UPDATE, w, qi, start, end)
                )
            if matched_push[qi]:
                if gen + 1 < steps_per_worker and release[qi][i]:
                    if latency > 0:
                        push_event(
                            end + latency,
                            _JOIN,
                            w,
                            _J_RELEASE,
                            (gen + 1, push_param[qi], release[qi][i]),
                        )
                    elif end > now:
                        push_event(
                            end, _JOIN, w, _J_RELEASE, (gen + 1, push_param[qi], release[qi][i])
                        )
                    else:
                        release_pulls(w, gen + 1, push_param[qi], release[qi][i], now)
                continue
            if end > last_update[w]:
                last_update[w] = end
            left = push_left[w]  # a gating push belongs to the running step
            left[qi] -= 1
            if left[qi] == 0:
                gating_left[w] -= 1
                check_end(w, now)

    for w in range(workers):
        if start_offsets_s is not None:
            start = float(start_offsets_s[w])
        else:
            start = 0.0 if w == 0 else float(rng.uniform(0.0, t1))
        push_event(start, _STEP_START, w)

    now = 0.0
    while events:
        now, kind, _, a, b, obj = heapq.heappop(events)
        if kind == _DEPART and b != link_version[a]:
            continue  # stale: the link changed since this was scheduled
        n_events += 1
        if kind == _DEPART and a >= 2:  # a node's cores finished a segment or a gap
            payload, w, t_next = links[a].pop_next(now)
            link_version[a] += 1
            if t_next is not None:
                push_event(t_next, _DEPART, a, link_version[a])
            if isinstance(w, tuple):  # ("gap", worker): the control message is through
                conn_busy[payload] = False
                kick(payload, now)
                continue
            running[w] = False
            s = seg[w]
            busy[w] += seg_dur[s]
            if trace is not None:
                trace.append((COMPUTE, w, s, seg_start[w], now))
            issue_pushes(w, s + 1, now)
            seg[w] = s + 1
            if s + 1 < n_seg:
                try_start(w, now)
            else:
                check_end(w, now)
        elif kind == _DEPART:
            (key, unit), _, _ = links[a].pop_next(now)
            deferred = {a}
            conn_busy[key] = False
            on_wire[a][key[1]] -= 1
            queues[key].done(unit)
            _, w, gen, items = unit
            shard = key[1]
            if trace is not None:
                kind_ = PULL if a == _DOWN else PUSH
                t0 = conn_since[key]
                trace.append(
                    (kind_, w, items[0][0], t0, now, shard)
                    if multi
                    else (kind_, w, items[0][0], t0, now)
                )
            if a == _DOWN:
                pull_arrived(w, gen, items, now)
            else:
                push_arrived(w, gen, items, shard, now)
            if a == _DOWN and pull_gap > 0 and len(queues[key]):
                conn_busy[key] = True  # the next pull waits for the control message
                if gap_cpu:
                    li = 2 + w // workers_per_node
                    if links[li].add(now, pull_gap, key, ("gap", w)):
                        reschedule(li)
                else:
                    push_event(now + pull_gap, _JOIN, w, _J_KICK, key)
            else:
                kick(key, now)
            for li in sorted(deferred):
                reschedule(li)
            deferred = None
        elif kind == _JOIN:
            w = a
            if b == _J_PULLS:
                gen = obj
                if shuffle:
                    order = rng.permutation(n_pull).tolist()
                else:
                    order = pull_order if gen == 0 else unmatched_pulls
                join_pulls(w, gen, order, now)
            elif b == _J_PUSHES:
                slot, gen = obj
                join_pushes(w, slot, gen, now)
            elif b == _J_KICK:
                conn_busy[obj] = False
                kick(obj, now)
            elif b == _J_WIRE:
                wire(obj[0], obj[1], now)
            else:
                gen, p, pieces = obj
                release_pulls(w, gen, p, pieces, now)
        elif kind == _SEG_END:
            w = a
            s = seg[w]
            busy[w] += seg_dur[s]
            if trace is not None:
                trace.append((COMPUTE, w, s, now - seg_dur[s], now))
            issue_pushes(w, s + 1, now)
            s += 1
            seg[w] = s
            if s == n_seg:
                running[w] = False
                check_end(w, now)
            elif pend_cur[w][s] == 0:
                push_event(now + seg_dur[s], _SEG_END, w)
            else:
                running[w] = False
        elif kind == _STEP_END:
            w = a
            step_ends[w].append(now)
            if len(step_ends[w]) < steps_per_worker:
                push_event(now + overhead, _STEP_START, w)
        else:  # _STEP_START
            w = a
            gen = step_no[w] = len(step_ends[w])
            seg[w] = 0
            running[w] = False
            ending[w] = False
            stage[w] = 0
            if gen == 0:
                pend_cur[w], pieces_cur[w], left_cur[w] = (
                    list(base_pending),
                    list(base_pieces),
                    n_pull,
                )
            else:
                pend_cur[w], pieces_cur[w], left_cur[w] = pend_nxt[w], pieces_nxt[w], left_nxt[w]
            pend_nxt[w], pieces_nxt[w], left_nxt[w] = list(base_pending), list(base_pieces), n_pull
            push_left[w] = [len(x) for x in push_pieces]
            gating_left[w] = n_gating
            last_update[w] = now
            issue_pushes(w, 0, now)
            if n_pull and (gen == 0 or unmatched_pulls):
                if pull_start > 0 or latency > 0:
                    push_event(now + pull_start + latency, _JOIN, w, _J_PULLS, gen)
                elif shuffle:
                    join_pulls(w, gen, rng.permutation(n_pull).tolist(), now)
                else:
                    join_pulls(w, gen, pull_order if gen == 0 else unmatched_pulls, now)
            try_start(w, now)
            check_end(w, now)

    nic: dict[str, tuple[float, float]] = {}
    if multi:
        down, up = links[_DOWN], links[_UP]
        for s in range(k):
            nic[f"ps{s}.out"] = (down.nic_bytes[s], down.busy_s[s])
            nic[f"ps{s}.in"] = (up.nic_bytes[s], up.busy_s[s])
        for j in range(n_nodes):
            nic[f"node{j}.in"] = (down.nic_bytes[k + j], down.busy_s[k + j])
            nic[f"node{j}.out"] = (up.nic_bytes[k + j], up.busy_s[k + j])
        down_busy = sum(down.busy_s[:k]) / k
        up_busy = sum(up.busy_s[:k]) / k
    else:
        nic["ps0.out"] = (links[_DOWN].bytes_done, links[_DOWN].busy_s)
        nic["ps0.in"] = (links[_UP].bytes_done, links[_UP].busy_s)
        down_busy, up_busy = links[_DOWN].busy_s, links[_UP].busy_s
    return RawRun(
        step_ends=step_ends,
        busy=busy,
        now=now,
        events=n_events,
        bytes_pulled=links[_DOWN].bytes_done,
        bytes_pushed=links[_UP].bytes_done,
        down_busy_s=down_busy,
        up_busy_s=up_busy,
        nic=nic,
    )
