"""The fast loop's early path as one compiled run.

With whole-tensor pulls (``tf_default``, ``tictac``, ``fifo_random``: the
policy's order, or one drawn per step), a fair PS NIC, one worker per node
and no trace,
:class:`~sgdsim.simulation.fast_fifo.FastFifoRun` works in bulk as its
docstring says: pull groups (or, with a pull gap, one pull at a time per
connection) on the PS → workers link, segment chains that run ahead, pushes
in runs on the workers → PS link, the PS's updates in batches. :func:`run` is
that same model in one call compiled by numba, the Python class's handlers as
functions on arrays, with the same floating-point operations in the same
order, so every figure is the same to the bit (``tests/test_fast_run.py``). It
returns to Python only at the end: a sweep of the default grid spends its
time here.

Events follow :class:`~sgdsim.simulation.core.Simulation`'s order, ``(time,
kind, sequence)``: the workers' events (step start, pull join, step end; at
most one pending per worker) in a heap, and each link's next departure in a
slot of its own, which a newer departure replaces (the core leaves the old
one in its heap as a stale event; either way it never runs).
"""

from __future__ import annotations

import math

import numpy as np
from numba.core import types
from numba.experimental import structref

from sgdsim.simulation import push_link as pl
from sgdsim.simulation.borrow import borrow
from sgdsim.simulation.chains import quiet_arrivals
from sgdsim.simulation.jit import jit as _jit

# event kinds, as the core's priorities
_DEPART, _JOIN, _STEP_END, _STEP_START = 0, 1, 3, 4
# per worker, floats: compute reaches its next segment, compute seconds, last
# update's end, virtual time of the step's first pull
_FREE, _BUSY, _LAST, _TAG0 = range(4)
# per worker, ints: next segment, pull flows arrived, step ending, steps done,
# breakpoint of its head pull group, its head group, its step's pull order (a
# row of the order arrays), and that order's flows (−1 until it is drawn)
_SEG, _ARR, _ENDING, _DONE, _HINT, _HEAD, _ORD, _NFLOWS = range(8)
# run floats: PS → workers clock (g, t), its busy seconds and bytes, the push
# link's wake, each link's next departure
_DG, _DT, _DNB, _DBYTES, _UP_WAKE, _DOWN_AT, _UP_AT, _DOWN_WAKE = range(8)
# run ints: busy pull connections, their heap's sequence and size, breakpoints
# logged and dropped, when to drop, event sequence, events run, worker events
# pending, each link's departure's sequence
_DK, _DSEQ, _DH_N, _DN, _DOFF, _DTRIM, _SEQ, _EVENTS, _EV_N, _DOWN_SEQ, _UP_SEQ = range(11)
# with a pull gap: the pulls waiting for their gap, and those on the wire (heaps);
# pull orders drawn
_REL_SEQ, _REL_N, _WIRE_SEQ, _WIRE_N, _DRAWN = range(11, 16)


#: A worker event's heap key is (time, kind · 2⁴⁰ + sequence): the core's order.
_KIND = 1 << 40


@_jit
def _ev_push(st, t: float, kind: int, w: int) -> None:  # type: ignore[no-untyped-def]
    """Schedule a worker event (``kind`` of worker ``w``) at ``t`` (s)."""
    if st.run_i[_EV_N] == st.ev.shape[1]:
        raise RuntimeError("more worker events pending than workers")
    key = kind * _KIND + st.run_i[_SEQ]
    st.run_i[_SEQ] += 1
    st.run_i[_EV_N] = pl.heap_push(st.ev, st.run_i[_EV_N], t, key, w)


@_jit
def _schedule_link(st, at: int, seq_at: int, t: float) -> None:  # type: ignore[no-untyped-def]
    """A link's next departure is at ``t`` (s): it replaces the one pending."""
    st.run_f[at] = t
    st.run_i[seq_at] = st.run_i[_SEQ]
    st.run_i[_SEQ] += 1


@_jit
def _peek(st) -> float:  # type: ignore[no-untyped-def]
    """Time of the earliest pending event, s (inf: none)."""
    t = st.ev[0, 0] if st.run_i[_EV_N] else math.inf
    return min(t, st.run_f[_DOWN_AT], st.run_f[_UP_AT])


