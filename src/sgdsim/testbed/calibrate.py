"""Calibrations of the testbed: CPU per byte of its network, and the join delays.

:func:`pull_join_delay` races two real TensorFlow workers' pulls from one PS,
:func:`push_join_delay` their pushes to it, and :func:`model_push_join_delay`
the pushes of one model's step, nearly in phase; :func:`training_join_delays`
measures both delays in real training from a capture of the PS's port (the
pipeline's join delays) and, from the same capture, what each direction of the
port carries while the other carries data; their docstrings say how that
measures each.

:func:`network_cpu_per_byte`: a profile measures each process's CPU seconds per
step on unshaped loopback. On the testbed the same bytes also cross a veth
pair, a bridge and two ``tc tbf`` shapers, whose work (softirqs, the shapers'
timers: each a VM exit on a virtual machine) is not charged to the TensorFlow
processes and is not in the profile, yet it takes the same cores.
:func:`network_cpu_per_byte` measures it with plain TCP: one host sends and
receives ``seconds`` worth of bytes at the rate, through the testbed and then
through loopback, while this machine's kernel CPU counters (``/proc/stat``:
system, irq and softirq time) are read before and after; the difference per
byte is what the testbed adds. User time is left out: the senders' user-space
work is the same on both paths, and leaving it out keeps other processes'
computing out of the figure.
:func:`sgdsim.simulation.bounds.cpu_bound_steps_per_s` charges it to every
step's pulled and pushed bytes.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sgdsim.hostcpu import cpu_ticks
from sgdsim.io import atomic_path
from sgdsim.profiling.procs import free_ports, ps_argv, spawn, stop
from sgdsim.protocol import SteadyRule, phase_distance
from sgdsim.simulation.connection import JoinDelay
from sgdsim.testbed.netns import Link, Testbed
from sgdsim.testbed.run import MeasurementError, all_exist, child_env, wait_workers

_T = TypeVar("_T")

_PORT = 5201

# both ends of a bidirectional bulk transfer: send SIZE bytes while receiving SIZE
_PEER = r"""
import socket, sys, threading
role, size, host, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if role == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port)); ls.listen(1); c, _ = ls.accept()
else:
    import time
    for _ in range(200):
        try:
            c = socket.create_connection((host, port)); break
        except OSError:
            time.sleep(0.05)
chunk = b"x" * (1 << 20)
def send():
    left = size
    while left > 0:
        n = min(left, len(chunk)); c.sendall(chunk[:n]); left -= n
t = threading.Thread(target=send); t.start()
got = 0
while got < size:
    b = c.recv(1 << 20)
    if not b:
        break
    got += len(b)
t.join(); c.close()
sys.exit(0 if got == size else 1)
"""


class CalibrationError(RuntimeError):
    """The calibration transfer failed."""


@dataclass(frozen=True)
class NetworkCpu:
    """Kernel CPU seconds per byte moved (sent and received bytes both count).

    Attributes:
        testbed_s_per_byte: through the testbed at ``bandwidth_bps`` (the median
            of ``testbed_runs_s_per_byte``).
        loopback_s_per_byte: through 127.0.0.1, unshaped (the median of its runs).
        bandwidth_bps: the testbed NIC rate, bit/s.
        bytes_moved: bytes each transfer moved (both directions).
        testbed_runs_s_per_byte: each testbed transfer's figure, in run order.
    """

    testbed_s_per_byte: float
    loopback_s_per_byte: float
    bandwidth_bps: float
    bytes_moved: int
    testbed_runs_s_per_byte: tuple[float, ...] = ()

    @property
    def extra_s_per_byte(self) -> float:
        """CPU seconds per byte the testbed's path adds to loopback's (≥ 0)."""
        return max(0.0, self.testbed_s_per_byte - self.loopback_s_per_byte)


def kernel_cpu_s() -> float:
    """This machine's kernel CPU seconds so far: system + irq + softirq over all
    cores, from ``/proc/stat``.

    Raises:
        CalibrationError: ``/proc/stat`` cannot be read.
    """
    t = cpu_ticks()
    if t is None:
        raise CalibrationError(
            "/proc/stat cannot be read: the calibration needs Linux's CPU counters"
        )
    return (t["system"] + t["irq"] + t["softirq"]) / os.sysconf("SC_CLK_TCK")


def _transfer(size: int, testbed: Testbed | None, timeout_s: float) -> float:
    """Kernel CPU seconds of one bidirectional transfer of ``size`` bytes each way
    (the two Python processes' start-up included; it cancels in the difference)."""
    if testbed is None:
        (port,) = free_ports(1)
        host = bind = "127.0.0.1"
    else:
        port, host, bind = _PORT, testbed.address("ps"), "0.0.0.0"
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, role: str, addr: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-c", _PEER, role, str(size), addr, str(port)]
        p = spawn(argv, dict(os.environ)) if testbed is None else testbed.popen(name, argv)
        procs.append(p)
        return p

    t0 = kernel_cpu_s()
    try:
        launch("ps", "server", bind)
        launch("w0", "client", host)
        _wait_all(procs, timeout_s, f"calibration transfer of {size} bytes")
        return kernel_cpu_s() - t0
    finally:
        for p in procs:
            stop(p)


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float, what: str) -> None:
    """Wait for every process of ``what`` to exit 0 within ``timeout_s`` seconds.

    Raises:
        CalibrationError: one took longer or exited with another code.
    """
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as e:
            raise CalibrationError(f"{what} took over {timeout_s:g} s") from e
        if rc != 0:
            raise CalibrationError(f"{what} failed (exit code {rc})")


#: Transfers :func:`network_cpu_per_byte` takes the median of: one transfer's
#: figure varies by ±15 % between repeats on the test VM (5.0–6.8 ns/byte over
#: four at 400 Mbit/s; docs/steady-state-log.md, "CPU per step, measured by who
#: spent it").
NETWORK_CPU_REPEATS = 3


