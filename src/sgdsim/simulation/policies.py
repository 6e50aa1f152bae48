"""Transmission policies: how a worker's tensors are cut into units and ordered.

Every worker has one connection per PS shard and direction (TensorFlow's one
gRPC channel per worker/PS pair). A connection puts one *unit* on the wire at
a time, at its fair share of the NICs it crosses (see
:mod:`sgdsim.simulation.link`); a per-connection *queue* chooses the next unit
whenever the connection falls idle. The policies differ in the units (whole
tensors, slices, partitions, blocks) and in the queue (issue order, priority,
credit window, block budget).

Priorities follow the layer (earlier layer = more urgent), taken from the
workload: a pull's layer rank is its gate (the first segment that reads it,
i.e. forward first-use order); a push's is the reverse of its producing
segment (back-propagation produces the gradients of the last layers first,
so a gradient produced later belongs to an earlier layer). Ties go to the
workload order.

Policies (the names :data:`sgdsim.simulation.async_ps.POLICIES` lists):

``tf_default``, ``tictac``, ``fifo_random``
    Whole tensors, first-in first-out in issue order (see
    :func:`sgdsim.simulation.async_ps.pull_issue_order`).

``p3``
    Jayarajan, Wei, Gibson, Fedorova, Pekhimenko, "Priority-based Parameter
    Propagation for Distributed DNN Training", SysML 2019. Modelled: every
    tensor is cut into slices of ``p3_slice_bytes``; each connection sends the
    most urgent queued slice next (layer priority, pulls and pushes), so a
    newly arrived urgent slice overtakes queued slices but never the one on
    the wire (preemption at slice boundaries); the PS applies each slice on
    its own (update time in proportion to its bytes) and sends the updated
    slice back at once, so the next step's pull of a parameter leaves the PS
    right after the worker's update of it (*pull after update*) and the next
    forward pass can start on the first layers while later ones are still in
    flight. Mapped onto the async-PS step model: a pull whose parameter the
    worker pushes (``Workload.push_param``) is issued for step k+1 by the PS,
    slice by slice, when it has applied the worker's step-k slices of that
    gradient (plus one latency), not at the start of step k+1; such pushes no
    longer hold the end of step k (the next step waits for them through its
    pulls); pulls without a matching push are issued at step start, pushes
    without one hold the step end, as before; the first step pulls everything
    at its start. Simplified: the PS side does not aggregate across workers
    (asynchronous SGD has no barrier). Normalized profiles fill
    ``push_param`` for every trainable variable's gradient push
    (:func:`sgdsim.traces.match_pushes_to_pulls`); other pushes (the learning
    rate, BatchNorm's batch statistics for the moving averages) have none,
    and the moving statistics are pulled at step start. Without
    ``push_param`` (workloads saved before it was filled, or built by hand)
    P3 keeps slicing and priorities but pulls at step start. Slice size
    default: 160,000 bytes = 40,000 float32 parameters, the default slice
    threshold of the authors' MXNet release (``MXNET_KVSTORE_SLICE_THRESHOLD``).

``bytescheduler``
    Peng, Zhu, Chen, Bao, Yi, Lan, Wu, Guo, "A Generic Communication
    Scheduler for Distributed DNN Training Acceleration", SOSP 2019.
    Modelled: tensors cut into partitions of ``bytescheduler_partition_bytes``;
    partitions wait in a priority queue (layer priority) and are released
    to the connection, which sends released partitions first-in first-out,
    while the released but not yet delivered bytes stay within the credit
    ``bytescheduler_credit_bytes`` (at least one partition is always
    released), so an urgent partition waits behind at most one credit of
    less urgent ones (preemption only between credits). Simplified: one
    credit window per connection (worker, shard, direction) rather than one
    per worker process; partition and credit are fixed (the paper tunes them
    with Bayesian optimisation). Defaults: the release's 1,000,000 and
    4,000,000 parameters (``BYTESCHEDULER_PARTITION``,
    ``BYTESCHEDULER_CREDIT``) as float32, i.e. 4 MB and 16 MB.

``prophet``
    Zhang, Qi, Shang, Chen, Xu, "Prophet: Speeding up Distributed DNN
    Training with Predictable Communication Scheduling", ICPP 2021.
    Modelled: gradients wait in a priority queue (layer priority); when the
    push connection falls idle, Prophet groups the most urgent waiting
    gradients into one block whose size fits the budget
    ``(gap + 1 ms) × bandwidth``, ``gap`` the profiled compute time from the
    worker's latest backward stage (a segment end that produced gradients)
    to the next one (no budget limit after the last stage; at least one
    gradient per block); a block is sent whole (no preemption). Pulls go as
    whole tensors in priority order. Simplified: the bandwidth is the NIC
    capacity (Prophet monitors the achieved bandwidth, which contention
    lowers), and the gaps come from the calibrated profile rather than being
    measured online.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any

#: Per-connection queue kinds.
FIFO, PRIORITY, CREDIT, BLOCKS = "fifo", "priority", "credit", "blocks"

#: Prophet's slack added to each stage gap when sizing a block, seconds.
PROPHET_SLACK_S = 1e-3

#: Defaults of the policies' sizes in bytes (see the module docstring).
P3_SLICE_BYTES = 160_000.0
BYTESCHEDULER_PARTITION_BYTES = 4_000_000.0
BYTESCHEDULER_CREDIT_BYTES = 16_000_000.0

# A unit on the wire: (bytes, worker, step, items), items = ((tensor, piece), ...).
Unit = tuple[float, int, int, tuple[tuple[int, int], ...]]


def split_bytes(size: float, piece: float) -> list[float]:
    """Cut ``size`` bytes into pieces of ``piece`` bytes and one remainder.

    A tensor of 0 bytes (or ``piece`` = inf) stays one piece. The pieces sum
    to ``size`` exactly in floating point when ``size / piece`` is an integer.
    """
    if not size > piece or math.isinf(piece):
        return [size]
    n = math.ceil(size / piece)
    return [piece] * (n - 1) + [size - piece * (n - 1)]


class FifoQueue:
    """Units leave in the order they were put (TensorFlow's per-connection order)."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque[Unit] = deque()

    def put(self, key: tuple[Any, ...], unit: Unit) -> None:
        self._q.append(unit)

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        return self._q.popleft() if self._q else None

    def done(self, unit: Unit) -> None:
        pass

    def __len__(self) -> int:
        return len(self._q)


class PriorityQueue:
    """The unit with the smallest key leaves next (O(log n) per unit); the unit on
    the wire is never interrupted."""

    __slots__ = ("_h", "_seq")

    def __init__(self) -> None:
        self._h: list[tuple[tuple[Any, ...], int, Unit]] = []
        self._seq = 0

    def put(self, key: tuple[Any, ...], unit: Unit) -> None:
        heapq.heappush(self._h, (key, self._seq, unit))
        self._seq += 1

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        return heapq.heappop(self._h)[2] if self._h else None

    def done(self, unit: Unit) -> None:
        pass

    def __len__(self) -> int:
        return len(self._h)


class CreditQueue:
    """ByteScheduler's window: a priority queue releasing units to a FIFO transport
    while the released, undelivered bytes fit in ``credit`` bytes."""

    __slots__ = ("_h", "_released", "_seq", "credit", "in_flight")

    def __init__(self, credit_bytes: float) -> None:
        self._h: list[tuple[tuple[Any, ...], int, Unit]] = []
        self._released: deque[Unit] = deque()
        self._seq = 0
        self.credit = credit_bytes
        self.in_flight = 0.0  # released and not yet delivered, bytes

    def _release(self) -> None:
        h = self._h
        while h and (self.in_flight == 0.0 or self.in_flight + h[0][2][0] <= self.credit):
            unit = heapq.heappop(h)[2]
            self._released.append(unit)
            self.in_flight += unit[0]

    def put(self, key: tuple[Any, ...], unit: Unit) -> None:
        heapq.heappush(self._h, (key, self._seq, unit))
        self._seq += 1
        self._release()

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        self._release()
        return self._released.popleft() if self._released else None

    def done(self, unit: Unit) -> None:
        self.in_flight -= unit[0]
        if not self._released and not self._h:
            self.in_flight = 0.0  # no rounding residue when the window empties
        self._release()

    def __len__(self) -> int:
        return len(self._h) + len(self._released)


class BlockQueue(PriorityQueue):
    """Prophet: the most urgent waiting units grouped into one block per take,
    within the byte budget of the unit's worker (at least one unit)."""

    __slots__ = ()

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        h = self._h
        if not h:
            return None
        size, w, step, items = heapq.heappop(h)[2]
        limit = budget(w)
        parts = list(items)
        while h:
            nb, nw, nstep, nitems = h[0][2]
            if nw != w or nstep != step or size + nb > limit:
                break
            heapq.heappop(h)
            size += nb
            parts.extend(nitems)
        return (size, w, step, tuple(parts))


Queue = FifoQueue | PriorityQueue | CreditQueue | BlockQueue


def make_queue(kind: str, credit_bytes: float = BYTESCHEDULER_CREDIT_BYTES) -> Queue:
    """A fresh per-connection queue of ``kind`` (one of FIFO, PRIORITY, CREDIT, BLOCKS)."""
    if kind == FIFO:
        return FifoQueue()
    if kind == PRIORITY:
        return PriorityQueue()
    if kind == CREDIT:
        return CreditQueue(credit_bytes)
    if kind == BLOCKS:
        return BlockQueue()
    raise ValueError(f"unknown queue kind {kind!r}")
