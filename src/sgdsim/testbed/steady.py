"""Measure steady-state asynchronous PS throughput on the testbed (``steady`` protocol).

Every worker starts when its process is up, as in a training job (no chosen
phases), runs ``rule.warmup_steps`` steps and goes on training; the window
starts ``rule.settle_s`` after the last worker's warm-up. The parent reads
every worker's step ends as they happen and stops the run at the first window
over which the batch-means estimate has converged, or after ``rule.max_s``
seconds of window (:func:`sgdsim.protocol.steady_stop`, the same rule that
scores the prediction). Once it has decided, the workers are stopped at once:
a step still running ends after the window and adds nothing to it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sgdsim.hostcpu import steal_warning
from sgdsim.profiling.procs import ps_argv, spawn, stop
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.protocol import (
    MeasurementError,
    SteadyEstimate,
    SteadyRule,
    steady_estimate,
    steady_stop,
)
from sgdsim.testbed.netns import Link, Testbed
from sgdsim.testbed.run import (
    CpuSampler,
    MeasurementResult,
    child_env,
    cpu_split,
    log,
    open_hosts,
    read_results,
    role_pids,
    wait_workers,
    warn_if_busy,
)

#: Seconds a capture runs on after the workers are stopped, to read its queued packets.
CAPTURE_DRAIN_S = 1.0


def read_progress(path: Path) -> list[float]:
    """Step ends (epoch s) a worker appended to ``path`` so far; a last line
    still being written is left out."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [float(x) for x in text.split("\n")[:-1] if x]