def network_cpu_per_byte(
    bandwidth_bps: float,
    seconds: float = 3.0,
    link: Link = Link(),
    repeats: int = NETWORK_CPU_REPEATS,
) -> NetworkCpu:
    """Measure the testbed's CPU seconds per byte at ``bandwidth_bps`` against loopback's.

    Moves ``seconds`` × rate bytes each way at once between two hosts of a
    one-worker testbed whose links are ``link`` (MTU, NIC queue and its limit,
    TCP congestion control: :class:`~sgdsim.testbed.netns.Link`), then the same
    bytes over 127.0.0.1; ``repeats`` times each, the medians.

    Raises:
        TestbedUnavailable: the testbed cannot run here.
        CalibrationError: a transfer failed or took longer than ``10 × seconds + 30`` s.
        ValueError: ``bandwidth_bps`` or ``seconds`` not > 0, or ``repeats`` < 1.
    """
    if not bandwidth_bps > 0 or not seconds > 0 or repeats < 1:
        raise ValueError(
            "need bandwidth_bps > 0, seconds > 0 and repeats >= 1, got "
            f"{bandwidth_bps}, {seconds}, {repeats}"
        )
    size = int(bandwidth_bps / 8 * seconds)
    timeout = 10 * seconds + 30
    moved = 2 * size
    with Testbed(1, bandwidth_bps, link=link) as tb:
        shaped = [_transfer(size, tb, timeout) / moved for _ in range(repeats)]
    loop = [_transfer(size, None, timeout) / moved for _ in range(repeats)]
    return NetworkCpu(
        statistics.median(shaped), statistics.median(loop), bandwidth_bps, moved, tuple(shaped)
    )


@dataclass(frozen=True)
class JoinRace:
    """How late a worker's transfer that joins another's gets its share of the PS NIC.

    Attributes:
        delay_s: the median (or mean, per race) lag growth, clipped at 0 (seconds): what
            :func:`sgdsim.simulation.simulate_async` takes as ``pull_join_delay_s``
            (a pull race) or ``push_join_delay_s`` (a push race).
        growth_s: (reps,) each race's lag growth: how much later the second
            worker's transfer ended than the first's, less how much later it started.
        offset_s: how much later the second worker started, seconds.
        bytes_each: bytes each worker pulled per race.
        bandwidth_bps: the testbed NIC rate, bit/s.
    """

    delay_s: float
    growth_s: tuple[float, ...]
    offset_s: float
    bytes_each: int
    bandwidth_bps: float


def pull_join_delay(bandwidth_bps: float, **kwargs: Any) -> JoinRace:
    """Measure the PS's join delay on the testbed with a race of two workers' pulls.

    A real TensorFlow PS holds ``tensors`` float32 variables of ``transfer_s``
    worth of bytes at the rate in all; two real workers in a two-worker testbed pull
    all of them, ``reps`` times, the second worker starting each race 40 % of
    ``transfer_s`` after the first. With the PS NIC shared fairly (processor
    sharing), the first worker ends ``offset`` ahead, as it started (it is
    alone for ``offset``, then both share: it ends at ``2 transfer_s −
    offset``, the second at ``2 transfer_s``). If the PS starts serving the
    second worker's step ``d`` late because it is busy sending, the first is
    alone ``d`` longer and the lead grows by exactly ``d``. The median growth
    is the join delay (:class:`JoinRace`). Keyword arguments and errors as
    :func:`join_delay` (``transfer_s`` 0.025 s by default).
    """
    return join_delay("pull", bandwidth_bps, **{"transfer_s": 0.025, **kwargs})


def push_join_delay(bandwidth_bps: float, **kwargs: Any) -> JoinRace:
    """Measure how late a push that joins another worker's gets its share of the PS NIC.

    As :func:`pull_join_delay`, with the bytes going the other way: each of two
    real workers sends ``tensors`` float32 tensors of its own (``transfer_s``
    worth of bytes at the rate in all) to the PS, which subtracts them from
    variables of that worker's, as it applies gradients; the second starts 40 %
    of ``transfer_s`` after the first. Under fair sharing the first ends as far
    ahead as it started; the median growth of its lead is the push join delay.
    The pushes of several workers meet in the switch port in front of the PS,
    where a sender that starts while another's stream fills it takes tens of
    milliseconds to get its share (docs/steady-state.md), where the PS's own
    sends share at once. ``transfer_s`` is 0.25 s by default, longer than the
    pull race's, so that the two still overlap after a delay of that size.
    Keyword arguments and errors as :func:`join_delay`.
    """
    return join_delay("push", bandwidth_bps, **{"transfer_s": 0.25, **kwargs})


def race_gap_s(transfer_s: float) -> float:
    """Seconds from one race's start to the next in :func:`join_delay`: both
    transfers end within two transfers, and the connections then idle for longer
    than TCP's retransmission timeout, so every race starts from an idle link."""
    return 4 * transfer_s + 0.1


def model_race_gap_s(transfer_s: float) -> float:
    """Seconds from one race's start to the next in :func:`model_push_join_delay`:
    both pushes end within two transfers, then the connections idle at least
    one more transfer and 0.3 s, as a training step's push connection idles
    while that step pulls (as many bytes as it pushes), and longer than TCP's
    minimum retransmission timeout (200 ms in Linux), after which Linux restarts
    an idle connection's congestion window (``tcp_slow_start_after_idle``,
    RFC 2861): every race starts the way a step's pushes do."""
    return 3 * transfer_s + 0.3


#: How :func:`join_delay` sums up its races' growths.
_STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
}

#: Lag of the second worker in :func:`model_push_join_delay`, as a fraction of the push.
MODEL_PUSH_LAG_FRACTION = 0.05


