"""Stages of the measured validation: calibrate_testbed, profile_allreduce, measure,
predict_testbed, replay_testbed.

A validation point is measured on the emulated-network testbed
(:mod:`sgdsim.testbed`) in its mode (``async``, ``sync_ps`` or ``allreduce``)
and predicted for the testbed's placement (the PS, if any, and every worker
on this one node) by the same :func:`~sgdsim.simulation.point.predict_point`
as the grid.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from sgdsim.config import entry, validation_points, with_defaults
from sgdsim.errors import ConfigError
from sgdsim.hostcpu import HostCpu, steal_warning
from sgdsim.io import atomic_path
from sgdsim.pipeline.grid import profile_spec
from sgdsim.simulation.bounds import tbf_payload_fraction
from sgdsim.simulation.connection import JoinDelay

if TYPE_CHECKING:
    from sgdsim.testbed.calibrate import TrainingJoins
    from sgdsim.testbed.netns import Link


def _validation_network(config: dict[str, Any], name: str) -> dict[str, Any]:
    for n in config["validation"]["networks"]:
        if n["name"] == name:
            return dict(n)
    raise ConfigError(f"config: validation.networks: no entry named {name!r}")


def _mode(wildcards: dict[str, str]) -> str:
    """The point's SGD mode (``async`` where the wildcards name none)."""
    return wildcards.get("mode", "async")


def _point(config: dict[str, Any], wildcards: dict[str, str]) -> dict[str, Any] | None:
    """The :func:`~sgdsim.config.validation_points` entry of a job's wildcards (None: none)."""
    key = (
        wildcards["model"],
        wildcards["network"],
        _mode(wildcards),
        wildcards["policy"],
        int(wildcards["workers"]),
    )
    for p in validation_points(config):
        if (p["model"], p["network"], p["mode"], p["policy"], p["workers"]) == key:
            return p
    return None


def _point_duration(config: dict[str, Any], wildcards: dict[str, str]) -> float:
    p = _point(config, wildcards)
    return float(config["validation"]["duration_s"] if p is None else p["duration_s"])


def _episode_protocol(config: dict[str, Any], wildcards: dict[str, str]) -> dict[str, Any]:
    """A validation point's measurement protocol: ``duration_s``, ``warmup_s``,
    ``warmup_steps`` and ``min_steps`` from ``validation`` (and the point's own
    ``duration_s``), with their defaults."""
    val = config["validation"]
    return {
        "duration_s": float(_point_duration(config, wildcards)),
        "warmup_s": float(val["warmup_s"]),
        "warmup_steps": int(val["warmup_steps"]),
        "min_steps": int(val["min_steps"]),
    }


def _link(config: dict[str, Any], net: dict[str, Any], key: str) -> Any:
    """A validation network's own ``mtu``, ``queue``, ``buffer_bytes`` or
    ``congestion_control``, else
    ``validation``'s (a network may set its own queueing regime)."""
    return net[key] if key in net else config["validation"][key]


def validation_link(config: dict[str, Any], net: dict[str, Any]) -> Link:
    """The testbed's links for ``net``: its own ``mtu`` (bytes), ``queue``,
    ``buffer_bytes`` (bytes; None: the testbed's default for the rate) and
    ``congestion_control`` (None: the machine's default), each else
    ``validation``'s.

    Raises:
        ValueError: a value :class:`~sgdsim.testbed.netns.Link` refuses (the
            config's schema and checks refuse them first).
    """
    from sgdsim.testbed.netns import Link

    keys = ("mtu", "queue", "buffer_bytes", "congestion_control")
    return Link(**{key: _link(config, net, key) for key in keys})


def _validation_mtu(config: dict[str, Any], net: dict[str, Any]) -> int:
    """MTU of the testbed's links for ``net``, bytes (its ``mtu``, or ``validation.mtu``)."""
    return int(_link(config, net, "mtu"))


def _validation_queue(config: dict[str, Any], net: dict[str, Any]) -> str:
    """How the testbed's NICs queue on ``net``, ``"fair"`` or ``"fifo"`` (its
    ``queue``, or ``validation.queue``)."""
    return str(_link(config, net, "queue"))


def _validation_buffer(config: dict[str, Any], net: dict[str, Any]) -> int:
    """Bytes each emulated NIC's queue holds on ``net`` (its ``buffer_bytes``, or
    ``validation.buffer_bytes``, or the testbed's default for the rate and MTU:
    :func:`sgdsim.testbed.netns.tbf_params`)."""
    from sgdsim.testbed.netns import tbf_params

    mtu = _validation_mtu(config, net)
    return tbf_params(float(net["bandwidth_bps"]), mtu, _link(config, net, "buffer_bytes"))[1]


def steady_rule(config: dict[str, Any], wildcards: dict[str, str] | None = None) -> Any:
    """The :class:`~sgdsim.protocol.SteadyRule` of the point of ``wildcards`` when
    it is measured in steady state (its entry's ``protocol``, else
    ``validation.protocol``; without ``wildcards``, the latter), else None:
    ``validation.steady`` with the keys of the entry's own ``steady`` in their
    place, so the measurement and its prediction take the same rule."""
    from sgdsim.protocol import SteadyRule

    val = with_defaults(config)["validation"]
    if _protocol(config, wildcards) != "steady":
        return None
    p = None if wildcards is None else _point(config, wildcards)
    return SteadyRule(**{**val["steady"], **({} if p is None else p["steady"])})


def _protocol(config: dict[str, Any], wildcards: dict[str, str] | None) -> str:
    """``episodes`` or ``steady``: the point's entry's, else ``validation.protocol``."""
    p = None if wildcards is None else _point(config, wildcards)
    return str(with_defaults(config)["validation"]["protocol"] if p is None else p["protocol"])


#: Name of the network a point measured on loopback (no root) is predicted for.
LOOPBACK_FIT = "loopback (profile fit)"

#: The join calibration's ``method`` in its JSON, per ``validation.join_calibration``.
METHODS = {"skeleton": "skeleton capture", "training": "training capture"}


