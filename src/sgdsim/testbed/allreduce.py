"""Measure synchronous ring all-reduce training on the emulated network.

Each of the N workers runs :mod:`sgdsim.testbed.allreduce_worker` (TensorFlow's
``MultiWorkerMirroredStrategy`` with the RING implementation) in its own
namespace of a :class:`~sgdsim.testbed.netns.Testbed`, so every ring hop
crosses two shaped NICs, as between real hosts. The workers step in lockstep;
the result counts worker steps per second (N per iteration), as the
asynchronous measurement does, so samples/s = steps/s × batch in both modes.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sgdsim.profiling.procs import free_ports, spawn
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.testbed.netns import Link, Testbed
from sgdsim.testbed.run import MeasurementError, child_env, log, wait_workers

#: Port every worker listens on inside its own namespace.
RING_PORT = 29500


@dataclass(frozen=True)
class AllReduceResult:
    """One measured all-reduce run.

    Attributes:
        workers: N.
        steps_per_s: worker steps per second, all workers together (N × iterations/s).
        iteration_s: median seconds between two consecutive step ends of a worker.
        step_end_times: (N, S) epoch seconds of every timed step end of each worker.
        bandwidth_bps, mtu, queue: the network it ran on (None: unshaped loopback).
    """

    workers: int
    steps_per_s: float
    iteration_s: float
    step_end_times: tuple[tuple[float, ...], ...]
    bandwidth_bps: float | None
    mtu: int
    queue: str


def run_allreduce_measurement(
    spec: ProfileSpec,
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float = 0.0,
    steps: int = 30,
    warmup_steps: int = 3,
    loopback: bool = False,
    link: Link = Link(),
    startup_s: float = 180.0,
    max_step_s: float = 30.0,
) -> AllReduceResult:
    """Train ``spec`` synchronously on ``workers`` ring all-reduce workers and measure steps/s.

    Args:
        spec: model, batch, image size and threads of every worker.
        workers: N ≥ 1 (N = 1 trains alone: no all-reduce crosses the network).
        bandwidth_bps: each host NIC's rate per direction, bit/s (None: unshaped).
        latency_s: one-way delay added to every packet, seconds.
        steps: timed steps per worker (≥ 2); ``warmup_steps`` untimed ones first.
        loopback: run every worker on 127.0.0.1 instead of the testbed (no root).
        link: the testbed's links: MTU (bytes), NIC queue, queue limit (bytes)
            and TCP congestion control (:class:`~sgdsim.testbed.netns.Link`);
            unused on loopback.
        startup_s, max_step_s: the run's deadline is ``startup_s + (steps +
            warmup_steps) × max_step_s`` seconds.

    Raises:
        MeasurementError: a worker failed or the deadline passed (all stopped).
        TestbedUnavailable: no root or iproute2 (and not ``loopback``).
        ValueError: N < 1 or ``steps`` < 2.
    """
    if workers < 1 or steps < 2:
        raise ValueError(f"need workers >= 1 and steps >= 2, got {workers}, {steps}")
    names = [f"w{k}" for k in range(workers)]
    testbed: Testbed | None = None
    procs = {}
    limit_s = startup_s + (steps + warmup_steps) * max_step_s
    env = child_env()
    try:
        if loopback:
            addr = [f"127.0.0.1:{p}" for p in free_ports(workers)]
        else:
            testbed = Testbed(workers, bandwidth_bps, latency_s, link=link)
            addr = [f"{testbed.address(h)}:{RING_PORT}" for h in names]
        log(
            f"{spec.model} {spec.image_size}px batch {spec.batch_size}, {workers} ring "
            f"all-reduce worker(s) on {'loopback' if testbed is None else testbed.run_id}; "
            f"{warmup_steps} + {steps} steps, deadline {limit_s:g} s"
        )
        with tempfile.TemporaryDirectory(prefix="sgdsim-allreduce-") as tmp:
            outs = [Path(tmp) / f"{h}.json" for h in names]
            for k, host in enumerate(names):
                argv = [
                    sys.executable, "-m", "sgdsim.testbed.allreduce_worker",
                    "--spec", spec.to_json(), "--workers", ",".join(addr),
                    "--task", str(k), "--steps", str(steps),
                    "--warmup-steps", str(warmup_steps), "--out", str(outs[k]),
                    "--lifetime", f"{limit_s + 30:.0f}",
                ]  # fmt: skip
                procs[host] = (
                    spawn(argv, env) if testbed is None else testbed.popen(host, argv, env)
                )
            wait_workers(procs, workers, time.monotonic() + limit_s)
            ends = [tuple(json.loads(p.read_text())["step_end_times"]) for p in outs]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        if testbed is not None:
            testbed.close()
    gaps = [b - a for e in ends for a, b in itertools.pairwise(e)]
    if not gaps or min(gaps) <= 0:
        raise MeasurementError("the workers' step end times are not increasing")
    rate = statistics.fmean((len(e) - 1) / (e[-1] - e[0]) for e in ends)
    return AllReduceResult(
        workers=workers,
        steps_per_s=workers * rate,
        iteration_s=statistics.median(gaps),
        step_end_times=tuple(ends),
        bandwidth_bps=None if testbed is None else bandwidth_bps,
        mtu=link.mtu,
        queue=link.queue,
    )
