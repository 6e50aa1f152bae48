"""One function per pipeline stage, called by the thin scripts in ``workflow/scripts``.

Each takes the validated config (a dict) and the job's wildcards and paths,
so that the library itself stays free of Snakemake.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl

from sgdsim.errors import ConfigError
from sgdsim.io import atomic_path
from sgdsim.simulation.bounds import ETHERNET_PAYLOAD_FRACTION, tbf_payload_fraction


def _entry(config: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    for e in config[key]:
        if e["name"] == name:
            return dict(e)
    raise ConfigError(f"config: {key}: no entry named {name!r}")


def profile_spec(config: dict[str, Any], hardware: str, model: str, **overrides: Any) -> Any:
    """The :class:`~sgdsim.profiling.ProfileSpec` of ``model`` on ``hardware`` in ``config``."""
    from sgdsim.profiling import ProfileSpec

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
        ps_tasks=h.get("ps_tasks", 1),
        runs=p.get("runs", 1),
    )
    return dataclasses.replace(spec, **overrides)


def profile_stage(config: dict[str, Any], hardware: str, model: str, out_dir: str) -> None:
    """Profile ``model`` on ``hardware`` (see :func:`sgdsim.profiling.run_profile`)."""
    from sgdsim.profiling import run_profile

    run_profile(profile_spec(config, hardware, model), out_dir)


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


def _predict(
    config: dict[str, Any],
    workload: Any,
    network: Any,
    workers: int,
    policy: str,
    workers_per_node: int,
    ps_with_workers: bool = False,
    network_cpu_s_per_byte: float = 0.0,
    start_offsets_s: Sequence[Sequence[float]] | None = None,
    episodes: tuple[float, float, int] | None = None,
    pull_join_delay_s: float = 0.0,
) -> dict[str, Any]:
    """Simulated metrics of one point, capped by the nodes' CPU (flat record).

    ``steps_per_s`` is the simulated throughput (``sim_steps_per_s``) or, when
    lower, the CPU bound (``cpu_bound_steps_per_s``, see
    :func:`sgdsim.simulation.bounds.cpu_bound_steps_per_s`; NULL when the
    profile did not measure CPU). One-at-a-time policies wait one RPC round
    trip per pull (``pull_gap_s``: the profile's ``rpc_rtt_s`` plus the
    network's round-trip latency); with ``ps_with_workers`` (the testbed: every
    process on one node) that round trip is CPU work sharing the node's cores
    with the workers' compute (``pull_gap_cpu``).

    Co-located workers share their node's cores
    (:func:`sgdsim.simulation.bounds.compute_slots`: the cores left to
    compute, divided by the cores one worker's compute keeps busy). With
    ``ps_with_workers`` the node also runs the PS, every worker's client and
    RPC threads and, at ``network_cpu_s_per_byte`` > 0, the emulated network's
    kernel work; they take cores in proportion to the throughput, so the
    slots are a fixed point of the throughput, found by damped iteration (4
    rounds: more throughput leaves fewer cores to compute, so the iteration
    contracts). ``compute_slots`` records the value used (NULL: cores not
    shared).

    ``start_offsets_s`` (R, N): simulate R runs from these start offsets
    (seconds) instead of ``simulation.replications`` seeded random ones.
    ``episodes`` (``warmup_s``, ``duration_s``, ``min_steps``): with
    ``start_offsets_s``, run and score each as the measured episode it predicts
    (:func:`sgdsim.testbed.protocol.simulate_episodes`) instead of
    ``simulation.steps_per_worker`` steps after ``simulation.warmup_steps``.
    ``pull_join_delay_s``: see :func:`sgdsim.simulation.simulate_async` (the
    testbed's, from :func:`calibrate_testbed_stage`).
    """
    import math

    from sgdsim.simulation import simulate_async_replicated
    from sgdsim.simulation.async_ps import SERIAL_PULL_POLICIES
    from sgdsim.simulation.bounds import compute_slots, cpu_bound_steps_per_s

    sim = config["simulation"]
    gap = workload.rpc_rtt_s + 2 * network.latency_s

    def run(slots: float) -> Any:
        kw: dict[str, Any] = {
            "policy": policy,
            "seed": config.get("seed", 42),
            "workers_per_node": workers_per_node,
            "ps_discipline": sim.get("ps_discipline", "fair"),
            "pull_gap_s": gap,
            "pull_gap_cpu": ps_with_workers,
            "compute_slots": slots,
            "pull_join_delay_s": pull_join_delay_s,
            **policy_sizes(sim),
        }
        if episodes is not None and start_offsets_s is not None:
            from sgdsim.testbed.protocol import simulate_episodes

            warmup_s, duration_s, min_steps = episodes
            return simulate_episodes(
                workload, network, workers, start_offsets_s, warmup_s, duration_s, min_steps, **kw
            )
        return simulate_async_replicated(
            workload,
            network,
            workers=workers,
            steps_per_worker=sim["steps_per_worker"],
            warmup_steps=sim["warmup_steps"],
            replications=sim.get("replications", 5),
            start_offsets_s=start_offsets_s,
            **kw,
        )

    shared = workers_per_node > 1 or (ps_with_workers and policy in SERIAL_PULL_POLICIES)
    slots = compute_slots(workload)
    r = run(slots)
    if shared and ps_with_workers:
        x = r.steps_per_s
        for _ in range(4):
            slots = compute_slots(workload, x, network_cpu_s_per_byte)
            r = run(slots)
            x = 0.5 * (x + r.steps_per_s)
    row = asdict(r)
    row["sim_wall_s"] = row.pop("wall_s")
    bound = cpu_bound_steps_per_s(
        workload, workers, workers_per_node, ps_with_workers, network_cpu_s_per_byte
    )
    row["sim_steps_per_s"] = r.steps_per_s
    row["cpu_bound_steps_per_s"] = None if math.isinf(bound) else bound
    row["pull_gap_s"] = gap
    row["compute_slots"] = slots if shared else None
    if bound < r.steps_per_s:
        row["steps_per_s"] = bound
        row["samples_per_s"] = bound * workload.batch_size
    return row


def simulate_stage(
    config: dict[str, Any], workload_path: str, out_path: str, wildcards: dict[str, str]
) -> None:
    """Simulate one grid point and write its flat record as a one-row Parquet file."""
    from sgdsim.simulation import Network, Workload

    net = _entry(config, "networks", wildcards["network"])
    sim = config["simulation"]
    if wildcards["mode"] != "async":
        raise ConfigError(f"config: modes: {wildcards['mode']!r} is not implemented; use async")
    workload = Workload.load(workload_path)
    network = Network.from_bits(
        net["bandwidth_bps"] * ETHERNET_PAYLOAD_FRACTION, net.get("latency_s", 1e-4), net["name"]
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
        **_predict(
            config,
            workload,
            network,
            int(wildcards["workers"]),
            wildcards["policy"],
            sim.get("workers_per_node", 1),
        ),
    }
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
    network = Network.from_bits(
        net["bandwidth_bps"] * ETHERNET_PAYLOAD_FRACTION, net.get("latency_s", 1e-4), net["name"]
    )
    r = simulate_async(
        workload,
        network,
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
        pull_gap_s=workload.rpc_rtt_s + 2 * network.latency_s,
    )
    meta = {**wildcards, "steps_per_s": r.steps_per_s, "seed": r.seed}
    write_chrome_trace(out_path, chrome_trace(records, r.workers, meta))


def _validation_network(config: dict[str, Any], name: str) -> dict[str, Any]:
    for n in config.get("validation", {}).get("networks", []):
        if n["name"] == name:
            return dict(n)
    raise ConfigError(f"config: validation.networks: no entry named {name!r}")


def _point_duration(config: dict[str, Any], wildcards: dict[str, str]) -> float:
    from sgdsim.config import validation_points

    key = (wildcards["model"], wildcards["network"], wildcards["policy"], int(wildcards["workers"]))
    for p in validation_points(config):
        if (p["model"], p["network"], p["policy"], p["workers"]) == key:
            return float(p["duration_s"])
    return float(config["validation"].get("duration_s", 20))


def _episode_protocol(config: dict[str, Any], wildcards: dict[str, str]) -> dict[str, Any]:
    """A validation point's measurement protocol: ``duration_s``, ``warmup_s``,
    ``warmup_steps`` and ``min_steps`` from ``validation`` (and the point's own
    ``duration_s``), with their defaults."""
    val = config["validation"]
    return {
        "duration_s": float(_point_duration(config, wildcards)),
        "warmup_s": float(val.get("warmup_s", 2)),
        "warmup_steps": int(val.get("warmup_steps", 3)),
        "min_steps": int(val.get("min_steps", 4)),
    }


def _validation_mtu(config: dict[str, Any]) -> int:
    """MTU of the testbed's links, bytes (``validation.mtu``)."""
    from sgdsim.testbed.netns import DEFAULT_MTU

    return int(config["validation"].get("mtu", DEFAULT_MTU))


def _validation_queue(config: dict[str, Any]) -> str:
    """How the testbed's NICs queue, ``"fair"`` or ``"fifo"`` (``validation.queue``)."""
    from sgdsim.testbed.netns import DEFAULT_QUEUE

    return str(config["validation"].get("queue", DEFAULT_QUEUE))


#: Name of the network a point measured on loopback (no root) is predicted for.
LOOPBACK_FIT = "loopback (profile fit)"


def _testbed_network(config: dict[str, Any], net: dict[str, Any], tables_dir: str) -> Any:
    """The network the testbed gives a validation point, as the simulator sees it.

    The validation network's rate less TCP/IP and Ethernet headers at
    ``validation.mtu`` (:func:`sgdsim.simulation.bounds.tbf_payload_fraction`);
    where the testbed cannot run and ``validation.unprivileged`` is
    ``loopback``, the profile's own loopback network fit instead (``name``
    :data:`LOOPBACK_FIT`).
    """
    from sgdsim.simulation import Network

    network = Network.from_bits(
        net["bandwidth_bps"] * tbf_payload_fraction(_validation_mtu(config)),
        float(net.get("latency_s", 0.0)),
        net["name"],
    )
    if config["validation"].get("unprivileged", "skip") == "loopback":
        from sgdsim.testbed import check_available

        if check_available(need_netem=network.latency_s > 0) is not None:
            fit = pl.read_parquet(Path(tables_dir) / "profile.parquet")
            network = Network(float(fit["profile_bandwidth_Bps"][0]), 0.0, LOOPBACK_FIT)
    return network


def validation_offsets(
    config: dict[str, Any], workload: Any, network: Any, wildcards: dict[str, str]
) -> list[list[float]]:
    """Start offsets of a validation point's episodes, (E, N) seconds.

    Worker 0 starts at 0 and every other worker at a uniformly random offset
    in ``[0, T1)``, ``T1`` the contention-free step time on the point's network
    (:func:`sgdsim.simulation.async_ps.single_step_estimate`), as the simulator
    draws them; ``E`` is ``validation.episodes`` (1 with one worker). The
    draws are seeded by ``seed`` and the point (model, network, policy, N),
    so the measure and predict_testbed stages get the same offsets.
    """
    import zlib

    import numpy as np

    from sgdsim.simulation.async_ps import single_step_estimate

    workers = int(wildcards["workers"])
    episodes = int(config["validation"].get("episodes", 3)) if workers > 1 else 1
    key = "/".join(wildcards[k] for k in ("model", "network", "policy", "workers"))
    rng = np.random.default_rng([int(config.get("seed", 42)), zlib.crc32(key.encode())])
    t1 = single_step_estimate(workload, network)
    return [[0.0, *rng.uniform(0.0, t1, workers - 1).tolist()] for _ in range(episodes)]


def measure_stage(
    config: dict[str, Any],
    workload_path: str,
    tables_dir: str,
    out_path: str,
    wildcards: dict[str, str],
) -> None:
    """Measure one validation point on the emulated network; one-row Parquet file.

    Runs :func:`sgdsim.testbed.run_async_measurement` with the model and thread
    settings of the profile, the validation network's rate and the point's pull
    order, in ``validation.episodes`` episodes that start the workers at the
    offsets of :func:`validation_offsets` (one episode with one worker). Without
    root or iproute2 the point is recorded with ``status`` ``skipped`` and the
    reason (``validation.unprivileged: skip``), or measured unshaped on
    loopback (``loopback``).

    Raises:
        MeasurementError: the run failed (nothing is written).
    """
    import statistics

    from sgdsim.simulation import Workload
    from sgdsim.testbed import check_available, run_async_measurement

    val = config["validation"]
    net = _validation_network(config, wildcards["network"])
    latency = float(net.get("latency_s", 0.0))
    spec = profile_spec(
        config, wildcards["hardware"], wildcards["model"], pull_order=wildcards["policy"]
    )
    workers = int(wildcards["workers"])
    row: dict[str, Any] = {
        "model": wildcards["model"],
        "hardware": wildcards["hardware"],
        "network": net["name"],
        "bandwidth_bps": float(net["bandwidth_bps"]),
        "latency_s": latency,
        "policy": wildcards["policy"],
        "workers": workers,
        "batch_size": spec.batch_size,
        **_episode_protocol(config, wildcards),
        "mtu": _validation_mtu(config),
        "queue": _validation_queue(config),
    }
    why = check_available(need_netem=latency > 0)
    loopback = False
    if why is not None:
        if val.get("unprivileged", "skip") == "skip":
            print(f"[measure] skipped: {why}", file=sys.stderr)
            row |= {"status": "skipped", "reason": why, "loopback": False}
            with atomic_path(out_path) as tmp:
                pl.DataFrame([row]).write_parquet(tmp)
            return
        print(f"[measure] {why}; measuring unshaped on loopback instead", file=sys.stderr)
        loopback = True
    offsets = validation_offsets(
        config, Workload.load(workload_path), _testbed_network(config, net, tables_dir), wildcards
    )
    row["episodes"] = len(offsets)
    r = run_async_measurement(
        spec,
        workers,
        None if loopback else float(net["bandwidth_bps"]),
        0.0 if loopback else latency,
        duration_s=row["duration_s"],
        warmup_s=row["warmup_s"],
        loopback=loopback,
        warmup_steps=row["warmup_steps"],
        min_steps=row["min_steps"],
        mtu=row["mtu"],
        queue=row["queue"],
        start_offsets_s=offsets,
    )
    windows = list(r.steps_per_s_windows)
    row |= {
        "status": "ok",
        "reason": why or "",
        "loopback": loopback,
        "steps_per_s": r.steps_per_s,
        "samples_per_s": r.steps_per_s * spec.batch_size,
        "steps_per_s_windows": windows,
        "steps_per_s_std": statistics.stdev(windows) if len(windows) > 1 else 0.0,
        "start_offsets_s": [list(e) for e in r.start_offsets_s],
        "per_worker_steps_per_s": list(r.per_worker_steps_per_s),
        "window_s": r.window_s,
        "step_end_times": [list(t) for t in r.step_end_times],
        "background_busy": r.background_busy,
        "cpu_busy": r.cpu_busy,
        "cpu_steal": r.cpu_steal,
        "shaper_drops": r.drops,
    }
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def calibrate_testbed_stage(config: dict[str, Any], out_path: str, network_name: str) -> None:
    """Calibrate the testbed for one validation network (JSON).

    Writes ``{"status": "ok", "network_cpu_s_per_byte": …, "pull_join_delay_s":
    …, …}`` from :func:`sgdsim.testbed.calibrate.network_cpu_per_byte` and
    :func:`sgdsim.testbed.calibrate.pull_join_delay` (with the validation
    hardware's threads), or ``status`` ``skipped`` with the reason (and zeros)
    where the testbed cannot run.

    Raises:
        CalibrationError: the transfer failed (nothing is written).
    """
    from sgdsim.testbed import check_available
    from sgdsim.testbed.calibrate import network_cpu_per_byte, pull_join_delay

    net = _validation_network(config, network_name)
    why = check_available()
    row: dict[str, Any] = {"network": net["name"], "bandwidth_bps": float(net["bandwidth_bps"])}
    if why is not None:
        print(f"[calibrate] skipped: {why}", file=sys.stderr)
        row |= {
            "status": "skipped",
            "reason": why,
            "network_cpu_s_per_byte": 0.0,
            "pull_join_delay_s": 0.0,
        }
    else:
        from sgdsim.progress import progress

        with progress(desc=f"[calibrate] {net['name']}", total=2, unit="calibration") as done:
            r = network_cpu_per_byte(
                float(net["bandwidth_bps"]),
                mtu=_validation_mtu(config),
                queue=_validation_queue(config),
            )
            done.update()
            hw = _entry(config, "hardware", config["validation"]["hardware"])
            race = pull_join_delay(
                float(net["bandwidth_bps"]),
                mtu=_validation_mtu(config),
                queue=_validation_queue(config),
                threads=int(hw.get("inter_op_threads", 2)),
            )
            done.update()
        row |= {
            "status": "ok",
            "reason": "",
            "network_cpu_s_per_byte": r.extra_s_per_byte,
            "testbed_s_per_byte": r.testbed_s_per_byte,
            "loopback_s_per_byte": r.loopback_s_per_byte,
            "bytes_moved": r.bytes_moved,
            "pull_join_delay_s": race.delay_s,
            "pull_race_growth_s": list(race.growth_s),
            "pull_race_bytes": race.bytes_each,
        }
        print(
            f"[calibrate] {net['name']}: kernel CPU {r.testbed_s_per_byte * 1e9:.1f} ns/byte "
            f"through the testbed, {r.loopback_s_per_byte * 1e9:.1f} on loopback; the PS "
            f"serves a step that starts while it sends {race.delay_s * 1e3:.2f} ms late",
            file=sys.stderr,
        )
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text(json.dumps(row, indent=1) + "\n")


def predict_testbed_stage(
    config: dict[str, Any],
    workload_path: str,
    tables_dir: str,
    out_path: str,
    wildcards: dict[str, str],
    calibration_path: str | None = None,
) -> None:
    """Predict one validation point for the testbed's placement; one-row Parquet file.

    The testbed runs the PS and all N workers on this one node, so the
    prediction places the N workers on one node (``workers_per_node = N``: they
    share its cores, and the PS's: see :func:`_predict` for the CPU bound) behind
    NICs of the validation network's rate less TCP/IP and Ethernet headers
    (:func:`_testbed_network`; points measured on loopback, without root, are
    predicted for the profile's own loopback network fit), one run from each
    episode's start offsets (:func:`validation_offsets`), each as long as the
    measured episode and scored over the same window by the same function
    (:func:`sgdsim.testbed.protocol.simulate_episodes`).
    ``calibration_path``: the network's :func:`calibrate_testbed_stage`
    result, whose CPU per byte the prediction charges to the node (see
    :func:`_predict`).
    """
    from sgdsim.simulation import Workload

    net = _validation_network(config, wildcards["network"])
    workers = int(wildcards["workers"])
    workload = Workload.load(workload_path)
    network = _testbed_network(config, net, tables_dir)
    net_cpu = join_delay = 0.0
    if calibration_path is not None and network.name != LOOPBACK_FIT:
        cal = json.loads(Path(calibration_path).read_text())
        net_cpu = float(cal["network_cpu_s_per_byte"])
        join_delay = float(cal.get("pull_join_delay_s", 0.0))
    offsets = validation_offsets(config, workload, network, wildcards)
    proto = _episode_protocol(config, wildcards)
    row = {
        "model": wildcards["model"],
        "hardware": wildcards["hardware"],
        "network": net["name"],
        "bandwidth_bps": float(net["bandwidth_bps"]),
        "predicted_bandwidth_Bps": network.bandwidth_Bps,
        "batch_size": workload.batch_size,
        "workers_per_node": workers,
        "network_cpu_s_per_byte": net_cpu,
        "pull_join_delay_s": join_delay,
        **_predict(
            config,
            workload,
            network,
            workers,
            wildcards["policy"],
            workers,
            ps_with_workers=True,
            network_cpu_s_per_byte=net_cpu,
            start_offsets_s=offsets,
            episodes=(proto["warmup_s"], proto["duration_s"], proto["min_steps"]),
            pull_join_delay_s=join_delay,
        ),
        "start_offsets_s": offsets,
    }
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def publish_stage(
    db_path: str,
    tables_dirs: list[str],
    prediction_files: list[str],
    config: dict[str, Any],
    measurement_files: Sequence[str] = (),
    testbed_prediction_files: Sequence[str] = (),
    imported_dirs: list[str] | None = None,
) -> None:
    """Build ``results/sgdsim.duckdb`` (see :func:`sgdsim.store.publish`).

    ``imported_dirs``: tables directories of ``sgdsim import`` to load as well.
    """
    from sgdsim.store import publish

    publish(
        db_path,
        [Path(d) for d in tables_dirs],
        [Path(p) for p in prediction_files],
        config_json=json.dumps(config, sort_keys=True, default=str),
        measurement_files=[Path(p) for p in measurement_files],
        testbed_prediction_files=[Path(p) for p in testbed_prediction_files],
        imported_dirs=[Path(d) for d in imported_dirs or []],
    )


def report_stage(
    db_path: str, policy_gain_path: str, accuracy_path: str, accuracy_plot_path: str
) -> None:
    """Markdown reports and the accuracy plot from the store (see :mod:`sgdsim.reports`)."""
    from sgdsim.reports import accuracy_plot, accuracy_report, policy_gain_report

    policy_gain_report(db_path, policy_gain_path)
    accuracy_report(db_path, accuracy_path)
    accuracy_plot(db_path, accuracy_plot_path)