def _testbed_network(config: dict[str, Any], net: dict[str, Any], tables_dir: str) -> Any:
    """The network the testbed gives a validation point, as the simulator sees it.

    The validation network's rate less TCP/IP and Ethernet headers at
    ``validation.mtu`` (:func:`sgdsim.simulation.bounds.tbf_payload_fraction`),
    behind the token bucket of the testbed's shaper (its burst,
    :func:`sgdsim.testbed.netns.tbf_params`, less the same headers); where the
    testbed cannot run and ``validation.unprivileged`` is ``loopback``, the
    profile's own loopback network fit instead (``name`` :data:`LOOPBACK_FIT`).
    """
    from sgdsim.simulation import Network
    from sgdsim.testbed.netns import tbf_params

    mtu = _validation_mtu(config, net)
    fraction = tbf_payload_fraction(mtu)
    network = Network(
        net["bandwidth_bps"] / 8.0 * fraction,
        float(net["latency_s"]),
        net["name"],
        burst_bytes=tbf_params(net["bandwidth_bps"], mtu)[0] * fraction,
    )
    if config["validation"]["unprivileged"] == "loopback":
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
    from sgdsim.simulation.async_ps import single_step_estimate

    workers = int(wildcards["workers"])
    episodes = int(config["validation"]["episodes"]) if workers > 1 else 1
    key = "/".join(wildcards[k] for k in ("model", "network", "policy", "workers"))
    rng = np.random.default_rng([int(config["seed"]), zlib.crc32(key.encode())])
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

    Mode ``async`` (``wildcards["mode"]``, ``async`` when absent): runs
    :func:`sgdsim.testbed.run_async_measurement` with the model and thread
    settings of the profile, the validation network's rate and the point's pull
    order, in ``validation.episodes`` episodes that start the workers at the
    offsets of :func:`validation_offsets` (one episode with one worker).
    Modes ``sync_ps`` and ``allreduce``: :func:`sgdsim.testbed.sync.run_sync_measurement`.
    With ``validation.protocol: steady`` every mode runs until the steady-state
    rule holds. A point's ``runs`` launches it that many times (fresh processes)
    and stores their mean (``run_steps_per_s``: each launch's rate). Without
    root or iproute2 the point is recorded with ``status`` ``skipped`` and the
    reason (``validation.unprivileged: skip``), or measured unshaped on loopback
    (``loopback``).

    Raises:
        MeasurementError: the run failed (nothing is written).
    """
    from sgdsim.simulation import Workload
    from sgdsim.testbed import check_available, run_async_measurement
    from sgdsim.testbed.netns import host_congestion_control

    config = with_defaults(config)
    val = config["validation"]
    net = _validation_network(config, wildcards["network"])
    latency = float(net["latency_s"])
    mode = _mode(wildcards)
    order = "tf_default" if mode == "allreduce" else wildcards["policy"]
    spec = profile_spec(config, wildcards["hardware"], wildcards["model"], pull_order=order)
    workers = int(wildcards["workers"])
    row: dict[str, Any] = {
        "model": wildcards["model"],
        "hardware": wildcards["hardware"],
        "network": net["name"],
        "bandwidth_bps": float(net["bandwidth_bps"]),
        "latency_s": latency,
        "mode": mode,
        "policy": wildcards["policy"],
        "workers": workers,
        "batch_size": spec.batch_size,
        **_episode_protocol(config, wildcards),
        "mtu": _validation_mtu(config, net),
        "queue": _validation_queue(config, net),
        "buffer_bytes": _validation_buffer(config, net),
        "congestion_control": _link(config, net, "congestion_control") or host_congestion_control(),
        "protocol": _protocol(config, wildcards),
    }
    why = check_available(need_netem=latency > 0)
    loopback = False
    if why is not None:
        if val["unprivileged"] == "skip":
            print(f"[measure] skipped: {why}", file=sys.stderr)
            row |= {"status": "skipped", "reason": why, "loopback": False}
            with atomic_path(out_path) as tmp:
                pl.DataFrame([row]).write_parquet(tmp)
            return
        print(f"[measure] {why}; measuring unshaped on loopback instead", file=sys.stderr)
        loopback = True
        row["buffer_bytes"] = None  # no shaping, no queue
    rule = steady_rule(config, wildcards)
    point = _point(config, wildcards)
    runs = 1 if point is None else int(point["runs"])
    if mode != "async":
        _measure_sync(row, spec, mode, rule, loopback, why or "", out_path, runs)
        return
    if rule is not None:
        _measure_steady(row, spec, rule, loopback, why or "", out_path, runs)
        return
    offsets = validation_offsets(
        config, Workload.load(workload_path), _testbed_network(config, net, tables_dir), wildcards
    )
    row["episodes"] = len(offsets)
    launches = [
        run_async_measurement(
            spec,
            workers,
            duration_s=row["duration_s"],
            warmup_s=row["warmup_s"],
            warmup_steps=row["warmup_steps"],
            min_steps=row["min_steps"],
            start_offsets_s=offsets,
            **_testbed_link(row, loopback),
        )
        for _ in range(runs)
    ]
    r = launches[0]
    row |= _run_columns(r, spec, why or "", loopback) | _window_columns(r)
    row |= _launch_columns(launches, spec)
    row["start_offsets_s"] = [list(e) for e in r.start_offsets_s]
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def _run_columns(r: Any, spec: Any, reason: str, loopback: bool) -> dict[str, Any]:
    """The columns every measured run fills: throughput, CPU and drops."""
    return {
        "status": "ok",
        "reason": reason,
        "loopback": loopback,
        "steps_per_s": r.steps_per_s,
        "samples_per_s": r.steps_per_s * spec.batch_size,
        "per_worker_steps_per_s": list(r.per_worker_steps_per_s),
        "background_busy": r.background_busy,
        "cpu_busy": r.cpu_busy,
        "cpu_steal": r.cpu_steal,
        **{f"{k}_cpu_s_per_step": r.cpu_s_per_step.get(k) for k in ("worker", "ps", "other")},
        "shaper_drops": r.drops,
    }


def _window_columns(r: Any) -> dict[str, Any]:
    """The columns of a run scored over a window (episodes, or one synchronous run)."""
    windows = list(r.steps_per_s_windows)
    return {
        "steps_per_s_windows": windows,
        "steps_per_s_std": statistics.stdev(windows) if len(windows) > 1 else 0.0,
        "window_s": r.window_s,
        "step_end_times": [list(t) for t in r.step_end_times],
    }


def _testbed_link(row: dict[str, Any], loopback: bool) -> dict[str, Any]:
    """The testbed's arguments for a point's ``row``: ``bandwidth_bps`` (bit/s) and
    ``latency_s`` (one way, seconds), none on ``loopback``; ``loopback``; and
    ``link``, the :class:`~sgdsim.testbed.netns.Link` of the row's ``mtu``,
    ``queue``, ``buffer_bytes`` and ``congestion_control`` (``""``: the
    machine's default).

    Raises:
        ValueError: a value :class:`~sgdsim.testbed.netns.Link` refuses.
    """
    from sgdsim.testbed.netns import Link

    return {
        "bandwidth_bps": None if loopback else row["bandwidth_bps"],
        "latency_s": 0.0 if loopback else row["latency_s"],
        "loopback": loopback,
        "link": Link(
            mtu=row["mtu"],
            queue=row["queue"],
            buffer_bytes=row["buffer_bytes"],
            congestion_control=row["congestion_control"] or None,
        ),
    }


def _launch_columns(launches: Sequence[Any], spec: Any) -> dict[str, Any]:
    """``runs`` and each launch's steps/s (``run_steps_per_s``); for more than one
    launch also each launch's step ends (``run_step_end_times``, as
    ``step_end_times``) and the point's rate as their mean (steps/s, samples/s,
    per worker) with the spread of all their windows (``steps_per_s_windows``,
    ``steps_per_s_std``) and their drops summed. The other columns stay the first
    launch's (step ends, CPU, the steady estimate)."""
    rates = [x.steps_per_s for x in launches]
    out: dict[str, Any] = {"runs": len(launches), "run_steps_per_s": rates}
    if len(launches) == 1:
        return out
    # fresh processes each time: a launch is one draw of the workers' phases
    mean = statistics.fmean(rates)
    windows = [w for x in launches for w in x.steps_per_s_windows]
    per_worker = np.mean([x.per_worker_steps_per_s for x in launches], axis=0)
    print(
        f"[measure] {len(launches)} launches: "
        + ", ".join(f"{v:.3g}" for v in rates)
        + f" steps/s, mean {mean:.4g}",
        file=sys.stderr,
    )
    return out | {
        "run_step_end_times": [[list(e) for e in x.step_end_times] for x in launches],
        "steps_per_s": mean,
        "samples_per_s": mean * spec.batch_size,
        "per_worker_steps_per_s": [float(v) for v in per_worker],
        "steps_per_s_windows": windows,
        "steps_per_s_std": statistics.stdev(windows),
        "shaper_drops": sum(x.drops for x in launches),
    }


def _steady_rule_columns(rule: Any, r: Any) -> dict[str, Any]:
    """The steady protocol's parameters and estimate (:func:`sgdsim.protocol.steady_columns`)."""
    from sgdsim.protocol import steady_columns

    return {
        "warmup_s": rule.settle_s,
        "warmup_steps": rule.warmup_steps,
        "settle_s": rule.settle_s,
        "target_rel_half_width": rule.rel_half_width,
        "batches": rule.batches,
        "confidence": rule.confidence,
        "max_s": rule.max_s,
        **steady_columns(r.steady, r.step_end_times),
    }


