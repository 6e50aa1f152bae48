"""The workers → PS link of the fast loop in bulk, its inner loop compiled.

:class:`BulkPushLink` is the PS NIC's receive side as
:class:`~sgdsim.simulation.fast_fifo.FastFifoRun` works it with a fair PS NIC
and one worker per node: processor sharing by a virtual clock (Demers,
Keshav and Shenker, SIGCOMM 1989; :class:`~sgdsim.simulation.link.PSLink`),
each worker's connection carrying the pushes due by the time it empties as
one flow. At high bandwidth a connection empties before its next push is
due, so the link sees a join and a departure per push: tens of millions in
a sweep. :func:`advance` takes them in time order, as long as they precede
every other event, in code that numba compiles, on arrays:

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

import numba
import numpy as np
import numpy.typing as npt

#: Why :func:`advance` returned.
WAKE, IDLE, LAST, GROW = range(4)

# F: the link's float state
_G, _T_LAST, _BUSY_S, _BYTES, _CAP, _PS_FREE = range(6)
# I: the link's int state
_K, _HSEQ, _RSEQ, _H_N, _R_N, _REC_N, _LOG_N, _LOG_FROM, _NW, _RING, _NP = range(11)
# per connection, ints: flow on the wire (pushes in it), busy flag, pushes of the
# step not gone yet, positions gone, ring head, ring length
_COUNT, _ON, _LEFT, _GONE, _HEAD, _LEN = range(6)

_jit = numba.njit(cache=True, nogil=True)
_inline = numba.njit(cache=True, nogil=True, inline="always")  # small helpers of the loop
_F_HEAD, _I_HEAD = 6, 11  # the scalars at the head of the two buffers

#: Initial rows of the records and columns of the clock's log; both double when full.
RECORDS0, LOG0 = 64, 4096
#: Breakpoints the log drops at once, when that many precede every unsettled push.
_LOG_DROP = 4096


@_inline
def _before(ka: float, sa: int, kb: float, sb: int) -> bool:
    """Heap order: key, then sequence."""
    return ka < kb or (ka == kb and sa < sb)


@_inline
def _heap_push(
    key: float, seq: int, item: int, n: int, hk: np.ndarray, hs: np.ndarray, hc: np.ndarray
) -> int:
    """Push ``(key, seq, item)`` on the heap of size ``n``; returns the new size."""
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if not _before(key, seq, hk[p], hs[p]):
            break
        hk[i], hs[i], hc[i] = hk[p], hs[p], hc[p]
        i = p
    hk[i], hs[i], hc[i] = key, seq, item
    return n + 1


@_inline
def _sift_down(
    key: float, seq: int, item: int, n: int, hk: np.ndarray, hs: np.ndarray, hc: np.ndarray
) -> None:
    """Put ``(key, seq, item)`` at the root of the heap of size ``n`` and restore order."""
    i = 0
    while True:
        m = 2 * i + 1
        if m >= n:
            break
        r = m + 1
        if r < n and _before(hk[r], hs[r], hk[m], hs[m]):
            m = r
        if not _before(hk[m], hs[m], key, seq):
            break
        hk[i], hs[i], hc[i] = hk[m], hs[m], hc[m]
        i = m
    hk[i], hs[i], hc[i] = key, seq, item


@_inline
def _heap_pop(n: int, hk: np.ndarray, hs: np.ndarray, hc: np.ndarray) -> int:
    """Remove the heap's top; returns the new size."""
    n -= 1
    if n > 0:
        _sift_down(hk[n], hs[n], hc[n], n, hk, hs, hc)
    return n


@_jit
def release(
    ints: np.ndarray, rk: np.ndarray, rs: np.ndarray, rc: np.ndarray, due: float, c: int
) -> None:
    """Idle connection ``c``'s first pending push falls due at ``due`` (s)."""
    ints[_R_N] = _heap_push(due, ints[_RSEQ], c, ints[_R_N], rk, rs, rc)
    ints[_RSEQ] += 1


