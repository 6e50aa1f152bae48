"""Measure real asynchronous parameter-server training throughput on N workers.

One PS process (:mod:`sgdsim.profiling.server`) and N worker processes
(:mod:`sgdsim.testbed.worker`), each in its own namespace of a
:class:`~sgdsim.testbed.netns.Testbed` (or all on 127.0.0.1 with
``loopback=True``). The throughput is counted over the window in which every
worker is training, after a warm-up.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgdsim.hostcpu import HostCpu, busy_s, busy_steal, cpu_ticks, process_cpu_s
from sgdsim.io import atomic_path
from sgdsim.profiling.procs import free_ports, ps_argv, spawn, stop
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.progress import progress, write_line
from sgdsim.protocol import (
    MeasurementError,
    SteadyEstimate,
    episode_train_s,
    summarize,
    window_start,
)
from sgdsim.testbed.netns import Link, Testbed

#: TCP port of every task inside the testbed (each host has its own namespace).
TESTBED_PORT = 2222
__all__ = [
    "MeasurementError",
    "MeasurementResult",
    "run_async_measurement",
    "summarize",
    "window_start",
]

#: Environment variables that would send gRPC through a proxy.
_PROXY_VARS = ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy")


@dataclass(frozen=True)
class MeasurementResult:
    """Throughput of one asynchronous run.

    Attributes:
        workers: number of workers N.
        steps_per_s: steps per second of all workers together over the window.
        per_worker_steps_per_s: each worker's steps per second over the window.
        window_s: seconds of the window (after warm-up, while every worker trained).
        steps_per_s_windows: ``steps_per_s`` over consecutive equal sub-windows.
        bandwidth_bps: NIC rate per direction in bit/s; None = unshaped.
        latency_s: one-way host-to-host delay in seconds added by netem.
        loopback: True when run on 127.0.0.1 without namespaces or shaping.
        step_end_times: per worker, the end of every step it ran, in seconds
            since the window started (negative: warm-up).
        window_start: epoch seconds at which the window started.
        qdisc: counters of every shaping qdisc over the whole run
            (:meth:`~sgdsim.testbed.netns.Testbed.qdisc_stats`); empty unshaped.
        cpu_busy, cpu_steal: share of this machine's CPU time that was busy, and
            that the hypervisor stole, over the window (:class:`CpuSampler`);
            None if ``/proc/stat`` could not be read.
        background_busy: share of this machine's CPU busy in the second before
            the run started (other load; see :func:`background_busy`).
        start_offsets_s: (E, N) each episode's start offsets, seconds; empty
            without episodes (then ``steps_per_s_windows`` are sub-windows of
            one window, else one rate per episode).
        steady: the batch-means estimate of a ``steady`` protocol run
            (:func:`sgdsim.testbed.steady.run_steady_measurement`; then
            ``steps_per_s_windows`` are the batch rates); None otherwise.
        allreduces_per_step: all-reduce ops in the traced step of an
            ``allreduce`` run (:func:`sgdsim.testbed.sync.run_sync_measurement`;
            1: every gradient in one pack); None in other modes.
        cpu_s_per_step: CPU seconds per step over the window by who spent them
            (:meth:`CpuSampler.cpu_per_step`: ``worker``, all workers' processes;
            ``ps``; ``other``, the rest of the node's busy time); empty where
            not sampled.
    """

    workers: int
    steps_per_s: float
    per_worker_steps_per_s: tuple[float, ...]
    window_s: float
    steps_per_s_windows: tuple[float, ...]
    bandwidth_bps: float | None
    latency_s: float
    loopback: bool
    step_end_times: tuple[tuple[float, ...], ...] = ()
    window_start: float = 0.0
    qdisc: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    cpu_busy: float | None = None
    cpu_steal: float | None = None
    background_busy: float | None = None
    start_offsets_s: tuple[tuple[float, ...], ...] = ()
    steady: SteadyEstimate | None = None
    allreduces_per_step: int | None = None
    cpu_s_per_step: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def drops(self) -> int:
        """Packets the shaping queues dropped over the run (all hosts, both directions)."""
        return sum(q["drops"] for q in self.qdisc.values())


def log(msg: str) -> None:
    write_line(f"[measure] {msg}")


def child_env() -> dict[str, str]:
    """Environment of the testbed's TensorFlow processes: ours without proxies, CPU only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in _PROXY_VARS and k.lower() != "no_proxy"
    }
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _exit_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with code {rc}"


