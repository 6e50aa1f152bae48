"""The general loop compiled: every policy's units and queues on one PS with a fair NIC.

:class:`~sgdsim.simulation.engine.AsyncPSModel` runs any policy as Python
objects, one event per unit. With one PS shard, the ``fair`` discipline, one
worker per node, no round-robin quantum, no join delays, no trace and a pull
order the policy fixes (a pull gap only as a pure delay), :func:`run_model`
runs that same model compiled by numba: the objects' handlers as functions on
arrays, the same events in the same order and the same floating-point
operations, so every figure equals the Python loop's to the bit
(``tests/test_fast_general.py``). ``p3``, ``bytescheduler`` and ``prophet``
run here in the pipeline's grid; the whole-tensor FIFO policies have their
bulk loop (:mod:`sgdsim.simulation.fast_run`).

The parts, as arrays of one :class:`_RunType` ``StructRef``, which the loop
reaches through a handle without reference counting
(:func:`~sgdsim.simulation.borrow.borrow`; see ``docs/benchmarks.md``):

- the event heap (:func:`~sgdsim.simulation.push_link.heap_push`, one (3,
  capacity) array) ordered by the core's ``(time, kind, sequence)``, each
  entry an index into a pool of ``(kind, worker, a, b)``; each link's next
  departure in a slot of its own, which a newer one replaces (the core leaves
  the old one in its heap as a stale event; either way it never runs);
- the two PS NIC directions as :class:`~sgdsim.simulation.link.FairLink`
  (virtual clock, a heap of finish tags, the departed entry left on top for
  the refill);
- per worker and direction, the connection's queue: a heap keyed by the
  policy's key and put order whose entries are runs of units put together
  (one ``put_many``: they leave together in put order, as from the bucket
  queue of :class:`~sgdsim.simulation.policies.PriorityQueue`; the FIFO
  queue keys every run 0), each a pool row ``(first, end, step)`` over the
  unit lists; ByteScheduler's released units in a ring and its credit in
  flight, Prophet's block formed at the take; the unit on the wire (bytes,
  step, the pieces it carries). The links' tags are one more row of the
  same heap array;
- per worker, the step's state machine (:class:`~sgdsim.simulation.worker.Worker`):
  pending pulls of this and the next step (two rows, swapped at a step
  start), push pieces left, the chain's push slots.

A unit list (``l_lo``, ``l_hi``) is a run list of the
:class:`~sgdsim.simulation.engine.StepPlan` (the first step's pulls, the
later ones', each push slot's pushes, what each push piece releases under
P3): its units' pieces ``u_f`` index the direction's pieces (every tensor's
units, in tensor order), ``u_end`` marks the last unit of each run. A
released unit is one integer, ``step · pieces + piece``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba.core import types
from numba.experimental import structref

from sgdsim.simulation import policies as pol
from sgdsim.simulation import push_link as pl
from sgdsim.simulation.borrow import borrow
from sgdsim.simulation.engine import AsyncPSModel, RawRun
from sgdsim.simulation.jit import inline as _inline
from sgdsim.simulation.jit import jit as _jit
from sgdsim.simulation.link import FairLink, SoloLink
from sgdsim.simulation.topology import DOWN, UP

#: Models that :func:`supports` accepts run compiled; tests switch it off.
_COMPILED = True

# the core's priorities (sgdsim.simulation.core); departures have their slots
_JOIN, _SEG_END, _STEP_END, _STEP_START = 1, 2, 3, 4
#: A heap entry's second key: kind · 2⁴⁰ + sequence (the core's order).
_KIND = 1 << 40
# pooled events: pulls join (step), pushes join (slot, step), P3's released pulls
# (step, unit list), a pull gap is over; the other kinds need only the worker
_K_PULLS, _K_PUSHES, _K_RELEASE, _K_GAP, _K_SEG, _K_END, _K_START = range(7)
# queue kinds (policies.FifoQueue, PriorityQueue, CreditQueue, BlockQueue)
_FIFO, _PRIORITY, _CREDIT, _BLOCK = range(4)
#: The key of a unit of ``step`` under the fair discipline: ``(step << SHIFT) + priority``.
_SHIFT = 24

# worker ints: step, next segment, running, ending, pushes holding the end left,
# Prophet's stage, the chain's last segment, the pending row of this step, the
# chain's push slots (first, count), steps done
_STEP, _SEG, _RUNNING, _ENDING, _GATING, _STAGE, _CHAIN, _CUR, _SL0, _SLN, _DONE = range(11)
# worker floats: end of the latest update holding the step, compute seconds
_LAST, _BUSY = range(2)
# run ints: event sequence, events run, heap size, pool entries in use, free pool
# entries, links to reschedule after the arrival (bits), each departure's sequence
_SEQ, _EVENTS, _EV_N, _POOL_N, _FREE_N, _DEFER, _DSEQ0, _DSEQ1 = range(8)
# run floats: now, the PS CPU free at, latest stale departure, each departure's time
_NOW, _PS_FREE, _STALE, _DT0, _DT1 = range(5)
# per link floats: virtual clock, its last update, busy seconds, bytes; ints: flows,
# the departed flow's tag still on top of its heap
_G, _T, _LBUSY, _LBYTES = range(4)
_K, _LSTALE = range(2)

_FIELDS = (  # noqa: SIM905 - the fields read as one list
    "wi wf pend_gate pend_pieces pend_left push_left slot_t slot_s step_ends "
    "ri rf ev pool free lf li "
    "cbusy wsize wstep wn witems qh qn qseq rq rh rl inflight "
    "seg_dur pull_gate base_pending base_pieces push_npieces has_pushes stage_budget "
    "pbytes ptensor nf upd matched rel_list l_lo l_hi u_f u_prio u_end qkind credit "
    "cap latency pull_start overhead gap n_seg n_pull n_gating has_next steps workers"
).split()


@structref.register
class _RunType(types.StructRef):
    """The run's state and step as a numba ``StructRef`` (passed by reference)."""

    def preprocess_fields(self, fields):  # type: ignore[no-untyped-def]
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class _Run(structref.StructRefProxy):
    """Python's handle of a :class:`_RunType` (built by :func:`run_model`)."""