def _steady_launch_columns(launches: Sequence[Any], confidence: float) -> dict[str, Any]:
    """The steady estimate of a point launched ``k`` > 1 times (each launch an
    object with ``steps_per_s`` and its ``steady`` estimate): the interval of
    the mean of the launches' rates, Student's t over the k launches
    (:func:`sgdsim.protocol.batch_means_half_width` with each launch one
    batch), since one launch's batches say nothing of where the next launch's
    phases settle; ``converged`` when every launch met the rule. Empty for one
    launch (its own estimate stands)."""
    from sgdsim.protocol import batch_means_half_width

    if len(launches) < 2:
        return {}
    rates = [x.steps_per_s for x in launches]
    half = batch_means_half_width(rates, confidence)
    return {
        "steps_per_s_half_width": half,
        "rel_half_width": half / statistics.fmean(rates),
        "converged": all(x.steady.converged for x in launches),
    }


def _measure_steady(
    row: dict[str, Any],
    spec: Any,
    rule: Any,
    loopback: bool,
    reason: str,
    out_path: str,
    runs: int = 1,
) -> None:
    """Measure one validation point under the ``steady`` protocol
    (:func:`sgdsim.testbed.run_steady_measurement`) in ``runs`` launches (fresh
    processes, each one draw of the phases the workers settle in; the point's
    rate is their mean, each one's in ``run_steps_per_s``) and write its one-row
    Parquet file: ``row`` (the point's columns) plus the runs', with every step
    end of every worker of the first launch (``step_end_times``, s since the
    window started). With several launches the interval is the mean's, over
    the launches (:func:`_steady_launch_columns`)."""
    from sgdsim.testbed import run_steady_measurement

    launches = [
        run_steady_measurement(spec, row["workers"], rule=rule, **_testbed_link(row, loopback))
        for _ in range(runs)
    ]
    r = launches[0]
    assert r.steady is not None
    row |= _run_columns(r, spec, reason, loopback)
    row["steps_per_s_std"] = statistics.stdev(r.steps_per_s_windows)
    row |= _steady_rule_columns(rule, r)
    row |= _launch_columns(launches, spec)
    row |= _steady_launch_columns(launches, rule.confidence)
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def _measure_sync(
    row: dict[str, Any],
    spec: Any,
    mode: str,
    rule: Any,
    loopback: bool,
    reason: str,
    out_path: str,
    runs: int = 1,
) -> None:
    """Measure one ``sync_ps`` or ``allreduce`` point
    (:func:`sgdsim.testbed.sync.run_sync_measurement`) under the ``episodes``
    protocol (one run per launch) or, with ``rule``, the ``steady`` one, in
    ``runs`` launches (fresh processes; the point's rate is their mean, each
    one's in ``run_steps_per_s``), and write its one-row Parquet file: ``row``
    plus the runs' columns (step ends and CPU of the first launch)."""
    from sgdsim.testbed.sync import run_sync_measurement

    launches = [
        run_sync_measurement(
            spec,
            mode,
            row["workers"],
            duration_s=row["duration_s"],
            warmup_s=row["warmup_s"],
            warmup_steps=row["warmup_steps"],
            min_steps=row["min_steps"],
            rule=rule,
            **_testbed_link(row, loopback),
        )
        for _ in range(runs)
    ]
    r = launches[0]
    row |= _run_columns(r, spec, reason, loopback) | _window_columns(r)
    row["allreduces_per_step"] = r.allreduces_per_step
    if rule is not None and r.steady is not None:
        row |= _steady_rule_columns(rule, r)
    else:
        row["episodes"] = 1
    row |= _launch_columns(launches, spec)
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def _nearest(captured: Iterable[int], workers: int) -> int:
    """The captured N nearest to ``workers``, the larger on a tie: a pair's
    joins are a regime of their own (two workers keep or trade places;
    three or more wander: docs/steady-state-log.md, "A pair keeps the phase it
    is launched with"), so N = 3 is nearer N = 4's than N = 2's."""
    return min(captured, key=lambda k: (abs(k - workers), -k))


def two_way_share_at(joins: dict[str, Any], workers: int) -> tuple[float, float] | None:
    """The ``(pull, push)`` two-way share a :func:`calibrate_push_join_stage` JSON
    gives N ``workers``: the one captured at N, else at the captured N nearest
    to it (the larger on a tie); None without any, or where that capture
    measured none (a direction never alone: LeNet5's four workers keep both
    busy), since the share changes with N and another N's would not be this
    one's (LeNet5 at 200 Mbit/s: 0.85 at N = 2; with it the simulator ran its
    own N = 4 capture 14 % slow, without it 1 % fast)."""
    shares = {int(n): v for n, v in (joins.get("two_way_share") or {}).items()}
    if not shares:
        return None
    share = shares[_nearest(shares, workers)]
    return None if not share else (float(share[0]), float(share[1]))


def joins_at_n(joins: dict[str, Any], workers: int) -> dict[str, Any]:
    """The join delays a :func:`calibrate_push_join_stage` JSON gives N ``workers``:
    its ``"joins_at"`` entry of N, else of the captured N nearest to it (the
    larger on a tie); the JSON itself when it has none (one capture, or a
    race's calibration). Read by :func:`join_delay_in`."""
    at = joins.get("joins_at") or {}
    return at[str(_nearest(map(int, at), workers))] if at else joins


def read_joins(path: str | Path) -> dict[str, Any]:
    """A joins JSON (``sgdsim calibrate-joins``, or the pipeline's
    :func:`calibrate_push_join_stage` result), checked to hold captured joins.

    Raises:
        ValueError: not readable JSON, or no ``status: ok`` with ``joins_at``
            (one line naming the file and the fix).
    """
    try:
        joins = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from e
    if not isinstance(joins, dict) or joins.get("status") != "ok" or "joins_at" not in joins:
        raise ValueError(
            f"{path}: no captured joins (needs status ok and joins_at); write it with "
            "sgdsim calibrate-joins"
        )
    return joins


def apply_joins(joins: dict[str, Any], workers: int, network: Any, params: Any) -> tuple[Any, Any]:
    """The network and :class:`~sgdsim.simulation.point.SimParams` of N async
    ``workers`` with a joins JSON's pull and push join delays
    (:func:`joins_at_n`, :func:`join_delay_in`) and two-way share
    (:func:`two_way_share_at`, the network's
    :attr:`~sgdsim.simulation.Network.two_way_share`) at that N, or at the
    captured N nearest to it."""
    at = joins_at_n(joins, workers)
    params = dataclasses.replace(
        params,
        pull_join_delay_s=join_delay_in(at, "pull"),
        push_join_delay_s=join_delay_in(at, "push"),
    )
    share = two_way_share_at(joins, workers)
    return (network if share is None else dataclasses.replace(network, two_way_share=share)), params


def _joins_row(joins: TrainingJoins) -> dict[str, Any]:
    """One capture's join delays as :func:`join_delay_in` reads them (JSON)."""
    row: dict[str, Any] = {
        "workers": joins.workers,
        "draw": "joins" if joins.push.joins_s else "gamma",
        "steps_per_s": joins.steps_per_s,
        "phase_distance": joins.phase_distance,
    }
    for name, delay, growth in (
        ("push", joins.push, joins.push_growth_s),
        ("pull", joins.pull, joins.pull_growth_s),
    ):
        row |= {
            f"{name}_join_delay_s": list(delay.mean_s),
            f"{name}_join_sd_s": list(delay.sd_s),
            f"{name}_join_growth_s": {str(k): list(g) for k, g in growth.items()},
        }
    return row


