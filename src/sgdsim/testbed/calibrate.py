"""Calibrations of the testbed: CPU per byte of its network, and the PS's join delay.

:func:`pull_join_delay` races two real TensorFlow workers' pulls from one PS;
its docstring says how that measures the delay.

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

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sgdsim.profiling.procs import free_ports, spawn, stop
from sgdsim.profiling.server import ps_argv
from sgdsim.testbed.netns import DEFAULT_MTU, DEFAULT_QUEUE, Testbed
from sgdsim.testbed.run import MeasurementError, all_exist, child_env, cpu_ticks, wait_workers

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
        testbed_s_per_byte: through the testbed at ``bandwidth_bps``.
        loopback_s_per_byte: through 127.0.0.1, unshaped.
        bandwidth_bps: the testbed NIC rate, bit/s.
        bytes_moved: bytes each transfer moved (both directions).
    """

    testbed_s_per_byte: float
    loopback_s_per_byte: float
    bandwidth_bps: float
    bytes_moved: int

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
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as e:
                raise CalibrationError(
                    f"calibration transfer of {size} bytes took over {timeout_s:g} s"
                ) from e
            if rc != 0:
                raise CalibrationError(f"calibration transfer failed (exit code {rc})")
        return kernel_cpu_s() - t0
    finally:
        for p in procs:
            stop(p)


def network_cpu_per_byte(
    bandwidth_bps: float,
    seconds: float = 3.0,
    mtu: int = DEFAULT_MTU,
    queue: str = DEFAULT_QUEUE,
) -> NetworkCpu:
    """Measure the testbed's CPU seconds per byte at ``bandwidth_bps`` against loopback's.

    Moves ``seconds`` × rate bytes each way at once between two hosts of a
    one-worker testbed (links of MTU ``mtu`` bytes, NIC queues ``queue``: see
    :class:`~sgdsim.testbed.netns.Testbed`), then the same bytes over 127.0.0.1.

    Raises:
        TestbedUnavailable: the testbed cannot run here.
        CalibrationError: a transfer failed or took longer than ``10 × seconds + 30`` s.
        ValueError: ``bandwidth_bps`` or ``seconds`` not > 0.
    """
    if not bandwidth_bps > 0 or not seconds > 0:
        raise ValueError(f"need bandwidth_bps > 0 and seconds > 0, got {bandwidth_bps}, {seconds}")
    size = int(bandwidth_bps / 8 * seconds)
    timeout = 10 * seconds + 30
    with Testbed(1, bandwidth_bps, mtu=mtu, queue=queue) as tb:
        shaped = _transfer(size, tb, timeout)
    loop = _transfer(size, None, timeout)
    moved = 2 * size
    return NetworkCpu(shaped / moved, loop / moved, bandwidth_bps, moved)


@dataclass(frozen=True)
class JoinDelay:
    """How late the PS serves a step that starts while it sends to another worker.

    Attributes:
        delay_s: the median lag growth, clipped at 0 (seconds): what
            :func:`sgdsim.simulation.simulate_async` takes as ``pull_join_delay_s``.
        growth_s: (reps,) each race's lag growth: how much later the second
            worker's pull ended than the first's, less how much later it started.
        offset_s: how much later the second worker started, seconds.
        bytes_each: bytes each worker pulled per race.
        bandwidth_bps: the testbed NIC rate, bit/s.
    """

    delay_s: float
    growth_s: tuple[float, ...]
    offset_s: float
    bytes_each: int
    bandwidth_bps: float


def pull_join_delay(
    bandwidth_bps: float,
    reps: int = 12,
    transfer_s: float = 0.025,
    mtu: int = DEFAULT_MTU,
    queue: str = DEFAULT_QUEUE,
    threads: int = 2,
    timeout_s: float = 240.0,
) -> JoinDelay:
    """Measure the PS's join delay on the testbed with a race of two workers' pulls.

    A real TensorFlow PS holds four float32 variables of ``transfer_s`` worth
    of bytes at the rate in all; two real workers in a two-worker testbed pull
    all of them, ``reps`` times, the second worker starting each race 40 % of
    ``transfer_s`` after the first. With the PS NIC shared fairly (processor
    sharing), the first worker ends ``offset`` ahead, as it started (it is
    alone for ``offset``, then both share: it ends at ``2 transfer_s −
    offset``, the second at ``2 transfer_s``). If the PS starts serving the
    second worker's step ``d`` late because it is busy sending, the first is
    alone ``d`` longer and the lead grows by exactly ``d``. The median growth
    is the join delay (:class:`JoinDelay`).

    Raises:
        TestbedUnavailable: the testbed cannot run here.
        CalibrationError: a process failed or the race took over ``timeout_s``.
        ValueError: ``bandwidth_bps``, ``transfer_s`` or ``reps`` not > 0.
    """
    if not bandwidth_bps > 0 or not transfer_s > 0 or reps < 1:
        raise ValueError(
            f"need bandwidth_bps > 0, transfer_s > 0 and reps >= 1, "
            f"got {bandwidth_bps}, {transfer_s}, {reps}"
        )
    from sgdsim.simulation.bounds import tbf_payload_fraction

    tensors = 4
    rate_Bps = bandwidth_bps / 8 * tbf_payload_fraction(mtu)
    floats = max(1, int(transfer_s * rate_Bps / 4 / tensors))
    offset = 0.4 * transfer_s
    gap = 4 * transfer_s + 0.1
    env = child_env()
    with (
        tempfile.TemporaryDirectory(prefix="sgdsim-race-") as tmp,
        Testbed(2, bandwidth_bps, mtu=mtu, queue=queue) as tb,
    ):
        d = Path(tmp)
        cluster = {
            "ps": [f"{tb.address('ps')}:{_PORT}"],
            "worker": [f"{tb.address(f'w{k}')}:{_PORT}" for k in range(2)],
        }
        procs = {"ps": tb.popen("ps", ps_argv(cluster, threads, threads, timeout_s + 30), env=env)}
        for k in range(2):
            argv = [
                sys.executable, "-m", "sgdsim.testbed.pull_race",
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
            (d / "go").write_text(json.dumps({"start": time.time() + 0.3}))
            wait_workers(procs, 2, deadline)
            a, b = (json.loads((d / f"w{k}.json").read_text())["steps"] for k in range(2))
        except MeasurementError as e:
            raise CalibrationError(f"pull race: {e}") from e
        finally:
            for p in procs.values():
                stop(p)
    growth = tuple((b1 - a1) - (b0 - a0) for (_, a0, a1), (_, b0, b1) in zip(a, b, strict=True))
    return JoinDelay(
        delay_s=max(0.0, statistics.median(growth)),
        growth_s=growth,
        offset_s=offset,
        bytes_each=4 * floats * tensors,
        bandwidth_bps=bandwidth_bps,
    )
