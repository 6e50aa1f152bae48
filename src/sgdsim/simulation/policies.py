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

Each policy is one class below, registered in :data:`REGISTRY` (the names
:data:`POLICIES` lists, in that order; the config schema's enum and the docs
follow it). A policy states, in one place, the order in which a worker issues
its pulls (:meth:`Policy.pull_order`), the units and queues of each direction
(:meth:`Policy.spec`, a :class:`PolicySpec`) and whether it pulls one tensor
at a time (:attr:`Policy.serial_pulls`: real TensorFlow then pays one control
round trip per pull). ``docs/policies.md`` shows how to add one.

``tf_default``
    Whole tensors, first-in first-out, pulls in an order the trace shows
    them arriving: TensorFlow issues them all at once and its runtime serves
    them in a new order every step (not the forward order), so each step draws
    one of the profile's traced orders (``Workload.pull_orders``; without them,
    the workload's own order every step).

``tictac``
    Hashemi, Abdu Jyothi, Campbell, "TicTac: Accelerating Distributed Deep
    Learning with Communication Scheduling", MLSys 2019. Whole tensors, one
    pull at a time in the order of first use in the forward pass.

``fifo_random``
    One pull at a time in a fresh seeded random order every step: the baseline
    of TicTac's evaluation.

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

import functools
import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

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
    """Units leave in the order they were put (TensorFlow's per-connection order).

    Every queue: ``put(key, unit)`` with an int ``key`` (smaller = more urgent,
    ties in put order) and ``put_many(key, units)``; ``take(budget)`` the next
    unit or None (``budget(w)``: Prophet's byte budget of worker ``w``);
    ``done(unit)`` once it has arrived, which only queues with ``tracks_done`` need.
    """

    __slots__ = ("_q",)

    #: ``done`` does something (the caller may skip it otherwise).
    tracks_done: ClassVar[bool] = False

    def __init__(self) -> None:
        self._q: deque[Unit] = deque()

    def put(self, key: int, unit: Unit) -> None:
        self._q.append(unit)

    def put_many(self, key: int, units: list[Unit]) -> None:
        self._q.extend(units)

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        return self._q.popleft() if self._q else None

    def done(self, unit: Unit) -> None:
        pass

    def __len__(self) -> int:
        return len(self._q)


class PriorityQueue:
    """The unit with the smallest key leaves next, equal keys in put order; the unit
    on the wire is never interrupted.

    Units wait in one first-in first-out list per key and the distinct keys in a
    heap (a bucket queue): O(1) per unit plus O(log k) per new or emptied key, k
    the keys waiting (a policy's keys are layer priorities, shared by every unit
    of a tensor and by the tensors of a layer).
    """

    __slots__ = ("_fifo", "_keys", "_n")

    tracks_done: ClassVar[bool] = False

    def __init__(self) -> None:
        self._keys: list[int] = []  # heap of the keys with units waiting
        self._fifo: dict[int, deque[Unit]] = {}
        self._n = 0

    def put(self, key: int, unit: Unit) -> None:
        q = self._fifo.get(key)
        if q is None:
            q = self._fifo[key] = deque()
            heapq.heappush(self._keys, key)
        q.append(unit)
        self._n += 1

    def put_many(self, key: int, units: list[Unit]) -> None:
        """``put(key, u)`` for each of ``units`` in turn."""
        q = self._fifo.get(key)
        if q is None:
            q = self._fifo[key] = deque()
            heapq.heappush(self._keys, key)
        q.extend(units)
        self._n += len(units)

    def _peek(self) -> Unit:
        """The next unit (the queue must not be empty)."""
        return self._fifo[self._keys[0]][0]

    def _pop(self) -> Unit:
        """Remove and return the next unit (the queue must not be empty)."""
        key = self._keys[0]
        q = self._fifo[key]
        unit = q.popleft()
        if not q:
            heapq.heappop(self._keys)
            del self._fifo[key]
        self._n -= 1
        return unit

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        if not self._n:
            return None
        key = self._keys[0]  # _pop, inlined: this runs once per unit
        q = self._fifo[key]
        unit = q.popleft()
        if not q:
            heapq.heappop(self._keys)
            del self._fifo[key]
        self._n -= 1
        return unit

    def done(self, unit: Unit) -> None:
        pass

    def __len__(self) -> int:
        return self._n