def calibrate_testbed_stage(config: dict[str, Any], out_path: str, network_name: str) -> None:
    """Calibrate the testbed for one validation network (JSON).

    Writes ``{"status": "ok", "network_cpu_s_per_byte": …, "pull_join_delay_s":
    …, "message_overhead_s": {"2": …, …}, …}`` from
    :func:`sgdsim.testbed.calibrate.network_cpu_per_byte` and
    :func:`sgdsim.testbed.calibrate.pull_join_delay` (with the validation
    hardware's threads; the push join delay is each model's own,
    :func:`calibrate_push_join_stage`) and, for every N ≥ 2 of an ``allreduce`` point
    measured on this network, :func:`sgdsim.testbed.calibrate.ring_step_overhead`
    at P = N with the validation hardware's threads (``message_overhead_s``
    maps N to its α less the latency; empty without such points),
    ``host_cpu_busy`` and ``host_cpu_steal`` (shares of the node's CPU time
    over the calibration, :class:`sgdsim.hostcpu.HostCpu`), or ``status``
    ``skipped`` with the reason (and zeros) where the testbed cannot run.

    Raises:
        CalibrationError: the transfer failed (nothing is written).
    """
    from sgdsim.profiling import ProfileSpec
    from sgdsim.testbed import check_available
    from sgdsim.testbed.calibrate import (
        network_cpu_per_byte,
        pull_join_delay,
        ring_step_overhead,
    )

    config = with_defaults(config)
    net = _validation_network(config, network_name)
    ring = sorted(
        {
            int(p["workers"])
            for p in validation_points(config)
            if p["mode"] == "allreduce" and p["network"] == net["name"] and int(p["workers"]) > 1
        }
    )
    why = check_available()
    row: dict[str, Any] = {"network": net["name"], "bandwidth_bps": float(net["bandwidth_bps"])}
    if why is not None:
        print(f"[calibrate] skipped: {why}", file=sys.stderr)
        row |= {
            "status": "skipped",
            "reason": why,
            "network_cpu_s_per_byte": 0.0,
            "pull_join_delay_s": 0.0,
            "message_overhead_s": {},
        }
    else:
        from sgdsim.progress import progress

        total = 2 + len(ring)
        # the NICs the measurements of this network get
        link = validation_link(config, net)
        with (
            HostCpu() as host,
            progress(desc=f"[calibrate] {net['name']}", total=total, unit="calibration") as done,
        ):
            r = network_cpu_per_byte(float(net["bandwidth_bps"]), link=link)
            done.update()
            hw = entry(config, "hardware", config["validation"]["hardware"])
            threads = int(hw["inter_op_threads"])
            race = pull_join_delay(float(net["bandwidth_bps"]), threads=threads, link=link)
            done.update()
            spec = ProfileSpec(
                model="probe",
                intra_op_threads=int(hw["intra_op_threads"]),
                inter_op_threads=int(hw["inter_op_threads"]),
            )
            steps = {}
            for p in ring:
                steps[p] = ring_step_overhead(
                    float(net["bandwidth_bps"]), float(net["latency_s"]), p, spec, link=link
                )
                done.update()
        row |= {
            "status": "ok",
            "reason": "",
            "network_cpu_s_per_byte": r.extra_s_per_byte,
            "testbed_s_per_byte": r.testbed_s_per_byte,
            "loopback_s_per_byte": r.loopback_s_per_byte,
            "testbed_runs_s_per_byte": list(r.testbed_runs_s_per_byte),
            "bytes_moved": r.bytes_moved,
            "pull_join_delay_s": race.delay_s,
            "pull_race_growth_s": list(race.growth_s),
            "pull_race_bytes": race.bytes_each,
            "message_overhead_s": {str(p): st.overhead_s for p, st in steps.items()},
            "host_cpu_busy": host.busy,
            "host_cpu_steal": host.steal,
            "ring_step_s": {str(p): st.step_s for p, st in steps.items()},
            "ring_alone_step_s": {str(p): st.alone_s for p, st in steps.items()},
        }
        for p, st in steps.items():
            print(
                f"[calibrate] {net['name']}: a training step of a 4-float model takes "
                f"{st.step_s * 1e3:.2f} ms with {p} ring workers, {st.alone_s * 1e3:.2f} ms "
                f"alone: {st.message_s * 1e3:.3f} ms per ring step",
                file=sys.stderr,
            )
        print(
            f"[calibrate] {net['name']}: kernel CPU {r.testbed_s_per_byte * 1e9:.1f} ns/byte "
            f"through the testbed, {r.loopback_s_per_byte * 1e9:.1f} on loopback; the PS "
            f"serves a step that starts while it sends {race.delay_s * 1e3:.2f} ms late",
            file=sys.stderr,
        )
        warn = steal_warning(f"the calibration of {net['name']}", host.steal)
        if warn is not None:
            print(f"[calibrate] {warn}", file=sys.stderr)
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text(json.dumps(row, indent=1) + "\n")


