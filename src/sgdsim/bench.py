"""Simulator benchmark: events per second and seconds per grid point.

Run ``sgdsim bench --workload results/workloads/cpu/ResNet50.json``. Each
configuration is run ``repeat`` times on one core and the fastest wall time is
kept (the least disturbed by other load, as ``timeit`` advises).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from sgdsim.simulation import POLICIES, Network, Workload, simulate_async


@dataclass(frozen=True)
class BenchRow:
    """One benchmark measurement (seconds, events)."""

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
) -> list[BenchRow]:
    """Time :func:`simulate_async` for every policy × worker count (best of ``repeat``)."""
    rows = []
    for policy in policies:
        for n in workers:
            best, events = float("inf"), 0
            for _ in range(repeat):
                t = time.perf_counter()
                r = simulate_async(workload, network, n, steps_per_worker, 3, policy=policy, seed=0)
                best = min(best, time.perf_counter() - t)
                events = r.events
            rows.append(BenchRow(policy, n, steps_per_worker, events, best))
    return rows


def format_table(rows: Sequence[BenchRow]) -> str:
    """Markdown table of benchmark rows."""
    out = [
        "| policy | workers | steps/worker | events | s per grid point | events/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.policy} | {r.workers} | {r.steps_per_worker} | {r.events:,} | "
            f"{r.wall_s:.3f} | {r.events_per_s:,.0f} |"
        )
    return "\n".join(out)
