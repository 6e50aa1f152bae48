"""Measure synchronous training on the testbed: ``sync_ps`` and ``allreduce`` modes.

``sync_ps``: one PS (:mod:`sgdsim.profiling.server`) and N graph-mode workers
(:mod:`sgdsim.testbed.worker` with ``--sync-replicas N``: TensorFlow's
``SyncReplicasOptimizer``). ``allreduce``: N workers of
:mod:`sgdsim.testbed.allreduce_worker` (``MultiWorkerMirroredStrategy``, RING
all-reduce over gRPC). Each host in its own namespace of a
:class:`~sgdsim.testbed.netns.Testbed` (or all on 127.0.0.1 with ``loopback``).

Synchronous workers step in lockstep: a worker cannot leave while the others
still wait for its gradients. So the workers append every step end to a file
as they go, the parent decides from those when the protocol has measured
enough (the ``episodes`` protocol's duration and minimum steps, or the
``steady`` protocol's convergence rule, :func:`sgdsim.protocol.steady_stop`),
and it writes one step count S, a second of steps beyond the last step so far,
to a stop file: every worker stops after its S-th step. Throughput counts
worker steps per second, N per synchronous iteration, as the asynchronous
measurement does, so samples/s = steps/s × batch in every mode.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sgdsim.io import atomic_path
from sgdsim.profiling.procs import ps_argv, spawn, stop
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.protocol import (
    MeasurementError,
    SteadyEstimate,
    SteadyRule,
    steady_estimate,
    steady_stop,
    summarize,
    window_start,
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
from sgdsim.testbed.steady import read_progress

#: Seconds of steps the workers run past the parent's decision (its polling and
#: the stop file's way to every worker must not let one pass the count).
STOP_SLACK_S = 1.0


def episode_measured(
    step_ends: Sequence[Sequence[float]],
    warmup_s: float,
    warmup_steps: int,
    duration_s: float,
    min_steps: int,
) -> bool:
    """Whether the step ends so far (epoch s, per worker) hold an ``episodes``
    protocol window: ``duration_s`` seconds from ``warmup_s`` after the last
    worker's warm-up steps, and at least ``min_steps`` (and 2) step ends of
    every worker in it."""
    if any(len(t) < max(warmup_steps, 1) for t in step_ends):
        return False
    t0 = window_start(step_ends, warmup_s, warmup_steps)
    return all(
        t[-1] >= t0 + duration_s and sum(x > t0 for x in t) >= max(min_steps, 2) for t in step_ends
    )


def stop_count(step_ends: Sequence[Sequence[float]], slack_s: float = STOP_SLACK_S) -> int:
    """The step count S every worker stops at: the most steps a worker ran so
    far, plus the steps of ``slack_s`` seconds at the latest median step time,
    plus 2."""
    gaps = [b - a for t in step_ends for a, b in zip(t[-6:-1], t[-5:], strict=False)]
    gap = statistics.median(gaps) if gaps else slack_s
    return max(len(t) for t in step_ends) + math.ceil(slack_s / max(gap, 1e-4)) + 2


def run_sync_measurement(
    spec: ProfileSpec,
    mode: str,
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float = 0.0,
    *,
    duration_s: float = 20.0,
    warmup_s: float = 2.0,
    warmup_steps: int = 3,
    min_steps: int = 4,
    rule: SteadyRule | None = None,
    loopback: bool = False,
    link: Link = Link(),
    startup_s: float = 180.0,
    max_step_s: float = 30.0,
) -> MeasurementResult:
    """Train ``spec`` synchronously on ``workers`` workers and measure steps/s.

    Protocol ``episodes`` (``rule`` None): one run (synchronous workers have no
    relative phase to draw); the window starts ``warmup_s`` after the last
    worker's ``warmup_steps`` steps and lasts at least ``duration_s`` and
    ``min_steps`` steps of every worker, scored by
    :func:`sgdsim.protocol.summarize` (``steps_per_s_windows``: 4 equal
    sub-windows). Protocol ``steady`` (``rule`` given): until the batch-means
    estimate has converged, scored by :func:`sgdsim.protocol.steady_stop` as
    :func:`sgdsim.testbed.run_steady_measurement` does.

    Args:
        spec: model, batch, image size, optimizer, threads and seed (the
            profile's; ``pull_order`` applies to ``sync_ps``).
        mode: ``sync_ps`` or ``allreduce``.
        workers: N ≥ 1.
        bandwidth_bps: each host NIC's rate per direction, bit/s (None: unshaped).
        latency_s: one-way delay added by netem, seconds.
        duration_s, warmup_s, warmup_steps, min_steps: the ``episodes`` protocol
            (``warmup_steps`` also before the ``steady`` rule's settling).
        rule: the ``steady`` protocol's rule (None: ``episodes``).
        loopback: every process on 127.0.0.1 without namespaces (no root).
        link: the testbed's links: MTU (bytes), NIC queue, queue limit (bytes)
            and TCP congestion control (:class:`~sgdsim.testbed.netns.Link`);
            unused on loopback.
        startup_s, max_step_s: the run's deadline is ``startup_s`` + the
            protocol's seconds + ``max_step_s`` per warm-up and minimum step.

    Raises:
        MeasurementError: a process failed, the deadline passed, or no window.
        TestbedUnavailable: not loopback and the testbed cannot run here.
        ValueError: unknown mode, N < 1, duration_s ≤ 0, warmup_s < 0,
            warmup_steps < 1 or min_steps < 0.
    """
    from sgdsim.simulation.sync import SYNC_MODES  # here: the testbed's processes skip it

    if mode not in SYNC_MODES:
        raise ValueError(f"mode must be one of {', '.join(SYNC_MODES)}, got {mode!r}")
    if workers < 1 or not duration_s > 0 or not warmup_s >= 0 or warmup_steps < 1 or min_steps < 0:
        raise ValueError(
            "need workers >= 1, duration_s > 0, warmup_s >= 0, warmup_steps >= 1, min_steps "
            f">= 0; got {workers}, {duration_s}, {warmup_s}, {warmup_steps}, {min_steps}"
        )
    if loopback:
        bandwidth_bps, latency_s = None, 0.0
    if rule is not None:
        warmup_steps = rule.warmup_steps
        measure_s = rule.settle_s + rule.max_s
    else:
        measure_s = warmup_s + duration_s
    limit_s = startup_s + measure_s + STOP_SLACK_S + max_step_s * (warmup_steps + min_steps + 3)
    env = child_env()
    testbed: Testbed | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    background = warn_if_busy()
    decided: list[float] = []
    try:
        testbed, addr, where = open_hosts(workers, bandwidth_bps, latency_s, loopback, link)
        what = "steady state" if rule is not None else f"{warmup_s:g} s warm-up + {duration_s:g} s"
        log(
            f"{spec.model} {spec.image_size}px batch {spec.batch_size}, {workers} {mode} "
            f"worker(s) on {where}; {what}, deadline {limit_s:g} s"
        )

        def launch(host: str, argv: list[str]) -> subprocess.Popen[bytes]:
            return spawn(argv, env) if testbed is None else testbed.popen(host, argv, env)

        with tempfile.TemporaryDirectory(prefix="sgdsim-sync-") as tmp:
            outs = [Path(tmp) / f"w{k}.json" for k in range(workers)]
            feeds = [Path(tmp) / f"w{k}.steps" for k in range(workers)]
            stop_file = Path(tmp) / "stop"
            common = ["--lifetime", f"{limit_s + 30:.0f}", "--stop", str(stop_file)]
            if mode == "sync_ps":
                cluster = {"ps": [addr["ps"]], "worker": [addr[f"w{k}"] for k in range(workers)]}
                procs["ps"] = launch(
                    "ps",
                    ps_argv(cluster, spec.intra_op_threads, spec.inter_op_threads, limit_s + 30),
                )
            for k in range(workers):
                if mode == "sync_ps":
                    argv = [
                        "sgdsim.testbed.worker", "--cluster", json.dumps(cluster),
                        "--sync-replicas", str(workers), "--duration", f"{limit_s:.0f}",
                    ]  # fmt: skip
                else:
                    argv = [
                        "sgdsim.testbed.allreduce_worker",
                        "--workers", ",".join(addr[f"w{j}"] for j in range(workers)),
                        "--steps", "1000000",
                    ]  # fmt: skip
                procs[f"w{k}"] = launch(
                    f"w{k}",
                    [
                        sys.executable, "-m", *argv, "--spec", spec.to_json(),
                        "--task", str(k), "--out", str(outs[k]),
                        "--warmup-steps", str(warmup_steps), "--progress", str(feeds[k]),
                        *common,
                    ],
                )  # fmt: skip
            log(f"started {', '.join(procs)}")
            deadline = time.monotonic() + limit_s

            def measured() -> bool:
                ends = [read_progress(f) for f in feeds]
                if rule is not None:
                    done = steady_stop(ends, rule) is not None
                else:
                    done = episode_measured(ends, warmup_s, warmup_steps, duration_s, min_steps)
                if done:
                    count = stop_count(ends)
                    with atomic_path(stop_file) as t:
                        t.write_text(f"{count}\n")
                    decided.append(time.time())
                    log(f"measured enough; every worker stops after step {count}")
                return done

            with CpuSampler(pids=role_pids(procs)) as cpu:
                wait_workers(procs, workers, deadline, until=measured)
                wait_workers(procs, workers, deadline)
            results = read_results([outs[k] for k in range(workers)])
        times = [
            sorted(float(x) for x in (*d.get("warmup_end_times", ()), *d["step_end_times"]))
            for d in results
        ]
        packs = None
        if mode == "allreduce":
            ops = results[0].get("collective_ops", {})
            packs = sum(n for t, n in ops.items() if t.startswith("CollectiveReduce"))
        est: SteadyEstimate | None = None
        if rule is not None:
            est = steady_stop(times, rule)
            if est is None:
                late = steady_estimate(times, rule)
                if late is None:
                    raise MeasurementError("no steady-state window after warm-up and settling")
                est = dataclasses.replace(late, converged=False)
            total, per, window = est.steps_per_s, est.per_worker_steps_per_s, est.window_s
            sub, t0 = est.batch_steps_per_s, est.start
        else:
            total, per, window, sub = summarize(times, warmup_s, 4, warmup_steps)
            t0 = window_start(times, warmup_s, warmup_steps)
        shares = cpu.fractions(t0, t0 + window)
        per_step = cpu.cpu_per_step([(t0, t0 + window, total)])
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
        loopback=testbed is None,
        step_end_times=tuple(tuple(x - t0 for x in t) for t in times),
        window_start=t0,
        qdisc=qdisc,
        background_busy=background,
        cpu_busy=None if shares is None else shares[0],
        cpu_steal=None if shares is None else shares[1],
        steady=est,
        allreduces_per_step=packs,
        cpu_s_per_step=per_step,
    )
    log(
        f"{workers} {mode} worker(s): {total:.3f} steps/s over {window:.1f} s (per worker "
        f"{', '.join(f'{r:.3f}' for r in per)}); {result.drops} packets dropped by the shapers"
        + ("" if packs is None else f"; {packs} all-reduce(s) per step")
        + cpu_split(per_step)
    )
    return result
