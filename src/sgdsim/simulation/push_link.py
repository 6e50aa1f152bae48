"""The workers → PS link of the fast loop in bulk, its inner loop compiled.

:class:`BulkPushLink` is the PS NIC's receive side as
:class:`~sgdsim.simulation.fast_fifo.FastFifoRun` works it with a fair PS NIC
and one worker per node: processor sharing by a virtual clock (Demers,
Keshav and Shenker, SIGCOMM 1989; :class:`~sgdsim.simulation.link.PSLink`),
each worker's connection carrying the pushes due by the time it empties as
one flow. At high bandwidth a connection empties before its next push is
due, so the link sees a join and a departure per push: tens of millions in
a sweep. :func:`advance` takes them in time order, as long as they precede
every other event, in code that numba compiles, on the arrays of a :class:`Link`:

- ``busy``: a heap of ``(tag, seq, connection)``, the flow on the wire of each
  busy connection (the tag is the virtual time at its last byte);
- ``releases``: a heap of ``(due, seq, connection)``, each idle connection
  whose first pending push falls due then;
- ``pending``: per connection, a ring of runs ``(base, lo, hi)``: positions
  ``lo … hi − 1`` of the step's pushes in issue order, position ``p`` due at
  ``base + pos_issue[p]``;
- ``records``: one row ``(base, lo, hi, connection, join time)`` per flow that
  joined and that the PS has not applied yet (:func:`settle`, when a
  worker's last push of the step leaves), position ``p``'s tag being
  ``base + pos_bytes[p + 1]``;
- ``log``: the clock's breakpoints ``(t, g, k)``: from ``t`` on the virtual
  time is ``g + (t' − t) · cap / k``, which ``settle`` inverts.

The arithmetic is the Python loop's it replaced, operation for operation, so
the figures are the same to the bit (``tests/test_simulator.py`` against one
event per tensor, ``tests/test_push_link.py``).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numba.core import types
from numba.experimental import structref

from sgdsim.simulation.jit import inline as _inline
from sgdsim.simulation.jit import jit as _jit

#: Why :func:`advance` returned.
WAKE, IDLE, LAST = range(3)

# F: the link's float state
_G, _T_LAST, _BUSY_S, _BYTES, _CAP, _PS_FREE = range(6)
# I: the link's int state
_K, _HSEQ, _RSEQ, _H_N, _R_N, _REC_N, _LOG_N, _LOG_FROM = range(8)
# per connection, ints: flow on the wire (pushes in it), busy flag, pushes of the
# step not gone yet, positions gone, ring head, ring length
_COUNT, _ON, _LEFT, _GONE, _HEAD, _LEN = range(6)


#: Initial rows of the records and columns of the clock's log; both double when full.
RECORDS0, LOG0 = 64, 4096
#: Breakpoints the log drops at once, when that many precede every unsettled push.
_LOG_DROP = 4096


@_inline
def _before(ka: float, sa: int, kb: float, sb: int) -> bool:
    """Heap order: key, then sequence."""
    return ka < kb or (ka == kb and sa < sb)


@_inline
def heap_push(h: np.ndarray, n: int, key: float, seq: int, item: float) -> int:
    """Push ``(key, seq, item)`` on the heap ``h`` (3, capacity) of size ``n``: rows
    keys, sequence numbers and items, as floats (exact below 2⁵³); returns the new
    size. One array per heap: numba counts one reference per operation, not three."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if not _before(key, seq, h[0, p], h[1, p]):
            break
        h[0, i], h[1, i], h[2, i] = h[0, p], h[1, p], h[2, p]
        i = p
    h[0, i], h[1, i], h[2, i] = key, seq, item
    return n + 1


@_inline
def heap_sift_down(h: np.ndarray, n: int, key: float, seq: int, item: float) -> None:
    """Put ``(key, seq, item)`` at the root of the heap ``h`` of size ``n``
    (:func:`heap_push`) and restore its order: it replaces the top."""
    i = 0
    while True:
        m = 2 * i + 1
        if m >= n:
            break
        r = m + 1
        if r < n and _before(h[0, r], h[1, r], h[0, m], h[1, m]):
            m = r
        if not _before(h[0, m], h[1, m], key, seq):
            break
        h[0, i], h[1, i], h[2, i] = h[0, m], h[1, m], h[2, m]
        i = m
    h[0, i], h[1, i], h[2, i] = key, seq, item


