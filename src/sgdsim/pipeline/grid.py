"""Stages of the prediction grid: profile, normalize, simulate, chrome_trace, publish, report."""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sgdsim.config import CAPTURE_PORT_KEYS, entry, joins_file, with_defaults
from sgdsim.errors import ConfigError
from sgdsim.io import atomic_path


def profile_spec(config: dict[str, Any], hardware: str, model: str, **overrides: Any) -> Any:
    """The :class:`~sgdsim.profiling.ProfileSpec` of ``model`` on ``hardware`` in ``config``."""
    from sgdsim.profiling import ProfileSpec

    cfg = with_defaults(config)
    m, h, p = entry(cfg, "models", model), entry(cfg, "hardware", hardware), cfg["profile"]
    spec = ProfileSpec(
        model=model,
        hardware=hardware,
        device=h["device"],
        batch_size=m["batch_size"],
        image_size=m["image_size"],
        classes=m["classes"],
        optimizer=m["optimizer"],
        intra_op_threads=h["intra_op_threads"],
        inter_op_threads=h["inter_op_threads"],
        warmup_steps=p["warmup_steps"],
        timed_steps=p["timed_steps"],
        traced_steps=p["traced_steps"],
        timeout_s=p["timeout_s"],
        seed=cfg["seed"],
        ps_tasks=h["ps_tasks"],
        runs=p["runs"],
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


def _network_entry(config: dict[str, Any], name: str) -> tuple[int, dict[str, Any]]:
    """The index and the raw ``networks[]`` entry named ``name`` (for messages
    that name the entry).

    Raises:
        ConfigError: no such entry.
    """
    for i, e in enumerate(config["networks"]):
        if e["name"] == name:
            return i, e
    raise ConfigError(f"config: networks: no entry named {name!r}")


def _grid_network(config: dict[str, Any], name: str) -> tuple[Any, dict[str, Any]]:
    """The network ``name`` as the simulator sees it, and its config entry with its
    preset resolved (see :func:`sgdsim.presets.resolve_network`).

    Raises:
        ConfigError: no such entry, or an unknown preset.
    """
    from sgdsim.presets import network, resolve_network

    i, raw = _network_entry(config, name)
    where = f"config: networks[{i}] ({name})"
    return network(raw, where), resolve_network(raw, where)


def joins_path(config: dict[str, Any], network: str, model: str, hardware: str) -> str | None:
    """The joins JSON the ``networks`` entry ``network`` names for ``model`` on
    ``hardware`` (:func:`sgdsim.config.joins_file`), or None, also where the grid
    has no async point with N > 1 (nothing takes joins, nothing to capture)."""
    if "async" not in config.get("modes", ["async"]) or not any(
        int(n) > 1 for n in config.get("workers", [])
    ):
        return None
    return joins_file(_network_entry(config, network)[1], model, hardware)


def grid_joins(
    config: dict[str, Any], network: str, model: str, hardware: str
) -> tuple[str, dict[str, Any]] | None:
    """The joins file of ``model`` on the grid network ``network`` (:func:`joins_path`)
    and its contents, read and checked against the entry's capture rate
    (:func:`joins_rate`); None where the entry names none.

    Raises:
        ConfigError: the file is not a joins JSON, or was captured at another
            rate than the entry's (one line naming the entry, the file and the
            fix).
    """
    import math

    from sgdsim.pipeline.validation import read_joins

    path = joins_path(config, network, model, hardware)
    if path is None:
        return None
    i, entry = _network_entry(config, network)
    where = f"config: networks[{i}].joins ({network}, model {model})"
    try:
        joins = read_joins(path)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    want = joins_rate(entry, where)
    rate = (joins.get("network") or {}).get("bandwidth_bps")
    if rate is None or not math.isclose(float(rate), want, rel_tol=1e-6):
        said = "does not record its rate" if rate is None else f"was captured at {rate:g} bit/s"
        key = "joins_bandwidth_bps" if "joins_bandwidth_bps" in entry else "bandwidth_bps"
        raise ConfigError(
            f"{where}: {path} {said}, not at the entry's {key} {want:g} bit/s; capture it at "
            f"that rate (sgdsim calibrate-joins -b {want:g}), name another file, or set "
            "joins_bandwidth_bps to the file's rate"
        )
    return path, joins


def joins_rate(entry: dict[str, Any], where: str = "config: networks[]") -> float:
    """The rate a ``networks[]`` entry's joins are captured at, bit/s: its
    ``joins_bandwidth_bps`` where given (a rate this machine emulates, taken for
    a network it cannot; a fair queue's joins carried across factors of 2 and 4 of
    rate: docs/model.md, "Joins from another rate"), else its own
    ``bandwidth_bps`` (or its preset's).

    Raises:
        ConfigError: neither is given (:func:`sgdsim.presets.resolve_network`).
    """
    from sgdsim.presets import resolve_network

    if "joins_bandwidth_bps" in entry:
        return float(entry["joins_bandwidth_bps"])
    return float(resolve_network(entry, where)["bandwidth_bps"])


#: Most workers the pipeline's own join capture (``networks[].joins: capture``)
#: runs at once: N processes and the PS share one machine's cores, so a grid
#: point at a larger N takes N = 4's joins (the nearest captured N,
#: :func:`sgdsim.pipeline.validation.joins_at_n`).
CAPTURE_MAX_WORKERS = 4

#: Least share of the network's rate the capture's port must carry at saturation
#: for its joins to be the network's (the machine's CPU caps what it emulates).
CAPTURE_MIN_RATE_SHARE = 0.8


def capture_workers_grid(config: dict[str, Any]) -> list[int]:
    """The N at which rule ``capture_joins`` captures: every N ≥ 2 of the grid's
    ``workers`` up to :data:`CAPTURE_MAX_WORKERS`, and that many where the grid
    holds only larger N (empty: the grid has no N ≥ 2)."""
    ns = [int(n) for n in config["workers"] if int(n) >= 2]
    if not ns:
        return []
    return sorted({min(n, CAPTURE_MAX_WORKERS) for n in ns})


def _capture_port(cfg: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The port a ``joins: capture`` entry emulates: its own ``CAPTURE_PORT_KEYS``,
    the queue else ``simulation.ps_discipline`` (the rest else ``validation``'s)."""
    return {"queue": cfg["simulation"]["ps_discipline"]} | {
        k: entry[k] for k in CAPTURE_PORT_KEYS if k in entry
    }


def capture_settings(config: dict[str, Any], network: str) -> str:
    """What rule ``capture_joins`` captures the grid network ``network`` with, as
    one line (the rule's ``params``, so that Snakemake captures again when any of
    it changes): the capture rate (:func:`joins_rate`), the emulated port
    (:func:`sgdsim.pipeline.validation.validation_link` of the entry's
    ``queue``, ``buffer_bytes``, ``mtu``, ``congestion_control``), the N
    captured, and ``validation``'s capture length and runs.

    Raises:
        ConfigError: no such entry.
    """
    from sgdsim.pipeline.validation import validation_link

    cfg = with_defaults(config)
    i, raw = _network_entry(cfg, network)
    v = cfg["validation"]
    return (
        f"rate={joins_rate(raw, f'config: networks[{i}] ({network})'):g} "
        f"link={validation_link(cfg, _capture_port(cfg, raw))!r} "
        f"workers={capture_workers_grid(cfg)} "
        f"capture_s={float(v['join_capture_s']):g} runs={int(v['join_capture_runs'])}"
    )


def capture_joins_stage(
    config: dict[str, Any],
    workload_path: str,
    out_path: str,
    network: str,
    hardware: str,
    model: str,
) -> None:
    """Capture one model's joins on the grid network ``network`` (``joins: capture``; JSON).

    What ``sgdsim calibrate-joins`` writes, for the network's entry: at each N of
    :func:`capture_workers_grid`, N processes run the skeleton of the profiled
    step (its pulls and pushes through a real TensorFlow PS, its compute as
    waits; :func:`sgdsim.pipeline.validation.join_calibration`) on emulated
    NICs of the entry's rate (:func:`joins_rate`) and its port (``queue``: ``fair``, or
    ``fifo`` of ``buffer_bytes``; ``mtu``; ``congestion_control``; each else
    ``simulation.ps_discipline`` for the queue and ``validation``'s), for up to
    ``validation.join_capture_s`` seconds each (``join_capture_runs`` pooled),
    while the PS's port is captured. The simulate job of the network then takes
    the joins and two-way share at each N (:func:`grid_joins`).

    Raises:
        ConfigError: the machine cannot run the emulated testbed (root,
            iproute2, tcpdump), or its emulation did not reach
            :data:`CAPTURE_MIN_RATE_SHARE` of the entry's rate in a pull that ran
            alone (:func:`sgdsim.testbed.capture.saturated_rate`; one line naming
            the entry and the fix); nothing is written.
        MeasurementError: the workers' run failed.
    """
    import math

    from sgdsim.pipeline.validation import join_calibration, validation_link, write_joins
    from sgdsim.testbed import check_available
    from sgdsim.testbed.capture import tcpdump_missing

    cfg = with_defaults(config)
    i, raw = _network_entry(cfg, network)
    where = f"config: networks[{i}].joins ({network}): capture"
    why = check_available() or tcpdump_missing()
    if why is not None:
        raise ConfigError(f"{where} needs the emulated testbed: {why}; or name a joins file")
    link = validation_link(cfg, _capture_port(cfg, raw))
    rate = joins_rate(raw, where)
    row = join_calibration(
        profile_spec(cfg, hardware, model),
        workload_path,
        rate,
        link,
        capture_workers_grid(cfg),
        float(cfg["validation"]["join_capture_s"]),
        label=network,
        runs=int(cfg["validation"]["join_capture_runs"]),
    )
    # a lone pull is bounded by the link, or by the machine where it cannot emulate
    # the rate (None: no pull ran alone, nothing to compare)
    saturated = row.get("saturated_Bps")
    reached = math.inf if saturated is None else 8.0 * float(saturated)
    if reached < CAPTURE_MIN_RATE_SHARE * rate:
        raise ConfigError(
            f"{where}: this machine's emulated port carried {reached:.3g} bit/s at most, "
            f"under {CAPTURE_MIN_RATE_SHARE:.0%} of the entry's {rate:.3g} bit/s, so its "
            "joins would not be this network's; set joins_bandwidth_bps to a rate it "
            "emulates, capture on a faster machine (sgdsim calibrate-joins) and name the "
            "file, or set joins: null"
        )
    write_joins(out_path, rate, link, row)


def with_hardware(config: dict[str, Any], hardware: str, params: Any) -> Any:
    """``params`` (a :class:`~sgdsim.simulation.point.SimParams`) with the ``hardware``
    entry's workers per node for all-reduce (``gpus_per_node``) and the network
    between them (``interconnect``, :func:`sgdsim.presets.interconnect_network`).

    Raises:
        ConfigError: no such hardware entry, or an unknown interconnect preset.
    """
    from sgdsim.presets import interconnect_network

    i = next((i for i, e in enumerate(config["hardware"]) if e["name"] == hardware), None)
    if i is None:
        raise ConfigError(f"config: hardware: no entry named {hardware!r}")
    h = config["hardware"][i]
    collective = dataclasses.replace(
        params.collective,
        gpus_per_node=int(h.get("gpus_per_node", 1)),
        intra_node=interconnect_network(
            h.get("interconnect", "pcie3_x16"), f"config: hardware[{i}].interconnect"
        ),
    )
    return dataclasses.replace(params, collective=collective)


def grid_points(
    config: dict[str, Any], defaults_filled: bool = False
) -> list[tuple[str, str, int]]:
    """Every (policy, mode, N) of the grid, in the order a batch simulates them.

    ``allreduce`` points take the config's ``fusions`` in place of its policies
    (a transmission policy orders parameter-server transfers; an all-reduce's
    schedule is its fusion rule). ``defaults_filled``: as :func:`simulate_stage`'s."""
    cfg = config if defaults_filled else with_defaults(config)
    return [
        (p, m, int(n))
        for m in cfg["modes"]
        for p in (cfg["fusions"] if m == "allreduce" else cfg["policies"])
        for n in cfg["workers"]
    ]


def simulate_stage(
    config: dict[str, Any],
    workload_path: str,
    out_path: str,
    wildcards: dict[str, str],
    defaults_filled: bool = False,
) -> None:
    """Simulate every grid point of one workload and network (each policy, mode and
    N of the config; see :func:`grid_points`) and write their flat records, one row
    per point, as one Parquet file. Progress goes to stderr (the job's log).

    One job per workload × network keeps a sweep's cost in the simulation rather
    than in a process start per point; the store keeps one row per point.
    ``defaults_filled``: ``config`` is already validated with the schema's
    defaults filled in (Snakemake's ``validate`` did it), so the job skips
    doing it again, and importing jsonschema (about 0.1 s of a job's start).

    A network entry with ``joins`` (:func:`grid_joins`) gives its async points
    with N > 1 the file's join delays and two-way share at N
    (:func:`sgdsim.pipeline.validation.apply_joins`); ``joins_path`` records
    the file used and ``joins_bandwidth_bps`` the rate it was captured at (None
    elsewhere).

    Raises:
        ConfigError: a mode that is not implemented, or a joins file that does
            not fit (:func:`grid_joins`).
    """
    from sgdsim.pipeline.validation import apply_joins
    from sgdsim.progress import progress
    from sgdsim.simulation import Workload
    from sgdsim.simulation.point import SimParams, grid_rule, predict_grid_point

    cfg = config if defaults_filled else with_defaults(config)
    workload = Workload.load(workload_path)
    network, net = _grid_network(cfg, wildcards["network"])
    params = with_hardware(cfg, wildcards["hardware"], SimParams.from_config(cfg))
    rule = grid_rule(cfg)
    joins = grid_joins(cfg, wildcards["network"], wildcards["model"], wildcards["hardware"])
    joins_bps = None if joins is None else float(joins[1]["network"]["bandwidth_bps"])
    points = grid_points(cfg, defaults_filled=True)
    rows: list[dict[str, Any]] = []
    for policy, mode, n in progress(points, desc=f"[simulate] {network.name}", unit="point"):
        if len(rows) == 1:
            # the compiled code and its types are loaded by now: the collector's full
            # passes skip those objects from here on (a tenth of a job's time)
            gc.freeze()
        net_n, params_n, used, used_rate = network, params, None, None
        if joins is not None and mode == "async" and n > 1:
            (used, captured), used_rate = joins, joins_bps
            net_n, params_n = apply_joins(captured, n, network, params)
        rows.append(
            {
                "model": wildcards["model"],
                "hardware": wildcards["hardware"],
                "network": net["name"],
                "bandwidth_bps": float(net["bandwidth_bps"]),
                "latency_s": float(net["latency_s"]),
                "mode": mode,
                "batch_size": workload.batch_size,
                "workers_per_node": params.workers_per_node,
                "ps_discipline": params.ps_discipline,
                "joins_path": used,
                "joins_bandwidth_bps": used_rate,
                **predict_grid_point(workload, net_n, n, policy, params_n, mode=mode, steady=rule),
            }
        )
    with atomic_path(out_path) as tmp:
        pl.DataFrame(rows).write_parquet(tmp)


def chrome_trace_stage(
    config: dict[str, Any], workload_path: str, out_path: str, wildcards: dict[str, str]
) -> None:
    """Write the synthetic execution trace (Chrome trace JSON) of one grid point:
    one run of the entry's ``steps`` steps after one warm-up step, with the
    grid's simulation settings (not the steady rule's long run nor the
    network's joins: a trace shows the steps of one start)."""
    from sgdsim.simulation import Workload
    from sgdsim.simulation.chrome_trace import TraceRecord, chrome_trace, write_chrome_trace
    from sgdsim.simulation.point import SimParams, predict_point

    cfg = with_defaults(config)
    if wildcards["mode"] != "async":
        raise ConfigError(f"config: modes: {wildcards['mode']!r} is not implemented; use async")
    workload = Workload.load(workload_path)
    network, _ = _grid_network(cfg, wildcards["network"])
    params = SimParams.from_config(cfg)
    key = tuple(wildcards[k] for k in ("model", "hardware", "network", "workers", "policy"))
    steps = next(
        int(t["steps"])
        for t in cfg["simulation"]["chrome_traces"]
        if (t["model"], t["hardware"], t["network"], str(t["workers"]), t["policy"]) == key
    )
    params = dataclasses.replace(params, steps_per_worker=steps + 1, warmup_steps=1, replications=1)
    records: list[TraceRecord] = []
    workers = int(wildcards["workers"])
    r = predict_point(workload, network, workers, wildcards["policy"], params, trace=records)
    meta = {**wildcards, "steps_per_s": r["steps_per_s"], "seed": r["seed"]}
    write_chrome_trace(out_path, chrome_trace(records, workers, meta))


def publish_stage(
    db_path: str,
    tables_dirs: list[str],
    prediction_files: list[str],
    config: dict[str, Any],
    measurement_files: Sequence[str] = (),
    testbed_prediction_files: Sequence[str] = (),
    imported_dirs: list[str] | None = None,
    replay_files: Sequence[str] = (),
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
        replay_files=[Path(p) for p in replay_files],
    )


def report_stage(
    db_path: str, policy_gain_path: str, accuracy_path: str, accuracy_plot_path: str
) -> None:
    """Markdown reports and the accuracy plot from the store (see :mod:`sgdsim.reports`)."""
    from sgdsim.reports import accuracy_plot, accuracy_report, policy_gain_report

    policy_gain_report(db_path, policy_gain_path)
    accuracy_report(db_path, accuracy_path)
    accuracy_plot(db_path, accuracy_plot_path)