def join_calibration(
    spec: Any,
    workload_path: str,
    bandwidth_bps: float,
    link: Any,
    workers: Sequence[int],
    capture_s: float,
    *,
    method: str = "skeleton",
    label: str = "",
    runs: int = 1,
) -> dict[str, Any]:
    """Capture one model's joins on one emulated network at each N of ``workers``.

    The largest N (at least 2) first, then each other N >= 2: N processes run
    the skeleton of the profiled step (``method`` ``skeleton``:
    :mod:`sgdsim.testbed.skeleton`) or train the model (``training``) on the
    testbed, phases left to themselves, for ``capture_s`` seconds after
    their warm-up, while the PS's port is captured
    (:func:`sgdsim.testbed.calibrate.training_join_delays`); with ``runs``
    > 1 each N is launched and captured that many times and the captures'
    joins pooled (:func:`sgdsim.testbed.calibrate.pool_joins`; each one's
    steps/s in its ``joins_at`` row's ``run_steps_per_s``). Progress and
    each N's joins go to stderr, prefixed ``[calibrate] label:``.

    Args:
        spec: the model's :class:`~sgdsim.profiling.ProfileSpec` (threads).
        workload_path: the model's workload JSON (the skeleton's step).
        bandwidth_bps: the NICs' rate, bit/s.
        link: the testbed's links (:class:`~sgdsim.testbed.netns.Link`).
        workers: the N to capture (those < 2 are skipped).
        capture_s: seconds of window of each capture (> 0), whole: the capture
            does not stop where its rate converges.
        method: ``skeleton`` or ``training`` (:data:`METHODS`).
        label: the network's name in the log lines.
        runs: captures pooled at each N (>= 1).

    Returns:
        The JSON fields :func:`calibrate_push_join_stage` documents (from
        ``"method"`` on; no ``status``).

    Raises:
        MeasurementError, TestbedUnavailable: as
            :func:`~sgdsim.testbed.run_steady_measurement`.
        FileNotFoundError: ``tcpdump`` is not installed.
        ValueError: ``method`` unknown, ``runs`` < 1.
    """
    from sgdsim.simulation import Workload
    from sgdsim.testbed.calibrate import TRAINING_JOIN_RULE, pool_joins, training_join_delays

    if method not in METHODS:
        raise ValueError(f"join calibration method must be one of {sorted(METHODS)}: {method!r}")
    if runs < 1:
        raise ValueError(f"join capture runs must be >= 1, got {runs}")
    workload = Workload.load(workload_path)
    doing = "running the step's skeleton" if method == "skeleton" else "training"
    ns = {int(n) for n in workers}
    most = max([2, *ns])
    kw: dict[str, Any] = dict(
        spec=spec,
        bandwidth_bps=float(bandwidth_bps),
        pull_bytes=float(workload.pull_bytes.sum()),
        push_bytes=float(workload.push_bytes.sum()),
        # the whole window: a fast model's rate converges within a second, its joins
        # and two-way shares do not (LeNet5 at 200 Mbit/s: 1 s, two-way share none)
        rule=dataclasses.replace(
            TRAINING_JOIN_RULE, max_s=float(capture_s), min_s=float(capture_s)
        ),
        link=link,
        # the skeleton's workers start in the testbed's namespaces: an absolute path
        skeleton=str(Path(workload_path).resolve()) if method == "skeleton" else None,
    )
    launches: dict[int, list[float]] = {}

    def capture(n: int) -> Any:
        # one capture is one launch of wandering phases: pool several
        # (docs/steady-state-log.md, "The calibration's own repeatability")
        got = []
        for i in range(runs):
            if runs > 1:
                print(
                    f"[calibrate] {label}: {n} workers, capture {i + 1} of {runs}", file=sys.stderr
                )
            got.append(training_join_delays(workers=n, **kw))
        launches[n] = [g.steps_per_s for g in got]
        return got[0] if runs == 1 else pool_joins(got, signed=link.queue == "fifo")

    with HostCpu() as host:
        joins = capture(most)
        # joins and shares change with N: each other N >= 2 gets a capture of its own
        at = {n: capture(n) for n in sorted(ns) if 2 <= n < most}
    at[most] = joins
    warn = steal_warning(f"the join captures of {label}", host.steal)
    if warn is not None:
        print(f"[calibrate] {label}: {warn}", file=sys.stderr)
    row: dict[str, Any] = {
        "method": METHODS[method],
        "host_cpu_busy": host.busy,
        "host_cpu_steal": host.steal,
        # the largest N's joins (as training_join_delays chose: a FIFO's drawn as
        # measured, sign included), then every N's
        **_joins_row(joins),
        "capture_runs": runs,
        "joins_at": {
            str(n): _joins_row(j) | {"run_steps_per_s": launches[n]} for n, j in sorted(at.items())
        },
        # docs/steady-state-log.md, "Two-way traffic through a FIFO"
        "two_way_share": {
            str(n): None if j.two_way_share is None else list(j.two_way_share)
            for n, j in sorted(at.items())
        },
        # recorded for the study of the phases (docs/steady-state-log.md, "The lag a join leaves")
        "two_way_share_past_start": {
            str(n): None if j.two_way_share_past_start is None else list(j.two_way_share_past_start)
            for n, j in sorted(at.items())
        },
        "join_lag_s": {
            str(n): {
                name: {str(k): [list(x) for x in g] for k, g in j.lag_s.get(name, {}).items()}
                for name in ("push", "pull")
            }
            for n, j in sorted(at.items())
        },
        # recorded for the study of the parting force (docs/steady-state-log.md,
        # "The joiner's start"): each N's start deficits, captured and simulated
        "start_deficit_s": {
            str(n): _start_deficits(j, workload, float(bandwidth_bps), link)
            for n, j in sorted(at.items())
        },
    }
    for name in ("push", "pull"):
        row |= {
            # recorded for the study of joins net of the transfers' own starts
            f"{name}_start_excess_s": {
                str(k): list(g) for k, g in joins.start_excess_s.get(name, {}).items()
            },
            # the part of the joins that moves the phases (docs/steady-state.md)
            f"{name}_join_gain_s": {str(k): list(g) for k, g in joins.gain_s.get(name, {}).items()},
            # each join's overlap, beside its lateness (docs/steady-state.md)
            f"{name}_join_window_s": {
                str(k): list(w) for k, w in joins.window_s.get(name, {}).items()
            },
        }
    for n, j in sorted(at.items()):
        for name, delay, growth in (
            ("push", j.push, j.push_growth_s),
            ("pull", j.pull, j.pull_growth_s),
        ):
            ms = ", ".join(
                f"{m * 1e3:.1f} ± {sd * 1e3:.1f} ms behind {k} ({len(growth.get(k, ()))} joins)"
                for k, (m, sd) in enumerate(zip(delay.mean_s, delay.sd_s, strict=True), 1)
            )
            print(
                f"[calibrate] {label}: {n} workers {doing}, a {name} "
                f"that joins gets its share {ms}",
                file=sys.stderr,
            )
        v = j.two_way_share
        said = "too little" if v is None else f"{v[0]:.3f} (pull) and {v[1]:.3f} (push)"
        print(
            f"[calibrate] {label}: {n} workers {doing}, each direction carries "
            f"{said} of its rate alone while the other carries data",
            file=sys.stderr,
        )
    row["boundary_s"] = joins.boundary_s  # recorded, unused (see the stage's docstring)
    row["saturated_Bps"] = joins.saturated_Bps
    return row


def _start_deficits(
    joins: TrainingJoins, workload: Any, bandwidth_bps: float, link: Any
) -> dict[str, Any]:
    """A capture's start deficits beside the simulator's own for its run (JSON):
    ``{"push": {"k": […]}, "pull": …}`` each captured start, seconds of the link
    (:func:`sgdsim.testbed.capture.start_deficits`), and ``"push_simulated"`` /
    ``"pull_simulated"``: ``{"k": [median, count]}`` of the same N simulated
    without join delays on the capture's full rate
    (:func:`sgdsim.testbed.calibrate.simulated_start_deficits`; the nominal
    payload rate when the capture had no lone pull)."""
    from sgdsim.testbed.calibrate import simulated_start_deficits

    rate = joins.saturated_Bps or bandwidth_bps / 8 * tbf_payload_fraction(link.mtu)
    sim = simulated_start_deficits(workload, rate, joins.workers)
    out: dict[str, Any] = {}
    for name in ("push", "pull"):
        got = joins.start_deficit_s.get(name, {})
        out[name] = {str(k): list(v) for k, v in got.items()}
        out[f"{name}_simulated"] = {
            str(k): [statistics.median(v), len(v)] for k, v in sim[name].items()
        }
    return out


def write_joins(out_path: str, bandwidth_bps: float, link: Any, row: dict[str, Any]) -> None:
    """Write a joins JSON (what ``sgdsim calibrate-joins`` and rule ``capture_joins``
    write, :func:`read_joins` reads): ``status`` ok, the ``network`` captured (its
    rate in bit/s and ``link``'s queue, buffer in bytes, MTU in bytes and TCP), and
    the fields of :func:`join_calibration`'s ``row``; atomically (nothing partial)."""
    network = {
        "bandwidth_bps": float(bandwidth_bps),
        "queue": link.queue,
        "buffer_bytes": link.buffer_bytes,
        "mtu": link.mtu,
        "congestion_control": link.congestion_control,
    }
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text(json.dumps({"status": "ok", "network": network, **row}, indent=1))