@_inline
def heap_pop(h: np.ndarray, n: int) -> int:
    """Remove the top of the heap ``h`` of size ``n`` (:func:`heap_push`); returns the
    new size."""
    n -= 1
    if n > 0:
        heap_sift_down(h, n, h[0, n], h[1, n], h[2, n])
    return n


@_inline
def next_event(
    top: float, busy: int, due: float, pending: int, g: float, t_last: float, k: int, cap: float
) -> tuple[float, bool]:
    """A processor-sharing link's next event, s, and whether it is a departure: the
    busy heap's top tag ``top`` reached by the virtual clock (at ``g`` since
    ``t_last``, ``k`` flows sharing ``cap`` bytes/s), or the release ``due``, a
    departure first at equal times; ``(inf, True)`` when neither heap holds one
    (``busy``, ``pending``: their sizes)."""
    t_next = math.inf
    if busy:
        gap = top - g
        t_next = t_last + gap * k / cap if gap > 0.0 else t_last
    due = due if pending else math.inf
    depart = t_next <= due
    return (t_next, True) if depart else (due, False)


@_jit
def release(lk, due: float, c: int) -> None:  # type: ignore[no-untyped-def]
    """Idle connection ``c``'s first pending push falls due at ``due`` (s)."""
    lk.i[_R_N] = heap_push(lk.rel, lk.i[_R_N], due, lk.i[_RSEQ], c)
    lk.i[_RSEQ] += 1


@_inline
def _take(lk, c: int, now: float, strict: bool) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Take connection ``c``'s pending positions due before ``now`` (``strict``) or by
    ``now``; returns their range ``(lo, hi)`` (empty if none)."""
    size = lk.pend_base.shape[1]
    head = lk.conn[c, _HEAD]
    n = lk.conn[c, _LEN]
    lo = hi = lk.pend_pos[c, head, 0]
    while n:
        base = lk.pend_base[c, head]
        plo = lk.pend_pos[c, head, 0]
        phi = lk.pend_pos[c, head, 1]
        last = base + lk.pos_issue[phi - 1]
        if last < now or (not strict and last == now):
            hi = phi
            head = (head + 1) % size
            n -= 1
            continue
        # the first position not due: bisect on C, then settle rounding on due times
        x = now - base
        a, b = plo, phi
        while a < b:
            mid = (a + b) >> 1
            if lk.pos_issue[mid] < x or (not strict and lk.pos_issue[mid] == x):
                a = mid + 1
            else:
                b = mid
        hi = a
        if strict:
            while hi > plo and base + lk.pos_issue[hi - 1] >= now:
                hi -= 1
            while hi < phi and base + lk.pos_issue[hi] < now:
                hi += 1
        else:
            while hi > plo and base + lk.pos_issue[hi - 1] > now:
                hi -= 1
            while hi < phi and base + lk.pos_issue[hi] <= now:
                hi += 1
        if hi > plo:
            lk.pend_pos[c, head, 0] = hi
        break
    lk.conn[c, _HEAD] = head
    lk.conn[c, _LEN] = n
    return lo, hi


@_inline
def _join(lk, c: int, base: float, lo: int, hi: int, now: float) -> float:  # type: ignore[no-untyped-def]
    """Positions ``lo … hi − 1`` of ``c`` join as one flow (a record); returns its tag."""
    tag = base + lk.pos_bytes[hi]
    r = lk.i[_REC_N]
    lk.records[r, 0] = base
    lk.records[r, 1] = lo
    lk.records[r, 2] = hi
    lk.records[r, 3] = c
    lk.records[r, 4] = now
    lk.i[_REC_N] = r + 1
    lk.cur[c, 0] = tag
    lk.cur[c, 1] = lk.pos_bytes[hi] - lk.pos_bytes[lo]
    lk.conn[c, _COUNT] = hi - lo
    return tag


@_inline
def _leave(lk, c: int, tag: float, now: float) -> int:  # type: ignore[no-untyped-def]
    """Connection ``c``'s flow (tag ``tag``) left at ``now``: the pushes due before now
    join as its next flow; returns 1 if ``c`` falls idle (released when its next
    pending push is due), else 0."""
    h = lk.conn[c, _HEAD]
    if lk.conn[c, _LEN] and lk.pend_base[c, h] + lk.pos_issue[lk.pend_pos[c, h, 0]] < now:
        lo, hi = _take(lk, c, now, True)
        t = _join(lk, c, tag - lk.pos_bytes[lo], lo, hi, now)
        # replaces c's entry, the top
        heap_sift_down(lk.busy, lk.i[_H_N], t, lk.i[_HSEQ], c)
        lk.i[_HSEQ] += 1
        return 0
    lk.i[_H_N] = heap_pop(lk.busy, lk.i[_H_N])
    lk.conn[c, _ON] = 0
    if lk.conn[c, _LEN]:
        release(lk, lk.pend_base[c, h] + lk.pos_issue[lk.pend_pos[c, h, 0]], c)
    return 1


@_jit
def _grow(lk) -> None:  # type: ignore[no-untyped-def]
    """Double the records or the clock's log, whichever is full."""
    if lk.i[_REC_N] >= lk.records.shape[0]:
        a = lk.records
        grown = np.zeros((2 * a.shape[0], a.shape[1]))
        grown[: a.shape[0]] = a
        lk.records = grown
    if lk.i[_LOG_N] >= lk.log.shape[1]:
        b = lk.log
        wider = np.zeros((3, 2 * b.shape[1]))
        wider[:, : b.shape[1]] = b
        lk.log = wider


