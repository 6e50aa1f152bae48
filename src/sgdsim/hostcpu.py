"""This machine's CPU time counters (``/proc/stat``): how busy the node was and
how much of it the hypervisor stole while something was measured; and each
process's own CPU time (:func:`process_cpu_s`).

A virtual machine's host may run other tenants on the same physical cores;
the time it takes from this VM is ``steal``. A profile, a calibration or a
measurement taken under steal runs slower than the same one on a quiet host,
and a prediction built from one stage taken quiet and checked against
another taken under steal misses by the difference, whatever the model.
Every measuring stage therefore records the steal over its own run.
"""

from __future__ import annotations

import os
import time

#: Fields of the aggregate ``cpu`` line of ``/proc/stat`` that :func:`cpu_ticks` reads.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

#: The :data:`CPU_FIELDS` that count as busy: the rest is idle, waiting on I/O or stolen.
BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")

#: Share of the CPU time stolen above which a stage's figures are flagged as
#: taken on a disturbed host (the quiet runs of this project's 2-core VM
#: averaged 2 %; a run at 8.7 % moved single-worker step times by up to 22 %).
STEAL_WARN = 0.05


def cpu_ticks() -> dict[str, int] | None:
    """This machine's CPU time so far per :data:`CPU_FIELDS`, in clock ticks (all
    cores, the aggregate ``cpu`` line of ``/proc/stat``), or None if unreadable."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    if not parts or parts[0] != "cpu" or len(parts) < 9:
        return None
    return dict(zip(CPU_FIELDS, (int(x) for x in parts[1:9]), strict=True))


def busy_s(a: dict[str, int], b: dict[str, int]) -> float:
    """CPU seconds the node was busy (:data:`BUSY_FIELDS`, all cores) between two
    :func:`cpu_ticks` readings; ``/proc/stat`` counts in ``USER_HZ`` ticks
    (``sysconf(SC_CLK_TCK)``, see ``proc(5)``)."""
    return sum(b[f] - a[f] for f in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def busy_steal(a: dict[str, int], b: dict[str, int]) -> tuple[float, float] | None:
    """(busy, steal) shares of all CPU time between two :func:`cpu_ticks` readings;
    busy as :data:`BUSY_FIELDS`. None if no time passed."""
    d = {f: b[f] - a[f] for f in CPU_FIELDS}
    total = sum(d.values())
    if total <= 0:
        return None
    return sum(d[f] for f in BUSY_FIELDS) / total, d["steal"] / total


class HostCpu:
    """The node's busy and stolen CPU shares over a ``with`` block.

    ``busy`` and ``steal`` (shares of all CPU time, 0…1) are None until the
    block ends, and stay None where ``/proc/stat`` cannot be read or no time
    passed.
    """

    def __init__(self) -> None:
        self.busy: float | None = None
        self.steal: float | None = None
        self._start: dict[str, int] | None = None

    def __enter__(self) -> HostCpu:
        self._start = cpu_ticks()
        return self

    def __exit__(self, *exc: object) -> None:
        end = cpu_ticks()
        if self._start is not None and end is not None:
            shares = busy_steal(self._start, end)
            if shares is not None:
                self.busy, self.steal = shares


def steal_warning(what: str, steal: float | None) -> str | None:
    """A one-line warning when ``steal`` exceeds :data:`STEAL_WARN`, else None."""
    if steal is None or steal <= STEAL_WARN:
        return None
    return (
        f"warning: the hypervisor stole {steal:.1%} of this machine's CPU during {what} "
        f"(above {STEAL_WARN:.0%}): its figures are slower than on a quiet host; "
        "predictions and measurements taken under different steal are not comparable"
    )


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) used so far by process ``pid``.

    Reads the process's CPU-time clock (``clock_gettime`` of the clock id
    ``clock_getcpuclockid(pid)`` returns, which Linux builds as
    ``(~pid << 3) | CPUCLOCK_SCHED``; see ``clock_getcpuclockid(3)`` and
    ``include/linux/posix-timers.h`` of the kernel): one system call, in
    nanoseconds. Not a sum over ``/proc/PID/task/*/schedstat``: that costs
    the reader one file read per thread (a TensorFlow process has ~110), about
    6 ms of the worker's own CPU per step for its and the PS's threads, which
    the worker's figure would then count. None where the clock cannot be read
    (not Linux, or the process is gone).
    """
    if pid == os.getpid():
        return time.process_time()
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, OverflowError, AttributeError):
        return None
