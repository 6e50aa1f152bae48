"""What the dashboard derives from the store's predictions: best N, bottleneck, cost.

Plain functions of polars frames, so they are tested without a browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

#: Best N: the smallest N whose throughput is within this share of the peak.
NEAR_PEAK = 0.95
#: A PS NIC direction counts as the bottleneck at this busy fraction or more.
LINK_SATURATED = 0.85
#: Workers count as communication-bound at this blocked share or more.
MOSTLY_BLOCKED = 0.5
#: A communication-bound point with N ≥ 2 is limited by the shared PS link when
#: its busier direction is at least this busy (else by each worker's own transfers).
PS_LINK_LOADED = 0.5

#: Columns that identify one scaling curve (one line of the Scaling page).
CURVE = ["model", "hardware", "network", "mode", "policy"]

BOTTLENECKS = {
    "PS NIC out": "the PS's link towards the workers (parameter pulls) limits the rate",
    "PS NIC in": "the PS's link from the workers (gradient pushes) limits the rate",
    "PS CPU": "the CPU bound (profiled CPU seconds per step, utilization law) caps the rate",
    "worker NIC": (
        "workers mostly wait on their own transfers (their link's rate and per-message "
        "latency) while the PS link has room"
    ),
    "compute": "workers mostly compute",
}


def bottleneck(row: dict[str, Any]) -> str:
    """Name of the resource that limits one grid point (a key of :data:`BOTTLENECKS`).

    Args:
        row: a ``predictions`` row; uses ``workers``, ``sim_steps_per_s``,
            ``cpu_bound_steps_per_s``, ``ps_down_util``, ``ps_up_util`` (busy
            fractions 0–1) and ``blocked_fraction`` (0–1).

    Rules, first match wins:

    1. the CPU bound is below the simulated rate (it is then the rate, see
       ``sgdsim.pipeline``; on the grid's placement the PS has nodes of its own,
       and the bound that does not grow with N is the PS's cores): PS CPU;
    2. workers are blocked on communication at least :data:`MOSTLY_BLOCKED` of
       their time: with N ≥ 2 and the PS link's busier direction at least
       :data:`PS_LINK_LOADED` busy, that direction of the PS NIC (it carries N
       times what one worker's NIC does); else the worker NIC (at N = 1 both
       ends carry the same bytes);
    3. a PS NIC direction is at least :data:`LINK_SATURATED` busy: that one;
    4. compute.
    """
    sim, bound = row.get("sim_steps_per_s"), row.get("cpu_bound_steps_per_s")
    if sim is not None and bound is not None and bound < sim:
        return "PS CPU"
    down, up = float(row.get("ps_down_util") or 0.0), float(row.get("ps_up_util") or 0.0)
    ps_link = "PS NIC out" if down >= up else "PS NIC in"
    if float(row.get("blocked_fraction") or 0.0) >= MOSTLY_BLOCKED:
        loaded = int(row.get("workers") or 1) >= 2 and max(down, up) >= PS_LINK_LOADED
        return ps_link if loaded else "worker NIC"
    if max(down, up) >= LINK_SATURATED:
        return ps_link
    return "compute"


def with_bottleneck(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` (``predictions`` rows) with a ``bottleneck`` column (see :func:`bottleneck`)."""
    return df.with_columns(
        pl.Series("bottleneck", [bottleneck(r) for r in df.iter_rows(named=True)], pl.String)
    )


def cost_per_million_samples(
    samples_per_s: float, nodes: float, hardware_price: float, network_price: float
) -> float | None:
    """Cost of training on one million samples, or None when no price is set.

    Args:
        samples_per_s: throughput of all workers, samples/s.
        nodes: nodes rented (workers' nodes plus the PS's), count.
        hardware_price, network_price: price per node-hour (config ``cost:``);
            both 0 = not priced.

    Returns:
        ``nodes · (hardware_price + network_price) / 3600 · 1e6 / samples_per_s``
        (price per node-hour over seconds per hour, times seconds per million samples).
    """
    price = hardware_price + network_price
    if price <= 0 or samples_per_s <= 0:
        return None
    return nodes * price / 3600.0 * 1e6 / samples_per_s


def nodes_rented(workers: int, workers_per_node: int, ps_tasks: int = 1) -> int:
    """Nodes a grid point rents: ``ceil(N / workers_per_node)`` worker nodes plus
    one node per PS task (the grid's placement gives the PS nodes of its own)."""
    return -(-workers // max(workers_per_node, 1)) + max(ps_tasks, 1)


def best_index(samples_per_s: Sequence[float]) -> int:
    """Index of the best N in a curve sorted by N: the first point whose
    throughput is at least :data:`NEAR_PEAK` of the curve's peak (more workers
    would buy less than 5 % more). Raises ValueError on an empty curve."""
    peak = max(samples_per_s)
    return next(i for i, s in enumerate(samples_per_s) if s >= NEAR_PEAK * peak)


def best_points(
    df: pl.DataFrame, prices: dict[tuple[str, str], float] | None = None
) -> pl.DataFrame:
    """The sizing answer: per curve (:data:`CURVE`), the best N and what it gives.

    Args:
        df: ``predictions`` rows (at least the :data:`CURVE` columns, ``workers``,
            ``workers_per_node``, ``samples_per_s``, ``steps_per_s`` and the columns of
            :func:`bottleneck`); optional ``ps_tasks``.
        prices: ``(kind, name) -> price per node-hour`` with kind ``hardware`` or
            ``network``; missing = 0.

    Returns:
        One row per curve: :data:`CURVE`, ``best_workers`` (the smallest N within
        :data:`NEAR_PEAK` of the curve's peak samples/s), ``peak_samples_per_s``,
        ``samples_per_s`` and ``efficiency`` at the best N (steps/s over N times
        the N = 1 steps/s; None without an N = 1 point), ``bottleneck`` there and
        ``cost_per_m_samples`` (None when not priced). Sorted by the curve columns.
    """
    prices = prices or {}
    # per curve: the first N (sorted) within NEAR_PEAK of the peak, as best_index
    marked = df.sort(*CURVE, "workers").with_columns(
        peak_samples_per_s=pl.col("samples_per_s").max().over(CURVE),
        one_steps_per_s=pl.col("steps_per_s").filter(pl.col("workers") == 1).first().over(CURVE),
    )
    chosen = (
        marked.filter(pl.col("samples_per_s") >= NEAR_PEAK * pl.col("peak_samples_per_s"))
        .group_by(CURVE, maintain_order=True)
        .first()
    )
    out: list[dict[str, Any]] = []
    for best in chosen.iter_rows(named=True):
        one = best["one_steps_per_s"]
        eff = best["steps_per_s"] / (best["workers"] * one) if one is not None and one > 0 else None
        nodes = nodes_rented(
            best["workers"], best.get("workers_per_node") or 1, best.get("ps_tasks") or 1
        )
        cost = cost_per_million_samples(
            best["samples_per_s"],
            nodes,
            prices.get(("hardware", best["hardware"]), 0.0),
            prices.get(("network", best["network"]), 0.0),
        )
        out.append(
            {
                **{c: best[c] for c in CURVE},
                "best_workers": best["workers"],
                "peak_samples_per_s": best["peak_samples_per_s"],
                "samples_per_s": best["samples_per_s"],
                "efficiency": eff,
                "bottleneck": bottleneck(best),
                "cost_per_m_samples": cost,
            }
        )
    schema = {
        **{c: pl.String for c in CURVE},
        "best_workers": pl.Int64,
        "peak_samples_per_s": pl.Float64,
        "samples_per_s": pl.Float64,
        "efficiency": pl.Float64,
        "bottleneck": pl.String,
        "cost_per_m_samples": pl.Float64,
    }
    return pl.DataFrame(out, schema=schema, orient="row") if out else pl.DataFrame(schema=schema)


def with_band(df: pl.DataFrame, metric: str) -> pl.DataFrame:
    """``df`` with ``band_lo`` and ``band_hi`` in the unit of ``metric``, or unchanged.

    The band comes from ``steps_per_s_lo`` / ``steps_per_s_hi`` when present,
    else the simulated rate ``sim_steps_per_s`` (or ``steps_per_s``) ± ``steps_per_s_std``
    (replications); both edges no higher than ``cpu_bound_steps_per_s`` (the CPU
    bound caps every replication's rate). It is converted to
    ``metric`` by the ratio ``metric / steps_per_s`` of each row (samples/s,
    speedup and efficiency are all proportional to steps/s at a fixed point).
    """
    if "steps_per_s" not in df.columns or metric not in df.columns:
        return df
    if {"steps_per_s_lo", "steps_per_s_hi"} <= set(df.columns):
        lo, hi = pl.col("steps_per_s_lo"), pl.col("steps_per_s_hi")
    elif "steps_per_s_std" in df.columns:
        # the spread is of the simulated rate, before the CPU bound caps it
        sim = (
            pl.coalesce("sim_steps_per_s", "steps_per_s")
            if "sim_steps_per_s" in df.columns
            else pl.col("steps_per_s")
        )
        lo = sim - pl.col("steps_per_s_std")
        hi = sim + pl.col("steps_per_s_std")
    else:
        return df
    if "cpu_bound_steps_per_s" in df.columns:  # a capped rate cannot exceed its cap
        cap = pl.col("cpu_bound_steps_per_s").fill_null(float("inf"))
        lo, hi = pl.min_horizontal(lo, cap), pl.min_horizontal(hi, cap)
    ratio = pl.when(pl.col("steps_per_s") > 0).then(pl.col(metric) / pl.col("steps_per_s"))
    return df.with_columns(
        (lo * ratio).clip(lower_bound=0).alias("band_lo"), (hi * ratio).alias("band_hi")
    )


#: Networks drawn when the URL names none: each adds a line, its ideal line, its band
#: and its best-N star, and a sweep's hundred networks took seconds to draw.
DEFAULT_NETWORKS = 8


def default_networks(nets: list[str]) -> list[str]:
    """The networks ticked when the URL names none: every one of ``nets`` (slowest first)
    up to :data:`DEFAULT_NETWORKS`, else that many spread evenly over the list, the
    slowest and the fastest included."""
    if len(nets) <= DEFAULT_NETWORKS:
        return list(nets)
    step = (len(nets) - 1) / (DEFAULT_NETWORKS - 1)
    return [nets[round(i * step)] for i in range(DEFAULT_NETWORKS)]


def baseline_policy(policies: list[str]) -> str | None:
    """Policy to compare against: ``fifo_random`` (the baseline of TicTac's
    evaluation) when present, else ``tf_default``, else the first; None if none."""
    for p in ("fifo_random", "tf_default"):
        if p in policies:
            return p
    return sorted(policies)[0] if policies else None


def finite(x: float | None) -> float:
    """``x`` or NaN (Plotly's hover formats show NaN for a missing value)."""
    return float("nan") if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
