"""Normalize a raw profile directory into Parquet tables and a calibrated workload."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sgdsim.errors import TraceError
from sgdsim.io import atomic_path
from sgdsim.simulation import Network, simulate_async
from sgdsim.traces.calibrate import (
    build_workload,
    profile_network,
    step_time_ratios,
    tracing_factor,
)
from sgdsim.traces.parse import load_run_metadata, parse_step, ps_task_of

#: Files :func:`normalize_profile` writes into its output directory.
TABLES = ("profile", "steps", "ops", "transfers", "params")
#: Columns of table ``profiles`` ← meta.json lists of per-call stamps (their median).
CALL_STAMPS = {
    "dispatch_s": "traced_dispatch_s",
    "return_s": "traced_return_s",
    "probe_dispatch_s": "probe_dispatch_s",
    "probe_return_s": "probe_return_s",
}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise TraceError(f"{path}: not found; run the profile stage first") from e
    except ValueError as e:
        raise TraceError(f"{path}: not valid JSON ({e}); re-run the profile stage") from e


def params_table(
    variables: list[dict[str, Any]], ops: pl.DataFrame, transfers: pl.DataFrame
) -> pl.DataFrame:
    """One row per variable: bytes, PS shard, first forward consumer, gradient producer, update op.

    ``shard`` is the variable's device as TensorFlow placed it (``var.device``,
    or the partition graph's for imported traces) and ``ps_task`` its PS task
    index (None when the variable is not on a PS).

    ``gradient_tensor`` is the rendezvous key (``edge_N_*``) of the push that
    carries the variable's gradient; one op may produce several gradients
    (fused BatchNorm's gradient yields gamma's and beta's). ``pull_tensor`` is
    the rendezvous key of the pull that carries the variable to the worker (a
    pull of one of its ``ReadVariableOp`` on the PS; if there are several,
    the one its first consumer reads); None when it is not pulled.

    Consumers and producers are op names on the worker. Times are medians
    over the traced steps, in µs of traced time (not scaled to untraced time):
    ``first_use_us`` when the first consumer starts and ``gradient_ready_us``
    when the gradient's producer ends, both after the step's first event;
    ``update_us`` the update op's duration on the PS, ``update_iqr_us`` its
    interquartile range.
    """
    ps = ops.filter(pl.col("role") == "ps")
    reads: dict[str, list[str]] = {}
    for name, typ, ins in ps.select("name", "op_type", "inputs").iter_rows():
        if typ == "ReadVariableOp" and ins:
            reads.setdefault(ins[0], []).append(name)
    ps_stats = ps.group_by("name").agg(
        pl.col("dur_us").median().alias("med"),
        (pl.col("dur_us").quantile(0.75) - pl.col("dur_us").quantile(0.25)).alias("iqr"),
    )
    upd_us = dict(ps_stats.select("name", "med").iter_rows())
    upd_iqr = dict(ps_stats.select("name", "iqr").iter_rows())
    w_times = (
        ops.filter(pl.col("role") == "worker")
        .group_by("name")
        .agg(
            pl.col("start_us").median().alias("start"),
            (pl.col("start_us") + pl.col("dur_us")).median().alias("end"),
        )
    )
    op_start = dict(w_times.select("name", "start").iter_rows())
    op_end = dict(w_times.select("name", "end").iter_rows())
    update_inputs = dict(ps.group_by("name").agg(pl.col("inputs").first()).iter_rows())
    w = (
        ops.filter(pl.col("role") == "worker")
        .group_by("name")
        .agg(pl.col("start_us").median(), pl.col("inputs").first())
        .sort("start_us", "name")
    )
    first_use: dict[str, str] = {}
    for name, _, ins in w.iter_rows():
        for x in ins:
            first_use.setdefault(x, name)
    t = transfers.unique(["direction", "tensor"]).sort("tensor")
    pull_recv: dict[str, list[str]] = {}
    pull_tensor: dict[str, str] = {}
    for src, recv, tensor in (
        t.filter(pl.col("direction") == "pull").select("src_op", "recv_node", "tensor").iter_rows()
    ):
        pull_recv.setdefault(src, []).append(recv)
        pull_tensor[recv] = tensor
    push_t = t.filter(pl.col("direction") == "push")
    push_src = dict(push_t.select("recv_node", "src_op").iter_rows())
    push_bytes = dict(push_t.select("recv_node", "bytes").iter_rows())
    push_tensor = dict(push_t.select("recv_node", "tensor").iter_rows())
    order = {n: i for i, n in enumerate(w["name"].to_list())}
    rows = []
    for v in variables:
        recvs = [r for op in reads.get(v["variable"], []) for r in pull_recv.get(op, [])]
        used = [r for r in recvs if r in first_use]
        first = min(used, key=lambda r: order[first_use[r]]) if used else None
        consumer = first_use[first] if first else None
        pulled = first or (recvs[0] if recvs else None)
        upd = v.get("update_op")
        # the update op reads (variable, learning rate, gradient): the gradient is its largest push
        pushed = [x for x in update_inputs.get(upd, []) if x in push_src]
        grad_recv = max(pushed, key=push_bytes.__getitem__) if pushed else None
        rows.append(
            {
                "variable": v["variable"],
                "bytes": int(v["bytes"]),
                "shard": v["device"],
                "ps_task": ps_task_of(v["device"]),
                "trainable": bool(v["trainable"]),
                "first_consumer_op": consumer,
                "gradient_op": push_src[grad_recv] if grad_recv else None,
                "gradient_tensor": push_tensor[grad_recv] if grad_recv else None,
                "pull_tensor": pull_tensor.get(pulled) if pulled else None,
                "update_op": upd,
                "first_use_us": op_start.get(consumer) if consumer else None,
                "gradient_ready_us": (op_end.get(push_src[grad_recv]) if grad_recv else None),
                "update_us": float(upd_us[upd]) if upd in upd_us else None,
                "update_iqr_us": float(upd_iqr[upd]) if upd in upd_iqr else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "variable": pl.Utf8,
            "bytes": pl.Int64,
            "shard": pl.Utf8,
            "ps_task": pl.Int32,
            "trainable": pl.Boolean,
            "first_consumer_op": pl.Utf8,
            "gradient_op": pl.Utf8,
            "gradient_tensor": pl.Utf8,
            "pull_tensor": pl.Utf8,
            "update_op": pl.Utf8,
            "first_use_us": pl.Float64,
            "gradient_ready_us": pl.Float64,
            "update_us": pl.Float64,
            "update_iqr_us": pl.Float64,
        },
    )


def step_summary(ops: pl.DataFrame, transfers: pl.DataFrame) -> pl.DataFrame:
    """One row per traced step (µs of traced time).

    Columns: ``span_us`` (first to last event of the step on any device),
    ``worker_busy_us`` (union of the worker's op intervals: its compute
    critical path, ops on parallel threads counted once), ``worker_idle_us``
    (worker span minus busy), ``pull_end_us`` (last pull arrival),
    ``pull_bytes`` and ``push_bytes``.
    """
    rows = []
    for step in sorted(set(ops["step"].to_list())):
        o = ops.filter(pl.col("step") == step)
        w = o.filter(pl.col("role") == "worker").sort("start_us")
        ws, we = w["start_us"].to_numpy(), (w["start_us"] + w["dur_us"]).to_numpy()
        busy, cur = 0, None
        for s, e in zip(ws.tolist(), we.tolist(), strict=True):
            if cur is None or s > cur:
                busy += e - s
                cur = e
            elif e > cur:
                busy += e - cur
                cur = e
        t = transfers.filter(pl.col("step") == step)
        pulls = t.filter(pl.col("direction") == "pull")
        pushes = t.filter(pl.col("direction") == "push")
        pull_end = (pulls["start_us"] + pulls["dur_us"]).to_numpy()
        o_end = (o["start_us"] + o["dur_us"]).to_numpy()
        w_span = int(we.max() - ws.min()) if len(ws) else 0
        rows.append(
            {
                "step": step,
                "span_us": int(o_end.max() - o["start_us"].to_numpy().min()),
                "worker_busy_us": int(busy),
                "worker_idle_us": w_span - int(busy),
                "pull_end_us": int(pull_end.max()) if len(pull_end) else 0,
                "pull_bytes": int(pulls["bytes"].to_numpy().sum()),
                "push_bytes": int(pushes["bytes"].to_numpy().sum()),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "step": pl.Int32,
            "span_us": pl.Int64,
            "worker_busy_us": pl.Int64,
            "worker_idle_us": pl.Int64,
            "pull_end_us": pl.Int64,
            "pull_bytes": pl.Int64,
            "push_bytes": pl.Int64,
        },
    )


def normalize_profile(
    profile_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    workload_path: str | os.PathLike[str],
    profile_id: str | None = None,
) -> None:
    """Parse every ``trace_*.pb`` of ``profile_dir``; write tables and workload.

    Writes the directory ``out_dir`` with ``{profile,steps,ops,transfers,params}.parquet``
    and the calibrated workload JSON at ``workload_path``. Both are written under
    temporary names and renamed when complete (the directory as a whole, so a
    reader never sees some tables of one run and some of another): on error
    nothing new is left behind, and an existing ``out_dir`` is replaced whole.

    Raises:
        TraceError: a trace or metadata file is missing, empty, truncated or not
            TensorFlow's (the message names the file).
    """
    src = Path(profile_dir)
    meta = _read_json(src / "meta.json")
    variables = _read_json(src / "variables.json")
    traces = sorted(src.glob("trace_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    if not traces:
        raise TraceError(f"{src}: no trace_*.pb files; run the profile stage first")
    spec = meta["spec"]
    pid = profile_id or f"{spec['hardware']}/{spec['model']}"
    ops_l, tr_l = [], []
    for k, path in enumerate(traces):
        st = parse_step(load_run_metadata(path), k, str(path))
        ops_l.append(st.ops)
        tr_l.append(st.transfers)
    ops = pl.concat(ops_l)
    transfers = pl.concat(tr_l)
    params = params_table(variables, ops, transfers)
    untraced, traced = meta["untraced_step_s"], meta["traced_step_s"]
    ps_tasks = spec.get("ps_tasks")  # absent from profiles taken before shards: derived
    workload = build_workload(
        ops,
        transfers,
        untraced,
        traced,
        int(spec["batch_size"]),
        meta={"profile_id": pid, "model": spec["model"], "hardware": spec["hardware"]},
        ps_tasks=None if ps_tasks is None else int(ps_tasks),
        params=params,
    )
    # CPU and RPC figures of the run (absent from profiles taken before they existed)
    med_or_none = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    worker_cpu = med_or_none(meta.get("worker_cpu_s") or [])
    ps_cpu = med_or_none(meta.get("ps_cpu_s") or [])
    rpc_rtt = meta.get("rpc_rtt_s")
    cores = meta.get("node_cores")
    workload = dataclasses.replace(
        workload,
        worker_cpu_s=worker_cpu,
        ps_cpu_s=ps_cpu,
        node_cores=cores,
        rpc_rtt_s=float(rpc_rtt) if rpc_rtt is not None else 0.0,
        step_scale=np.asarray(step_time_ratios(untraced, len(meta.get("runs") or [None]))),
    )
    net, net_rms = profile_network(transfers)
    loopback = Network(net.bandwidth_Bps, 0.0, "profile")  # its latency is in pull_start_s
    replay = simulate_async(workload, loopback, workers=1, steps_per_worker=12, warmup_steps=2)
    q = statistics.quantiles(untraced, n=4) if len(untraced) > 1 else [untraced[0]] * 3
    steps = step_summary(ops, transfers)
    span = steps["span_us"].to_list()
    qs = statistics.quantiles(span, n=4) if len(span) > 1 else [span[0]] * 3
    profile = pl.DataFrame(
        [
            {
                "profile_id": pid,
                "model": spec["model"],
                "hardware": spec["hardware"],
                "device": spec["device"],
                "batch_size": int(spec["batch_size"]),
                "image_size": int(spec["image_size"]),
                "classes": int(spec["classes"]),
                "ps_tasks": workload.ps_tasks,
                "tf_version": meta["tf_version"],
                "host": meta["host"],
                "param_count": int(meta["param_count"]),
                "param_bytes": int(meta["param_bytes"]),
                "runs": len(meta.get("runs") or [None]),
                "traced_steps": len(traces),
                "untraced_step_s": statistics.median(untraced),
                "untraced_step_iqr_s": q[2] - q[0],
                "traced_step_s": statistics.median(traced),
                "tracing_factor": tracing_factor(untraced, traced),
                "profile_bandwidth_Bps": net.bandwidth_Bps,
                "profile_latency_s": net.latency_s,
                "profile_fit_rms_s": net_rms,
                "replay_step_s": replay.mean_step_s,
                "compute_s": workload.compute_s,
                "overhead_s": workload.overhead_s,
                "pull_start_s": workload.pull_start_s,
                "trace_span_s": statistics.median(span) * 1e-6,
                "trace_span_iqr_s": (qs[2] - qs[0]) * 1e-6,
                "worker_busy_s": statistics.median(steps["worker_busy_us"].to_list()) * 1e-6,
                "worker_cpu_s": worker_cpu,
                "ps_cpu_s": ps_cpu,
                "node_cores": cores,
                "rpc_rtt_s": rpc_rtt,
                "session_call_s": meta.get("session_call_s"),
                "host_cpu_busy": meta.get("host_cpu_busy"),
                "host_cpu_steal": meta.get("host_cpu_steal"),
                **{col: med_or_none(meta.get(key) or []) for col, key in CALL_STAMPS.items()},
            }
        ]
    )
    tables = {
        "profile": profile,
        "steps": steps,
        "ops": ops,
        "transfers": transfers,
        "params": params,
    }
    with atomic_path(workload_path) as wtmp, atomic_path(out_dir) as tmp:
        workload.save(str(wtmp))
        tmp.mkdir()
        for name, df in tables.items():
            if name != "profile":
                df = df.select(pl.lit(pid).alias("profile_id"), pl.all())
            df.write_parquet(tmp / f"{name}.parquet")