def run_steady_measurement(
    spec: ProfileSpec,
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float = 0.0,
    rule: SteadyRule | None = None,
    loopback: bool = False,
    startup_s: float = 180.0,
    max_step_s: float = 30.0,
    link: Link = Link(),
    capture_path: str | None = None,
    capture_payload: bool = False,
    skeleton: str | None = None,
) -> MeasurementResult:
    """Run asynchronous PS training of ``spec`` on ``workers`` workers until its
    steady-state throughput has converged (see the module docstring).

    Each worker appends its step ends to a file as it goes (``--progress`` of
    :mod:`sgdsim.testbed.worker`); every ``rule.check_every_s`` seconds the
    parent evaluates :func:`~sgdsim.protocol.steady_stop` on them and, once it
    decides, stops the workers (their steps in flight end after the window)
    and scores the same files again, so the same step ends give the same
    estimate as the live check. Workers that end on their own bound first are
    scored from their final records.

    The run is bounded by ``startup_s`` + ``max_step_s`` per warm-up step +
    ``rule.settle_s`` + ``rule.max_s`` + 2 ``max_step_s``. The PS and the
    workers are stopped, and the testbed removed, on success, error, timeout
    and Ctrl-C.

    Args:
        spec, workers, bandwidth_bps, latency_s, loopback, startup_s,
            max_step_s, link: as for :func:`sgdsim.testbed.run_async_measurement`.
        rule: the protocol's parameters (default :class:`~sgdsim.protocol.SteadyRule`).
        capture_path: where to write a header capture of the PS's port
            (:meth:`~sgdsim.testbed.netns.Testbed.capture`) for the whole run;
            testbed only.
        capture_payload: capture whole packets, not only headers (for
            :func:`sgdsim.testbed.wire.tensor_timeline`; about the bytes
            the run moves, on disk).
        skeleton: a workload JSON path: the workers run the skeleton of its
            profiled step (:mod:`sgdsim.testbed.skeleton`) instead of
            training ``spec`` (whose threads they keep).

    Returns:
        A :class:`~sgdsim.testbed.run.MeasurementResult` with ``steady`` set:
        ``steps_per_s`` is the estimate, ``steps_per_s_windows`` the batch
        rates, ``window_s`` the window, ``step_end_times`` every step end of
        every worker in seconds since the window started (negative: warm-up
        and settling).

    Raises:
        MeasurementError: a process failed, the run exceeded its bound, or no
            window remained after warm-up and settling.
        TestbedUnavailable: not loopback and the testbed cannot run here.
        ValueError: workers < 1.
    """
    rule = rule or SteadyRule()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if loopback and (bandwidth_bps is not None or latency_s > 0):
        log("loopback mode: bandwidth and latency are not emulated (recorded as unshaped)")
        bandwidth_bps, latency_s = None, 0.0
    # a worker's own bound (the stop file normally ends it long before): the
    # last worker may finish its warm-up up to startup_s after this one
    train_s = startup_s + rule.settle_s + rule.max_s + 2 * max_step_s
    limit_s = startup_s + max_step_s * rule.warmup_steps + train_s
    env = child_env()
    testbed: Testbed | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    background = warn_if_busy()
    decided: list[SteadyEstimate] = []
    capture: subprocess.Popen[bytes] | None = None
    try:
        testbed, addr, where = open_hosts(workers, bandwidth_bps, latency_s, loopback, link)
        cluster = {"ps": [addr["ps"]], "worker": [addr[f"w{k}"] for k in range(workers)]}
        if capture_path is not None:
            if testbed is None:
                raise ValueError("capture_path needs the testbed (not loopback)")
            capture = testbed.capture("ps", capture_path, limit_s + 30, capture_payload)
        log(
            f"{spec.model} {spec.image_size}px batch {spec.batch_size}, {workers} async "
            f"worker(s) on {where}; steady state: {rule.warmup_steps} warm-up step(s), "
            f"{rule.settle_s:g} s settling, then until ±{rule.rel_half_width:.1%} at "
            f"{rule.confidence:.0%} ({rule.batches} batches, >= {rule.min_steps} steps per "
            f"worker) or {rule.max_s:g} s; deadline {limit_s:g} s"
        )

        def launch(host: str, argv: list[str]) -> subprocess.Popen[bytes]:
            return spawn(argv, env) if testbed is None else testbed.popen(host, argv, env)

        with tempfile.TemporaryDirectory(prefix="sgdsim-steady-") as tmp:
            procs["ps"] = launch(
                "ps",
                ps_argv(cluster, spec.intra_op_threads, spec.inter_op_threads, limit_s + 30),
            )
            outs = {k: Path(tmp) / f"w{k}.json" for k in range(workers)}
            feeds = [Path(tmp) / f"w{k}.steps" for k in range(workers)]
            for k in range(workers):
                procs[f"w{k}"] = launch(
                    f"w{k}",
                    [
                        sys.executable, "-m", "sgdsim.testbed.worker",
                        "--spec", spec.to_json(),
                        "--cluster", json.dumps(cluster),
                        "--task", str(k),
                        "--duration", f"{train_s:g}",
                        "--out", str(outs[k]),
                        "--warmup-steps", str(rule.warmup_steps),
                        "--lifetime", f"{limit_s + 30:.0f}",
                        "--progress", str(feeds[k]),
                        *(["--skeleton", skeleton] if skeleton is not None else []),
                    ],
                )  # fmt: skip
            log(f"started {', '.join(procs)}")
            deadline = time.monotonic() + limit_s
            last_check = [0.0]

            def converged() -> bool:
                now = time.monotonic()
                if now - last_check[0] < rule.check_every_s:
                    return False
                last_check[0] = now
                est = steady_stop([read_progress(f) for f in feeds], rule)
                if est is None:
                    return False
                decided.append(est)
                log(
                    f"{'converged' if est.converged else 'not converged, time bound reached'}"
                    f" after {est.window_s:.1f} s of window: {est.steps_per_s:.3f} steps/s "
                    f"± {est.rel_half_width:.1%}; stopping the workers"
                )
                return True

            with CpuSampler(pids=role_pids(procs)) as cpu:
                wait_workers(procs, workers, deadline, until=converged)
                if decided:
                    for k in range(workers):
                        stop(procs[f"w{k}"])
                    times = [sorted(read_progress(f)) for f in feeds]
                    if capture is not None:
                        time.sleep(CAPTURE_DRAIN_S)  # tcpdump reads what is still queued
                else:
                    wait_workers(procs, workers, deadline)
                    results = read_results([outs[k] for k in range(workers)])
                    times = [sorted(float(x) for x in d["step_end_times"]) for d in results]
        est = steady_stop(times, rule)
        if est is None:  # the workers stopped on their own bound before a decision
            late = steady_estimate(times, rule)
            if late is None:
                raise MeasurementError(
                    "no steady-state window: the workers stopped before the warm-up "
                    f"({rule.warmup_steps} step(s)) and settling ({rule.settle_s:g} s) ended"
                )
            est = dataclasses.replace(late, converged=False)
        shares = cpu.fractions(est.start, est.end)
        per_step = cpu.cpu_per_step([(est.start, est.end, est.steps_per_s)])
        qdisc = testbed.qdisc_stats() if testbed is not None else {}
        if capture is not None and capture.poll() is not None:
            raise MeasurementError(
                f"the capture (tcpdump) ended early, exit code {capture.returncode}"
            )
    finally:
        for p in [*([capture] if capture is not None else []), *procs.values()]:
            stop(p)
        if testbed is not None:
            testbed.close()
    result = MeasurementResult(
        workers=workers,
        steps_per_s=est.steps_per_s,
        per_worker_steps_per_s=est.per_worker_steps_per_s,
        window_s=est.window_s,
        steps_per_s_windows=est.batch_steps_per_s,
        bandwidth_bps=bandwidth_bps,
        latency_s=latency_s,
        loopback=loopback,
        step_end_times=tuple(tuple(x - est.start for x in t) for t in times),
        window_start=est.start,
        qdisc=qdisc,
        background_busy=background,
        cpu_busy=None if shares is None else shares[0],
        cpu_steal=None if shares is None else shares[1],
        steady=est,
        cpu_s_per_step=per_step,
    )
    log(
        f"{workers} worker(s): {est.steps_per_s:.3f} ± {est.half_width:.3f} steps/s "
        f"({'converged' if est.converged else 'NOT converged'}) over {est.window_s:.1f} s "
        f"(per worker {', '.join(f'{r:.3f}' for r in est.per_worker_steps_per_s)}; steps "
        f"{', '.join(map(str, est.steps))}); {result.drops} packets dropped by the shapers"
        + cpu_split(per_step)
    )
    warn = steal_warning("the measurement's window", result.cpu_steal)
    if warn is not None:
        log(warn)
    return result