def calibrate_push_join_stage(
    config: dict[str, Any],
    workload_path: str,
    out_path: str,
    network_name: str,
    hardware: str,
    model: str,
) -> None:
    """Calibrate one model's join delays on one validation network (JSON).

    Writes ``{"status": "ok", "method": "skeleton capture", "workers": W,
    "push_join_delay_s": [mean per k], "push_join_sd_s": [sd per k],
    "push_join_growth_s": {"k": […]}, the same for ``pull``,
    "steps_per_s": …}`` from
    :func:`sgdsim.testbed.calibrate.training_join_delays`: the largest N
    of the model's async points on this network (at least 2) run the
    skeleton of the profiled step (``validation.join_calibration:
    skeleton``, the default: the workload's transfers, its compute as
    waits; ``"method": "training capture"`` with ``training``: they train
    the model) on the network's NICs (the validation hardware's threads) while
    the PS's port is captured; per number ``k`` of transfers a pull or push
    joins, the mean and spread of the joins' lateness the capture shows.
    ``host_cpu_busy`` and ``host_cpu_steal``: the node's CPU shares over
    all the captures (:class:`sgdsim.hostcpu.HostCpu`).
    Through a ``fifo`` queue, where a joiner may get more than its share,
    ``"draw": "joins"`` (the means unclipped): the prediction draws the
    measured joins themselves, sign included (docs/steady-state-log.md, "Joins
    through a FIFO"); ``"draw": "gamma"`` otherwise. Recorded beside them,
    not used by the prediction: ``"boundary_s"`` (median seconds from a
    worker's last push packet to its next pull's bulk) and
    ``"push_start_excess_s"`` / ``"pull_start_excess_s"`` (``{"k": […]}``,
    ``"0"`` alone: each transfer's start over its fair share), the joins
    net of the transfers' own starts (docs/steady-state-log.md, "Where the
    simulated pair's catch-up comes from"), and ``"push_join_gain_s"`` /
    ``"pull_join_gain_s"`` (``{"k": […]}``: how much earlier than a fair
    share of the full link, ``"saturated_Bps"``, each join's incumbents got
    their bytes, the part of a join that moves the phases:
    docs/steady-state-log.md, "The force on the phase") and
    ``"push_join_window_s"`` / ``"pull_join_window_s"`` (each join's overlap
    with its incumbents, in the order of its lateness), ``"join_lag_s"``
    (``{"N": {"push": {"k": [[growth, start lag], …]}, "pull": …}}``: how far
    each join moved the workers' phases, :func:`sgdsim.testbed.capture.join_lags`)
    and ``"two_way_share_past_start"`` (``{"N": [pull, push] or null}``: the
    two-way share without each transfer's first 0.1 s; docs/steady-state-log.md,
    "The lag a join leaves") and ``"start_deficit_s"`` (``{"N": {"push": {"k":
    […]}, "pull": …, "push_simulated": {"k": [median, count]}, "pull_simulated":
    …}}``: each start's shortfall from its share, captured and simulated;
    :func:`_start_deficits`, docs/steady-state-log.md, "The joiner's start").
    Every other N ≥ 2 of
    the model's async points on this network is run and captured the
    same way: ``"joins_at"`` (``{"N": {"workers", "draw", "steps_per_s",
    "push_join_delay_s", "push_join_sd_s", "push_join_growth_s", the same for
    pull}}``, the largest N's included) and ``"two_way_share"`` (``{"N":
    [pull, push] or null}``: each direction's rate while the other carries
    data over its rate alone, :func:`sgdsim.testbed.capture.two_way_shares`)
    hold each N's own, which the prediction of a point at N uses
    (:func:`joins_at_n`): a pair's joins are not four workers' (docs/steady-
    state.md, "Joins at each N"). ``skipped`` with the reason where the
    testbed cannot run.

    Raises:
        MeasurementError: the workers' run failed (nothing is written).
    """
    from sgdsim.testbed import check_available

    config = with_defaults(config)
    net = _validation_network(config, network_name)
    row: dict[str, Any] = {"network": net["name"], "push_join_delay_s": 0.0}
    why = check_available()
    if why is None:
        from sgdsim.testbed.capture import tcpdump_missing

        why = tcpdump_missing()
    if why is not None:
        print(f"[calibrate] skipped: {why}", file=sys.stderr)
        row |= {"status": "skipped", "reason": why}
    else:
        method = config["validation"]["join_calibration"]
        ns = capture_workers(config, net["name"], model)
        row |= {"status": "ok", "reason": ""} | join_calibration(
            profile_spec(config, hardware, model),
            workload_path,
            float(net["bandwidth_bps"]),
            validation_link(config, net),
            sorted(ns),
            float(config["validation"]["join_capture_s"]),
            method=method,
            label=net["name"],
            runs=int(config["validation"]["join_capture_runs"]),
        )
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text(json.dumps(row, indent=1) + "\n")


def capture_workers(config: dict[str, Any], network: str, model: str) -> set[int]:
    """The N at which the join calibration of ``model`` on ``network`` runs
    and captures: every N of the model's async points on the network, or,
    with ``validation.join_capture_workers`` set, those of them in that list
    (the largest of them if none is); a point at an N not captured takes the
    nearest captured N's joins (:func:`joins_at_n`). The caller skips N < 2."""
    ns = {
        int(p["workers"])
        for p in validation_points(config)
        if p["mode"] == "async" and p["network"] == network and p["model"] == model
    }
    chosen = config["validation"].get("join_capture_workers")
    if chosen is None or not ns:
        return ns
    return (ns & set(chosen)) or {max(ns)}


#: Timed steps of the all-reduce path's own step, at least (a mean over 30 steps).
MIN_ALLREDUCE_STEPS = 30


def profile_allreduce_stage(
    config: dict[str, Any], hardware: str, model: str, out_path: str
) -> None:
    """Time the ``allreduce`` path's own step for ``model`` on ``hardware`` (JSON).

    The pipeline's ``measure_allreduce`` job runs it right before the
    point's N-worker measurement, so that both see the VM at the same speed.
    ``profile.runs`` independent runs (a fresh process each, as the PS profile
    pools them: a step's time varies more between launches than within one),
    each one ``MultiWorkerMirroredStrategy`` worker training alone on loopback
    (:func:`sgdsim.testbed.calibrate.allreduce_step`) with the profile's
    model, batch, optimizer and threads, ``profile.warmup_steps`` untimed and
    2 × ``profile.timed_steps`` (at least :data:`MIN_ALLREDUCE_STEPS`) timed
    steps, or more until they span ``profile.min_timed_s`` seconds (a small
    model's step is a few ms, and its speed drifts over seconds). The pooled
    step is the mean of every timed step of every run (all runs' time over
    all their steps). It needs no root. Writes
    ``{"step_s": …, "cpu_s": …, "step_times_s": [...], "run_step_s": [...],
    "run_gaps": [...], …}`` (``run_gaps``: how many of the step times each run gave):
    the compute that :func:`predict_testbed_stage` gives an ``allreduce``
    worker (:func:`sync_path_workload`).

    Raises:
        CalibrationError: a worker failed or ran over ``profile.timeout_s``.
    """
    from sgdsim.progress import progress
    from sgdsim.testbed.calibrate import allreduce_step

    config = with_defaults(config)
    prof = config["profile"]
    spec = profile_spec(config, hardware, model)
    runs = [
        allreduce_step(
            spec,
            steps=max(2 * int(prof["timed_steps"]), MIN_ALLREDUCE_STEPS),
            warmup_steps=int(prof["warmup_steps"]),
            timeout_s=float(prof["timeout_s"]),
            min_timed_s=float(prof["min_timed_s"]),
        )
        for _ in progress(range(int(prof["runs"])), desc=f"profile_allreduce {model}")
    ]
    gaps = [g for r in runs for g in r.step_times_s]
    ends = [len(r.step_times_s) + 1 for r in runs]
    row = {
        "hardware": hardware,
        "model": model,
        "batch_size": spec.batch_size,
        "image_size": spec.image_size,
        "intra_op_threads": spec.intra_op_threads,
        "inter_op_threads": spec.inter_op_threads,
        "step_s": statistics.fmean(gaps),
        "cpu_s": sum(r.cpu_s * n for r, n in zip(runs, ends, strict=True)) / sum(ends),
        "step_times_s": gaps,
        "run_step_s": [r.step_s for r in runs],
        "run_gaps": [len(r.step_times_s) for r in runs],
    }
    print(
        f"[profile_allreduce] {model}: one MultiWorkerMirroredStrategy worker alone, "
        f"{row['step_s'] * 1e3:.1f} ms per step (mean of {len(gaps)} over {len(runs)} runs: "
        + ", ".join(f"{r.step_s * 1e3:.1f}" for r in runs)
        + f" ms), {row['cpu_s'] * 1e3:.1f} ms CPU",
        file=sys.stderr,
    )
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text(json.dumps(row, indent=1) + "\n")