@_inline
def _take(
    c: int,
    now: float,
    strict: bool,
    conn: np.ndarray,
    pend_base: np.ndarray,
    pend_pos: np.ndarray,
    pos_issue: np.ndarray,
) -> tuple[int, int]:
    """Take connection ``c``'s pending positions due before ``now`` (``strict``) or by
    ``now``; returns their range ``(lo, hi)`` (empty if none)."""
    size = pend_base.shape[1]
    head = conn[c, _HEAD]
    n = conn[c, _LEN]
    lo = hi = pend_pos[c, head, 0]
    while n:
        base = pend_base[c, head]
        plo = pend_pos[c, head, 0]
        phi = pend_pos[c, head, 1]
        last = base + pos_issue[phi - 1]
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
            if pos_issue[mid] < x or (not strict and pos_issue[mid] == x):
                a = mid + 1
            else:
                b = mid
        hi = a
        if strict:
            while hi > plo and base + pos_issue[hi - 1] >= now:
                hi -= 1
            while hi < phi and base + pos_issue[hi] < now:
                hi += 1
        else:
            while hi > plo and base + pos_issue[hi - 1] > now:
                hi -= 1
            while hi < phi and base + pos_issue[hi] <= now:
                hi += 1
        if hi > plo:
            pend_pos[c, head, 0] = hi
        break
    conn[c, _HEAD] = head
    conn[c, _LEN] = n
    return lo, hi


@_inline
def _join(
    c: int,
    base: float,
    lo: int,
    hi: int,
    now: float,
    ints: np.ndarray,
    conn: np.ndarray,
    cur: np.ndarray,
    pos_bytes: np.ndarray,
    records: np.ndarray,
) -> float:
    """Positions ``lo … hi − 1`` of ``c`` join as one flow (a record); returns its tag."""
    tag = base + pos_bytes[hi]
    r = ints[_REC_N]
    records[r, 0] = base
    records[r, 1] = lo
    records[r, 2] = hi
    records[r, 3] = c
    records[r, 4] = now
    ints[_REC_N] = r + 1
    cur[c, 0] = tag
    cur[c, 1] = pos_bytes[hi] - pos_bytes[lo]
    conn[c, _COUNT] = hi - lo
    return tag


@_inline
def _leave(
    c: int,
    tag: float,
    now: float,
    ints: np.ndarray,
    busy: tuple[np.ndarray, np.ndarray, np.ndarray],
    rel: tuple[np.ndarray, np.ndarray, np.ndarray],
    conn: np.ndarray,
    cur: np.ndarray,
    pend_base: np.ndarray,
    pend_pos: np.ndarray,
    pos: tuple[np.ndarray, np.ndarray],
    records: np.ndarray,
) -> int:
    """Connection ``c``'s flow (tag ``tag``) left at ``now``: the pushes due before now
    join as its next flow; returns 1 if ``c`` falls idle (released when its next
    pending push is due), else 0."""
    hk, hs, hc = busy
    pos_issue, pos_bytes = pos
    h = conn[c, _HEAD]
    if conn[c, _LEN] and pend_base[c, h] + pos_issue[pend_pos[c, h, 0]] < now:
        lo, hi = _take(c, now, True, conn, pend_base, pend_pos, pos_issue)
        t = _join(c, tag - pos_bytes[lo], lo, hi, now, ints, conn, cur, pos_bytes, records)
        _sift_down(t, ints[_HSEQ], c, ints[_H_N], hk, hs, hc)  # replaces c's entry, the top
        ints[_HSEQ] += 1
        return 0
    ints[_H_N] = _heap_pop(ints[_H_N], hk, hs, hc)
    conn[c, _ON] = 0
    if conn[c, _LEN]:
        due = pend_base[c, h] + pos_issue[pend_pos[c, h, 0]]
        release(ints, rel[0], rel[1], rel[2], due, c)
    return 1