class CreditQueue(PriorityQueue):
    """ByteScheduler's window: a priority queue releasing units to a FIFO transport
    while the released, undelivered bytes fit in ``credit`` bytes."""

    __slots__ = ("_released", "credit", "in_flight")

    tracks_done: ClassVar[bool] = True

    def __init__(self, credit_bytes: float) -> None:
        super().__init__()
        self._released: deque[Unit] = deque()
        self.credit = credit_bytes
        self.in_flight = 0.0  # released and not yet delivered, bytes

    def _release(self) -> None:
        # _peek and _pop inlined: this runs on every put, take and delivery
        n = self._n
        if not n:
            return
        keys, fifo, released = self._keys, self._fifo, self._released
        in_flight, credit = self.in_flight, self.credit
        while n:
            key = keys[0]
            q = fifo[key]
            size = q[0][0]
            if in_flight != 0.0 and in_flight + size > credit:
                break
            released.append(q.popleft())
            in_flight += size
            n -= 1
            if not q:
                heapq.heappop(keys)
                del fifo[key]
        self._n = n
        self.in_flight = in_flight

    def put(self, key: int, unit: Unit) -> None:
        super().put(key, unit)
        self._release()

    def put_many(self, key: int, units: list[Unit]) -> None:
        # releasing once after the puts releases what releasing after each would: a
        # release walks the queue in order while units fit, and units put together
        # under one key are adjacent in that order
        super().put_many(key, units)
        self._release()

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        # every put and done releases all that fits, and a take frees no credit,
        # so nothing more can be released here
        return self._released.popleft() if self._released else None

    def done(self, unit: Unit) -> None:
        self.in_flight -= unit[0]
        if not self._released:
            # the delivered unit was the last one released: nothing is in flight, and
            # a rounding residue must not hold back a unit larger than the credit
            self.in_flight = 0.0
        self._release()

    def __len__(self) -> int:
        return self._n + len(self._released)


class BlockQueue(PriorityQueue):
    """Prophet: the most urgent waiting units grouped into one block per take,
    within the byte budget of the unit's worker (at least one unit)."""

    __slots__ = ()

    def take(self, budget: Callable[[int], float]) -> Unit | None:
        if not self._n:
            return None
        size, w, step, items = self._pop()
        limit = budget(w)
        parts = list(items)
        while self._n:
            nb, nw, nstep, nitems = self._peek()
            if nw != w or nstep != step or size + nb > limit:
                break
            self._pop()
            size += nb
            parts.extend(nitems)
        return (size, w, step, tuple(parts))


Queue = FifoQueue | PriorityQueue | CreditQueue | BlockQueue


@dataclass(frozen=True)
class PolicySizes:
    """The policies' configurable unit sizes, bytes (config ``simulation.*``).

    Raises:
        ValueError: a size is not > 0.
    """

    p3_slice_bytes: float = P3_SLICE_BYTES
    bytescheduler_partition_bytes: float = BYTESCHEDULER_PARTITION_BYTES
    bytescheduler_credit_bytes: float = BYTESCHEDULER_CREDIT_BYTES

    def __post_init__(self) -> None:
        for name in (
            "p3_slice_bytes",
            "bytescheduler_partition_bytes",
            "bytescheduler_credit_bytes",
        ):
            v = getattr(self, name)
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v}")


@dataclass(frozen=True)
class PolicySpec:
    """How a policy cuts and orders each direction's tensors.

    Attributes:
        pull_piece, push_piece: unit size in bytes (inf = whole tensors).
        pull_queue, push_queue: factories of a fresh per-connection queue.
        pull_after_update: P3: the PS sends a pushed parameter back right after
            applying it (needs ``Workload.push_param``).
        pull_gap_s: seconds a worker's pull connection stays idle between one
            pull's arrival and the next pull's start: the control message by
            which TensorFlow enforces a pull order one tensor at a time
            (:func:`sgdsim.profiling.graph.enforce_pull_order`); 0 = none.
        pull_gap_cpu: the gap is CPU work on the worker's node rather than a pure
            delay: it shares the node's cores with the compute of the workers
            placed there (processor sharing, like their segments), so it
            stretches while they compute.
    """

    pull_piece: float = math.inf
    push_piece: float = math.inf
    pull_queue: Callable[[], Queue] = FifoQueue
    push_queue: Callable[[], Queue] = FifoQueue
    pull_after_update: bool = False
    pull_gap_s: float = 0.0
    pull_gap_cpu: bool = False