def sync_path_workload(workload: Any, step: dict[str, Any]) -> Any:
    """``workload`` with the compute of the ``allreduce`` path's own step.

    The graph-mode PS profile times a ``tf.compat.v1`` session step (client
    overhead, pulls and pushes over loopback around the compute);
    ``MultiWorkerMirroredStrategy`` runs the same model as one
    ``tf.function`` and its all-reduce moves nothing with one worker
    (:func:`profile_allreduce_stage`). The profile's compute segments
    (seconds) are scaled by one factor so that they add up to that measured
    step, ``step["step_s"]``, keeping when each gradient is produced relative
    to the others; the per-step overhead, the pull start and the updates'
    times become 0 (they are in the measured step, whose worker applies its
    own update), the worker's CPU per step is the measured one and the PS's
    0 (no PS).

    Raises:
        ValueError: ``step["step_s"]`` not > 0.
    """
    step_s = float(step["step_s"])
    if not step_s > 0:
        raise ValueError(f"the all-reduce step time must be > 0 s, got {step_s}")
    compute = float(workload.seg_dur_s.sum())
    return dataclasses.replace(
        workload,
        seg_dur_s=workload.seg_dur_s * (step_s / compute),
        overhead_s=0.0,
        pull_start_s=0.0,
        push_update_s=np.zeros_like(workload.push_update_s),
        worker_cpu_s=float(step["cpu_s"]),
        ps_cpu_s=0.0,
        meta={**workload.meta, "sync_path_step_s": step_s, "profile_compute_s": compute},
    )


def _message_overhead(cal: dict[str, Any], workers: int) -> float:
    """The calibrated ring message cost for ``workers`` (0 for one worker or none
    calibrated; a single number from an older calibration applies to every N)."""
    msg = cal.get("message_overhead_s", 0.0)
    if isinstance(msg, dict):
        return float(msg.get(str(workers), 0.0)) if workers > 1 else 0.0
    return float(msg)


def join_delay_in(joins: dict[str, Any], name: str) -> JoinDelay:
    """``name`` (push or pull) join delay of a :func:`calibrate_push_join_stage` JSON:
    per k means and sds, per k the measured joins (``"draw": "joins"``), or
    one number (a race's calibration)."""
    mean = joins.get(f"{name}_join_delay_s", 0.0)
    if isinstance(mean, (int, float)):
        return JoinDelay.of(float(mean))
    if joins.get("draw") == "joins":
        from sgdsim.testbed.calibrate import join_delay_of

        growth = {int(k): g for k, g in joins[f"{name}_join_growth_s"].items()}
        return join_delay_of(growth, int(joins["workers"]), signed=True)
    return JoinDelay(tuple(mean), tuple(joins[f"{name}_join_sd_s"]))


def predict_testbed_stage(
    config: dict[str, Any],
    workload_path: str,
    tables_dir: str,
    out_path: str,
    wildcards: dict[str, str],
    calibration_path: str | None = None,
    allreduce_step_path: str | None = None,
    push_calibration_path: str | None = None,
    start_offsets_s: Sequence[Sequence[float]] | None = None,
) -> None:
    """Predict one validation point for the testbed's placement; one-row Parquet file.

    The testbed runs the PS and all N workers on this one node, so the
    prediction places the N workers on one node (``workers_per_node = N``: they
    share its cores, and the PS's: see :func:`~sgdsim.simulation.point.predict_point`) behind
    NICs of the validation network's rate less TCP/IP and Ethernet headers
    (:func:`_testbed_network`; points measured on loopback, without root, are
    predicted for the profile's own loopback network fit). ``async`` points:
    one run from each episode's start offsets (:func:`validation_offsets`),
    each as long as the measured episode and scored over the same window by
    the same function (:func:`sgdsim.simulation.protocols.simulate_episodes`).
    ``sync_ps`` and ``allreduce`` points (``wildcards["mode"]``): the
    simulator's own runs (synchronous workers have no phase to start from),
    or the steady-state rule with ``validation.protocol: steady``; an
    ``allreduce`` point's policy is its fusion rule (``single`` on the
    testbed: :data:`sgdsim.config.TESTBED_FUSION`), and its worker computes
    for the all-reduce path's own step time (``allreduce_step_path``, the
    :func:`profile_allreduce_stage` result: :func:`sync_path_workload`).
    ``calibration_path``: the network's :func:`calibrate_testbed_stage`
    result, whose CPU per byte the prediction charges to the node (see
    :func:`~sgdsim.simulation.point.predict_point`) and whose ring message
    cost for this N becomes ``simulation.allreduce.message_overhead_s``.
    ``push_calibration_path``: the model's :func:`calibrate_push_join_stage`
    result on this network (async points): its join delays at this N
    (:func:`joins_at_n`; 0 without it) and its two-way share at this N
    (:func:`two_way_share_at`), which becomes the network's
    (:attr:`~sgdsim.simulation.Network.two_way_share`).
    ``calibration_cpu_steal``: the larger ``host_cpu_steal`` of the two
    calibrations (None where neither recorded it).
    ``start_offsets_s``: (R, N) start phases of a ``steady`` async point's R
    runs instead of the seeded ones (:func:`replay_testbed_stage`).

    An async point with N > 1 predicted with a join capture (the skeleton's or
    training's) is predicted once more without it (``profile_only_steps_per_s``,
    ``profile_only_phase_distance``; NULL otherwise, and in a replay): the
    one-worker profile and the network's own calibration (CPU per byte, the
    pull race's join delay), no push join, a two-way share of 1, no phase band:
    what the grid predicts for a network that names no joins
    (``networks[].joins``), set beside the measurement.

    An async point whose N was itself captured running the skeleton
    (``"method": "skeleton capture"``, ``joins_at`` of N) also gets the
    capture's own throughput and phase (``capture_steps_per_s``,
    ``capture_phase_distance``) beside the simulation of that capture
    (``skeleton_steps_per_s``, ``skeleton_phase_distance``): the same
    joins and two-way share, its workers each on a node of their own (the
    skeleton waits out the compute, so no CPU is shared). Both are
    calibration data, not the point's measurement: where the simulated
    capture misses the captured one, the simulator's network dynamics miss
    before any model is trained (NULL otherwise, and in a replay).

    Raises:
        ConfigError: an ``allreduce`` point without ``allreduce_step_path``.
    """
    from sgdsim.simulation import Workload
    from sgdsim.simulation.point import SimParams, predict_point

    config = with_defaults(config)

    net = _validation_network(config, wildcards["network"])
    workers = int(wildcards["workers"])
    mode = _mode(wildcards)
    workload = Workload.load(workload_path)
    network = _testbed_network(config, net, tables_dir)
    net_cpu = overhead = 0.0
    pull_delay = push_delay = JoinDelay((0.0,))
    two_way = None
    steals: list[float | None] = []  # the calibrations' host CPU steal
    if calibration_path is not None and network.name != LOOPBACK_FIT:
        cal = json.loads(Path(calibration_path).read_text())
        steals.append(cal.get("host_cpu_steal"))
        net_cpu = float(cal["network_cpu_s_per_byte"])
        pull_delay = JoinDelay.of(float(cal.get("pull_join_delay_s", 0.0)))
        overhead = _message_overhead(cal, workers)
    # what a grid network without joins has: the network's own calibration
    network_only, race_pull = network, pull_delay
    capture = None if network.name == LOOPBACK_FIT else push_calibration_path
    skeleton_at_n: dict[str, Any] | None = None  # this N's own skeleton capture
    if capture is not None:
        joins = json.loads(Path(capture).read_text())
        steals.append(joins.get("host_cpu_steal"))
        at_n = joins_at_n(joins, workers)
        if joins.get("method") == METHODS["skeleton"] and at_n.get("workers") == workers:
            skeleton_at_n = at_n
        push_delay = join_delay_in(at_n, "push")
        if joins.get("method") in METHODS.values():  # the model's own, from its capture
            pull_delay = join_delay_in(at_n, "pull")
        two_way = two_way_share_at(joins, workers)
        if two_way is not None:
            network = dataclasses.replace(network, two_way_share=two_way)
    extra: dict[str, Any] = {}
    if mode == "allreduce":
        if allreduce_step_path is None:
            raise ConfigError(
                "predict_testbed: an allreduce point needs the all-reduce path's step time "
                "(profile_allreduce's JSON); run it through the pipeline"
            )
        step = json.loads(Path(allreduce_step_path).read_text())
        workload = sync_path_workload(workload, step)
        extra = {
            "sync_step_s": workload.meta["sync_path_step_s"],
            "profile_compute_s": workload.meta["profile_compute_s"],
        }
    base = SimParams.from_config(config)
    params = dataclasses.replace(
        base,
        workers_per_node=workers,
        ps_with_workers=True,
        network_cpu_s_per_byte=net_cpu,
        pull_join_delay_s=pull_delay,
        push_join_delay_s=push_delay,
        collective=dataclasses.replace(base.collective, message_overhead_s=overhead),
        start_window_s=config["validation"]["start_window_s"],
    )
    rule = steady_rule(config, wildcards)
    offsets = None if start_offsets_s is None else [list(r) for r in start_offsets_s]
    if rule is None and mode == "async":
        offsets = validation_offsets(config, workload, network, wildcards)
    proto = _episode_protocol(config, wildcards)
    episodes = (
        None
        if offsets is None or rule is not None
        else (proto["warmup_s"], proto["duration_s"], proto["min_steps"])
    )

    def predict(on: Any, with_params: SimParams) -> dict[str, Any]:
        return predict_point(
            workload,
            on,
            workers,
            wildcards["policy"],
            with_params,
            mode=mode,
            start_offsets_s=offsets,
            episodes=episodes,
            steady=rule,
        )

    row = {
        "model": wildcards["model"],
        "hardware": wildcards["hardware"],
        "network": net["name"],
        "bandwidth_bps": float(net["bandwidth_bps"]),
        "predicted_bandwidth_Bps": network.bandwidth_Bps,
        "batch_size": workload.batch_size,
        "workers_per_node": workers,
        "network_cpu_s_per_byte": net_cpu,
        "pull_join_delay_s": pull_delay.mean_s[0],
        "push_join_delay_s": push_delay.mean_s[0],
        "pull_join_delays_s": list(pull_delay.mean_s),
        "pull_join_sd_s": list(pull_delay.sd_s),
        "push_join_delays_s": list(push_delay.mean_s),
        "push_join_sd_s": list(push_delay.sd_s),
        "two_way_share": None if two_way is None else list(two_way),
        "message_overhead_s": overhead,
        "calibration_cpu_steal": max((x for x in steals if x is not None), default=None),
        **extra,
        **predict(network, params),
        "mode": mode,
        "profile_only_steps_per_s": None,
        "profile_only_phase_distance": None,
        "capture_steps_per_s": None,
        "capture_phase_distance": None,
        "skeleton_steps_per_s": None,
        "skeleton_phase_distance": None,
    }
    if capture is not None and mode == "async" and workers > 1 and start_offsets_s is None:
        # the same point without the capture: how the grid predicts a network
        # that names no joins (docs/validation.md)
        no_push = JoinDelay((0.0,))
        bare = dataclasses.replace(
            params, pull_join_delay_s=race_pull, push_join_delay_s=no_push, phase_band=False
        )
        alone = predict(network_only, bare)
        row["profile_only_steps_per_s"] = alone["steps_per_s"]
        row["profile_only_phase_distance"] = alone.get("phase_distance")
    if skeleton_at_n is not None and mode == "async" and start_offsets_s is None:
        # the capture's own run simulated: its workers wait out the compute
        # instead of computing, so no CPU is shared (docs/validation.md)
        alone_cpu = dataclasses.replace(
            params, workers_per_node=1, ps_with_workers=False, network_cpu_s_per_byte=0.0,
            phase_band=False,
        )  # fmt: skip
        sk = predict(network, alone_cpu)
        row["capture_steps_per_s"] = skeleton_at_n.get("steps_per_s")
        row["capture_phase_distance"] = skeleton_at_n.get("phase_distance")
        row["skeleton_steps_per_s"] = sk["steps_per_s"]
        row["skeleton_phase_distance"] = sk.get("phase_distance")
    if offsets is not None:
        row["start_offsets_s"] = offsets
    with atomic_path(out_path) as tmp:
        pl.DataFrame([row]).write_parquet(tmp)