structref.define_proxy(_Run, _RunType, _FIELDS)


# -- events --------------------------------------------------------------------------


@_inline
def _alloc(st) -> int:  # type: ignore[no-untyped-def]
    """A free row of the pool (an event's ``(kind, worker, a, b)``, or a queued run's
    ``(first, end, step)``); the pool doubles when full."""
    if st.ri[_FREE_N]:
        st.ri[_FREE_N] -= 1
        return st.free[st.ri[_FREE_N]]
    i = st.ri[_POOL_N]
    if i == st.pool.shape[0]:
        grown = np.zeros((2 * i, 4), np.int64)
        grown[:i] = st.pool
        st.pool = grown
        st.free = np.zeros(2 * i, np.int64)
    st.ri[_POOL_N] = i + 1
    return i


@_inline
def _free(st, i: int) -> None:  # type: ignore[no-untyped-def]
    """Row ``i`` of the pool is free again."""
    st.free[st.ri[_FREE_N]] = i
    st.ri[_FREE_N] += 1


@_jit
def _schedule(st, t: float, prio: int, kind: int, w: int, a: int, b: int) -> None:  # type: ignore[no-untyped-def]
    """Schedule an event of ``kind`` for worker ``w`` at ``t`` (s), after every
    pending one with a smaller ``(t, prio)`` (``Simulation.schedule``)."""
    i = _alloc(st)
    st.pool[i, 0], st.pool[i, 1], st.pool[i, 2], st.pool[i, 3] = kind, w, a, b
    if st.ri[_EV_N] == st.ev.shape[1]:
        grown = np.zeros((3, 2 * st.ri[_EV_N]))
        grown[:, : st.ri[_EV_N]] = st.ev
        st.ev = grown
    st.ri[_EV_N] = pl.heap_push(st.ev, st.ri[_EV_N], t, prio * _KIND + st.ri[_SEQ], i)
    st.ri[_SEQ] += 1


@_inline
def _set_departure(st, d: int, t: float) -> None:  # type: ignore[no-untyped-def]
    """Link ``d``'s next departure is at ``t`` (inf: none); a pending one turns stale."""
    old = st.rf[_DT0 + d]
    if old < math.inf and old > st.rf[_STALE]:
        st.rf[_STALE] = old  # the core would still pop it
    st.rf[_DT0 + d] = t
    if t < math.inf:
        st.ri[_DSEQ0 + d] = st.ri[_SEQ]
        st.ri[_SEQ] += 1


# -- heaps: the connections' queues and the links' tags ---------------------------------


@_jit
def _h_push(st, d: int, r: int, key: float, item: float) -> None:  # type: ignore[no-untyped-def]
    """Push ``item`` under ``key`` on heap ``(d, r)`` (row ``r < N``: worker ``r``'s
    queue; ``r = N``: link ``d``'s tags), ties in push order
    (:func:`~sgdsim.simulation.push_link.heap_push`); the heaps double when full."""
    n = st.qn[d, r]
    if n == st.qh.shape[3]:
        grown = np.zeros((2, st.workers + 1, 3, 2 * n))
        grown[:, :, :, :n] = st.qh
        st.qh = grown
    seq = st.qseq[d, r]
    st.qseq[d, r] = seq + 1
    st.qn[d, r] = pl.heap_push(st.qh[d, r], n, key, seq, item)


@_inline
def _h_replace(st, d: int, r: int, key: float, item: float) -> None:  # type: ignore[no-untyped-def]
    """Replace heap ``(d, r)``'s top by ``item`` under ``key`` (``heapq.heapreplace``)."""
    seq = st.qseq[d, r]
    st.qseq[d, r] = seq + 1
    pl.heap_sift_down(st.qh[d, r], st.qn[d, r], key, seq, item)


@_inline
def _h_pop(st, d: int, r: int) -> int:  # type: ignore[no-untyped-def]
    """Remove heap ``(d, r)``'s top; returns its item."""
    item = int(st.qh[d, r, 2, 0])
    st.qn[d, r] = pl.heap_pop(st.qh[d, r], st.qn[d, r])
    return item


# -- the PS NIC: FairLink, its tags on heap (d, N) -------------------------------------


