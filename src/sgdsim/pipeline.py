"""One function per pipeline stage, called by the thin scripts in ``workflow/scripts``.

Each takes the validated config (a dict) and the job's wildcards and paths,
so that the library itself stays free of Snakemake.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl

from sgdsim.errors import ConfigError
from sgdsim.io import atomic_path


def _entry(config: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    for e in config[key]:
        if e["name"] == name:
            return dict(e)
    raise ConfigError(f"config: {key}: no entry named {name!r}")


def profile_stage(config: dict[str, Any], hardware: str, model: str, out_dir: str) -> None:
    """Profile ``model`` on ``hardware`` (see :func:`sgdsim.profiling.run_profile`)."""
    from sgdsim.profiling import ProfileSpec, run_profile

    m, h, p = (
        _entry(config, "models", model),
        _entry(config, "hardware", hardware),
        config["profile"],
    )
    spec = ProfileSpec(
        model=model,
        hardware=hardware,
        device=h.get("device", "cpu"),
        batch_size=m.get("batch_size", 16),
        image_size=m.get("image_size", 64),
        classes=m.get("classes", 10),
        optimizer=m.get("optimizer", "sgd"),
        intra_op_threads=h.get("intra_op_threads", 2),
        inter_op_threads=h.get("inter_op_threads", 2),
        warmup_steps=p.get("warmup_steps", 3),
        timed_steps=p.get("timed_steps", 8),
        traced_steps=p.get("traced_steps", 3),
        timeout_s=p.get("timeout_s", 900),
        seed=config.get("seed", 42),
    )
    run_profile(spec, out_dir)


def normalize_stage(profile_dir: str, tables_dir: str, workload_path: str) -> None:
    """Normalize one raw profile (see :func:`sgdsim.traces.normalize_profile`)."""
    from sgdsim.traces import normalize_profile

    normalize_profile(profile_dir, tables_dir, workload_path)


def policy_sizes(sim: dict[str, Any]) -> dict[str, float]:
    """The policies' unit sizes from the config's ``simulation`` section (bytes),
    with the simulator's defaults (see :mod:`sgdsim.simulation.policies`)."""
    from sgdsim.simulation import policies as pol

    return {
        "p3_slice_bytes": float(sim.get("p3_slice_bytes", pol.P3_SLICE_BYTES)),
        "bytescheduler_partition_bytes": float(
            sim.get("bytescheduler_partition_bytes", pol.BYTESCHEDULER_PARTITION_BYTES)
        ),
        "bytescheduler_credit_bytes": float(
            sim.get("bytescheduler_credit_bytes", pol.BYTESCHEDULER_CREDIT_BYTES)
        ),
    }


def simulate_stage(
    config: dict[str, Any], workload_path: str, out_path: str, wildcards: dict[str, str]
) -> None:
    """Simulate one grid point and write its flat record as a one-row Parquet file."""
    from sgdsim.simulation import Network, Workload, simulate_async_replicated

    net = _entry(config, "networks", wildcards["network"])
    sim = config["simulation"]
    if wildcards["mode"] != "async":
        raise ConfigError(f"config: modes: {wildcards['mode']!r} is not implemented; use async")
    workload = Workload.load(workload_path)
    network = Network.from_bits(net["bandwidth_bps"], net.get("latency_s", 1e-4), net["name"])
    r = simulate_async_replicated(
        workload,
        network,
        workers=int(wildcards["workers"]),
        steps_per_worker=sim["steps_per_worker"],
        warmup_steps=sim["warmup_steps"],
        policy=wildcards["policy"],
        seed=config.get("seed", 42),
        replications=sim.get("replications", 3),
        workers_per_node=sim.get("workers_per_node", 1),
        ps_discipline=sim.get("ps_discipline", "fair"),
        **policy_sizes(sim),
    )
    row = {
        "model": wildcards["model"],
        "hardware": wildcards["hardware"],
        "network": net["name"],
        "bandwidth_bps": float(net["bandwidth_bps"]),
        "latency_s": float(net.get("latency_s", 1e-4)),
        "mode": wildcards["mode"],
        "batch_size": workload.batch_size,
        "workers_per_node": sim.get("workers_per_node", 1),
        "ps_discipline": sim.get("ps_discipline", "fair"),
        **asdict(r),
    }
    row["sim_wall_s"] = row.pop("wall_s")
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def chrome_trace_stage(
    config: dict[str, Any], workload_path: str, out_path: str, wildcards: dict[str, str]
) -> None:
    """Write the synthetic execution trace (Chrome trace JSON) of one grid point."""
    from sgdsim.simulation import Network, Workload, simulate_async
    from sgdsim.simulation.chrome_trace import TraceRecord, chrome_trace, write_chrome_trace

    net = _entry(config, "networks", wildcards["network"])
    entry: dict[str, Any] = next(
        (
            t
            for t in config["simulation"].get("chrome_traces", [])
            if (
                t["model"],
                t["hardware"],
                t["network"],
                str(t["workers"]),
                t.get("policy", "tf_default"),
            )
            == (
                wildcards["model"],
                wildcards["hardware"],
                wildcards["network"],
                wildcards["workers"],
                wildcards["policy"],
            )
        ),
        {},
    )
    steps = int(entry.get("steps", 5))
    workload = Workload.load(workload_path)
    records: list[TraceRecord] = []
    sizes = policy_sizes(config["simulation"])
    r = simulate_async(
        workload,
        Network.from_bits(net["bandwidth_bps"], net.get("latency_s", 1e-4), net["name"]),
        workers=int(wildcards["workers"]),
        steps_per_worker=steps + 1,
        warmup_steps=1,
        policy=wildcards["policy"],
        seed=config.get("seed", 42),
        trace=records,
        workers_per_node=config["simulation"].get("workers_per_node", 1),
        ps_discipline=config["simulation"].get("ps_discipline", "fair"),
        p3_slice_bytes=sizes["p3_slice_bytes"],
        bytescheduler_partition_bytes=sizes["bytescheduler_partition_bytes"],
        bytescheduler_credit_bytes=sizes["bytescheduler_credit_bytes"],
    )
    meta = {**wildcards, "steps_per_s": r.steps_per_s, "seed": r.seed}
    write_chrome_trace(out_path, chrome_trace(records, r.workers, meta))


def publish_stage(
    db_path: str, tables_dirs: list[str], prediction_files: list[str], config: dict[str, Any]
) -> None:
    """Build ``results/sgdsim.duckdb`` (see :func:`sgdsim.store.publish`)."""
    from sgdsim.store import publish

    publish(
        db_path,
        [Path(d) for d in tables_dirs],
        [Path(p) for p in prediction_files],
        config_json=json.dumps(config, sort_keys=True, default=str),
    )


def report_stage(db_path: str, policy_gain_path: str) -> None:
    """Markdown reports from the store (see :mod:`sgdsim.reports`)."""
    from sgdsim.reports import policy_gain_report

    policy_gain_report(db_path, policy_gain_path)