def replay_offsets(measurement: dict[str, Any], warmup_steps: int) -> list[list[float]] | None:
    """Start phases of a measured steady point's launches, (R, N) seconds.

    For each launch (``run_step_end_times``, else ``step_end_times``), every
    worker's end of its last warm-up step (step ``warmup_steps``, the
    first step end with ``warmup_steps`` = 0 as well) less the earliest of
    them: the phases the workers leave warm-up with. None for one worker, a
    measurement that did not run (``status`` other than ``ok``), or a launch
    in which a worker recorded fewer step ends.
    """
    launches = measurement.get("run_step_end_times") or [measurement.get("step_end_times")]
    if measurement.get("status") != "ok" or not launches[0] or len(launches[0]) < 2:
        return None
    k = max(warmup_steps, 1) - 1
    rows = []
    for ends in launches:
        if not ends or any(len(e) <= k for e in ends):
            return None
        first = [float(e[k]) for e in ends]
        rows.append([t - min(first) for t in first])
    return rows


def replay_testbed_stage(
    config: dict[str, Any],
    measurement_path: str,
    workload_path: str,
    tables_dir: str,
    out_path: str,
    wildcards: dict[str, str],
    calibration_path: str | None = None,
    push_calibration_path: str | None = None,
) -> None:
    """Replay a measured steady point: its prediction started from the phases
    the real workers left warm-up with; one-row Parquet file.

    A diagnostic, not a prediction: it reads the measurement. Asynchronous
    workers keep much of the phase they reach, so a steady point's error has
    a part from the launch (the phases the workers leave warm-up with) and a
    part from the step model and how the phases move after. The replay runs
    :func:`predict_testbed_stage` (the same network, calibrations and rule)
    from each launch's :func:`replay_offsets` (one run per launch, averaged)
    instead of seeded phases; its error against the measurement is the
    second part (docs/steady-state.md, "Replaying a launch").

    Columns: the point's keys (model, hardware, network, mode, policy,
    workers), ``replay_status`` (``ok`` or ``skipped``) with
    ``replay_reason``, ``replay_steps_per_s``, ``replay_phase_distance`` (the
    first run's), ``replay_offsets_s`` (R, N) and ``replay_after_step`` (the
    warm-up step whose ends give the phases).
    """
    import tempfile

    config = with_defaults(config)
    workers = int(wildcards["workers"])
    row: dict[str, Any] = {
        k: wildcards[k] for k in ("model", "hardware", "network", "mode", "policy")
    }
    row |= {"workers": workers, "replay_status": "skipped", "replay_reason": ""}
    row |= {"replay_steps_per_s": None, "replay_phase_distance": None, "replay_offsets_s": None}
    rule = steady_rule(config, wildcards)
    measured = pl.read_parquet(measurement_path).row(0, named=True)
    offsets = None
    if rule is None or row["mode"] != "async":
        row["replay_reason"] = "only steady asynchronous points are replayed"
    elif workers == 1:
        row["replay_reason"] = "one worker has no phases to replay"
    else:
        offsets = replay_offsets(measured, rule.warmup_steps)
        if offsets is None:
            row["replay_reason"] = f"no step ends to replay (measurement {measured['status']})"
    row["replay_after_step"] = None if rule is None else max(rule.warmup_steps, 1)
    if offsets is not None:
        with tempfile.TemporaryDirectory() as tmp:
            pred = str(Path(tmp) / "replay.parquet")
            predict_testbed_stage(
                config, workload_path, tables_dir, pred, wildcards, calibration_path,
                push_calibration_path=push_calibration_path, start_offsets_s=offsets,
            )  # fmt: skip
            r = pl.read_parquet(pred).row(0, named=True)
        row |= {
            "replay_status": "ok",
            "replay_steps_per_s": r["steps_per_s"],
            "replay_phase_distance": r.get("phase_distance"),
            "replay_offsets_s": offsets,
        }
    with atomic_path(out_path) as tmp_out:
        pl.DataFrame([row]).write_parquet(tmp_out)