@_jit
def _advance(
    floats: np.ndarray,
    ints: np.ndarray,
    busy: tuple[np.ndarray, np.ndarray, np.ndarray],
    rel: tuple[np.ndarray, np.ndarray, np.ndarray],
    conn: np.ndarray,
    cur: np.ndarray,
    pend_base: np.ndarray,
    pend_pos: np.ndarray,
    pos: tuple[np.ndarray, np.ndarray],
    ps: tuple[np.ndarray, np.ndarray],
    records: np.ndarray,
    log: np.ndarray,
    now: float,
    horizon: float,
    n_push: int,
) -> tuple[int, int, float, float, int]:
    """Take the link's departures and the releases of idle connections in time order
    (a departure first at equal times) while they precede ``horizon`` (s).

    An emptying connection takes the pushes due by then (strictly before) as
    its next flow; a released one those due by then. When a connection's last
    push of the step leaves, the PS applies every push up to its tag
    (:func:`_settle_step`). ``ps``: (P,) each position's PS update time, s,
    and (N,) each connection's latest update end settled, s.

    Returns ``(why, c, now, t, taken)``: ``why`` is ``LAST`` when connection
    ``c``'s last push of the step left at ``now`` and its last update ends at
    ``t`` (the caller ends the step and calls again), ``WAKE`` when the next
    event is at ``t`` ≥ ``horizon``, ``IDLE`` when nothing is on the link or
    pending, ``GROW`` when ``records`` or ``log`` is full (the caller grows
    them and calls again); ``taken``: events taken before ``horizon``.
    """
    hk, hs, hc = busy
    rk, rs, rc = rel
    pos_issue, pos_bytes = pos
    cap = floats[_CAP]
    g = floats[_G]
    t_last = floats[_T_LAST]
    nb = floats[_BUSY_S]
    nbytes = floats[_BYTES]
    k = ints[_K]
    taken = 0
    why = IDLE
    c = -1
    tag = 0.0
    t_next = math.inf
    while True:
        if ints[_REC_N] >= records.shape[0] or ints[_LOG_N] >= log.shape[1]:
            why = GROW
            break
        t_next = math.inf
        if ints[_H_N]:
            gap = hk[0] - g
            t_next = t_last + gap * k / cap if gap > 0.0 else t_last
        due = rk[0] if ints[_R_N] else math.inf
        depart = t_next <= due
        if not depart:
            t_next = due
        elif t_next == math.inf:  # nothing on the link, nothing pending
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
            c = hc[0]
            tag = cur[c, 0]
            if g < tag:
                # rounding: the clock reaches the tag when the flow leaves, so
                # that g⁻¹(tag) over the breakpoints (settle) gives this time
                g = tag
            nbytes += cur[c, 1]
            left = conn[c, _LEFT] - conn[c, _COUNT]
            conn[c, _LEFT] = left
            conn[c, _GONE] = n_push - left
            k -= _leave(c, tag, now, ints, busy, rel, conn, cur, pend_base, pend_pos, pos, records)
        else:
            c = rc[0]
            ints[_R_N] = _heap_pop(ints[_R_N], rk, rs, rc)
            lo, hi = _take(c, now, False, conn, pend_base, pend_pos, pos_issue)
            t = _join(c, g - pos_bytes[lo], lo, hi, now, ints, conn, cur, pos_bytes, records)
            ints[_H_N] = _heap_push(t, ints[_HSEQ], c, ints[_H_N], hk, hs, hc)
            ints[_HSEQ] += 1
            conn[c, _ON] = 1
            k += 1
        n = ints[_LOG_N]
        log[0, n] = now
        log[1, n] = g
        log[2, n] = k
        ints[_LOG_N] = n + 1
        if left == 0:
            why = LAST
            t_next = _settle_step(c, tag, g, floats, ints, conn, pos_bytes, ps, records, log)
            break
    floats[_G] = g
    floats[_T_LAST] = t_last
    floats[_BUSY_S] = nb
    floats[_BYTES] = nbytes
    ints[_K] = k
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
def _settle_step(
    c: int,
    x: float,
    g: float,
    floats: np.ndarray,
    ints: np.ndarray,
    conn: np.ndarray,
    pos_bytes: np.ndarray,
    ps: tuple[np.ndarray, np.ndarray],
    records: np.ndarray,
    log: np.ndarray,
) -> float:
    """Connection ``c``'s last push of the step left, its tag ``x``, the clock at ``g``:
    the PS applies every push on the link whose tag is at most ``x`` (:func:`settle`,
    every later push has a tag ≥ min(x, g)); returns the end of ``c``'s last update, s."""
    pos_update, settled_end = ps
    n = ints[_REC_N]
    if n:
        kept, floats[_PS_FREE] = settle(
            records[:n], x, conn[:, _GONE], pos_bytes, pos_update, log, ints[_LOG_FROM],
            ints[_LOG_N], floats[_CAP], floats[_PS_FREE], settled_end,
        )  # fmt: skip
        ints[_REC_N] = kept
        # the breakpoints before the last one before min(x, g) are of settled pushes
        lf = ints[_LOG_FROM]
        n_log = ints[_LOG_N]
        j = lf + np.searchsorted(log[1, lf:n_log], x if x < g else g, "left") - 1
        if j > lf:
            lf = ints[_LOG_FROM] = j
        if lf > _LOG_DROP:
            for i in range(n_log - lf):
                log[0, i], log[1, i], log[2, i] = log[0, lf + i], log[1, lf + i], log[2, lf + i]
            ints[_LOG_N] = n_log - lf
            ints[_LOG_FROM] = 0
    end: float = settled_end[c]
    settled_end[c] = -math.inf
    return end


