"""A worker's connection to a PS shard, and the PS shard's CPU.

TensorFlow carries every tensor between one worker and one PS task over one
gRPC channel; the transmission policy decides what that channel sends next
(:mod:`sgdsim.simulation.policies`). A :class:`Connection` is that channel in
one direction: it owns the policy's queue and puts one unit (a whole tensor,
a slice, a partition or a block) on the network at a time, the next when the
previous one has arrived. A :class:`ParameterServer` is one PS shard's CPU,
applying the pushed gradients one at a time in arrival order. A
:class:`JoinDelay` is how late a transfer that joins others' gets its share.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgdsim.simulation.chrome_trace import PULL, PUSH
from sgdsim.simulation.core import JOIN
from sgdsim.simulation.policies import Queue, Unit
from sgdsim.simulation.topology import DOWN, UP

if TYPE_CHECKING:
    import numpy as np

    from sgdsim.simulation.engine import AsyncPSModel


@dataclass(frozen=True)
class JoinDelay:
    """How late a transfer that joins other workers' transfers gets its fair share.

    Joining ``k`` transfers on the wire, the transfer waits a delay of mean
    ``mean_s[k − 1]`` and standard deviation ``sd_s[k − 1]`` seconds (the
    last entries for more than ``len(mean_s)``), drawn per join from a gamma
    distribution with those two moments (the mean itself when either is 0).
    On the testbed the lateness grows with ``k`` and varies from join to
    join by about as much as its mean; both are measured in real training by
    :func:`sgdsim.testbed.calibrate.training_join_delays` (docs/steady-state-log.md,
    "Joins by how many they join").

    With ``joins_s`` each join instead draws one of the measured joins of its
    ``k`` (uniformly, with replacement), sign included: through a FIFO port
    a joiner may get *more* than its share (docs/steady-state-log.md, "Joins
    through a FIFO"), which a negative draw ``d`` gives it: the ``k``
    incumbents each hold their next unit of the transfer on the wire
    ``−d / k`` seconds, so the joiner has the link to itself for about that
    long (the lateness ``k (B̄_incumbent −
    B_joiner) / rate`` of :func:`sgdsim.testbed.capture.join_losses` is then
    ``d``).

    Attributes:
        mean_s: (K,) mean delay joining 1, 2, … K transfers, seconds (≥ 0
            unless ``joins_s`` is given).
        sd_s: (K,) their standard deviations, seconds (≥ 0); empty: all 0.
        joins_s: (K,) per ``k``, the measured joins' lateness, seconds (any
            sign, at least one each); empty: the gamma draws above.

    Raises:
        ValueError: a negative mean without ``joins_s``, a negative sd, no
            mean, ``sd_s`` or ``joins_s`` of another length, an empty ``k``
            in ``joins_s``.
    """

    mean_s: tuple[float, ...]
    sd_s: tuple[float, ...] = ()
    joins_s: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        sd = self.sd_s or (0.0,) * len(self.mean_s)
        object.__setattr__(self, "mean_s", tuple(float(x) for x in self.mean_s))
        object.__setattr__(self, "sd_s", tuple(float(x) for x in sd))
        object.__setattr__(self, "joins_s", tuple(tuple(map(float, j)) for j in self.joins_s))
        if not self.mean_s or len(self.sd_s) != len(self.mean_s):
            raise ValueError(
                f"a join delay needs one mean and one sd per number of transfers joined, "
                f"got means {self.mean_s} and sds {self.sd_s}"
            )
        if self.joins_s and (len(self.joins_s) != len(self.mean_s) or not all(self.joins_s)):
            raise ValueError(
                f"joins_s needs at least one join per number of transfers joined "
                f"({len(self.mean_s)}), got {len(self.joins_s)} lists"
            )
        if min(self.sd_s) < 0 or (not self.joins_s and min(self.mean_s) < 0):
            raise ValueError(f"join delays must be >= 0 s, got {self.mean_s}, sd {self.sd_s}")

    @classmethod
    def of(cls, value: float | Sequence[float] | JoinDelay) -> JoinDelay:
        """``value`` as a JoinDelay: a number is one fixed delay for any ``k``."""
        if isinstance(value, JoinDelay):
            return value
        if isinstance(value, (int, float)):
            return cls((float(value),))
        return cls(tuple(value))

    @classmethod
    def resampled(cls, joins_s: Sequence[Sequence[float]]) -> JoinDelay:
        """Draws of the measured joins ``joins_s[k − 1]`` (seconds, any sign) for each ``k``.

        Raises:
            ValueError: no ``k``, or a ``k`` without joins.
        """
        if not joins_s or not all(joins_s):
            raise ValueError(f"every k needs at least one measured join, got {joins_s}")
        mean = tuple(statistics.fmean(j) for j in joins_s)
        return cls(mean, tuple(statistics.pstdev(j) for j in joins_s), tuple(map(tuple, joins_s)))

    def __bool__(self) -> bool:
        return any(self.mean_s) or any(any(j) for j in self.joins_s)

    def draw(self, k: int, rng: np.random.Generator) -> float:
        """The delay of one join of ``k ≥ 1`` transfers, seconds (``rng`` with an sd or joins).

        Negative only with ``joins_s``: the joiner goes first (see the class)."""
        i = min(k, len(self.mean_s)) - 1
        if self.joins_s:
            joins = self.joins_s[i]
            return joins[int(rng.integers(len(joins)))]
        mean, sd = self.mean_s[i], self.sd_s[i]
        if sd == 0.0 or mean == 0.0:
            return mean
        shape = (mean / sd) ** 2
        return float(rng.gamma(shape, mean / shape))


class ParameterServer:
    """One PS shard: its CPU applies updates first come, first served.

    A FIFO single server: an update arriving at ``a`` with service time ``u``
    ends at ``D = max(a, D_prev) + u`` (Lindley's recursion, Lindley 1952).

    Attributes:
        shard: the shard's index (its host in the topology).
        free_at: time the CPU finishes the updates applied so far, seconds.
        on_wire: units on the wire from (index DOWN) and to (UP) this shard.
    """

    __slots__ = ("free_at", "on_wire", "shard")

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.free_at = 0.0
        self.on_wire = [0, 0]

    def apply(self, now: float, update_s: float) -> tuple[float, float]:
        """Queue an update of ``update_s`` seconds arriving at ``now``; (start, end) in s."""
        start = now if now > self.free_at else self.free_at
        self.free_at = end = start + update_s
        return start, end


class Connection:
    """One direction of the channel between a worker and a PS shard.

    With the ``fifo`` PS discipline one connection per shard and direction is
    shared by all workers (one queue, served in order); otherwise each worker
    has its own. The connection sends one unit at a time: when it is idle and
    its queue gives a unit, the unit goes on the wire; when the unit arrives,
    the next is taken. Two delays of real TensorFlow sit between them, both
    configured on the model (:class:`~sgdsim.simulation.engine.AsyncPSModel`):

    - the pull gap of the one-at-a-time policies (``pull_gap_s``): the
      control message that enforces the order, a pure delay or CPU work on
      the worker's node (``pull_gap_cpu``);
    - the join delays, each calibrated on the testbed
      (:mod:`sgdsim.testbed.calibrate`): a step's first pull waits a draw of
      the pull :class:`JoinDelay` if the PS NIC is sending to other workers at
      that moment, by how many, and the first push of a step's backward pass
      (its first gradient once all its pulls have arrived) a draw of the push
      one if the PS NIC is receiving from other workers; the kilobyte-sized
      pushes of state no step pulls (a batch-normalization layer's moving
      statistics, sent during the forward pass) fit TCP's initial window,
      and neither wait nor open the backward pass.

    The arrival differs by direction: :class:`PullConnection` (DOWN) and
    :class:`PushConnection` (UP) implement :meth:`on_arrival`.

    Args:
        model: the run this connection belongs to.
        direction: DOWN (pulls) or UP (pushes).
        ps: the PS shard at the other end.
        queue: the policy's queue for this direction.
    """

    __slots__ = ("busy", "direction", "hold_s", "joined_step", "model", "ps", "queue", "since")

    def __init__(self, model: AsyncPSModel, direction: int, ps: ParameterServer, queue: Queue):
        self.model = model
        self.direction = direction
        self.ps = ps
        self.queue = queue
        self.busy = False
        self.since = 0.0  # when the unit on the wire was put there
        self.joined_step = -1  # step whose first pull (backward push) this connection sent
        self.hold_s = 0.0  # a joiner through a FIFO goes first: the next unit waits this long

    def kick(self, now: float) -> None:
        """If idle, put the next unit of the queue on the wire at ``now``."""
        if self.busy:
            return
        m = self.model
        unit = self.queue.take(m.block_budget)
        if unit is None:
            return
        self.busy = True
        # the join delays are the testbed's; elsewhere kick stays one check
        delay = self._join_delay(unit) if m.join_delay_s or m.push_join_delay_s else 0.0
        if delay:
            m.sim.schedule(now + delay, JOIN, self.wire, unit)
            return
        self.wire(now, unit)

    def _join_delay(self, unit: Unit) -> float:
        """Seconds ``unit`` waits before the wire: a hold another worker's join put on
        this connection, plus a draw of the join delay if ``unit`` opens its
        step's pulls (or backward pushes) while the PS NIC carries other
        workers' (by how many). A negative draw puts the hold on those others."""
        hold, self.hold_s = self.hold_s, 0.0
        m = self.model
        d = m.join_delay_s if self.direction == DOWN else m.push_join_delay_s
        if not d or self.joined_step == unit[2]:
            return hold
        if self.direction == UP:
            w = m.workers[unit[1]]
            if w.step != unit[2] or w.cur.left or not m.plan.gradient_push[unit[3][0][0]]:
                return hold  # still in the forward pass
        self.joined_step = unit[2]
        k = self.ps.on_wire[self.direction]
        delay = d.draw(k, m.rng) if k else 0.0
        if delay >= 0.0:
            return hold + delay
        for other in m.conns[self.direction][self.ps.shard]:
            if other is not self and other.busy and len(other.queue):  # units of this transfer
                other.hold_s = max(other.hold_s, -delay / k)
        return hold

    def wire(self, now: float, unit: Unit) -> None:
        """Put ``unit`` on the network at ``now``."""
        self.since = now
        self.ps.on_wire[self.direction] += 1
        src, dst = self.route(unit)
        self.model.topology.transfer(now, src, dst, unit[0], unit, self)

    def route(self, unit: Unit) -> tuple[int, int]:
        """Hosts (source, destination) of ``unit``: the PS shard and the worker's node."""
        node = self.model.hosts[unit[1]]
        return (self.ps.shard, node) if self.direction == DOWN else (node, self.ps.shard)

    def on_arrival(self, now: float, unit: Unit) -> Unit | None:
        """``unit`` has arrived at ``now``: deliver it and send the next one.

        Returns:
            The next unit if it goes on the wire at once, on this connection's
            route (the topology puts it there); None if the connection is
            idle, waits (pull gap, join delay) or has sent it itself.
        """
        raise NotImplementedError  # PullConnection, PushConnection

    def _trace(self, now: float, unit: Unit) -> None:
        """Record ``unit``'s transfer, from ``since`` to ``now`` (s)."""
        m = self.model
        kind = PULL if self.direction == DOWN else PUSH
        rec: Any = (kind, unit[1], unit[3][0][0], self.since, now)
        m.trace.append((*rec, self.ps.shard) if m.sharded else rec)  # type: ignore[union-attr]

    def gap_over(self, now: float, _: Any = None) -> None:
        """The control message of the pull gap is through: send the next pull."""
        self.busy = False
        self.kick(now)


class PullConnection(Connection):
    """A worker's connection from a PS shard (DOWN): pulls, with the pull gap and
    the join delay."""

    __slots__ = ()

    def __init__(self, model: AsyncPSModel, ps: ParameterServer, queue: Queue):
        super().__init__(model, DOWN, ps, queue)

    def on_arrival(self, now: float, unit: Unit) -> Unit | None:
        self.busy = False
        self.ps.on_wire[DOWN] -= 1
        queue = self.queue
        if queue.tracks_done:
            queue.done(unit)
        m = self.model
        if m.trace is not None:
            self._trace(now, unit)
        _, w, step, items = unit
        m.workers[w].pulls_arrived(now, step, items)
        if m.pull_gap_s > 0 and len(queue):
            self.busy = True  # the next pull waits for the control message
            if m.pull_gap_cpu:
                m.cores_of(w).run(now, m.pull_gap_s, self.gap_over, ("gap", w))
            else:
                m.sim.schedule(now + m.pull_gap_s, JOIN, self.gap_over)
            return None
        if self.busy:
            return None
        if m.join_delay_s:
            self.kick(now)  # the step's first pull may wait
            return None
        nxt = queue.take(m.block_budget)  # None if the queue is empty
        if nxt is not None:
            self.busy = True  # as wire(now, nxt), the topology putting it on the link
            self.since = now
            self.ps.on_wire[DOWN] += 1
        return nxt


class PushConnection(Connection):
    """A worker's connection to a PS shard (UP): pushes, which the shard applies."""

    __slots__ = ()

    def __init__(self, model: AsyncPSModel, ps: ParameterServer, queue: Queue):
        super().__init__(model, UP, ps, queue)

    def on_arrival(self, now: float, unit: Unit) -> Unit | None:
        self.busy = False
        ps = self.ps
        ps.on_wire[UP] -= 1
        queue = self.queue
        if queue.tracks_done:
            queue.done(unit)
        m = self.model
        if m.trace is not None:
            self._trace(now, unit)
        m.workers[unit[1]].pushes_arrived(now, unit[2], unit[3], ps)
        if self.busy:
            return None
        if m.push_join_delay_s:
            self.kick(now)  # the backward pass's first push may wait
            return None
        nxt = queue.take(m.block_budget)  # None if the queue is empty
        if nxt is not None:
            self.busy = True  # as wire(now, nxt), the topology putting it on the link
            self.since = now
            ps.on_wire[UP] += 1
        return nxt
