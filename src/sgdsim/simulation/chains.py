"""A worker's segment chains as the fast loop's pull groups release them, compiled.

In bulk (:class:`~sgdsim.simulation.fast_fifo.FastFifoRun`) a worker's pull
flows whose arrival lets only segments run that issue no push travel in one
group; when the group leaves the PS NIC, :func:`quiet_arrivals` runs what
each flow of it released, from the flow's arrival on. A flow arrives when the
link's virtual clock reaches its tag, at g⁻¹(tag) from the clock's
breakpoints (Demers, Keshav and Shenker, SIGCOMM 1989). The arithmetic is
that of the Python loop it replaces, so the figures are the same to the bit.
"""

from __future__ import annotations

import numpy as np

from sgdsim.simulation.jit import jit


@jit
def quiet_arrivals(
    f: int,
    last: int,
    now: float,
    j: int,
    tag0: float,
    s: int,
    free_at: float,
    busy: float,
    cum: np.ndarray,
    req: np.ndarray,
    seg_end: np.ndarray,
    log: np.ndarray,
    n_log: int,
    cap: float,
) -> tuple[int, float, float, float, int]:
    """Flows ``f … last − 1`` of a worker's step arrived by ``now``: run the segments
    each lets start (they issue no push), as ``run_chain`` does.

    Args:
        f, last: the first flow of the group not counted yet, and the group's last.
        now: when the group's last flow arrived, s.
        j: the breakpoint at which the group started (an index into ``log``).
        tag0: the virtual time the step's first flow started at, bytes.
        s, free_at, busy: the worker's next segment, when its compute reaches it
            (s), and its compute seconds so far.
        cum: (F + 1,) bytes of the step's flows before each flow.
        req: (S + 1,) flows that must have arrived before each segment starts.
        seg_end: (S + 1,) compute time from the step's start to each segment, s.
        log: (3, B) the PS → workers clock's breakpoints ``(t, g, k)``, ``n_log`` of them.
        cap: the link's capacity, bytes/s.

    Returns:
        ``(s, free_at, busy, t, f)``: the worker's state after the group, and the
        time and flow at which its compute reached the step's end (``f`` −1 if it
        did not).
    """
    n_seg = len(seg_end) - 1
    t_end, f_end = 0.0, -1
    gl = log[1]
    # only the flows whose arrival lets a segment start matter: jump to each
    while s < n_seg:
        if req[s] - 1 > f:
            f = req[s] - 1
        if f >= last:
            break
        tag = tag0 + cum[f + 1]
        a, b = j + 1, n_log  # the last breakpoint before the tag
        while a < b:
            m = (a + b) >> 1
            if gl[m] < tag:
                a = m + 1
            else:
                b = m
        j = a - 1
        gap = tag - gl[j]
        t = log[0, j] + (gap if gap > 0.0 else 0.0) * log[2, j] / cap
        if t > now:
            t = now
        # the chain runs to the first segment that needs a flow after f
        a, b = s + 1, n_seg
        while a < b:
            m = (a + b) >> 1
            if f + 1 < req[m]:
                b = m
            else:
                a = m + 1
        span = seg_end[a] - seg_end[s]
        busy += span
        s = a
        free_at = (free_at if free_at > t else t) + span
        if s == n_seg:
            t_end, f_end = t, f
        f += 1
    return s, free_at, busy, t_end, f_end