@_jit
def _views(floats: np.ndarray, ints: np.ndarray) -> tuple:
    """The link's arrays as views of its two buffers: ``floats`` holds the float
    state, then (N,) busy keys, (N,) release keys, (N, 2) flows on the wire,
    (N, ring) pending bases, (P,) pos_issue, (P + 1,) pos_bytes, (P,) PS update
    times and (N,) settled ends; ``ints`` the int state, then (N,) busy
    sequence numbers and connections, the same for releases, (N, 6) per
    connection and (N, ring, 2) pending positions. One buffer per dtype keeps
    a call from Python cheap (numba checks each argument's type)."""
    n, ring, p = ints[_NW], ints[_RING], ints[_NP]
    o = _F_HEAD
    hk = floats[o : o + n]
    rk = floats[o + n : o + 2 * n]
    o += 2 * n
    cur = floats[o : o + 2 * n].reshape(n, 2)
    o += 2 * n
    pend_base = floats[o : o + n * ring].reshape(n, ring)
    o += n * ring
    pos_issue = floats[o : o + p]
    pos_bytes = floats[o + p : o + 2 * p + 1]
    pos_update = floats[o + 2 * p + 1 : o + 3 * p + 1]
    settled_end = floats[o + 3 * p + 1 : o + 3 * p + 1 + n]
    o = _I_HEAD
    hs, hc = ints[o : o + n], ints[o + n : o + 2 * n]
    rs, rc = ints[o + 2 * n : o + 3 * n], ints[o + 3 * n : o + 4 * n]
    o += 4 * n
    conn = ints[o : o + 6 * n].reshape(n, 6)
    pend_pos = ints[o + 6 * n : o + 6 * n + 2 * n * ring].reshape(n, ring, 2)
    return (
        (hk, hs, hc), (rk, rs, rc), conn, cur, pend_base, pend_pos,
        (pos_issue, pos_bytes), (pos_update, settled_end),
    )  # fmt: skip


@_jit
def new_buffers(
    workers: int,
    cap: float,
    pos_issue: np.ndarray,
    pos_bytes: np.ndarray,
    pos_update: np.ndarray,
    ring: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The float and int buffer (:func:`_views`) of an idle link: ``workers``
    connections, capacity ``cap`` (bytes/s), the step's positions (arguments as
    :class:`BulkPushLink`), ``ring`` pending runs per connection."""
    n, p = workers, len(pos_issue)
    floats = np.zeros(_F_HEAD + 5 * n + n * ring + 3 * p + 1)
    ints = np.zeros(_I_HEAD + 10 * n + 2 * n * ring, np.int64)
    floats[_CAP] = cap
    ints[_NW], ints[_RING], ints[_NP] = n, ring, p
    ints[_LOG_N] = 1  # the clock's first breakpoint: (0, 0, 0)
    _, _, _, _, _, _, pos, ps = _views(floats, ints)
    pos[0][:] = pos_issue
    pos[1][:] = pos_bytes
    ps[0][:] = pos_update
    ps[1][:] = -math.inf
    return floats, ints


def new_growing(workers: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The arrays that grow as a run goes: records and the clock's log."""
    return np.zeros((max(RECORDS0, 4 * workers), 5)), np.zeros((3, LOG0))