@_jit
def _link_refill(st, d: int, now: float, size: float, c: int) -> float:  # type: ignore[no-untyped-def]
    """Connection ``c``'s flow of ``size`` bytes joins link ``d`` with its clocks at
    ``now`` (``FairLink.refill``); returns the next departure, s."""
    g = st.lf[d, _G]
    k = st.li[d, _K] + 1
    st.li[d, _K] = k
    r = st.workers
    if st.li[d, _LSTALE]:
        st.li[d, _LSTALE] = 0
        _h_replace(st, d, r, g + size, c)
    else:
        _h_push(st, d, r, g + size, c)
    gap = st.qh[d, r, 0, 0] - g
    return st.lf[d, _T] + (gap if gap > 0.0 else 0.0) * k / st.cap


@_jit
def _link_add(st, d: int, now: float, size: float, c: int) -> None:  # type: ignore[no-untyped-def]
    """A flow joins link ``d`` at ``now`` (``FairLink.add``)."""
    k = st.li[d, _K]
    if k:
        dt = now - st.lf[d, _T]
        st.lf[d, _G] += dt * st.cap / k
        st.lf[d, _LBUSY] += dt
    st.lf[d, _T] = now
    _link_refill(st, d, now, size, c)


@_inline
def _link_next(st, d: int) -> float:  # type: ignore[no-untyped-def]
    """Link ``d``'s next departure if nothing joins, s (inf: none; ``FairLink.next_departure``)."""
    r = st.workers
    if st.li[d, _LSTALE]:
        st.li[d, _LSTALE] = 0
        _h_pop(st, d, r)
    if st.qn[d, r] == 0:
        return math.inf
    gap = st.qh[d, r, 0, 0] - st.lf[d, _G]
    gap = gap if gap > 0.0 else 0.0
    return st.lf[d, _T] + gap * st.li[d, _K] / st.cap


@_jit
def _link_pop(st, d: int, now: float) -> int:  # type: ignore[no-untyped-def]
    """Remove the flow leaving link ``d`` at ``now``; returns its connection
    (``FairLink.pop_head``)."""
    r = st.workers
    if st.li[d, _LSTALE]:
        _h_pop(st, d, r)
    k = st.li[d, _K]
    dt = now - st.lf[d, _T]
    st.lf[d, _G] += dt * st.cap / k
    st.lf[d, _LBUSY] += dt
    st.lf[d, _T] = now
    c = int(st.qh[d, r, 2, 0])
    st.li[d, _LSTALE] = 1
    st.li[d, _K] = k - 1
    st.lf[d, _LBYTES] += st.wsize[d, c]
    return c


@_inline
def _reschedule(st, d: int) -> None:  # type: ignore[no-untyped-def]
    """Link ``d``'s departure event anew (``topology._Port.reschedule``)."""
    _set_departure(st, d, _link_next(st, d))


