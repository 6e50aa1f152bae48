"""Simulator benchmark: events per second and seconds per grid point.

Run ``sgdsim bench --workload results/workloads/cpu/ResNet50.json``, or
``sgdsim bench`` alone for the synthetic ResNet-50 of :func:`synthetic_resnet50`.
Each point is predicted exactly as the pipeline's ``simulate`` rule predicts
it (:func:`~sgdsim.simulation.point.predict_point`: the policy's pull gap, the
placement, the CPU bound), with one replication of ``steps_per_worker`` steps
(the pipeline's steady rule runs an async point with N > 1 for as many steps
as its rate needs to converge; a fixed count keeps the figures comparable).
Each configuration is run ``repeat`` times on one core and the fastest wall
time is kept (the least disturbed by other load, as ``timeit`` advises).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sgdsim.simulation import POLICIES, Network, Workload
from sgdsim.simulation.point import SimParams, predict_point
from sgdsim.simulation.sync import FUSIONS


def _resnet50_layers() -> list[tuple[int, int]]:
    """(kernel parameters, output channels) of ResNet-50 v1's 53 convolutions and
    its classifier, in forward order (He, Zhang, Ren, Sun, CVPR 2016, Table 1)."""
    layers = [(7 * 7 * 3 * 64, 64)]
    c_in = 64
    for blocks, width in ((3, 64), (4, 128), (6, 256), (3, 512)):
        for b in range(blocks):
            out = 4 * width
            layers += [(c_in * width, width), (9 * width * width, width), (width * out, out)]
            if b == 0:
                layers.append((c_in * out, out))  # projection shortcut
            c_in = out
    layers.append((2048 * 1000, 1000))  # fully connected
    return layers


def synthetic_resnet50(compute_s: float = 0.72, seed: int = 0) -> Workload:
    """A ResNet-50 step for benchmarking: 161 float32 variables of ResNet-50 v1
    without convolution biases (53 kernels, 53 batch-norm gamma/beta pairs, the
    classifier's kernel and bias: 25.56 M parameters, 102 MB), each pulled and
    pushed once per step.

    162 segments: one forward segment per layer (53 conv + fc, reading that
    layer's variables), then two backward segments per layer in reverse order,
    the second pushing the layer's gradients. Compute time ``compute_s`` is
    spread in proportion to each layer's parameters plus an equal share (a
    third forward, two thirds backward); PS update 0.3 ms per MB (0.03 s a
    step, as in the calibrated profile). Pulls are
    listed in a seeded random order, as a trace's arrival order is not the
    forward order. ``pull_start_s`` and ``overhead_s`` are those of this
    project's calibrated CPU profile of ResNet50 (0.046 s, 0.087 s).
    """
    layers = _resnet50_layers()
    n = len(layers)
    weight = np.array([k for k, _ in layers], float)
    share = 0.5 * weight / weight.sum() + 0.5 / n
    fwd = share * compute_s / 3
    bwd = share * compute_s * 2 / 3
    seg = np.concatenate([fwd, np.repeat(bwd[::-1] / 2, 2)])
    var_bytes, var_layer = [], []
    for i, (k, c) in enumerate(layers):
        if i < n - 1:  # conv kernel, BN gamma and beta
            var_bytes += [4.0 * k, 4.0 * c, 4.0 * c]
            var_layer += [i, i, i]
        else:  # classifier kernel and bias
            var_bytes += [4.0 * k, 4.0 * c]
            var_layer += [i, i]
    v = len(var_bytes)
    order = np.random.default_rng(seed).permutation(v)
    pull_bytes = np.asarray(var_bytes)[order]
    pull_gate = np.asarray(var_layer)[order]
    # backward of layer i: segments n + 2 (n - 1 - i) and the next; push after the second
    push_seg = np.asarray([n + 2 * (n - 1 - i) + 1 for i in var_layer])
    return Workload(
        seg_dur_s=seg,
        pull_bytes=pull_bytes,
        pull_gate=pull_gate,
        push_bytes=np.asarray(var_bytes),
        push_seg=push_seg,
        push_update_s=np.asarray(var_bytes) * 3e-10,
        pull_start_s=0.046,
        overhead_s=0.087,
        batch_size=32,
        meta={"model": "synthetic ResNet-50 v1", "seed": seed},
        push_param=np.argsort(order),
    )


@dataclass(frozen=True)
class BenchRow:
    """One benchmark measurement (seconds, events)."""

    mode: str
    policy: str
    workers: int
    steps_per_worker: int
    events: int
    wall_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")


def run_bench(
    workload: Workload,
    network: Network,
    workers: Sequence[int] = (1, 8, 64),
    policies: Sequence[str] = POLICIES,
    steps_per_worker: int = 50,
    repeat: int = 3,
    params: SimParams | None = None,
    modes: Sequence[str] = ("async",),
) -> list[BenchRow]:
    """Time :func:`~sgdsim.simulation.point.predict_point` for every mode × policy ×
    worker count (best of ``repeat``, after one short untimed run that compiles
    or loads the compiled loops), with ``params`` (default: the config schema's
    defaults) but one replication of ``steps_per_worker`` steps; ``allreduce``
    runs every fusion rule in place of the policies."""
    from sgdsim.config import defaults

    base = params or SimParams.from_config(defaults())
    p = dataclasses.replace(base, steps_per_worker=steps_per_worker, replications=1)
    rows = []
    schedules = [(m, pol) for m in modes for pol in (FUSIONS if m == "allreduce" else policies)]
    warm = dataclasses.replace(p, steps_per_worker=p.warmup_steps + 2)
    for mode, policy in schedules:
        # the compiled loops compile (or load their cache) on first use: not timed
        predict_point(workload, network, min(workers), policy, warm, mode=mode)
        for n in workers:
            best, events = float("inf"), 0
            for _ in range(repeat):
                t = time.perf_counter()
                r = predict_point(workload, network, n, policy, p, mode=mode)
                best = min(best, time.perf_counter() - t)
                events = r["events"]
            rows.append(BenchRow(mode, policy, n, steps_per_worker, events, best))
    return rows


def format_table(rows: Sequence[BenchRow]) -> str:
    """Markdown table of benchmark rows."""
    out = [
        "| mode | policy | workers | steps/worker | events | s per grid point | events/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.mode} | {r.policy} | {r.workers} | {r.steps_per_worker} | {r.events:,} | "
            f"{r.wall_s:.3f} | {r.events_per_s:,.0f} |"
        )
    return "\n".join(out)