def model_push_join_delay(
    bandwidth_bps: float,
    push_bytes: Sequence[float],
    *,
    reps: int = 20,
    link: Link = Link(),
    **kwargs: Any,
) -> JoinRace:
    """The push join delay of one model: a race of two real workers each pushing
    that model's step, nearly in phase.

    Each worker sends ``len(push_bytes)`` float32 tensors of ``sum(push_bytes)``
    bytes in all (equal parts) to the PS, the second starting
    :data:`MODEL_PUSH_LAG_FRACTION` of the transfer after the first: near in
    phase, where two workers that start together have to leave from. The lead
    the joiner gives away grows with the number of tensors and is largest near
    in phase (docs/steady-state-log.md, "How fast real pairs move apart": at 200
    Mbit/s, 300 tensors 5 % apart +10 ms, 30 % apart −0.5 ms, 4 tensors −4.5
    to +3 ms), so the race uses the model's own pushes rather than a fixed
    four. Single races scatter by tens of milliseconds either way (MobileNetV2
    at 100 Mbit/s: −20 … +35 ms), and what moves a pair's phase is the lead
    given away per join on average, so the delay is the mean over ``reps``
    races (clipped at 0), each :func:`model_race_gap_s` after the last.

    Args:
        bandwidth_bps: the testbed NIC rate, bit/s.
        push_bytes: (pushes,) bytes of each push of the model's step (the
            workload's ``push_bytes``).
        reps: races.
        link: the testbed's links (:class:`~sgdsim.testbed.netns.Link`); its
            MTU (bytes) sets the payload rate the transfer's length is reckoned at.
        kwargs: ``threads`` of :func:`join_delay`.

    Raises:
        ValueError: no push, bytes or ``bandwidth_bps`` not > 0; the errors of
            :func:`join_delay`.
        TestbedUnavailable, CalibrationError: as :func:`join_delay`.
    """
    from sgdsim.simulation.bounds import tbf_payload_fraction

    total = float(sum(push_bytes))
    if len(push_bytes) == 0 or not total > 0:
        raise ValueError(f"need at least one push of > 0 bytes, got {len(push_bytes)} pushes")
    if not bandwidth_bps > 0:
        raise ValueError(f"bandwidth_bps must be > 0, got {bandwidth_bps}")
    transfer_s = total / (bandwidth_bps / 8 * tbf_payload_fraction(link.mtu))
    gap_s = model_race_gap_s(transfer_s)
    timeout_s = reps * gap_s + 120.0  # and the processes' start-up
    return join_delay(
        "push",
        bandwidth_bps,
        reps=reps,
        transfer_s=transfer_s,
        link=link,
        tensors=len(push_bytes),
        lag_fraction=MODEL_PUSH_LAG_FRACTION,
        timeout_s=timeout_s,
        gap_s=gap_s,
        statistic="mean",
        **kwargs,
    )


#: The capture's run: 1 warm-up step (the first builds the graph; the second is
#: already a steady one: docs/steady-state.md), then until 20 steps each (or 60 s).
TRAINING_JOIN_RULE = SteadyRule(warmup_steps=1, settle_s=0.0, min_steps=20, max_s=60.0)


@dataclass(frozen=True)
class TrainingJoins:
    """How late a transfer that joins other workers' gets its share, in real training.

    Attributes:
        push: the simulator's push :class:`~sgdsim.simulation.connection.JoinDelay`:
            per number ``k`` of transfers joined, the mean and standard
            deviation of ``push_growth_s[k]`` (the mean clipped at 0); a ``k``
            without a join takes the nearest ``k``'s that has one
            (:func:`join_delay_of`).
        pull: the same for pulls.
        push_growth_s: ``{k: (joins,)}`` each push join's lateness, seconds
            (:func:`sgdsim.testbed.capture.join_losses`).
        pull_growth_s: the same for pulls.
        steps_per_s: the workers' throughput over the run, steps/s.
        workers: workers that trained.
        start_excess_s: ``{"push": {k: (excess,)}, "pull": …}`` each transfer's
            start over its fair share, alone (``k = 0``) or beside ``k`` others
            (:func:`sgdsim.testbed.capture.start_excess`): a join's cost net of
            the transfer's own start. Recorded, not yet used by the simulator.
        boundary_s: median seconds from a worker's last push packet to the bulk
            of its next pull (:func:`sgdsim.testbed.capture.step_boundaries`);
            None without a step to measure. Recorded, not yet used.
        gain_s: ``{"push": {k: (gain,)}, "pull": …}`` how much earlier than a
            fair share of the full link each join's incumbents got their bytes
            (:func:`sgdsim.testbed.capture.join_gains`): the part of a join's
            lateness that moves the phases. Recorded, not yet used.
        saturated_Bps: the full link's rate, bytes/s, the gains are taken
            against (:func:`sgdsim.testbed.capture.saturated_rate`; None
            without a lone pull, and then no gains).
        window_s: ``{"push": {k: (window,)}, "pull": …}`` how long each join of
            ``push_growth_s`` / ``pull_growth_s`` (same order) overlapped its
            incumbents, seconds (:func:`sgdsim.testbed.capture.join_records`):
            a push's lateness grows with it. Recorded, not yet used.
        two_way_share: ``(pull, push)``: what each direction of the PS's port
            carried while the other carried data too, over what it carried alone
            (:func:`sgdsim.testbed.capture.two_way_shares`); None when the
            capture holds too little of either.
        phase_distance: how far apart the captured workers stepped over the
            run (:func:`sgdsim.protocol.phase_distance` of their step ends:
            0 in phase, 1/N evenly spread); None when it cannot be told.
        lag_s: ``{"push": {k: ((growth, start lag),)}, "pull": …}`` each join's
            lag growth and start lag, seconds
            (:func:`sgdsim.testbed.capture.join_lags`): how far a join moved
            the workers' phases, by where in the incumbent's transfer it came.
            Recorded, not yet used (docs/steady-state-log.md, "The lag a join leaves").
        two_way_share_past_start: :attr:`two_way_share` without each transfer's
            first 0.1 s (``ramp_s``), None as it. Recorded, not yet used.
        start_deficit_s: ``{"push": {k: (deficit,)}, "pull": …}`` how far behind
            its share each transfer's start fell, seconds of the full link,
            alone (``k = 0``) or joining ``k`` (:func:`sgdsim.testbed.capture.start_deficits`):
            recorded beside the simulator's own (:func:`simulated_start_deficits`)
            for the study of the parting force (docs/steady-state-log.md,
            "The joiner's start"), not yet used.
    """

    push: JoinDelay
    pull: JoinDelay
    push_growth_s: dict[int, tuple[float, ...]]
    pull_growth_s: dict[int, tuple[float, ...]]
    steps_per_s: float
    workers: int
    start_excess_s: dict[str, dict[int, tuple[float, ...]]] = field(default_factory=dict)
    boundary_s: float | None = None
    gain_s: dict[str, dict[int, tuple[float, ...]]] = field(default_factory=dict)
    saturated_Bps: float | None = None
    window_s: dict[str, dict[int, tuple[float, ...]]] = field(default_factory=dict)
    two_way_share: tuple[float, float] | None = None
    phase_distance: float | None = None
    lag_s: dict[str, dict[int, tuple[tuple[float, float], ...]]] = field(default_factory=dict)
    two_way_share_past_start: tuple[float, float] | None = None
    start_deficit_s: dict[str, dict[int, tuple[float, ...]]] = field(default_factory=dict)