@_jit
def advance(lk, now: float, horizon: float) -> tuple[int, int, float, float, int]:  # type: ignore[no-untyped-def]
    """Take the link's departures and the releases of idle connections in time order
    (a departure first at equal times) while they precede ``horizon`` (s).

    An emptying connection takes the pushes due by then (strictly before) as
    its next flow; a released one those due by then. When a connection's last
    push of the step leaves, the PS applies every push up to its tag
    (:func:`_settle_step`). The records and the clock's log double when full.

    Returns ``(why, c, now, t, taken)``: ``why`` is ``LAST`` when connection
    ``c``'s last push of the step left at ``now`` and its last update ends at
    ``t`` (the caller ends the step and calls again), ``WAKE`` when the next
    event is at ``t`` ≥ ``horizon``, ``IDLE`` when nothing is on the link or
    pending; ``taken``: events taken before ``horizon``.
    """
    # the arrays are read through lk in each expression, not bound to locals:
    # numba then counts no reference per array and call
    cap = lk.f[_CAP]
    g = lk.f[_G]
    t_last = lk.f[_T_LAST]
    nb = lk.f[_BUSY_S]
    nbytes = lk.f[_BYTES]
    k = lk.i[_K]
    n_push = len(lk.pos_issue)
    taken = 0
    why = IDLE
    c = -1
    tag = 0.0
    t_next = math.inf
    while True:
        if lk.i[_REC_N] >= lk.records.shape[0] or lk.i[_LOG_N] >= lk.log.shape[1]:
            _grow(lk)
        t_next, depart = next_event(
            lk.busy[0, 0], lk.i[_H_N], lk.rel[0, 0], lk.i[_R_N], g, t_last, k, cap
        )
        if t_next == math.inf:  # nothing on the link, nothing pending
            why = IDLE
            break
        if t_next > now:
            if t_next >= horizon:
                why = WAKE
                break
            now = t_next  # it precedes every pending event: take it now
            taken += 1
        if k:
            dt = now - t_last
            g += dt * cap / k
            nb += dt
        t_last = now
        left = -1
        if depart:
            c = int(lk.busy[2, 0])
            tag = lk.cur[c, 0]
            if g < tag:
                # rounding: the clock reaches the tag when the flow leaves, so
                # that g⁻¹(tag) over the breakpoints (settle) gives this time
                g = tag
            nbytes += lk.cur[c, 1]
            left = lk.conn[c, _LEFT] - lk.conn[c, _COUNT]
            lk.conn[c, _LEFT] = left
            lk.conn[c, _GONE] = n_push - left
            k -= _leave(lk, c, tag, now)
        else:
            c = int(lk.rel[2, 0])
            lk.i[_R_N] = heap_pop(lk.rel, lk.i[_R_N])
            lo, hi = _take(lk, c, now, False)
            t = _join(lk, c, g - lk.pos_bytes[lo], lo, hi, now)
            lk.i[_H_N] = heap_push(lk.busy, lk.i[_H_N], t, lk.i[_HSEQ], c)
            lk.i[_HSEQ] += 1
            lk.conn[c, _ON] = 1
            k += 1
        n = lk.i[_LOG_N]
        lk.log[0, n] = now
        lk.log[1, n] = g
        lk.log[2, n] = k
        lk.i[_LOG_N] = n + 1
        if left == 0:
            why = LAST
            t_next = _settle_step(lk, c, tag, g)
            break
    lk.f[_G] = g
    lk.f[_T_LAST] = t_last
    lk.f[_BUSY_S] = nb
    lk.f[_BYTES] = nbytes
    lk.i[_K] = k
    return why, c, now, t_next, taken