class CpuSampler:
    """Samples this machine's CPU time counters (``/proc/stat``) and the CPU time of
    the measured processes in a background thread.

    :meth:`fractions` gives, over a time window, the share of the node's CPU
    time that was busy (user, nice, system, irq, softirq) and stolen by the
    hypervisor (steal): a testbed point near busy = 1 is CPU-bound, and steal
    says how much of the node another tenant took. :meth:`cpu_per_step` splits
    the busy CPU seconds of the window by who spent them, per step.

    Args:
        interval_s: seconds between samples.
        pids: process ids by role (say ``{"worker": [...], "ps": [...]}``),
            whose CPU time (:func:`~sgdsim.hostcpu.process_cpu_s`) each sample reads.
    """

    def __init__(
        self, interval_s: float = 0.5, pids: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        self.samples: list[tuple[float, dict[str, int], dict[str, float | None]]] = []
        self._pids = {role: tuple(p) for role, p in (pids or {}).items()}
        self._stop = threading.Event()
        self._interval = interval_s
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _processes(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for role, pids in self._pids.items():
            times = [process_cpu_s(p) for p in pids]
            out[role] = None if any(t is None for t in times) else sum(t or 0.0 for t in times)
        return out

    def _run(self) -> None:
        while True:
            c = cpu_ticks()
            if c is not None:
                self.samples.append((time.time(), c, self._processes()))
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _inside(
        self, start: float, end: float
    ) -> list[tuple[float, dict[str, int], dict[str, float | None]]]:
        return [x for x in self.samples if start <= x[0] <= end]

    def fractions(self, start: float, end: float) -> tuple[float, float] | None:
        """(busy, steal) fractions of all CPU time between the samples nearest inside
        ``[start, end]`` (epoch seconds); None with fewer than two samples there."""
        inside = self._inside(start, end)
        if len(inside) < 2:
            return None
        return busy_steal(inside[0][1], inside[-1][1])

    def cpu_per_step(self, windows: Sequence[tuple[float, float, float]]) -> dict[str, float]:
        """CPU seconds per step over ``windows``, each ``(start, end, steps_per_s)``
        (epoch seconds; all workers' steps per second in it): each role's processes
        (all their threads), and ``other``, the node's busy CPU seconds less theirs
        (kernel work charged to no process, such as the emulated network's softirqs
        on the kernel's own threads, and any other load), summed over the windows
        and divided by their steps.

        Each window counts between its first and last sample that read every
        process's clock (a process that ended has none); a window with fewer than
        two such samples or no steps is left out; empty if every one is.
        """
        spent = dict.fromkeys(self._pids, 0.0)
        busy = steps = 0.0
        for start, end, steps_per_s in windows:
            inside = [x for x in self._inside(start, end) if None not in x[2].values()]
            if len(inside) < 2 or not steps_per_s > 0 or inside[-1][0] <= inside[0][0]:
                continue
            (t0, c0, p0), (t1, c1, p1) = inside[0], inside[-1]
            for role in self._pids:
                spent[role] += (p1[role] or 0.0) - (p0[role] or 0.0)
            busy += busy_s(c0, c1)
            steps += steps_per_s * (t1 - t0)
        if steps <= 0:
            return {}
        return {
            **{r: s / steps for r, s in spent.items()},
            "other": (busy - sum(spent.values())) / steps,
        }


def role_pids(procs: Mapping[str, subprocess.Popen[bytes]]) -> dict[str, list[int]]:
    """Process ids of a run's ``ps`` and ``w<k>`` processes by role (``ps``,
    ``worker``), for :class:`CpuSampler`; a role without processes is left out."""
    roles = {
        "worker": [p.pid for name, p in procs.items() if name.startswith("w")],
        "ps": [p.pid for name, p in procs.items() if name == "ps"],
    }
    return {role: pids for role, pids in roles.items() if pids}


def background_busy(seconds: float = 1.0) -> float | None:
    """Share of this machine's CPU time busy over ``seconds`` (``/proc/stat``), taken
    before a run starts: other load competes with the measured processes for the
    cores (and, with ``sched_autogroup``, a process in another session gets an equal
    share of them whatever its nice value). None if ``/proc/stat`` cannot be read."""
    with HostCpu() as host:
        time.sleep(seconds)
    return host.busy


def run_async_measurement(
    spec: ProfileSpec,
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float = 0.0,
    duration_s: float = 30.0,
    warmup_s: float = 5.0,
    loopback: bool = False,
    startup_s: float = 180.0,
    sub_windows: int = 4,
    warmup_steps: int = 3,
    min_steps: int = 4,
    max_step_s: float = 30.0,
    link: Link = Link(),
    start_offsets_s: Sequence[Sequence[float]] | None = None,
) -> MeasurementResult:
    """Run asynchronous PS training of ``spec`` on ``workers`` workers and measure steps/s.

    Each worker runs ``warmup_steps`` steps, then trains ``warmup_s +
    duration_s`` seconds plus a short allowance for staggered starts, and at
    least ``min_steps`` steps; the rates are counted over the window, after
    warm-up, in which every worker trained (see :func:`summarize`).

    With ``start_offsets_s`` the run has one *episode* per row: the workers
    wait until all of them finished the previous one (or their warm-up), then
    each starts at its offset from a common start, and trains ``warmup_s +
    duration_s`` plus the largest offset, and at least ``min_steps`` steps.
    Each episode's rate is counted from ``warmup_s`` after its last offset
    (:func:`summarize`); the result is their mean, and
    ``steps_per_s_windows`` holds one rate per episode. Asynchronous workers
    keep much of the relative phase they start with, and throughput depends on
    it (two workers that pull while the other pushes outrun two that pull
    together), so episodes from seeded random offsets measure the mean over
    phases that the simulator predicts, from the same offsets.

    The whole run is bounded by ``startup_s`` plus, per episode, its training
    time and ``max_step_s`` per minimum step, plus ``max_step_s`` per warm-up
    step. The PS and the workers are stopped, and the testbed removed, on
    success, error, timeout and Ctrl-C.

    Args:
        spec: model, batch_size, image_size, classes, optimizer, thread counts and seed.
        workers: number of worker processes N (>= 1).
        bandwidth_bps: each host NIC's rate per direction in bit/s; None = unshaped.
        latency_s: one-way host-to-host delay in seconds (netem); 0 = none.
        duration_s: seconds of measurement after warm-up (per episode).
        warmup_s: seconds skipped after the last worker's warm-up steps, or
            after an episode's last offset.
        loopback: run every process on 127.0.0.1 without namespaces (no root needed);
            no shaping, so the result records ``bandwidth_bps=None, latency_s=0``.
        startup_s: seconds allowed for process start, graph building and init.
        sub_windows: number of equal sub-windows in ``steps_per_s_windows``
            (without ``start_offsets_s``).
        warmup_steps: steps each worker runs before the window may start
            (TensorFlow's first steps in a process run slower).
        min_steps: steps each worker runs after warm-up (per episode), at
            least, however long they take (a window of few multi-second steps
            is noisy).
        max_step_s: seconds a step may take, for the deadline.
        link: the testbed's links: MTU (bytes), NIC queue, queue limit (bytes)
            and TCP congestion control (:class:`~sgdsim.testbed.netns.Link`);
            unused on loopback.
        start_offsets_s: (E, N) seconds after each episode's common start at
            which each worker begins it; None: one episode, each worker going
            on from its warm-up at once (they start as their processes come up).

    Raises:
        MeasurementError: a process failed (names it), the run exceeded its deadline,
            or no common window remained.
        TestbedUnavailable: not loopback and the testbed cannot run here.
        ValueError: workers < 1, duration_s <= 0, warmup_s < 0, sub_windows < 1,
            warmup_steps < 0, min_steps < 0, or start_offsets_s not (E >= 1, N)
            values >= 0.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    offsets = None if start_offsets_s is None else [list(map(float, e)) for e in start_offsets_s]
    if offsets is not None and (
        not offsets or any(len(e) != workers or min(e) < 0 for e in offsets)
    ):
        raise ValueError(
            f"start_offsets_s needs one row of {workers} values >= 0 per episode, "
            f"got {start_offsets_s}"
        )
    bad_steps = min(warmup_steps, min_steps) < 0
    if not duration_s > 0 or not warmup_s >= 0 or sub_windows < 1 or bad_steps:
        raise ValueError(
            "need duration_s > 0, warmup_s >= 0, sub_windows >= 1, warmup_steps >= 0, "
            f"min_steps >= 0; got {duration_s}, {warmup_s}, {sub_windows}, {warmup_steps}, "
            f"{min_steps}"
        )
    if loopback and (bandwidth_bps is not None or latency_s > 0):
        log("loopback mode: bandwidth and latency are not emulated (recorded as unshaped)")
        bandwidth_bps, latency_s = None, 0.0
    episodes = 1 if offsets is None else len(offsets)
    # allowance for workers that start a little later, or the offsets they start at
    if offsets is None:
        train_s = warmup_s + duration_s + 2.0 + 0.05 * duration_s
    else:
        train_s = episode_train_s(warmup_s, duration_s, offsets)
    limit_s = (
        startup_s + episodes * (train_s + max_step_s * (min_steps + 1)) + max_step_s * warmup_steps
    )
    env = child_env()
    testbed: Testbed | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    background = warn_if_busy()
    try:
        testbed, addr, where = open_hosts(workers, bandwidth_bps, latency_s, loopback, link)
        cluster = {"ps": [addr["ps"]], "worker": [addr[f"w{k}"] for k in range(workers)]}
        log(
            f"{spec.model} {spec.image_size}px batch {spec.batch_size}, {workers} async "
            f"worker(s) on {where}; {episodes} episode(s) of {warmup_s:g} s warm-up + "
            f"{duration_s:g} s, deadline {limit_s:g} s"
        )

        def launch(host: str, argv: list[str]) -> subprocess.Popen[bytes]:
            if testbed is None:
                return spawn(argv, env)
            return testbed.popen(host, argv, env)

        with tempfile.TemporaryDirectory(prefix="sgdsim-measure-") as tmp:
            procs["ps"] = launch(
                "ps",
                ps_argv(cluster, spec.intra_op_threads, spec.inter_op_threads, limit_s + 30),
            )
            outs = {f"w{k}": Path(tmp) / f"w{k}.json" for k in range(workers)}
            go = Path(tmp) / "go"
            for k in range(workers):
                barrier = (
                    []
                    if offsets is None
                    else ["--ready", f"{outs[f'w{k}']}.ready", "--go", str(go)]
                )
                procs[f"w{k}"] = launch(
                    f"w{k}",
                    [
                        sys.executable,
                        "-m",
                        "sgdsim.testbed.worker",
                        "--spec",
                        spec.to_json(),
                        "--cluster",
                        json.dumps(cluster),
                        "--task",
                        str(k),
                        "--duration",
                        f"{train_s:g}",
                        "--out",
                        str(outs[f"w{k}"]),
                        "--warmup-steps",
                        str(warmup_steps),
                        "--min-steps",
                        str(min_steps),
                        "--lifetime",
                        f"{limit_s + 30:.0f}",
                        "--episodes",
                        str(episodes),
                        *barrier,
                    ],
                )
            log(f"started {', '.join(procs)}")
            deadline = time.monotonic() + limit_s
            starts: list[float] = []  # each episode's common start (with offsets)
            # an episode is done when every worker is ready for the next one, or has exited
            done = progress(desc=f"[measure] N={workers} episodes", total=episodes, unit="episode")
            with CpuSampler(pids=role_pids(procs)) as cpu, done:
                for ep, row in enumerate(offsets or []):
                    readies = [Path(f"{outs[f'w{k}']}.ready.{ep}") for k in range(workers)]
                    wait_workers(
                        procs,
                        workers,
                        deadline,
                        until=functools.partial(all_exist, readies),
                    )
                    done.update(int(ep > 0))
                    starts.append(time.time() + 0.2)
                    with atomic_path(Path(f"{go}.{ep}")) as tmp_go:
                        tmp_go.write_text(json.dumps({"start": starts[-1], "offsets_s": row}))
                    log(
                        f"episode {ep + 1}/{episodes}: every worker is ready; they start at "
                        + ", ".join(f"{x:.3f}" for x in row)
                        + " s"
                    )
                wait_workers(procs, workers, deadline)
                done.update(done.total - done.n)
            results = read_results([outs[f"w{k}"] for k in range(workers)])
        times = [sorted(float(x) for x in d["step_end_times"]) for d in results]
        if offsets is None:
            t0 = window_start(times, warmup_s, warmup_steps)
            total, per, window, sub = summarize(times, warmup_s, sub_windows, warmup_steps)
            shares = cpu.fractions(t0, t0 + window)
            per_step = cpu.cpu_per_step([(t0, t0 + window, total)])
        else:
            rates, windows = [], []
            for ep, row in enumerate(offsets):
                ends = [sorted(float(x) for x in d["episodes"][ep]) for d in results]
                begin = starts[ep] + max(row) + warmup_s
                rates.append(summarize(ends, 0.0, 1, 0, begin))
                windows.append((begin, begin + rates[-1][2], rates[-1][0]))
            t0 = starts[0] + max(offsets[0]) + warmup_s
            total = statistics.fmean(r[0] for r in rates)
            per = tuple(statistics.fmean(r[1][k] for r in rates) for k in range(workers))
            window = sum(r[2] for r in rates)
            sub = tuple(r[0] for r in rates)
            shares = cpu.fractions(t0, starts[-1] + max(offsets[-1]) + warmup_s + rates[-1][2])
            per_step = cpu.cpu_per_step(windows)
        qdisc = testbed.qdisc_stats() if testbed is not None else {}
    finally:
        for p in procs.values():
            stop(p)
        if testbed is not None:
            testbed.close()
    result = MeasurementResult(
        workers=workers,
        steps_per_s=total,
        per_worker_steps_per_s=per,
        window_s=window,
        steps_per_s_windows=sub,
        bandwidth_bps=bandwidth_bps,
        latency_s=latency_s,
        loopback=loopback,
        step_end_times=tuple(tuple(x - t0 for x in t) for t in times),
        window_start=t0,
        qdisc=qdisc,
        background_busy=background,
        cpu_busy=None if shares is None else shares[0],
        cpu_steal=None if shares is None else shares[1],
        start_offsets_s=tuple(tuple(e) for e in offsets or ()),
        cpu_s_per_step=per_step,
    )
    cpu_text = "not sampled" if shares is None else f"busy {shares[0]:.0%}, stolen {shares[1]:.0%}"
    what = "episodes" if offsets is not None else "sub-windows"
    log(
        f"{workers} worker(s): {total:.3f} steps/s over {window:.1f} s "
        f"(per worker {', '.join(f'{r:.3f}' for r in per)}; "
        f"{what} {', '.join(f'{r:.3f}' for r in sub)}); "
        f"{result.drops} packets dropped by the shapers; CPU {cpu_text}{cpu_split(per_step)}"
    )
    return result


def cpu_split(per_step: Mapping[str, float]) -> str:
    """``per_step`` (:meth:`CpuSampler.cpu_per_step`) as a log fragment, '' if empty."""
    if not per_step:
        return ""
    return "; CPU per step " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in per_step.items())


def warn_if_busy() -> float | None:
    """This machine's busy CPU share over one second (:func:`background_busy`),
    logged as a warning above 20 %: other load takes cores from a measurement."""
    background = background_busy()
    if background is not None and background > 0.2:
        log(
            f"warning: this machine was {background:.0%} busy before the run started; other "
            "load takes cores from the measured processes (stop it for a clean measurement)"
        )
    return background


def open_hosts(
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float,
    loopback: bool,
    link: Link = Link(),
) -> tuple[Testbed | None, dict[str, str], str]:
    """The PS's and workers' addresses (``host:port`` by host name ``ps``, ``w0``, …)
    on a new :class:`Testbed` of ``bandwidth_bps`` (bit/s), ``latency_s`` (one
    way, seconds) and ``link``, or on free loopback ports with ``loopback``.

    Returns:
        The testbed (None on loopback; the caller closes it), the addresses and
        a one-line description of the network for the log.

    Raises:
        TestbedUnavailable: not loopback and the testbed cannot run here.
    """
    names = ["ps", *(f"w{k}" for k in range(workers))]
    if loopback:
        ports = free_ports(len(names))
        return None, {h: f"127.0.0.1:{p}" for h, p in zip(names, ports, strict=True)}, "loopback"
    testbed = Testbed(workers, bandwidth_bps, latency_s, link=link)
    rate = "unshaped" if bandwidth_bps is None else f"{bandwidth_bps / 1e6:g} Mbit/s"
    where = (
        f"testbed {testbed.run_id} ({rate}, +{latency_s * 1e3:g} ms one-way, "
        f"MTU {link.mtu}, {link.queue} queue of {testbed.queue_limit_bytes} bytes, "
        f"TCP {testbed.congestion_control})"
    )
    return testbed, {h: f"{testbed.address(h)}:{TESTBED_PORT}" for h in names}, where


def all_exist(paths: Sequence[Path]) -> bool:
    """Whether every one of ``paths`` exists."""
    return all(p.exists() for p in paths)


def read_results(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The JSON result each worker wrote, in worker order (``paths[k]``: worker ``k``'s).

    Raises:
        MeasurementError: a worker wrote no file or no valid JSON.
    """
    results = []
    for k, path in enumerate(paths):
        try:
            results.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:
            raise MeasurementError(f"worker w{k} wrote no valid result: {e}") from e
    return results


def wait_workers(
    procs: dict[str, subprocess.Popen[bytes]],
    workers: int,
    deadline: float,
    until: Callable[[], bool] | None = None,
) -> None:
    """Wait until every worker exited 0 (or ``until()`` holds); raise at the first
    failure or at ``deadline`` (``time.monotonic()`` seconds)."""
    done: set[str] = set()
    while len(done) < workers and not (until is not None and until()):
        for name, p in procs.items():
            rc = p.poll()
            if rc is None or name in done:
                continue
            if name == "ps":
                raise MeasurementError(
                    f"the PS process {_exit_text(rc)} before the workers finished "
                    "(its error is in the log above)"
                )
            if rc != 0:
                raise MeasurementError(
                    f"worker process {name} {_exit_text(rc)} (its error is in the log above); "
                    "stopped the other processes"
                )
            done.add(name)
            log(f"{name} finished")
        if time.monotonic() > deadline:
            raise MeasurementError(
                "measurement exceeded its deadline; still running: "
                f"{', '.join(n for n, p in procs.items() if p.poll() is None)}"
            )
        time.sleep(0.2)