#: One run's state and settings: per worker (``wf``, ``wi``, ``step_ends``), the
#: run's scalars (``run_f``, ``run_i``), the heaps (3, capacity) of the worker
#: events (``ev``) and the busy pull connections (``down``;
#: :func:`~sgdsim.simulation.push_link.heap_push`), the push link (``up``, a
#: :class:`~sgdsim.simulation.push_link.Link`), the pull clock's log (``dlog``,
#: which grows), with a pull gap the heaps of the pulls waiting for it and of
#: those on the wire (``rel``, ``wire``), and the step's arrays and settings; the
#: arrays of the pull flows have a row per pull order (``req``, ``g_*``,
#: ``cum``, ``flow_bytes``, ``n_flows``): the policy's order, then with
#: ``random`` one per step, drawn as the pulls join.
_FIELDS = (  # noqa: SIM905 - the fields read as one list
    "wf wi step_ends run_f run_i ev down up dlog "
    "rel wire "
    "seg_end req first_pos g_end g_size g_last n_groups cum flow_bytes n_flows "
    "cap latency pull_start overhead gap n_seg n_push n_pull steps workers random"
).split()


@structref.register
class _RunType(types.StructRef):
    """The run's state as a numba ``StructRef``: passed by reference, so a call
    counts one reference (a tuple would count each of its arrays on every call:
    2.5 times slower with a pull gap)."""

    def preprocess_fields(self, fields):  # type: ignore[no-untyped-def]
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class _Run(structref.StructRefProxy):
    """Python's handle of a :class:`_RunType` (built inside :func:`run`)."""


structref.define_proxy(_Run, _RunType, _FIELDS)