def _pooled(dicts: Sequence[Mapping[int, Sequence[_T]]]) -> dict[int, tuple[_T, ...]]:
    """Per key, the values of every dict in turn (each capture's order kept)."""
    out: dict[int, list[_T]] = {}
    for d in dicts:
        for k, v in d.items():
            out.setdefault(k, []).extend(v)
    return {k: tuple(v) for k, v in sorted(out.items())}


def _mean_of(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are not None (None when none is)."""
    have = [v for v in values if v is not None]
    return statistics.fmean(have) if have else None


def _mean_pair(pairs: Sequence[tuple[float, float] | None]) -> tuple[float, float] | None:
    """Element-wise mean of the pairs that are not None (None when none is)."""
    have = [p for p in pairs if p is not None]
    if not have:
        return None
    return (statistics.fmean(p[0] for p in have), statistics.fmean(p[1] for p in have))


def pool_joins(captures: Sequence[TrainingJoins], *, signed: bool = False) -> TrainingJoins:
    """Several captures of the same N workers as one: their joins pooled.

    One capture is one launch of workers whose phases wander, and its few
    joins per ``k`` (5–80 in 32 s) carry that launch into the prediction:
    five captures of one pair moved its predictions by 2–8 % (sd), up to
    21 % lowest to highest, and their pooled joins predict what the mean of
    their five predictions does (docs/steady-state-log.md, "The calibration's
    own repeatability").

    Every per-join record (lateness, start excess, gains, windows, lags) is
    concatenated per ``k`` in the captures' order, and the
    :class:`~sgdsim.simulation.connection.JoinDelay` drawn from them again
    (:func:`join_delay_of`); the rates, shares and phase distances are the
    means over the captures that have them, ``boundary_s`` their median.

    Args:
        captures: one or more captures of the same number of workers.
        signed: as :func:`join_delay_of` (the link's queue is ``fifo``).

    Raises:
        ValueError: no capture, or captures of different numbers of workers.
    """
    if not captures:
        raise ValueError("pool_joins needs at least one capture")
    workers = {c.workers for c in captures}
    if len(workers) != 1:
        raise ValueError(f"captures of different numbers of workers: {sorted(workers)}")
    n = captures[0].workers
    push = _pooled([c.push_growth_s for c in captures])
    pull = _pooled([c.pull_growth_s for c in captures])

    def by_direction(
        get: Callable[[TrainingJoins], Mapping[str, Mapping[int, Sequence[_T]]]],
    ) -> dict[str, dict[int, tuple[_T, ...]]]:
        names = sorted({name for c in captures for name in get(c)})
        return {name: _pooled([get(c).get(name, {}) for c in captures]) for name in names}

    bounds = [c.boundary_s for c in captures if c.boundary_s is not None]
    return TrainingJoins(
        join_delay_of(push, n, signed=signed),
        join_delay_of(pull, n, signed=signed),
        push,
        pull,
        statistics.fmean(c.steps_per_s for c in captures),
        n,
        by_direction(lambda c: c.start_excess_s),
        statistics.median(bounds) if bounds else None,
        by_direction(lambda c: c.gain_s),
        _mean_of([c.saturated_Bps for c in captures]),
        by_direction(lambda c: c.window_s),
        _mean_pair([c.two_way_share for c in captures]),
        _mean_of([c.phase_distance for c in captures]),
        by_direction(lambda c: c.lag_s),
        _mean_pair([c.two_way_share_past_start for c in captures]),
        by_direction(lambda c: c.start_deficit_s),
    )


def join_delay_of(
    growth_s: Mapping[int, Sequence[float]], workers: int, *, signed: bool = False
) -> JoinDelay:
    """The :class:`~sgdsim.simulation.connection.JoinDelay` of measured joins.

    Args:
        growth_s: ``{k: lateness of each join of k transfers, seconds}``.
        workers: workers of the run (``k`` runs 1 … workers − 1).
        signed: draw the measured joins themselves, sign included
            (:meth:`JoinDelay.resampled`: a FIFO port's joins), instead of
            a gamma of their mean clipped at 0 and their spread (a fair
            queue's late start).

    Returns:
        Per ``k``, the mean (clipped at 0) and the population standard
        deviation of its joins, or with ``signed`` the joins, however few;
        a ``k`` without a join takes those of the nearest ``k`` that has
        some (the smaller on a tie), and 0 when no ``k`` has any. A big
        model's capture holds a few joins per ``k`` (its workers, once
        spread, rarely overlap); 0 would claim that joining costs nothing,
        which holds the simulated workers in phase (docs/steady-state-log.md,
        "Every join counts").
    """
    ks = range(1, max(workers, 2))
    have = [k for k in ks if growth_s.get(k)]
    lists = [
        tuple(growth_s[min(have, key=lambda h: (abs(h - k), h))]) if have else (0.0,) for k in ks
    ]
    if signed:
        return JoinDelay.resampled(lists)
    return JoinDelay(
        tuple(max(0.0, statistics.fmean(j)) for j in lists),
        tuple(statistics.pstdev(j) for j in lists),
    )


def simulated_start_deficits(
    workload: Any,
    rate_Bps: float,
    workers: int,
    *,
    ps_discipline: str = "fair",
    seed: int = 0,
    runs: int = 6,
    steps: int = 30,
) -> dict[str, dict[int, tuple[float, ...]]]:
    """The simulator's own start deficits of a capture's run, as the capture reads them.

    ``workers`` workers of ``workload`` on nodes of their own (the skeleton's
    compute is waits) on a link of ``rate_Bps``, without join delays or
    two-way share, ``runs`` runs of ``steps`` steps from start phases drawn
    uniformly in one contention-free step (seeded by ``seed``), policy
    ``tf_default``; each run's trace read as a capture
    (:func:`sgdsim.testbed.capture.trace_packets`) by
    :func:`sgdsim.testbed.capture.start_deficits`, the runs pooled.

    Returns:
        ``{"push": {k: (deficit, …)}, "pull": …}``, seconds of the link.

    Raises:
        ValueError: ``rate_Bps`` not > 0, ``workers`` < 2, ``runs`` or ``steps`` < 1.
    """
    import numpy as np

    from sgdsim.simulation import Network
    from sgdsim.simulation.async_ps import simulate_async, single_step_estimate
    from sgdsim.testbed.capture import start_deficits, trace_packets, transfer_gap_s

    if not rate_Bps > 0 or workers < 2 or runs < 1 or steps < 1:
        raise ValueError(
            f"need rate_Bps > 0, workers >= 2, runs and steps >= 1; got {rate_Bps}, "
            f"{workers}, {runs}, {steps}"
        )
    network = Network(float(rate_Bps), 0.0)
    t1 = single_step_estimate(workload, network)
    rng = np.random.default_rng(seed)
    hosts = list(range(2, 2 + workers))
    sizes = {"pull": float(workload.pull_bytes.sum()), "push": float(workload.push_bytes.sum())}
    gap = transfer_gap_s(sizes["pull"], sizes["push"], rate_Bps, longest_s=0.05)
    pooled: dict[str, list[dict[int, list[float]]]] = {"push": [], "pull": []}
    for _ in range(runs):
        trace: list[Any] = []
        offsets = [0.0, *rng.uniform(0.0, t1, workers - 1).tolist()]
        simulate_async(
            workload, network, workers, steps, 1, "tf_default", seed,
            ps_discipline=ps_discipline, start_offsets_s=offsets, trace=trace,
        )  # fmt: skip
        packets = trace_packets(trace, workload.pull_bytes, workload.push_bytes)
        for name, size in sizes.items():
            pooled[name].append(
                start_deficits(packets, 1, hosts, name, size / 2, rate_Bps, gap_s=gap)
            )
    return {name: _pooled(got) for name, got in pooled.items()}


def training_join_delays(
    spec: Any,
    bandwidth_bps: float,
    pull_bytes: float,
    push_bytes: float,
    *,
    workers: int = 2,
    rule: SteadyRule = TRAINING_JOIN_RULE,
    link: Link = Link(),
    skeleton: str | None = None,
) -> TrainingJoins:
    """The join delays of one model on one network, from real workers training it
    or running the skeleton of its profiled step.

    ``workers`` real workers train ``spec`` asynchronously on the testbed
    (launched together, phases left to themselves, as in a training job)
    while a header capture records the PS's port. Every pull or push of one
    worker that starts while ``k`` other workers' are on the wire gives one
    join of ``k`` (:func:`sgdsim.testbed.capture.join_losses`: how much later
    than a fair share from its first packet the joiner got its bytes); the
    delays are the mean and spread over the joins of each ``k``
    (:func:`join_delay_of`); through a ``fifo`` queue, where a joiner may
    get more than its share, the joins themselves, drawn with their sign
    (``signed``). Races of pre-made tensors
    (:func:`model_push_join_delay`) see a third of it for pushes: in training
    the joiner starts its push as its backward pass starts and its pull as
    the others' streams run (docs/steady-state-log.md, "Joins in training").

    Args:
        spec: the model's :class:`~sgdsim.profiling.spec.ProfileSpec`.
        bandwidth_bps: the testbed NIC rate, bit/s.
        pull_bytes: bytes a step pulls (the workload's ``pull_bytes`` summed).
        push_bytes: bytes a step pushes.
        workers: workers that train (≥ 2): joins of up to ``workers − 1``.
        rule: how long they train.
        link: the testbed's links (:class:`~sgdsim.testbed.netns.Link`); a
            ``fifo`` queue's joins are drawn with their sign.
        skeleton: the model's workload JSON path: the workers run the skeleton
            of its profiled step (:mod:`sgdsim.testbed.skeleton`: the
            profile's transfers through the same gRPC connections, compute as
            waits) instead of training the model. It needs only the one-worker
            profile, and its pairs split and lock as training pairs do
            (docs/steady-state-log.md, "The step's skeleton").

    Raises:
        ValueError: bytes or ``bandwidth_bps`` not > 0, ``workers`` < 2.
        MeasurementError, TestbedUnavailable: as
            :func:`~sgdsim.testbed.run_steady_measurement`.
        FileNotFoundError: ``tcpdump`` is not installed.
    """
    from sgdsim.testbed.capture import (
        join_gains,
        join_lags,
        join_records,
        read_pcap,
        saturated_rate,
        start_deficits,
        start_excess,
        step_boundaries,
        transfer_gap_s,
        two_way_shares,
    )
    from sgdsim.testbed.steady import run_steady_measurement

    if not (bandwidth_bps > 0 and pull_bytes > 0 and push_bytes > 0):
        raise ValueError(
            f"bandwidth and bytes must be > 0, got {bandwidth_bps}, {pull_bytes}, {push_bytes}"
        )
    if workers < 2:
        raise ValueError(f"joins need workers >= 2, got {workers}")
    with tempfile.TemporaryDirectory(prefix="sgdsim-joins-") as tmp:
        path = str(Path(tmp) / "ps.pcap")
        r = run_steady_measurement(
            spec, workers, bandwidth_bps, rule=rule, link=link, capture_path=path,
            skeleton=skeleton,
        )  # fmt: skip
        packets, steps_per_s = read_pcap(path), r.steps_per_s
    rate = bandwidth_bps / 8
    # the testbed numbers its hosts ps, w0, w1, … as .1, .2, .3, … (Testbed.address)
    hosts = list(range(2, 2 + workers))
    growth, excess, gains, windows, lags, deficits = {}, {}, {}, {}, {}, {}
    # one step's transfer at a time: pauses within it shorter than the other leg
    gap = transfer_gap_s(pull_bytes, push_bytes, rate)
    deficit_gap = transfer_gap_s(pull_bytes, push_bytes, rate, longest_s=0.05)
    # a step's pull: half its bytes to one and a half (not two steps' run together)
    full = saturated_rate(packets, 1, hosts, pull_bytes / 2, gap, max_bytes=1.5 * pull_bytes)
    for direction, size in (("push", push_bytes), ("pull", pull_bytes)):
        # a step's main transfer (half its bytes at least); windows of 5 % of it
        window = 0.05 * size / rate
        found = join_records(
            packets, 1, hosts, direction, size / 2, gap_s=gap, min_overlap_s=window
        )
        growth[direction] = {k: tuple(late for late, _ in g) for k, g in found.items()}
        windows[direction] = {k: tuple(w for _, w in g) for k, g in found.items()}
        lags[direction] = {
            k: tuple(g)
            for k, g in join_lags(packets, 1, hosts, direction, size / 2, gap_s=gap).items()
        }
        starts = start_excess(packets, 1, hosts, direction, size / 2, rate, gap_s=gap)
        excess[direction] = {k: tuple(g) for k, g in starts.items()}
        short = start_deficits(
            packets, 1, hosts, direction, size / 2, full or rate, gap_s=deficit_gap
        )
        deficits[direction] = {k: tuple(g) for k, g in short.items()}
        if full is not None:
            got = join_gains(
                packets, 1, hosts, direction, size / 2, full, gap_s=gap, min_overlap_s=window
            )
            gains[direction] = {k: tuple(g) for k, g in got.items()}
    boundaries = step_boundaries(packets, 1, hosts, pull_bytes, gap_s=gap)
    signed = link.queue == "fifo"
    return TrainingJoins(
        join_delay_of(growth["push"], workers, signed=signed),
        join_delay_of(growth["pull"], workers, signed=signed),
        growth["push"],
        growth["pull"],
        steps_per_s,
        workers,
        excess,
        statistics.median(boundaries) if boundaries else None,
        gains,
        full,
        windows,
        two_way_shares(packets, 1, hosts, pull_bytes, push_bytes, gap_s=gap),
        phase_distance(r.step_end_times, r.window_s),
        lags,
        two_way_shares(packets, 1, hosts, pull_bytes, push_bytes, gap_s=gap, ramp_s=0.1),
        deficits,
    )


def join_delay(
    direction: str,
    bandwidth_bps: float,
    reps: int = 12,
    transfer_s: float = 0.025,
    link: Link = Link(),
    threads: int = 2,
    timeout_s: float = 240.0,
    tensors: int = 4,
    lag_fraction: float = 0.4,
    gap_s: float | None = None,
    statistic: str = "median",
) -> JoinRace:
    """Race two real TensorFlow workers' pulls (``direction`` ``pull``) or pushes
    (``push``) on a two-worker testbed (:mod:`sgdsim.testbed.race`) and return the
    median (or mean) growth of the first one's lead, clipped at 0.

    Args:
        direction: ``pull`` or ``push``.
        bandwidth_bps: the testbed NIC rate, bit/s.
        reps: races.
        transfer_s: each worker moves this long's worth of bytes at the rate.
        link: the testbed's links (:class:`~sgdsim.testbed.netns.Link`).
        threads: the TensorFlow processes' intra- and inter-op threads.
        timeout_s: the whole race's limit, seconds.
        tensors: float32 tensors per worker and race.
        lag_fraction: the second worker starts this fraction of ``transfer_s``
            after the first (0 < lag_fraction < 1).
        gap_s: seconds from one race's start to the next; None:
            :func:`race_gap_s` of ``transfer_s``. At least two transfers.
        statistic: ``median`` or ``mean`` of the races' growths.

    Raises:
        TestbedUnavailable: the testbed cannot run here.
        CalibrationError: a process failed or the race took over ``timeout_s``.
        ValueError: ``bandwidth_bps``, ``transfer_s``, ``reps`` or ``tensors`` not > 0,
            ``lag_fraction`` outside (0, 1), ``gap_s`` under two transfers, or an
            unknown ``direction`` or ``statistic``.
    """
    if direction not in ("pull", "push"):
        raise ValueError(f"direction must be pull or push, got {direction!r}")
    if not bandwidth_bps > 0 or not transfer_s > 0 or reps < 1 or tensors < 1:
        raise ValueError(
            f"need bandwidth_bps > 0, transfer_s > 0, reps >= 1 and tensors >= 1, "
            f"got {bandwidth_bps}, {transfer_s}, {reps}, {tensors}"
        )
    if not 0.0 < lag_fraction < 1.0:
        raise ValueError(f"lag_fraction must be in (0, 1), got {lag_fraction}")
    if statistic not in _STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(_STATISTICS)}, got {statistic!r}")
    gap = race_gap_s(transfer_s) if gap_s is None else gap_s
    if not gap >= 2 * transfer_s:
        raise ValueError(f"gap_s must be >= two transfers ({2 * transfer_s:g} s), got {gap:g}")
    from sgdsim.simulation.bounds import tbf_payload_fraction

    rate_Bps = bandwidth_bps / 8 * tbf_payload_fraction(link.mtu)
    floats = max(1, int(transfer_s * rate_Bps / 4 / tensors))
    offset = lag_fraction * transfer_s
    env = child_env()
    with (
        tempfile.TemporaryDirectory(prefix=f"sgdsim-{direction}-race-") as tmp,
        Testbed(2, bandwidth_bps, link=link) as tb,
    ):
        d = Path(tmp)
        cluster = {
            "ps": [f"{tb.address('ps')}:{_PORT}"],
            "worker": [f"{tb.address(f'w{k}')}:{_PORT}" for k in range(2)],
        }
        procs = {"ps": tb.popen("ps", ps_argv(cluster, threads, threads, timeout_s + 30), env=env)}
        for k in range(2):
            argv = [
                sys.executable, "-m", "sgdsim.testbed.race", "--direction", direction,
                "--cluster", json.dumps(cluster), "--task", str(k),
                "--floats", str(floats), "--tensors", str(tensors), "--reps", str(reps),
                "--gap", f"{gap}", "--offset", f"{offset}", "--threads", str(threads),
                "--ready", str(d / f"ready{k}"), "--go", str(d / "go"),
                "--out", str(d / f"w{k}.json"), "--lifetime", f"{timeout_s + 30:.0f}",
            ]  # fmt: skip
            procs[f"w{k}"] = tb.popen(f"w{k}", argv, env=env)
        deadline = time.monotonic() + timeout_s
        readies = [d / f"ready{k}" for k in range(2)]
        try:
            wait_workers(procs, 2, deadline, until=lambda: all_exist(readies))
            # atomically: a worker polls for the file and reads it at once
            with atomic_path(d / "go") as tmp_go:
                tmp_go.write_text(json.dumps({"start": time.time() + 0.3}))
            wait_workers(procs, 2, deadline)
            a, b = (json.loads((d / f"w{k}.json").read_text())["steps"] for k in range(2))
        except MeasurementError as e:
            raise CalibrationError(f"{direction} race: {e}") from e
        finally:
            for p in procs.values():
                stop(p)
    growth = tuple((b1 - a1) - (b0 - a0) for (_, a0, a1), (_, b0, b1) in zip(a, b, strict=True))
    return JoinRace(
        delay_s=max(0.0, _STATISTICS[statistic](growth)),
        growth_s=growth,
        offset_s=offset,
        bytes_each=4 * floats * tensors,
        bandwidth_bps=bandwidth_bps,
    )


@dataclass(frozen=True)
class RingMessage:
    """The cost of one message of TensorFlow's RING all-reduce on the testbed.

    Attributes:
        allreduce_s: median seconds of one all-reduce of a 4-float tensor
            between ``workers`` workers (function-call cost cancelled).
        message_s: ``allreduce_s`` / (2 (P − 1)): one of the ring's sequential
            steps (reduce-scatter then all-gather, 2 (P − 1) steps in all).
        overhead_s: ``message_s`` less the network's one-way latency, at least
            0: what ``simulation.allreduce.message_overhead_s`` adds to the
            latency to make α (the 16 bytes' wire time is below a microsecond
            at 100 Mbit/s and left in).
        samples_s: (calls,) each call's per-all-reduce seconds.
        workers: P.
        bandwidth_bps, latency_s: the testbed network it ran on.
    """

    allreduce_s: float
    message_s: float
    overhead_s: float
    samples_s: tuple[float, ...]
    workers: int
    bandwidth_bps: float
    latency_s: float


def ring_message_overhead(
    bandwidth_bps: float,
    latency_s: float = 0.0,
    workers: int = 2,
    calls: int = 15,
    repeats: int = 21,
    link: Link = Link(),
    timeout_s: float = 240.0,
    floats: int = 4,
) -> RingMessage:
    """Measure α's software part for the ring all-reduce on the testbed.

    ``workers`` real ``MultiWorkerMirroredStrategy`` workers (RING, one
    thread per pool, one per namespace of a testbed at ``bandwidth_bps``
    whose links are ``link``: :class:`~sgdsim.testbed.netns.Link`)
    time ``calls`` calls of one and of ``repeats`` chained all-reduces of a
    4-float tensor (``--probe`` of :mod:`sgdsim.testbed.allreduce_worker`;
    ``floats`` sets another size, to see what a message's bytes add).
    One all-reduce is the difference over ``repeats`` − 1 (task 0's median
    over the calls); its 2 (P − 1) sequential ring steps each cost the
    network's latency plus the software's per-message cost, which is the
    result (:class:`RingMessage`). The α–β model of a ring all-reduce
    (2 (P − 1) α + 2 (P − 1)/P · bytes · β) is the one of Shi, Wang and Chu,
    ICPADS 2018, and of the MG-WFBP release's fits.

    Raises:
        TestbedUnavailable: the testbed cannot run here.
        CalibrationError: a worker failed or the run took over ``timeout_s``.
        ValueError: ``bandwidth_bps`` not > 0, ``workers`` < 2, ``calls`` < 1
            or ``repeats`` < 2.
    """
    if not bandwidth_bps > 0 or workers < 2 or calls < 1 or repeats < 2:
        raise ValueError(
            "need bandwidth_bps > 0, workers >= 2, calls >= 1 and repeats >= 2, got "
            f"{bandwidth_bps}, {workers}, {calls}, {repeats}"
        )
    from sgdsim.testbed.allreduce import RING_PORT

    env = child_env()
    with (
        tempfile.TemporaryDirectory(prefix="sgdsim-ring-") as tmp,
        Testbed(workers, bandwidth_bps, latency_s, link=link) as tb,
    ):
        addr = ",".join(f"{tb.address(f'w{k}')}:{RING_PORT}" for k in range(workers))
        outs = [Path(tmp) / f"w{k}.json" for k in range(workers)]
        procs = {}
        for k in range(workers):
            argv = [
                sys.executable, "-m", "sgdsim.testbed.allreduce_worker",
                "--spec", "{}", "--workers", addr, "--task", str(k),
                "--steps", str(calls), "--probe", str(repeats), "--out", str(outs[k]),
                "--probe-floats", str(floats), "--lifetime", f"{timeout_s + 30:.0f}",
            ]  # fmt: skip
            procs[f"w{k}"] = tb.popen(f"w{k}", argv, env=env)
        try:
            wait_workers(procs, workers, time.monotonic() + timeout_s)
            probe = json.loads(outs[0].read_text())
        except (MeasurementError, OSError, ValueError) as e:
            raise CalibrationError(f"ring message probe: {e}") from e
        finally:
            for p in procs.values():
                stop(p)
    samples = tuple(
        (many - one) / (repeats - 1)
        for one, many in zip(probe["one_s"], probe["many_s"], strict=True)
    )
    each = max(0.0, statistics.median(samples))
    message = each / (2 * (workers - 1))
    return RingMessage(
        allreduce_s=each,
        message_s=message,
        overhead_s=max(0.0, message - latency_s),
        samples_s=samples,
        workers=workers,
        bandwidth_bps=bandwidth_bps,
        latency_s=latency_s,
    )


@dataclass(frozen=True)
class RingStep:
    """What the all-reduce of a training step costs beyond its bytes, at P workers.

    Attributes:
        step_s: mean seconds per step of ``workers`` workers training a 4-float
            model through the ring (task 0's step ends, first to last).
        alone_s: the same model's step with one worker (no peer: no message).
        message_s: (``step_s`` − ``alone_s``) / (2 (P − 1)): one of the ring's
            sequential steps, launching and finishing the collective included.
        overhead_s: ``message_s`` less the network's one-way latency, at least
            0: ``simulation.allreduce.message_overhead_s`` for P workers.
        workers: P.
        bandwidth_bps, latency_s: the testbed network it ran on.
    """

    step_s: float
    alone_s: float
    message_s: float
    overhead_s: float
    workers: int
    bandwidth_bps: float
    latency_s: float


def ring_step_overhead(
    bandwidth_bps: float,
    latency_s: float = 0.0,
    workers: int = 2,
    spec: Any = None,
    steps: int = 300,
    warmup_steps: int = 10,
    link: Link = Link(),
    timeout_s: float = 240.0,
) -> RingStep:
    """Measure α for ``workers`` workers as a training step sees it.

    ``workers`` real ``MultiWorkerMirroredStrategy`` workers (RING, ``spec``'s
    thread pools, one per namespace of a testbed at ``bandwidth_bps`` whose
    links are ``link``: :class:`~sgdsim.testbed.netns.Link`) train a model of one 4-float
    variable (``--probe-step`` of :mod:`sgdsim.testbed.allreduce_worker`) for
    ``warmup_steps`` + ``steps`` steps; one worker alone on loopback trains
    it too. The difference of their mean steps is what the step's all-reduce
    costs beyond its 16 bytes: the 2 (P − 1) sequential ring steps, each the
    network's latency plus the software's per-message cost, the collective's
    launch in every step and, with P workers on one host, their waiting on
    each other's cores. Unlike :func:`ring_message_overhead` (chained
    all-reduces in one call) it is measured at the P it is used for. The
    α–β model of a ring all-reduce (2 (P − 1) α + 2 (P − 1)/P · bytes · β) is
    the one of Shi, Wang and Chu, ICPADS 2018.

    Raises:
        TestbedUnavailable: the testbed cannot run here.
        CalibrationError: a worker failed or a run took over ``timeout_s``.
        ValueError: ``bandwidth_bps`` not > 0, ``workers`` < 2 or ``steps`` < 2.
    """
    if not bandwidth_bps > 0 or workers < 2 or steps < 2:
        raise ValueError(
            "need bandwidth_bps > 0, workers >= 2 and steps >= 2, got "
            f"{bandwidth_bps}, {workers}, {steps}"
        )
    from sgdsim.profiling.spec import ProfileSpec
    from sgdsim.testbed.allreduce import RING_PORT

    spec = spec if spec is not None else ProfileSpec(model="probe")
    env = child_env()

    def argv(addr: str, k: int, out: Path) -> list[str]:
        return [
            sys.executable, "-m", "sgdsim.testbed.allreduce_worker",
            "--spec", spec.to_json(), "--workers", addr, "--task", str(k),
            "--steps", str(steps), "--warmup-steps", str(warmup_steps), "--probe-step",
            "--out", str(out), "--lifetime", f"{timeout_s + 30:.0f}",
        ]  # fmt: skip

    def mean_step(out: Path) -> float:
        ends = json.loads(out.read_text())["step_end_times"]
        return (ends[-1] - ends[0]) / (len(ends) - 1)

    with tempfile.TemporaryDirectory(prefix="sgdsim-ringstep-") as tmp:
        alone_out = Path(tmp) / "alone.json"
        (port,) = free_ports(1)
        procs = {"w0": spawn(argv(f"127.0.0.1:{port}", 0, alone_out), env)}
        try:
            wait_workers(procs, 1, time.monotonic() + timeout_s)
            alone = mean_step(alone_out)
        except (MeasurementError, OSError, ValueError) as e:
            raise CalibrationError(f"ring step probe, one worker: {e}") from e
        finally:
            stop(procs["w0"])
        with Testbed(workers, bandwidth_bps, latency_s, link=link) as tb:
            addr = ",".join(f"{tb.address(f'w{k}')}:{RING_PORT}" for k in range(workers))
            outs = [Path(tmp) / f"w{k}.json" for k in range(workers)]
            procs = {
                f"w{k}": tb.popen(f"w{k}", argv(addr, k, outs[k]), env=env) for k in range(workers)
            }
            try:
                wait_workers(procs, workers, time.monotonic() + timeout_s)
                step = mean_step(outs[0])
            except (MeasurementError, OSError, ValueError) as e:
                raise CalibrationError(f"ring step probe, {workers} workers: {e}") from e
            finally:
                for p in procs.values():
                    stop(p)
    message = max(0.0, step - alone) / (2 * (workers - 1))
    return RingStep(
        step_s=step,
        alone_s=alone,
        message_s=message,
        overhead_s=max(0.0, message - latency_s),
        workers=workers,
        bandwidth_bps=bandwidth_bps,
        latency_s=latency_s,
    )


@dataclass(frozen=True)
class AllReduceStep:
    """One ``MultiWorkerMirroredStrategy`` worker training alone (N = 1).

    Attributes:
        step_s: mean seconds between two step ends (timed steps).
        step_times_s: (steps − 1,) every step's seconds.
        cpu_s: CPU seconds (user + system, all threads) of the process per step.
        model, batch_size, image_size: what it trained.
    """

    step_s: float
    step_times_s: tuple[float, ...]
    cpu_s: float
    model: str
    batch_size: int
    image_size: int


def allreduce_step(
    spec: Any,
    steps: int = 10,
    warmup_steps: int = 3,
    timeout_s: float = 600.0,
    min_timed_s: float = 0.0,
) -> AllReduceStep:
    """Time the synchronous all-reduce path's own step: one worker of
    :mod:`sgdsim.testbed.allreduce_worker` alone on loopback (no peer: its
    all-reduce moves nothing), with ``spec``'s model, batch, optimizer and
    threads, ``warmup_steps`` untimed steps, then ``steps`` timed ones, or
    more until they span ``min_timed_s`` seconds.
    ``step_s`` is the mean time per step over the timed ones (first to last
    step end), as a throughput measurement counts it: a step's time is
    skewed to the right (occasional slow steps), so its median runs about 6 %
    below what a run of steps takes (MobileNetV2 64 px: 46.8 ms median, 49.8
    ms mean over 30 steps).

    Raises:
        CalibrationError: the worker failed or took over ``timeout_s``.
        ValueError: ``steps`` < 2 or ``warmup_steps`` < 0.
    """
    if steps < 2 or warmup_steps < 0 or min_timed_s < 0:
        raise ValueError(
            "need steps >= 2, warmup_steps >= 0 and min_timed_s >= 0, got "
            f"{steps}, {warmup_steps}, {min_timed_s}"
        )
    (port,) = free_ports(1)
    with tempfile.TemporaryDirectory(prefix="sgdsim-arstep-") as tmp:
        out = Path(tmp) / "w0.json"
        argv = [
            sys.executable, "-m", "sgdsim.testbed.allreduce_worker",
            "--spec", spec.to_json(), "--workers", f"127.0.0.1:{port}", "--task", "0",
            "--steps", str(steps), "--warmup-steps", str(warmup_steps), "--out", str(out),
            "--min-seconds", repr(float(min_timed_s)), "--lifetime", f"{timeout_s + 30:.0f}",
        ]  # fmt: skip
        procs = {"w0": spawn(argv, child_env())}
        try:
            wait_workers(procs, 1, time.monotonic() + timeout_s)
            res = json.loads(out.read_text())
        except (MeasurementError, OSError, ValueError) as e:
            raise CalibrationError(f"all-reduce worker alone: {e}") from e
        finally:
            stop(procs["w0"])
    ends = [float(t) for t in res["step_end_times"]]
    gaps = tuple(b - a for a, b in itertools.pairwise(ends))
    return AllReduceStep(
        step_s=(ends[-1] - ends[0]) / (len(ends) - 1),
        step_times_s=gaps,
        cpu_s=float(res["cpu_s"]) / len(ends),
        model=spec.model,
        batch_size=spec.batch_size,
        image_size=spec.image_size,
    )