@_jit
def _transfer(st, d: int, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Connection ``(d, w)``'s unit goes on the wire (``StarTopology.transfer``)."""
    _link_add(st, d, now, st.wsize[d, w], w)
    if st.ri[_DEFER]:
        st.ri[_DEFER] |= 1 << d
    else:
        _reschedule(st, d)


# -- the connections' queues -----------------------------------------------------------


@_jit
def _q_put(st, d: int, w: int, key: float, lo: int, hi: int, step: int) -> None:  # type: ignore[no-untyped-def]
    """Units ``lo … hi − 1`` of the unit lists, of ``step``, join connection ``(d, w)``'s
    queue under one key (``put_many``): one heap entry, a run in the pool, since
    units put together leave together in put order."""
    e = _alloc(st)
    st.pool[e, 0], st.pool[e, 1], st.pool[e, 2] = lo, hi, step
    _h_push(st, d, w, key, e)


@_inline
def _q_pop(st, d: int, w: int) -> int:  # type: ignore[no-untyped-def]
    """Remove connection ``(d, w)``'s most urgent unit; returns its list position (its
    step: ``st.pool[top, 2]`` before the call)."""
    e = int(st.qh[d, w, 2, 0])
    u = st.pool[e, 0]
    through = u + 1 == st.pool[e, 1]
    st.pool[e, 0] = u + 1
    if through:
        _h_pop(st, d, w)
        _free(st, e)
    return u


@_jit
def _release(st, d: int, w: int) -> None:  # type: ignore[no-untyped-def]
    """ByteScheduler: release queued units while the credit allows (``CreditQueue._release``)."""
    credit = st.credit[d]
    inflight = st.inflight[d, w]
    while st.qn[d, w]:
        e = int(st.qh[d, w, 2, 0])
        size = st.pbytes[d, st.u_f[st.pool[e, 0]]]
        if inflight != 0.0 and inflight + size > credit:
            break
        step = st.pool[e, 2]
        item = step * st.nf[d] + st.u_f[_q_pop(st, d, w)]
        n, cap = st.rl[d, w], st.rq.shape[2]
        if n == cap:
            _grow_ring(st)
            cap *= 2
        st.rq[d, w, (st.rh[d, w] + n) % cap] = item
        st.rl[d, w] = n + 1
        inflight += size
    st.inflight[d, w] = inflight


@_jit
def _grow_ring(st) -> None:  # type: ignore[no-untyped-def]
    """Double the released units' rings, each unrolled from its head."""
    cap = st.rq.shape[2]
    grown = np.zeros((2, st.workers, 2 * cap), np.int64)
    for d in range(2):
        for w in range(st.workers):
            for j in range(st.rl[d, w]):
                grown[d, w, j] = st.rq[d, w, (st.rh[d, w] + j) % cap]
            st.rh[d, w] = 0
    st.rq = grown


@_jit
def _put_list(st, d: int, w: int, lid: int, step: int) -> None:  # type: ignore[no-untyped-def]
    """Put unit list ``lid``'s runs for ``step`` on connection ``(d, w)``'s queue, in
    order (``put_many`` per run)."""
    kind = st.qkind[d]
    lo = st.l_lo[lid]
    for u in range(lo, st.l_hi[lid]):
        if st.u_end[u]:
            key = 0.0 if kind == _FIFO else float((step << _SHIFT) + st.u_prio[u])
            _q_put(st, d, w, key, lo, u + 1, step)
            if kind == _CREDIT:
                _release(st, d, w)
            lo = u + 1


@_inline
def _q_len(st, d: int, w: int) -> int:  # type: ignore[no-untyped-def]
    """Whether units wait on connection ``(d, w)`` (0: none; ``len(queue)``'s truth)."""
    return st.qn[d, w] + st.rl[d, w]


@_jit
def _take(st, d: int, w: int) -> bool:  # type: ignore[no-untyped-def]
    """The queue's next unit becomes connection ``(d, w)``'s unit on the wire
    (``queue.take``); False if there is none."""
    kind = st.qkind[d]
    if kind == _CREDIT:
        n = st.rl[d, w]
        if not n:
            return False
        item = st.rq[d, w, st.rh[d, w]]
        st.rh[d, w] = (st.rh[d, w] + 1) % st.rq.shape[2]
        st.rl[d, w] = n - 1
        step, f = item // st.nf[d], item % st.nf[d]
    elif st.qn[d, w]:
        step = st.pool[int(st.qh[d, w, 2, 0]), 2]
        f = st.u_f[_q_pop(st, d, w)]
    else:
        return False
    size = st.pbytes[d, f]
    st.wstep[d, w] = step
    st.witems[d, w, 0] = f
    n_items = 1
    if kind == _BLOCK:
        limit = _block_budget(st, w)
        while st.qn[d, w]:
            e = int(st.qh[d, w, 2, 0])
            nxt = st.u_f[st.pool[e, 0]]
            nb = st.pbytes[d, nxt]
            if st.pool[e, 2] != step or size + nb > limit:
                break
            _q_pop(st, d, w)
            size += nb
            st.witems[d, w, n_items] = nxt
            n_items += 1
    st.wsize[d, w] = size
    st.wn[d, w] = n_items
    return True


@_jit
def _done(st, d: int, w: int) -> None:  # type: ignore[no-untyped-def]
    """ByteScheduler: the unit on the wire arrived; its credit returns (``CreditQueue.done``)."""
    st.inflight[d, w] -= st.wsize[d, w]
    if not st.rl[d, w]:  # nothing in flight: no rounding residue
        st.inflight[d, w] = 0.0
    _release(st, d, w)


# -- connections -----------------------------------------------------------------------


@_jit
def _kick(st, d: int, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """If connection ``(d, w)`` is idle, put its next unit on the wire (``Connection.kick``)."""
    if st.cbusy[d, w] or not _take(st, d, w):
        return
    st.cbusy[d, w] = 1
    _transfer(st, d, w, now)


@_jit
def _join(st, d: int, w: int, lid: int, step: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Unit list ``lid`` of ``step`` joins connection ``(d, w)``, which starts if idle
    (``Worker._join`` with one shard)."""
    if st.l_hi[lid] > st.l_lo[lid]:
        _put_list(st, d, w, lid, step)
        _kick(st, d, w, now)


@_jit
def _on_arrival(st, d: int, w: int, now: float) -> bool:  # type: ignore[no-untyped-def]
    """Connection ``(d, w)``'s unit arrived at ``now``: deliver it and take the next
    (``PullConnection.on_arrival``, ``PushConnection.on_arrival``); True if the
    next unit goes on the wire at once (the caller refills the link)."""
    st.cbusy[d, w] = 0
    if st.qkind[d] == _CREDIT:
        _done(st, d, w)
    if d == DOWN:
        _pulls_arrived(st, w, now)
        if st.gap > 0 and _q_len(st, d, w):
            st.cbusy[d, w] = 1  # the next pull waits for the control message
            _schedule(st, now + st.gap, _JOIN, _K_GAP, w, 0, 0)
            return False
    else:
        _pushes_arrived(st, w, now)
    if st.cbusy[d, w] or not _take(st, d, w):
        return False
    st.cbusy[d, w] = 1
    return True


@_jit
def _depart(st, d: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Link ``d``'s departures at ``now`` and after, while the next precedes every
    other event and the arrival changed no other link (``StarTopology._depart``)."""
    bit = 1 << d
    while True:
        c = _link_pop(st, d, now)
        st.ri[_DEFER] = bit
        if _on_arrival(st, d, c, now):
            t = _link_refill(st, d, now, st.wsize[d, c], c)
        else:
            t = _link_next(st, d)
        deferred = st.ri[_DEFER]
        st.ri[_DEFER] = 0
        if deferred != bit:
            break
        other = st.rf[_DT0 + 1 - d]
        if st.ri[_EV_N] and st.ev[0, 0] < other:
            other = st.ev[0, 0]
        if t >= other:  # not before the next event: it waits its turn
            _set_departure(st, d, t)
            return
        now = st.rf[_NOW] = t
        st.ri[_EVENTS] += 1
    if deferred & 1:  # in link order, DOWN first
        _reschedule(st, DOWN)
    if deferred & 2:
        _reschedule(st, UP)


# -- workers ---------------------------------------------------------------------------


@_jit
def _check_end(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Schedule the step's end once compute, pulls and holding updates are done."""
    if (
        not st.wi[w, _ENDING]
        and st.wi[w, _SEG] == st.n_seg
        and st.pend_left[w, st.wi[w, _CUR]] == 0
        and st.wi[w, _GATING] == 0
    ):
        st.wi[w, _ENDING] = 1
        last = st.wf[w, _LAST]
        _schedule(st, now if now > last else last, _STEP_END, _K_END, w, 0, 0)


@_jit
def _reset_pending(st, w: int, row: int) -> None:  # type: ignore[no-untyped-def]
    """Every pull of a step is pending (``Worker._all_pending``)."""
    st.pend_gate[w, row, :] = st.base_pending
    st.pend_pieces[w, row, :] = st.base_pieces
    st.pend_left[w, row] = st.n_pull


@_jit
def _start_step(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """A step starts (``Worker.start_step``)."""
    step = st.wi[w, _DONE]
    st.wi[w, _STEP] = step
    st.wi[w, _SEG] = st.wi[w, _RUNNING] = st.wi[w, _ENDING] = st.wi[w, _STAGE] = 0
    if step == 0:
        st.wi[w, _CUR] = 0
        _reset_pending(st, w, 0)
        _reset_pending(st, w, 1)
    else:  # the next step's row becomes this one's; the other is the next's, afresh
        st.wi[w, _CUR] = 1 - st.wi[w, _CUR]
        _reset_pending(st, w, 1 - st.wi[w, _CUR])
    st.push_left[w, :] = st.push_npieces
    st.wi[w, _GATING] = st.n_gating
    st.wf[w, _LAST] = now
    _issue_pushes(st, w, now, 0)
    if st.n_pull and (step == 0 or st.has_next):
        if st.pull_start > 0 or st.latency > 0:
            _schedule(st, now + st.pull_start + st.latency, _JOIN, _K_PULLS, w, step, 0)
        else:
            _join(st, DOWN, w, 0 if step == 0 else 1, step, now)
    _try_start(st, w, now)
    _check_end(st, w, now)


@_jit
def _end_step(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """The step has ended: record it; the next starts after the overhead."""
    done = st.wi[w, _DONE]
    st.step_ends[w, done] = now
    st.wi[w, _DONE] = done + 1
    if done + 1 < st.steps:
        _schedule(st, now + st.overhead, _STEP_START, _K_START, w, 0, 0)


@_jit
def _try_start(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """Start segment ``seg`` and the chain of those after it whose pulls are here
    (``Worker.try_start`` on the worker's own cores, no trace)."""
    s = st.wi[w, _SEG]
    cur = st.wi[w, _CUR]
    if st.wi[w, _RUNNING] or s >= st.n_seg or st.pend_gate[w, cur, s] != 0:
        return
    st.wi[w, _RUNNING] = 1
    end = now + st.seg_dur[s]
    last = st.n_seg - 1
    lat = st.latency
    while s < last and st.pend_gate[w, cur, s + 1] == 0:
        if st.has_pushes[s + 1]:
            if not lat > 0:
                break
            _schedule(st, end + lat, _JOIN, _K_PUSHES, w, s + 1, st.wi[w, _STEP])
            j = st.wi[w, _SL0] + st.wi[w, _SLN]
            st.slot_t[w, j] = end
            st.slot_s[w, j] = s + 1
            st.wi[w, _SLN] += 1
        s += 1
        end += st.seg_dur[s]
    st.wi[w, _CHAIN] = s
    _schedule(st, end, _SEG_END, _K_SEG, w, 0, 0)


@_jit
def _segment_done(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """The running chain has ended: push its last segment's gradients, go on."""
    st.wi[w, _RUNNING] = 0
    s = st.wi[w, _SEG]
    for j in range(s, st.wi[w, _CHAIN] + 1):
        st.wf[w, _BUSY] += st.seg_dur[j]
    s = st.wi[w, _CHAIN]
    if st.wi[w, _SLN]:
        st.wi[w, _STAGE] = st.slot_s[w, st.wi[w, _SL0] + st.wi[w, _SLN] - 1]
    st.wi[w, _SL0] = st.wi[w, _SLN] = 0  # Prophet's budget may have taken them all
    _issue_pushes(st, w, now, s + 1)
    st.wi[w, _SEG] = s + 1
    if s + 1 < st.n_seg:
        _try_start(st, w, now)
    else:
        _check_end(st, w, now)


@_jit
def _block_budget(st, w: int) -> float:  # type: ignore[no-untyped-def]
    """Prophet's byte budget of worker ``w``'s next block (``Worker.block_budget``)."""
    if st.wi[w, _SEG] >= st.n_seg:
        return math.inf
    while st.wi[w, _SLN] and st.slot_t[w, st.wi[w, _SL0]] < st.rf[_NOW]:
        st.wi[w, _STAGE] = st.slot_s[w, st.wi[w, _SL0]]
        st.wi[w, _SL0] += 1
        st.wi[w, _SLN] -= 1
    return st.stage_budget[st.wi[w, _STAGE]]


@_jit
def _issue_pushes(st, w: int, now: float, slot: int) -> None:  # type: ignore[no-untyped-def]
    """Push the gradients of push slot ``slot`` (``Worker.issue_pushes``)."""
    if not st.has_pushes[slot]:
        return
    st.wi[w, _STAGE] = slot
    if st.latency > 0:
        _schedule(st, now + st.latency, _JOIN, _K_PUSHES, w, slot, st.wi[w, _STEP])
    else:
        _join(st, UP, w, 2 + slot, st.wi[w, _STEP], now)


@_jit
def _pulls_arrived(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """The pull pieces on connection ``(DOWN, w)`` arrived (``Worker.pulls_arrived``)."""
    cur = st.wstep[DOWN, w] == st.wi[w, _STEP]
    row = st.wi[w, _CUR] if cur else 1 - st.wi[w, _CUR]
    for j in range(st.wn[DOWN, w]):
        p = st.ptensor[DOWN, st.witems[DOWN, w, j]]
        st.pend_pieces[w, row, p] -= 1
        if st.pend_pieces[w, row, p]:
            continue
        g = st.pull_gate[p]
        st.pend_gate[w, row, g] -= 1
        st.pend_left[w, row] -= 1
        if cur and g == st.wi[w, _SEG]:
            _try_start(st, w, now)
            _check_end(st, w, now)


@_jit
def _pushes_arrived(st, w: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """The push pieces on connection ``(UP, w)`` arrived; the PS applies them in turn,
    first come first served (``Worker.pushes_arrived``, ``ParameterServer.apply``)."""
    step = st.wstep[UP, w]
    for j in range(st.wn[UP, w]):
        f = st.witems[UP, w, j]
        free = st.rf[_PS_FREE]
        start = now if now > free else free
        end = start + st.upd[f]
        st.rf[_PS_FREE] = end
        q = st.ptensor[UP, f]
        if st.matched[q]:
            _pull_after_update(st, w, now, step, f, end)
            continue
        if end > st.wf[w, _LAST]:
            st.wf[w, _LAST] = end
        st.push_left[w, q] -= 1
        if st.push_left[w, q] == 0:
            st.wi[w, _GATING] -= 1
            _check_end(st, w, now)


@_jit
def _pull_after_update(st, w: int, now: float, step: int, f: int, end: float) -> None:  # type: ignore[no-untyped-def]
    """P3: the next step's pull pieces that push piece ``f`` releases leave the PS
    when its update ends (``Worker._pull_after_update``)."""
    lid = st.rel_list[f]
    if step + 1 >= st.steps or lid < 0:
        return
    if st.latency > 0:
        _schedule(st, end + st.latency, _JOIN, _K_RELEASE, w, step + 1, lid)
    elif end > now:
        _schedule(st, end, _JOIN, _K_RELEASE, w, step + 1, lid)
    else:
        _release_pulls(st, w, step + 1, lid, now)


@_jit
def _release_pulls(st, w: int, step: int, lid: int, now: float) -> None:  # type: ignore[no-untyped-def]
    """P3: pull pieces of ``step`` join after their update (``Worker.release_pulls``)."""
    _put_list(st, DOWN, w, lid, step)
    _kick(st, DOWN, w, now)


# -- the loop --------------------------------------------------------------------------


@_jit
def _dispatch(st, now: float) -> None:  # type: ignore[no-untyped-def]
    """Pop the heap's top event and run it."""
    i = int(st.ev[2, 0])
    st.ri[_EV_N] = pl.heap_pop(st.ev, st.ri[_EV_N])
    kind, w, a, b = st.pool[i, 0], st.pool[i, 1], st.pool[i, 2], st.pool[i, 3]
    _free(st, i)
    if kind == _K_SEG:
        _segment_done(st, w, now)
    elif kind == _K_PUSHES:
        _join(st, UP, w, 2 + a, b, now)
    elif kind == _K_RELEASE:
        _release_pulls(st, w, a, b, now)
    elif kind == _K_PULLS:
        _join(st, DOWN, w, 0 if a == 0 else 1, a, now)
    elif kind == _K_GAP:
        st.cbusy[DOWN, w] = 0
        _kick(st, DOWN, w, now)
    elif kind == _K_END:
        _end_step(st, w, now)
    else:
        _start_step(st, w, now)


@_jit
def _next_source(st) -> int:  # type: ignore[no-untyped-def]
    """Which event comes next: 0 or 1 a link's departure, 2 the heap's top, −1 none."""
    src, t, key = -1, math.inf, 0.0
    if st.ri[_EV_N]:
        src, t, key = 2, st.ev[0, 0], st.ev[1, 0]
    for d in range(2):
        td = st.rf[_DT0 + d]
        kd = float(st.ri[_DSEQ0 + d])
        if td < t or (td == t and td < math.inf and kd < key):
            src, t, key = d, td, kd
    return src


@_jit
def _loop(st) -> float:  # type: ignore[no-untyped-def]
    """Run every event; returns the time of the last one the core would pop, s."""
    last = 0.0
    while True:
        src = _next_source(st)
        if src < 0:
            break
        st.ri[_EVENTS] += 1
        if src < 2:
            now = st.rf[_DT0 + src]
            st.rf[_DT0 + src] = math.inf
            st.rf[_NOW] = now
            _depart(st, src, now)
        else:
            now = st.rf[_NOW] = st.ev[0, 0]
            _dispatch(st, now)
        last = st.rf[_NOW]
    return max(last, st.rf[_STALE])


@_jit
def _run(st, starts: np.ndarray):  # type: ignore[no-untyped-def]
    """Start every worker at its offset (s) and run to the end. Returns ``(now,
    events, step_ends, busy, links)``: the last time (s), events run, (N, steps) step
    ends (s), (N,) compute seconds and per link (bytes, busy seconds)."""
    b = borrow(st)  # st, counted, holds the run while the loop works on b
    for w in range(b.workers):
        _schedule(b, starts[w], _STEP_START, _K_START, w, 0, 0)
    now = _loop(b)
    links = ((st.lf[0, _LBYTES], st.lf[0, _LBUSY]), (st.lf[1, _LBYTES], st.lf[1, _LBUSY]))
    return now, st.ri[_EVENTS], st.step_ends, st.wf[:, _BUSY].copy(), links


_QUEUE_KINDS = {
    pol.FifoQueue: _FIFO,
    pol.PriorityQueue: _PRIORITY,
    pol.CreditQueue: _CREDIT,
    pol.BlockQueue: _BLOCK,
}


def supports(model: AsyncPSModel) -> bool:
    """Whether :func:`run_model` runs ``model``: one PS shard, the ``fair``
    discipline (one worker: the link ``SoloLink``, whose arithmetic is
    ``FairLink``'s with one flow) without a token bucket or two-way share, processor sharing,
    no shared cores, no join delay, no step ratios, no trace, a pull order the
    policy fixes and the registry's queues."""
    return (
        _COMPILED
        and not model.fifo
        and not model.sharded
        and isinstance(model.topology.links[DOWN], FairLink | SoloLink)
        and model.topology.links[DOWN].bucket is None
        and not model.topology.two_way
        and not model.shared_cpu
        and model.trace is None
        and not model.join_delay_s
        and not model.push_join_delay_s
        and model.step_scale is None
        and model.plan.orders is None
        and all(type(c[0][0].queue) in _QUEUE_KINDS for c in model.conns)
    )


def _pieces(pieces: list[list[float]]) -> tuple[list[int], list[float], list[int]]:
    """Offsets of each tensor's units, and each unit's bytes and tensor, in tensor order."""
    off: list[int] = []
    size: list[float] = []
    tensor: list[int] = []
    for t, x in enumerate(pieces):
        off.append(len(size))
        size.extend(x)
        tensor.extend([t] * len(x))
    return off, size, tensor


def _unit_lists(model: AsyncPSModel, offsets: tuple[list[int], list[int]]) -> tuple[Any, ...]:
    """The plan's runs as unit lists: the first step's pulls, the later steps', each
    push slot's pushes, then what each push piece releases (P3); per list a range
    of units (piece, priority, last of its run). Returns ``(l_lo, l_hi, u_f,
    u_prio, u_end, rel_list)``."""
    plan = model.plan
    lists = [(DOWN, plan.first_pulls), (DOWN, plan.next_pulls)]
    lists += [(UP, runs) for runs in plan.push_runs]
    rel_list = []
    for q, pieces in enumerate(plan.push_pieces):  # unmatched pushes release nothing
        rel = plan.release_runs[q] or [None] * len(pieces)
        for run in rel:
            rel_list.append(-1 if run is None else len(lists))
            if run is not None:
                lists.append((DOWN, [run]))
    l_lo: list[int] = []
    l_hi: list[int] = []
    u_f: list[int] = []
    u_prio: list[int] = []
    u_end: list[int] = []
    for d, runs in lists:
        l_lo.append(len(u_f))
        for _, prio, units in runs:
            for _, items in units:
                ((t, i),) = items
                u_f.append(offsets[d][t] + i)
                u_prio.append(prio)
                u_end.append(0)
            u_end[-1] = 1
        l_hi.append(len(u_f))
    ints = (l_lo, l_hi, u_f, u_prio, u_end, rel_list)
    return tuple(np.asarray(x, np.int64) for x in ints)


def _start_offsets(model: AsyncPSModel) -> np.ndarray:
    """Each worker's start, s, drawn as ``AsyncPSModel.run`` draws them."""
    n = len(model.workers)
    if model._start_offsets is not None:
        return np.asarray([float(model._start_offsets[w]) for w in range(n)])
    return np.asarray([0.0] + [float(model.rng.uniform(0.0, model._t1)) for _ in range(n - 1)])


def _step_arrays(model: AsyncPSModel) -> tuple[tuple[Any, ...], int]:
    """The plan's step as the arrays :class:`_RunType` reads (its fields from
    ``seg_dur`` to ``credit``, in order), and the most pieces a unit on the wire
    carries (a Prophet block: every piece of a step; else 1).

    Raises:
        ValueError: the unit codes ``step · pieces + piece`` would pass 2⁵².
    """
    plan = model.plan
    down_off, down_bytes, down_tensor = _pieces(plan.pull_pieces)
    up_off, up_bytes, up_tensor = _pieces(plan.push_pieces)
    nf = np.asarray([len(down_bytes), len(up_bytes)], np.int64)
    if int(nf.max()) * model.steps_per_worker >= 1 << 52:
        raise ValueError("too many units × steps for the compiled loop's unit codes")
    pbytes = np.zeros((2, int(nf.max())))
    ptensor = np.zeros((2, int(nf.max())), np.int64)
    pbytes[0, : nf[0]], pbytes[1, : nf[1]] = down_bytes, up_bytes
    ptensor[0, : nf[0]], ptensor[1, : nf[1]] = down_tensor, up_tensor
    queues = [c[0][0].queue for c in model.conns]
    qkind = [_QUEUE_KINDS[type(q)] for q in queues]
    width = int(nf.max()) if _BLOCK in qkind else 1
    l_lo, l_hi, u_f, u_prio, u_end, rel_list = _unit_lists(model, (down_off, up_off))
    i8 = np.int64
    arrays = (
        np.asarray(plan.seg_dur, float), np.asarray(plan.pull_gate, i8),
        np.asarray(plan.base_pending, i8), np.asarray(plan.base_pieces, i8),
        np.asarray([len(x) for x in plan.push_pieces], i8),
        np.asarray([1 if x else 0 for x in plan.pushes_after], i8),
        np.asarray(plan.stage_budget, float), pbytes, ptensor, nf,
        np.asarray([u for x in plan.push_piece_update_s for u in x], float),
        np.asarray(plan.matched_push, i8), rel_list, l_lo, l_hi, u_f, u_prio, u_end,
        np.asarray(qkind, i8), np.asarray([getattr(q, "credit", 0.0) for q in queues]),
    )  # fmt: skip
    return arrays, width


def _state(n: int, n_seg: int, n_pull: int, n_push: int, steps: int, width: int) -> tuple[Any, ...]:
    """A run's fresh state (:class:`_RunType`'s fields from ``wi`` to ``inflight``) for
    ``n`` workers; the heaps, pools and rings double when full."""
    i8 = np.int64
    ri = np.zeros(8, i8)
    rf = np.zeros(5)
    rf[_DT0] = rf[_DT1] = math.inf
    ev = 16 * n + 16  # pending events and queued runs at first
    return (
        np.zeros((n, 11), i8), np.zeros((n, 2)), np.zeros((n, 2, n_seg + 1), i8),
        np.zeros((n, 2, n_pull), i8), np.zeros((n, 2), i8),
        np.zeros((n, n_push), i8), np.zeros((n, n_seg + 1)),
        np.zeros((n, n_seg + 1), i8), np.zeros((n, steps)),
        ri, rf, np.zeros((3, ev)), np.zeros((ev, 4), i8), np.zeros(ev, i8),
        np.zeros((2, 4)), np.zeros((2, 2), i8),
        np.zeros((2, n), i8), np.zeros((2, n)), np.zeros((2, n), i8), np.zeros((2, n), i8),
        np.zeros((2, n, width), i8), np.zeros((2, n + 1, 3, 64)), np.zeros((2, n + 1), i8),
        np.zeros((2, n + 1), i8),
        np.zeros((2, n, 64), i8), np.zeros((2, n), i8), np.zeros((2, n), i8), np.zeros((2, n)),
    )  # fmt: skip


def run_model(model: AsyncPSModel) -> RawRun:
    """Run ``model`` compiled (see the module docstring; :func:`supports` must hold).

    Returns:
        The :class:`~sgdsim.simulation.engine.RawRun` that ``model.run()``
        returns, the same to the bit.

    Raises:
        ValueError: more units × steps than the unit codes hold (2⁵²).
    """
    plan = model.plan
    n, steps = len(model.workers), model.steps_per_worker
    step, width = _step_arrays(model)
    state = _state(n, plan.n_seg, plan.n_pull, len(plan.push_pieces), steps, width)
    settings = (
        model.topology.links[DOWN].capacity, plan.latency_s, plan.pull_start_s, plan.overhead_s,
        model.pull_gap_s, plan.n_seg, plan.n_pull, plan.n_gating,
        1 if plan.unmatched_pulls else 0, steps, n,
    )  # fmt: skip
    st = _Run(*state, *step, *settings)
    now, events, step_ends, busy, (down, up) = _run(st, _start_offsets(model))
    down, up = (float(down[0]), float(down[1])), (float(up[0]), float(up[1]))
    return RawRun(
        step_ends=step_ends.tolist(),
        busy=busy.tolist(),
        now=float(now),
        events=int(events),
        bytes_pulled=down[0],
        bytes_pushed=up[0],
        down_busy_s=down[1],
        up_busy_s=up[1],
        nic={"ps0.out": down, "ps0.in": up},
    )