@_jit
def _check_end(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Schedule worker ``w``'s step end once compute, pulls and updates are done."""
    if (
        st.wi[w, _ENDING] == 0
        and st.wi[w, _SEG] == st.n_seg
        and st.wi[w, _ARR] == st.wi[w, _NFLOWS]
        and st.up.conn[w, pl._LEFT] == 0
    ):
        st.wi[w, _ENDING] = 1
        t = max(now, st.wf[w, _LAST], st.wf[w, _FREE])
        _ev_push(st, t, _STEP_END, w)


@_jit
def _issue_run(st, w: int, base: float, lo: int, hi: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Positions ``lo … hi − 1`` of worker ``w`` are issued (``FastFifoRun.issue_run``)."""
    due = pl.issue(st.up, w, base, lo, hi)
    if due == -math.inf:  # the connection is busy or has pushes pending
        return
    if due < now:
        due = now
    if due < st.run_f[_UP_WAKE]:
        st.run_f[_UP_WAKE] = due
        _schedule_link(st, _UP_AT, _UP_SEQ, due)


@_jit
def _run_chain(st, w: int, t: float, now: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w`` runs its segments from the next on, from ``t`` ≥ ``now``, until one
    waits for a pull (``FastFifoRun.run_chain``)."""
    s = st.wi[w, _SEG]
    a, b, x = s + 1, st.n_seg, st.wi[w, _ARR]  # bisect_right(req, arrived, s + 1, n_seg)
    while a < b:
        m = (a + b) >> 1
        if x < st.req[st.wi[w, _ORD], m]:
            b = m
        else:
            a = m + 1
    e = a
    c0 = st.seg_end[s]
    span = st.seg_end[e] - c0
    st.wf[w, _BUSY] += span
    st.wi[w, _SEG] = e
    st.wf[w, _FREE] = t + span
    lo, hi = st.first_pos[s + 1], st.first_pos[e + 1]
    if hi > lo:
        _issue_run(st, w, t - c0 + st.latency, lo, hi, now)
    if e == st.n_seg:
        _check_end(st, w, now)


@_jit
def _try_start(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Run worker ``w``'s next chain if its pulls have arrived."""
    s = st.wi[w, _SEG]
    if s < st.n_seg and st.wi[w, _ARR] >= st.req[st.wi[w, _ORD], s]:
        t = st.wf[w, _FREE]
        _run_chain(st, w, t if t > now else now, now)


@_jit
def _pull_arrived(st, w: int, last: int, now: float, hint: int) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w``'s pull group ending with flow ``last`` arrived at ``now``; the
    group started at breakpoint ``hint`` (``FastFifoRun._pull_arrived``)."""
    if last > st.wi[w, _ARR]:
        s, free, busy, t, f = quiet_arrivals(
            st.wi[w, _ARR], last, now, hint - st.run_i[_DOFF], st.wf[w, _TAG0], st.wi[w, _SEG],
            st.wf[w, _FREE], st.wf[w, _BUSY], st.cum[st.wi[w, _ORD]], st.req[st.wi[w, _ORD]],
            st.seg_end, st.dlog,
            st.run_i[_DN], st.cap,
        )  # fmt: skip
        st.wi[w, _SEG] = s
        st.wf[w, _FREE] = free
        st.wf[w, _BUSY] = busy
        if f >= 0:  # the compute reached the step's end at t, flow f having arrived
            st.wi[w, _ARR] = f + 1
            _check_end(st, w, t)
        st.wi[w, _ARR] = last
    _count_arrival(st, w, now)


@_jit
def _count_arrival(st, w: int, now: float) -> int:  # type: ignore[no-untyped-def]
    """Worker ``w``'s next pull flow arrived at ``now``: run what it lets run; returns
    the flows arrived this step."""
    got = st.wi[w, _ARR] + 1
    st.wi[w, _ARR] = got
    s = st.wi[w, _SEG]
    if s < st.n_seg:
        if got >= st.req[st.wi[w, _ORD], s]:
            _try_start(st, w, now)
    elif got == st.wi[w, _NFLOWS]:
        _check_end(st, w, now)
    return got


@_jit
def _log_down(st, t: float, g: float, k: int) -> None:  # type: ignore[no-untyped-def]
    """Log a breakpoint of the PS → workers clock."""
    n = st.run_i[_DN]
    if n == st.dlog.shape[1]:
        grown = np.zeros((3, 2 * n))
        grown[:, :n] = st.dlog
        st.dlog = grown
    st.dlog[0, n] = t
    st.dlog[1, n] = g
    st.dlog[2, n] = k
    st.run_i[_DN] = n + 1


@_jit
def _join_pulls(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w``'s pulls of the step join its idle connection at ``now`` as groups
    (``FastFifoRun.join_pull_groups``)."""
    cap = st.cap
    k = st.run_i[_DK]
    if k:
        dt = now - st.run_f[_DT]
        st.run_f[_DG] += dt * cap / k
        st.run_f[_DNB] += dt
    st.run_f[_DT] = now
    tag0 = st.run_f[_DG]
    st.wf[w, _TAG0] = tag0
    st.wi[w, _HEAD] = 0
    k += 1
    st.run_i[_DK] = k
    st.run_i[_DH_N] = pl.heap_push(
        st.down, st.run_i[_DH_N], tag0 + st.g_end[st.wi[w, _ORD], 0], st.run_i[_DSEQ], w
    )
    st.run_i[_DSEQ] += 1
    _log_down(st, now, tag0, k)
    st.wi[w, _HINT] = st.run_i[_DOFF] + st.run_i[_DN] - 1
    gap = st.down[0, 0] - tag0
    _schedule_link(st, _DOWN_AT, _DOWN_SEQ, now + (gap if gap > 0.0 else 0.0) * k / cap)
    if st.run_i[_DN] > st.run_i[_DTRIM]:
        # drop the breakpoints before every busy connection's head group
        keep = st.wi[int(st.down[2, 0]), _HINT]
        for i in range(1, st.run_i[_DH_N]):
            keep = min(keep, st.wi[int(st.down[2, i]), _HINT])
        d, n = keep - st.run_i[_DOFF], st.run_i[_DN]
        log = st.dlog
        for j in range(n - d):
            log[0, j], log[1, j], log[2, j] = log[0, d + j], log[1, d + j], log[2, d + j]
        st.run_i[_DN] = n - d
        st.run_i[_DOFF] = keep
        st.run_i[_DTRIM] = max(4096, 16 * st.workers, 2 * st.run_i[_DN])


@_jit
def _down_clock(st) -> tuple[int, float, float, float, float]:  # type: ignore[no-untyped-def]
    """The PS → workers link's busy connections, virtual time, its last update (s),
    busy seconds and bytes sent."""
    return st.run_i[_DK], st.run_f[_DG], st.run_f[_DT], st.run_f[_DNB], st.run_f[_DBYTES]


@_jit
def _down_departures(st, now: float) -> float:  # type: ignore[no-untyped-def]
    """Departures from the PS → workers link while the next precedes every other
    event (``FastFifoRun._link_departures``); returns the last one's time."""
    cap = st.cap
    k, g, t_last, nb, nbytes = _down_clock(st)
    while True:
        dt = now - t_last
        g += dt * cap / k
        nb += dt
        t_last = now
        c = int(st.down[2, 0])
        i = st.wi[c, _HEAD]
        o = st.wi[c, _ORD]
        nbytes += st.g_size[o, i]
        more = i + 1 < st.n_groups[o]
        if more:  # c's next group is its head now
            st.wi[c, _HEAD] = i + 1
            pl.heap_sift_down(
                st.down, st.run_i[_DH_N], st.wf[c, _TAG0] + st.g_end[o, i + 1], st.run_i[_DSEQ], c
            )
            st.run_i[_DSEQ] += 1
        else:
            st.run_i[_DH_N] = pl.heap_pop(st.down, st.run_i[_DH_N])
            k -= 1
        hint = st.wi[c, _HINT]
        _log_down(st, now, g, k)
        if more:
            st.wi[c, _HINT] = st.run_i[_DOFF] + st.run_i[_DN] - 1
        st.run_i[_DK] = k
        st.run_f[_DG] = g
        st.run_f[_DT] = t_last
        _pull_arrived(st, c, st.g_last[o, i], now, hint)
        if st.run_i[_DH_N]:
            gap = st.down[0, 0] - g
            t_next = now + (gap if gap > 0.0 else 0.0) * k / cap
            if t_next < _peek(st):
                # it precedes every pending event: take it now, as the queue would
                now = t_next
                st.run_i[_EVENTS] += 1
                continue
            _schedule_link(st, _DOWN_AT, _DOWN_SEQ, t_next)
        else:
            st.run_f[_DOWN_AT] = math.inf
        break
    st.run_f[_DNB] = nb
    st.run_f[_DBYTES] = nbytes
    return now


@_jit
def _release_pull(st, w: int, due: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w``'s next pull joins its connection at ``due`` (with a pull gap;
    ``FastFifoRun.release_pull``)."""
    st.run_i[_REL_N] = pl.heap_push(st.rel, st.run_i[_REL_N], due, st.run_i[_REL_SEQ], w)
    st.run_i[_REL_SEQ] += 1
    if due < st.run_f[_DOWN_WAKE]:
        st.run_f[_DOWN_WAKE] = due
        _schedule_link(st, _DOWN_AT, _DOWN_SEQ, due)


@_jit
def _pull_link(st, now: float) -> float:  # type: ignore[no-untyped-def]
    """With a pull gap, the PS → workers link's departures and the pulls that join
    after their gap, in time order, while they precede every other event
    (``FastFifoRun._pull_link``); returns the last one's time."""
    cap = st.cap
    k, g, t_last, nb, nbytes = _down_clock(st)
    horizon = _peek(st)
    st.run_f[_DOWN_WAKE] = -math.inf  # pulls released meanwhile are taken by this loop
    while True:
        t_next, depart = pl.next_event(
            st.wire[0, 0], st.run_i[_WIRE_N], st.rel[0, 0], st.run_i[_REL_N], g, t_last, k, cap
        )
        if t_next == math.inf:  # nothing on the link, nothing to release
            st.run_f[_DOWN_WAKE] = math.inf
            st.run_f[_DOWN_AT] = math.inf
            break
        if t_next > now:
            if t_next >= horizon:
                st.run_f[_DOWN_WAKE] = t_next
                _schedule_link(st, _DOWN_AT, _DOWN_SEQ, t_next)
                break
            now = t_next  # it precedes every pending event: take it now
            st.run_i[_EVENTS] += 1
        if k:
            dt = now - t_last
            g += dt * cap / k
            nb += dt
        t_last = now
        if depart:  # a connection carries one pull at a time: its next flow
            w = int(st.wire[2, 0])
            st.run_i[_WIRE_N] = pl.heap_pop(st.wire, st.run_i[_WIRE_N])
            k -= 1
            nbytes += st.flow_bytes[st.wi[w, _ORD], st.wi[w, _ARR]]
            st.run_i[_DK], st.run_f[_DG], st.run_f[_DT] = k, g, t_last
            _pull_arrived_gap(st, w, now)
            horizon = _peek(st)
        else:  # worker w's next pull goes on the wire
            w = int(st.rel[2, 0])
            st.run_i[_REL_N] = pl.heap_pop(st.rel, st.run_i[_REL_N])
            size = st.flow_bytes[st.wi[w, _ORD], st.wi[w, _ARR]]
            st.run_i[_WIRE_N] = pl.heap_push(
                st.wire, st.run_i[_WIRE_N], g + size, st.run_i[_WIRE_SEQ], w
            )
            st.run_i[_WIRE_SEQ] += 1
            k += 1
    st.run_i[_DK] = k
    st.run_f[_DG] = g
    st.run_f[_DT] = t_last
    st.run_f[_DNB] = nb
    st.run_f[_DBYTES] = nbytes
    return now


@_jit
def _pull_arrived_gap(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w``'s next pull arrived (with a pull gap): run what it lets run; the
    next one joins one gap later (``FastFifoRun._pull_arrived``)."""
    if _count_arrival(st, w, now) < st.wi[w, _NFLOWS]:
        st.run_i[_REL_N] = pl.heap_push(
            st.rel, st.run_i[_REL_N], now + st.gap, st.run_i[_REL_SEQ], w
        )
        st.run_i[_REL_SEQ] += 1


@_jit
def _push_link(st, now: float) -> float:  # type: ignore[no-untyped-def]
    """The workers → PS link's departures and releases until the next other event
    (``FastFifoRun._push_link``); returns the last one's time."""
    horizon = _peek(st)
    st.run_f[_UP_WAKE] = math.inf
    while True:
        why, c, now, t, taken = pl.advance(st.up, now, horizon)
        st.run_i[_EVENTS] += taken
        if why != pl.LAST:
            break
        # c's last push of the step left, the PS has applied every push up to it
        if t > st.wf[c, _LAST]:
            st.wf[c, _LAST] = t
        _check_end(st, c, now)
        horizon = _peek(st)
    st.run_f[_UP_AT] = math.inf
    if why == pl.WAKE:
        st.run_f[_UP_WAKE] = t
        _schedule_link(st, _UP_AT, _UP_SEQ, t)
    return now


@_jit
def _pulls_join(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w``'s pulls of the step join at ``now`` (``FastFifoRun.join_pulls``),
    with a random order the next order drawn first: as one at a time (pull gap) or
    as groups."""
    if st.random:
        o = st.run_i[_DRAWN] + 1
        st.run_i[_DRAWN] = o
        st.wi[w, _ORD] = o
        st.wi[w, _NFLOWS] = st.n_flows[o]
    if st.gap:
        _release_pull(st, w, now)
    else:
        _join_pulls(st, w, now)


@_jit
def _step_start(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w`` starts a step (``FastFifoRun._step_start``)."""
    st.wi[w, _SEG] = 0
    st.wi[w, _ENDING] = 0
    st.wi[w, _ARR] = 0
    st.wf[w, _FREE] = now
    if st.random and st.n_pull:
        st.wi[w, _NFLOWS] = -1  # drawn when the pulls join
    st.up.conn[w, pl._LEFT] = st.n_push
    st.wf[w, _LAST] = now
    st.up.conn[w, pl._GONE] = 0
    if st.first_pos[1]:
        _issue_run(st, w, now + st.latency, 0, st.first_pos[1], now)
    if st.n_pull:
        if st.pull_start > 0 or st.latency > 0:
            _ev_push(st, now + st.pull_start + st.latency, _JOIN, w)
        else:
            _pulls_join(st, w, now)
    _try_start(st, w, now)
    _check_end(st, w, now)


@_jit
def _step_end(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Worker ``w``'s step ends; the next starts after the per-step overhead."""
    d = st.wi[w, _DONE]
    st.step_ends[w, d] = now
    st.wi[w, _DONE] = d + 1
    if d + 1 < st.steps:
        _ev_push(st, now + st.overhead, _STEP_START, w)


@_jit
def _next_event(st) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """The earliest pending event in the core's order: (source, time); source 0 and 1
    the PS → workers and workers → PS links, 2 a worker event, −1 none."""
    src, t, key = -1, math.inf, 0
    if st.run_i[_EV_N]:
        src, t, key = 2, st.ev[0, 0], st.ev[1, 0]
    for link, at, seq_at in ((0, _DOWN_AT, _DOWN_SEQ), (1, _UP_AT, _UP_SEQ)):
        # a departure's key is its sequence (kind 0)
        if st.run_f[at] < math.inf and (
            src < 0 or pl._before(st.run_f[at], st.run_i[seq_at], t, key)
        ):
            src, t, key = link, st.run_f[at], st.run_i[seq_at]
    return src, t


@_jit
def run(  # type: ignore[no-untyped-def]
    starts,
    steps,
    cap,
    latency,
    pull_start,
    overhead,
    gap,
    seg_end,
    first_pos,
    orders,
    random,
    n_pull,
    pushes,
    room,
):
    """Run N workers to the end: pull groups (``gap`` 0) or, with a pull gap of
    ``gap`` seconds, one pull at a time per connection (arguments as
    ``FastFifoRun._run_compiled`` prepares them from the step).

    ``orders``: the pull flows of each pull order, a row per order: ``(req, cum,
    flow_bytes, n_flows, g_end, g_size, g_last, n_groups)`` as
    ``FastFifoRun.pull_groups`` and ``_pull_flows`` give them, padded; row 0 is
    the policy's order, which every worker's first step uses; with ``random``,
    each step's pulls take the next row as they join (the rows drawn in
    advance, in the order the Python loop draws them). ``room``: the push
    records' rows and the two clocks' log columns at first, which double when
    full.

    Returns ``(step_ends, busy, now, events, nic)``: (N, steps) step end times (s),
    (N,) compute seconds, the last event's time (s), events run, and ``(bytes,
    busy s)`` of the PS → workers and workers → PS links.
    """
    req, cum, flow_bytes, n_flows, g_end, g_size, g_last, n_groups = orders
    pos_issue, pos_bytes, pos_update = pushes
    n = len(starts)
    n_seg = len(seg_end) - 1
    records, up_log, down_log = room
    up = pl.new_link(n, cap, pos_issue, pos_bytes, pos_update, n_seg + 2, records, up_log)
    run_i = np.zeros(16, np.int64)
    run_i[_DN] = 1  # the pull clock's first breakpoint: (0, 0, 0)
    run_i[_DTRIM] = max(4096, 16 * n)
    run_f = np.zeros(8)
    run_f[_UP_WAKE] = run_f[_DOWN_AT] = run_f[_UP_AT] = run_f[_DOWN_WAKE] = math.inf
    st = _Run(
        np.zeros((n, 4)), np.zeros((n, 8), np.int64), np.zeros((n, steps)), run_f, run_i,
        np.zeros((3, 2 * n + 4)), np.zeros((3, n)),
        up, np.zeros((3, down_log)),
        np.zeros((3, n + 1)), np.zeros((3, n + 1)),
        seg_end, req, first_pos, g_end, g_size, g_last, n_groups, cum, flow_bytes, n_flows,
        cap, latency, pull_start, overhead, gap, n_seg, len(pos_issue), n_pull, steps, n, random,
    )  # fmt: skip
    st.wi[:, _NFLOWS] = n_flows[0]
    b = borrow(st)  # st, counted, holds the run while the loop works on b
    for w in range(n):
        _ev_push(b, starts[w], _STEP_START, w)
    last = 0.0
    while True:
        src, now = _next_event(b)
        if src < 0:
            break
        run_i[_EVENTS] += 1
        if src == 0:
            run_f[_DOWN_AT] = math.inf
            now = _pull_link(b, now) if b.gap else _down_departures(b, now)
        elif src == 1:
            run_f[_UP_AT] = math.inf
            now = _push_link(b, now)
        else:
            kind, w = int(b.ev[1, 0]) // _KIND, int(b.ev[2, 0])
            run_i[_EV_N] = pl.heap_pop(b.ev, run_i[_EV_N])
            if kind == _JOIN:
                _pulls_join(b, w, now)
            elif kind == _STEP_END:
                _step_end(b, w, now)
            else:
                _step_start(b, w, now)
        last = now
    up_busy, up_bytes = up.f[pl._BUSY_S], up.f[pl._BYTES]
    nic = ((run_f[_DBYTES], run_f[_DNB]), (up_bytes, up_busy))
    return st.step_ends, st.wf[:, _BUSY].copy(), last, run_i[_EVENTS], nic