class Policy:
    """A transmission policy: pull order, units and queues (see the module docstring).

    Subclasses set :attr:`name` and override what differs from whole tensors
    sent first-in first-out in workload order, and are listed in
    :data:`REGISTRY`.
    """

    #: The name in the config, the store and the papers.
    name: ClassVar[str] = ""
    #: Pulls go one at a time in an order the worker enforces: with a pull gap
    #: (one control round trip, ``pull_gap_s``) each pull after the first waits.
    serial_pulls: ClassVar[bool] = False
    #: A fresh seeded random pull order every step instead of :meth:`pull_order`.
    shuffle_pulls: ClassVar[bool] = False
    #: Each step's pull order drawn from the workload's profiled ones
    #: (``Workload.pull_orders``), when it has them, instead of :meth:`pull_order`.
    profile_orders: ClassVar[bool] = False

    def draw_orders(self, workload: Any) -> npt.NDArray[np.int64] | None:
        """(K, P) pull orders a step draws from (:func:`draw_pull_order`), ``(0, P)``
        for a fresh uniform one every step, None for :meth:`pull_order` every step
        (and for a workload without pulls: nothing to draw)."""
        if not len(workload.pull_bytes):
            return None
        if self.shuffle_pulls:
            return np.zeros((0, len(workload.pull_bytes)), np.int64)
        return workload.pull_order_rows if self.profile_orders else None

    def pull_order(self, workload: Any) -> list[int]:
        """Order in which a worker issues its pulls (indices into ``pull_bytes``):
        by default the workload's, i.e. the order the trace shows them arriving."""
        return list(range(len(workload.pull_bytes)))

    def spec(self, sizes: PolicySizes) -> PolicySpec:
        """Units and queues of both directions; by default whole tensors, FIFO."""
        return PolicySpec()

    @property
    def whole_tensor_fifo(self) -> bool:
        """Whole tensors first-in first-out in both directions, no pull after update."""
        return self.spec(PolicySizes()) == PolicySpec()


def draw_pull_order(
    rng: np.random.Generator, orders: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """One step's pull order: a row of ``orders`` (K, P) drawn uniformly, or with no
    rows a uniform random permutation of the P pulls (``fifo_random``)."""
    if len(orders):
        return orders[int(rng.integers(len(orders)))]
    return rng.permutation(orders.shape[1])


def forward_order(workload: Any) -> list[int]:
    """Pulls by first use in the forward pass (their gate), ties in workload order."""
    gate = np.asarray(workload.pull_gate).tolist()
    return sorted(range(len(gate)), key=lambda p: (gate[p], p))


class TfDefault(Policy):
    name = "tf_default"
    profile_orders = True


class TicTac(Policy):
    name = "tictac"
    serial_pulls = True

    def pull_order(self, workload: Any) -> list[int]:
        return forward_order(workload)


class FifoRandom(Policy):
    name = "fifo_random"
    serial_pulls = True
    shuffle_pulls = True


class P3(Policy):
    name = "p3"

    def pull_order(self, workload: Any) -> list[int]:
        return forward_order(workload)

    def spec(self, sizes: PolicySizes) -> PolicySpec:
        b = sizes.p3_slice_bytes
        return PolicySpec(b, b, PriorityQueue, PriorityQueue, pull_after_update=True)


class ByteScheduler(Policy):
    name = "bytescheduler"

    def pull_order(self, workload: Any) -> list[int]:
        return forward_order(workload)

    def spec(self, sizes: PolicySizes) -> PolicySpec:
        b = sizes.bytescheduler_partition_bytes
        credit = functools.partial(CreditQueue, sizes.bytescheduler_credit_bytes)
        return PolicySpec(b, b, credit, credit)


class Prophet(Policy):
    name = "prophet"

    def pull_order(self, workload: Any) -> list[int]:
        return forward_order(workload)

    def spec(self, sizes: PolicySizes) -> PolicySpec:
        return PolicySpec(pull_queue=PriorityQueue, push_queue=BlockQueue)


#: Every policy the simulator implements, by name. Adding a policy: one class, one line.
REGISTRY: dict[str, Policy] = {
    p.name: p() for p in (TfDefault, TicTac, FifoRandom, P3, ByteScheduler, Prophet)
}

#: The policy names, in registry order.
POLICIES: tuple[str, ...] = tuple(REGISTRY)


def get_policy(name: str) -> Policy:
    """The registered policy called ``name``.

    Raises:
        ValueError: no policy of that name (the message lists the names).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