@_jit
def _merge_runs(tags: np.ndarray, heads: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(T,) the order of the items by tag, then head tag, then index (a stable sort by
    tag, ties by head tag), given runs ``starts[r] … starts[r + 1] − 1`` already in
    that order: adjacent runs merged pairwise, pass after pass (bottom-up merge sort
    on natural runs, Knuth, TAOCP vol. 3, 5.2.4)."""
    total = len(tags)
    src = np.arange(total)
    dst = np.empty(total, np.int64)
    bounds = starts.copy()
    n_runs = len(starts) - 1
    while n_runs > 1:
        k = 0
        for r in range(0, n_runs, 2):
            a, mid = bounds[r], bounds[r + 1]
            b = bounds[r + 2] if r + 2 <= n_runs else mid
            i, j, out = a, mid, a
            while i < mid and j < b:
                x, y = src[i], src[j]
                # y first only if strictly before x (x has the smaller index)
                if tags[y] < tags[x] or (tags[y] == tags[x] and heads[y] < heads[x]):
                    dst[out] = y
                    j += 1
                else:
                    dst[out] = x
                    i += 1
                out += 1
            while i < mid:
                dst[out] = src[i]
                i += 1
                out += 1
            while j < b:
                dst[out] = src[j]
                j += 1
                out += 1
            bounds[k] = a
            k += 1
        bounds[k] = total
        n_runs = k
        src, dst = dst, src
    return src


@_jit
def settle(
    rec: np.ndarray,
    x: float,
    gone: np.ndarray,
    pos_bytes: np.ndarray,
    pos_update: np.ndarray,
    log: np.ndarray,
    log_from: int,
    log_n: int,
    cap: float,
    ps_free: float,
    settled_end: np.ndarray,
) -> tuple[int, float]:
    """The PS applies every push of ``rec`` whose tag is at most ``x``, and every one
    that has left (``gone``), in tag order (ties: the one that became its
    connection's head first, then join order), each arriving at g⁻¹(tag) from
    the clock's breakpoints ``log[:, log_from:log_n]`` and served first-in
    first-out from ``ps_free`` on, by Lindley's recursion (Lindley 1952)
    D_i = max(a_i, D_{i−1}) + u_i.

    ``rec`` (R, 5): rows ``(base, lo, hi, connection, join time)``; each row's
    ``lo`` moves past the positions applied, and the rows with positions left
    move to the front in order. Raises each connection's ``settled_end`` to the
    end of its last update applied. Returns (rows left, the PS CPU's new
    ``ps_free``), seconds.
    """
    n = rec.shape[0]
    cut = np.empty(n, np.int64)
    total = 0
    for r in range(n):
        lo, hi = int(rec[r, 1]), int(rec[r, 2])
        c = np.searchsorted(pos_bytes, x - rec[r, 0], "right") - 1
        c = min(max(c, lo), hi)
        cut[r] = max(c, min(hi, gone[int(rec[r, 3])]))
        total += cut[r] - lo
    if total:
        row = np.empty(total, np.int64)
        pos = np.empty(total, np.int64)
        tags = np.empty(total)
        heads = np.empty(total)
        starts = np.empty(n + 1, np.int64)  # each row's positions are a run of rising tags
        i = 0
        for r in range(n):
            starts[r] = i
            base = rec[r, 0]
            for p in range(int(rec[r, 1]), cut[r]):
                row[i] = r
                pos[i] = p
                heads[i] = base + pos_bytes[p]
                tags[i] = base + pos_bytes[p + 1]
                i += 1
        starts[n] = total
        o = _merge_runs(tags, heads, starts)
        u_sum = 0.0
        top = -math.inf
        j = log_from  # the last breakpoint before the tag (tags rise along o)
        for i in range(total):
            q = o[i]
            tag = tags[q]
            while j + 1 < log_n and log[1, j + 1] < tag:
                j += 1
            gap = max(tag - log[1, j], 0.0)
            # no earlier than the run joined: the clock stands still while the link
            # idles, so a zero-byte push's tag is also that of the last departure
            arrive = max(log[0, j] + gap * log[2, j] / cap, rec[row[q], 4])
            u = pos_update[pos[q]]
            u_sum += u
            m = arrive - (u_sum - u)
            if i == 0 and m < ps_free:
                m = ps_free
            top = max(top, m)
            ps_free = u_sum + top
            c = int(rec[row[q], 3])
            settled_end[c] = max(settled_end[c], ps_free)
    kept = 0
    for r in range(n):
        if cut[r] < rec[r, 2]:
            rec[kept] = rec[r]
            rec[kept, 1] = cut[r]
            kept += 1
    return kept, ps_free


@_jit
def _settle_step(lk, c: int, x: float, g: float) -> float:  # type: ignore[no-untyped-def]
    """Connection ``c``'s last push of the step left, its tag ``x``, the clock at ``g``:
    the PS applies every push on the link whose tag is at most ``x`` (:func:`settle`,
    every later push has a tag ≥ min(x, g)); returns the end of ``c``'s last update, s."""
    n = lk.i[_REC_N]
    if n:
        kept, lk.f[_PS_FREE] = settle(
            lk.records[:n], x, lk.conn[:, _GONE], lk.pos_bytes, lk.pos_update, lk.log,
            lk.i[_LOG_FROM], lk.i[_LOG_N], lk.f[_CAP], lk.f[_PS_FREE], lk.settled_end,
        )  # fmt: skip
        lk.i[_REC_N] = kept
        # the breakpoints before the last one before min(x, g) are of settled pushes
        log = lk.log
        lf = lk.i[_LOG_FROM]
        n_log = lk.i[_LOG_N]
        j = lf + np.searchsorted(log[1, lf:n_log], x if x < g else g, "left") - 1
        if j > lf:
            lf = lk.i[_LOG_FROM] = j
        if lf > _LOG_DROP:
            for i in range(n_log - lf):
                log[0, i], log[1, i], log[2, i] = log[0, lf + i], log[1, lf + i], log[2, lf + i]
            lk.i[_LOG_N] = n_log - lf
            lk.i[_LOG_FROM] = 0
    end: float = lk.settled_end[c]
    lk.settled_end[c] = -math.inf
    return end


@structref.register
class _LinkType(types.StructRef):
    """The link's state as a numba ``StructRef`` (:class:`Link`)."""

    def preprocess_fields(self, fields):  # type: ignore[no-untyped-def]
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Link(structref.StructRefProxy):
    """The workers → PS link's state, and the PS's, as one object that compiled code
    passes by reference (one reference counted per call, not one per array).

    Fields: ``f`` (6,) and ``i`` (8,) the float and int scalars (``_G`` …,
    ``_K`` …); the heaps (:func:`heap_push`) of busy connections ``busy`` and of
    releases ``rel``, (3, N) each; ``conn`` (N, 6) ints per connection
    (``_COUNT`` …); ``cur`` (N, 2) each flow on the wire's tag and bytes;
    ``pend_base`` (N, ring) and ``pend_pos`` (N, ring, 2) the pending runs;
    ``pos_issue`` (P,) s, ``pos_bytes`` (P + 1,) bytes, ``pos_update`` (P,) s;
    ``settled_end`` (N,) each connection's latest update end settled, s;
    ``records`` (R, 5) and ``log`` (3, L), which grow.
    """


structref.define_proxy(
    Link,
    _LinkType,
    (  # noqa: SIM905 - the fields read as one list
        "f i busy rel conn cur pend_base pend_pos pos_issue pos_bytes pos_update "
        "settled_end records log"
    ).split(),
)


@_jit
def new_link(  # type: ignore[no-untyped-def]
    workers: int,
    cap: float,
    pos_issue: np.ndarray,
    pos_bytes: np.ndarray,
    pos_update: np.ndarray,
    ring: int,
    records: int,
    log: int,
):
    """An idle link (:class:`Link`): ``workers`` connections, capacity ``cap``
    (bytes/s), the step's positions (arguments as :class:`BulkPushLink`), ``ring``
    pending runs per connection, room for ``records`` records and ``log``
    breakpoints at first."""
    n = workers
    f = np.zeros(6)
    f[_CAP] = cap
    i = np.zeros(8, np.int64)
    i[_LOG_N] = 1  # the clock's first breakpoint: (0, 0, 0)
    return Link(
        f, i, np.zeros((3, n)), np.zeros((3, n)),
        np.zeros((n, 6), np.int64), np.zeros((n, 2)), np.zeros((n, ring)),
        np.zeros((n, ring, 2), np.int64), pos_issue.copy(), pos_bytes.copy(),
        pos_update.copy(), np.full(n, -math.inf), np.zeros((records, 5)), np.zeros((3, log)),
    )  # fmt: skip


@_jit
def issue(lk, w: int, base: float, lo: int, hi: int) -> float:  # type: ignore[no-untyped-def]
    """Positions ``lo … hi − 1`` of connection ``w`` are issued, position ``p`` due at
    ``base + pos_issue[p]``: they wait in its ring. Returns the time the
    connection joins the link if it was idle with nothing pending (it is
    released then), else −inf.

    Raises:
        RuntimeError: more pending runs than the ring holds (a bug).
    """
    n = lk.conn[w, _LEN]
    size = lk.pend_base.shape[1]
    if n == size:
        raise RuntimeError("more pending push runs than the ring holds")
    i = (lk.conn[w, _HEAD] + n) % size
    lk.pend_base[w, i] = base
    lk.pend_pos[w, i, 0] = lo
    lk.pend_pos[w, i, 1] = hi
    lk.conn[w, _LEN] = n + 1
    if n or lk.conn[w, _ON]:
        return -math.inf
    due = base + lk.pos_issue[lo]
    release(lk, due, w)
    return due


@_jit
def _scalars_and_conn(lk):  # type: ignore[no-untyped-def]
    """The link's float scalars and its (N, 6) ints per connection, for Python."""
    return lk.f, lk.conn


class BulkPushLink:
    """The workers → PS link's state, and the PS's (:class:`Link`), for Python.

    Args:
        workers: connections (one per worker).
        cap: the link's capacity, bytes/s.
        pos_issue: (P,) each position's issue time less its chain's start, s.
        pos_bytes: (P + 1,) bytes of the positions before each, bytes.
        pos_update: (P,) each position's PS update time, s.
        ring: pending runs a connection can hold at once (a step's chains).
    """

    __slots__ = ("f", "gone", "lk", "pushes_left")

    def __init__(
        self,
        workers: int,
        cap: float,
        pos_issue: npt.NDArray[np.float64],
        pos_bytes: npt.NDArray[np.float64],
        pos_update: npt.NDArray[np.float64],
        ring: int,
    ) -> None:
        self.lk = new_link(
            workers, cap, pos_issue, pos_bytes, pos_update, ring, max(RECORDS0, 4 * workers),
            LOG0,
        )  # fmt: skip
        self.f, conn = _scalars_and_conn(self.lk)  # the same memory as the link's
        #: (N,) pushes of each worker's step that have not left, and positions that have
        self.pushes_left: npt.NDArray[np.int64] = conn[:, _LEFT]
        self.gone: npt.NDArray[np.int64] = conn[:, _GONE]

    def advance(self, now: float, horizon: float) -> tuple[int, int, float, float, int]:
        """:func:`advance` on this link."""
        return advance(self.lk, now, horizon)

    def issue(self, w: int, base: float, lo: int, hi: int) -> float:
        """:func:`issue` on this link."""
        return issue(self.lk, w, base, lo, hi)

    @property
    def busy_s(self) -> float:
        """Seconds the link was busy, up to its last breakpoint."""
        return float(self.f[_BUSY_S])

    @property
    def bytes_done(self) -> float:
        """Bytes that left the link."""
        return float(self.f[_BYTES])