@_jit
def advance(
    floats: np.ndarray, ints: np.ndarray, records: np.ndarray, log: np.ndarray, now: float,
    horizon: float,
) -> tuple[int, int, float, float, int]:  # fmt: skip
    """:func:`_advance` on the link's buffers (:func:`_views`)."""
    busy, rel, conn, cur, pend_base, pend_pos, pos, ps = _views(floats, ints)
    return _advance(
        floats, ints, busy, rel, conn, cur, pend_base, pend_pos, pos, ps, records, log, now,
        horizon, ints[_NP],
    )  # fmt: skip


@_jit
def issue(floats: np.ndarray, ints: np.ndarray, w: int, base: float, lo: int, hi: int) -> float:
    """Positions ``lo … hi − 1`` of connection ``w`` are issued, position ``p`` due at
    ``base + pos_issue[p]``: they wait in its ring. Returns the time the
    connection joins the link if it was idle with nothing pending (it is
    released then), else −inf.

    Raises:
        RuntimeError: more pending runs than the ring holds (a bug).
    """
    _, rel, conn, _, pend_base, pend_pos, pos, _ = _views(floats, ints)
    n = conn[w, _LEN]
    size = pend_base.shape[1]
    if n == size:
        raise RuntimeError("more pending push runs than the ring holds")
    i = (conn[w, _HEAD] + n) % size
    pend_base[w, i] = base
    pend_pos[w, i, 0] = lo
    pend_pos[w, i, 1] = hi
    conn[w, _LEN] = n + 1
    if n or conn[w, _ON]:
        return -math.inf
    due = base + pos[0][lo]
    release(ints, rel[0], rel[1], rel[2], due, w)
    return due


class BulkPushLink:
    """The workers → PS link's state, and the PS's, on arrays for :func:`advance`.

    Args:
        workers: connections (one per worker).
        cap: the link's capacity, bytes/s.
        pos_issue: (P,) each position's issue time less its chain's start, s.
        pos_bytes: (P + 1,) bytes of the positions before each, bytes.
        pos_update: (P,) each position's PS update time, s.
        ring: pending runs a connection can hold at once (a step's chains).
    """

    __slots__ = ("floats", "gone", "ints", "log", "pushes_left", "records")

    def __init__(
        self,
        workers: int,
        cap: float,
        pos_issue: npt.NDArray[np.float64],
        pos_bytes: npt.NDArray[np.float64],
        pos_update: npt.NDArray[np.float64],
        ring: int,
    ) -> None:
        self.floats, self.ints = new_buffers(workers, cap, pos_issue, pos_bytes, pos_update, ring)
        conn = _views(self.floats, self.ints)[2]
        #: (N,) pushes of each worker's step that have not left, and positions that have
        self.pushes_left: npt.NDArray[np.int64] = conn[:, _LEFT]
        self.gone: npt.NDArray[np.int64] = conn[:, _GONE]
        self.records, self.log = new_growing(workers)

    def advance(self, now: float, horizon: float) -> tuple[int, int, float, float, int]:
        """:func:`advance` on this link's arrays, growing them when full: ``(why, c,
        now, t, taken)`` as there, ``why`` never ``GROW``."""
        taken = 0
        while True:
            why, c, now, t, n = advance(
                self.floats, self.ints, self.records, self.log, now, horizon
            )
            taken += n
            if why != GROW:
                return why, c, now, t, taken
            if self.ints[_REC_N] >= len(self.records):
                self.records = np.concatenate((self.records, np.zeros_like(self.records)))
            if self.ints[_LOG_N] >= self.log.shape[1]:
                self.log = np.concatenate((self.log, np.zeros_like(self.log)), axis=1)

    @property
    def busy_s(self) -> float:
        """Seconds the link was busy, up to its last breakpoint."""
        return float(self.floats[_BUSY_S])

    @property
    def bytes_done(self) -> float:
        """Bytes that left the link."""
        return float(self.floats[_BYTES])
