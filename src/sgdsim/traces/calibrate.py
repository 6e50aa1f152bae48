"""From normalized trace tables to the simulator's calibrated :class:`Workload`.

Steps (all times from medians over the K traced steps):

1. Within each traced step, worker ops are sorted by start time. Each op's
   compute time is its new contribution to the union of busy intervals, so
   ops that ran in parallel on several threads are not double-counted.
2. An idle gap before an op is *explained* when the op waits for a pull that
   arrived (in the same step) after the previous op ended; the simulator
   reproduces that wait. Any other gap (executor scheduling) stays as compute
   time of the op. Per-op times are then means over the traced steps (a step
   is their sum; the mean of a sum is the sum of the means), and ops are
   replayed in order of their median start.
3. Ops are merged into segments: a new segment starts at an op that is the
   first consumer of a pull, and ends after an op whose output is pushed.
4. Each push costs the PS the run time of the PS ops reachable from its
   ``_Recv`` (the update op, e.g. ``ResourceApplyGradientDescent``).
5. Calibration: tracing slows every op (FULL_TRACE), so all traced durations
   are scaled by ``f = median untraced step / mean traced step`` (wall times
   measured by the client around ``Session.run``; see :func:`tracing_factor`).
   The part of a traced step outside the trace's span (client, RPC), mean over
   traced steps, becomes the per-step overhead, also scaled by ``f``.
   Transfers are not scaled: the simulator recomputes them from the network.
6. Network seen in the profile: see :func:`profile_network`. Its latency
   (software time before the first pull lands) is moved into the pull start
   offset, so the loopback replay uses the fitted bandwidth with zero latency.
7. PS shards: each pull and push carries the PS task (shard) at its PS end,
   from the transfer's device (``transfers.ps_task``), into
   ``Workload.pull_shard`` / ``push_shard``.
8. Pull orders: each traced step's pulls by their end in that step, as
   indices into the workload's pulls, into ``Workload.pull_orders`` (steps
   missing a pull are left out): TensorFlow delivers them in a new order every
   step, and ``tf_default`` draws one per simulated step.
9. Variables: with the params table, each push that carries a variable's
   gradient (``params.gradient_tensor``) is matched to the pull that carries
   the same variable (``params.pull_tensor``) into ``Workload.push_param``
   (P3's pull after update); other pushes get −1. See :func:`match_pushes_to_pulls`.
"""

from __future__ import annotations

import statistics
from collections import defaultdict, deque
from typing import Any

import numpy as np
import polars as pl

from sgdsim.errors import TraceError
from sgdsim.simulation.workload import Network, Workload


def tracing_factor(untraced_s: list[float], traced_s: list[float]) -> float:
    """``median(untraced) / mean(traced)``: scales traced durations to untraced time.

    The replay is built from per-op *means* over the traced steps, so it
    reconstructs the mean traced step, and is scaled by the mean traced wall
    time; it is scaled *to* the median untraced step, the typical step and
    robust to an outlier. (Dividing by the median traced time instead let one
    slow traced step inflate the replay by 11 %.)

    Raises:
        TraceError: no step times.
    """
    if not untraced_s or not traced_s:
        raise TraceError("meta.json: untraced_step_s and traced_step_s must be non-empty")
    return statistics.median(untraced_s) / statistics.fmean(traced_s)


def step_time_ratios(untraced_s: list[float], runs: int = 1) -> list[float]:
    """Each untraced step's time over its profile run's mean (dimensionless, mean 1).

    A worker's step takes a little longer or shorter from one step to the next
    (the OS, the allocator, the inter-op scheduler); asynchronous workers that
    share a PS drift apart or together by these differences, so the simulator
    draws one ratio per simulated step (``Workload.step_scale``). Dividing by
    each run's own mean keeps what differs between whole runs (a process, a
    moment of the machine) out of the step-to-step spread.

    Args:
        untraced_s: seconds of each untraced step, the runs' steps in run order.
        runs: profile runs the steps came from, each with as many steps
            (one group when they do not divide evenly).

    Raises:
        TraceError: no step times, or one not > 0.
    """
    if not untraced_s or min(untraced_s) <= 0:
        raise TraceError("meta.json: untraced_step_s must be non-empty and > 0")
    per = len(untraced_s) // runs if runs > 0 and len(untraced_s) % runs == 0 else len(untraced_s)
    out: list[float] = []
    for i in range(0, len(untraced_s), per):
        group = untraced_s[i : i + per]
        mean = statistics.fmean(group)
        out.extend(x / mean for x in group)
    return out


def profile_network(transfers: pl.DataFrame) -> tuple[Network, float]:
    """Fit the network seen while profiling from the pull records.

    TensorFlow issues all pulls of a step together, so they share the link.
    Under processor sharing with capacity ``C`` and latency ``α``, the i-th
    pull to complete ends at ``t_i = t_0 + α + B_i / C``, where ``B_i`` is the
    bytes of all pulls completed by then. A least-squares line of ``t_i − t_0``
    on ``B_i`` per traced step gives ``α`` (intercept) and ``1/C`` (slope);
    medians over steps are returned.

    With several PS shards the pulls of all shards are fitted together: they
    come from different PS hosts but all land on the one worker, whose link
    they share (the common bottleneck of a single worker); this holds for any
    work-conserving sharing, whatever order the shards' connections deliver in.
    A fit per shard would mistake the other shards' traffic for a slower link.

    Returns:
        ``(network, rms_residual_s)``: the fitted network (named ``profile``)
        and the root-mean-square residual of the fit in seconds.
    """
    pulls = transfers.filter(pl.col("direction") == "pull").sort("step", "start_us", "tensor")
    bws, lats, res = [], [], []
    for _, g in pulls.group_by("step", maintain_order=True):
        end = ((g["start_us"] + g["dur_us"]).to_numpy() - g["start_us"].min()) * 1e-6
        order = np.argsort(end, kind="stable")
        t = end[order]
        cum = np.cumsum(g["bytes"].to_numpy()[order].astype(float))
        if len(t) < 2 or cum[-1] <= 0:
            continue
        slope, icpt = np.polyfit(cum, t, 1)
        if slope <= 0:
            continue
        bws.append(1.0 / slope)
        lats.append(max(0.0, float(icpt)))
        res.append(float(np.sqrt(np.mean((t - (icpt + slope * cum)) ** 2))))
    if not bws:
        return Network(bandwidth_Bps=1e12, latency_s=0.0, name="profile"), 0.0
    net = Network(
        bandwidth_Bps=statistics.median(bws), latency_s=statistics.median(lats), name="profile"
    )
    return net, statistics.median(res)


def _op_times(
    ops: pl.DataFrame,
    transfers: pl.DataFrame,
    step: int,
    index: dict[str, int],
    consumers: dict[str, int],
) -> np.ndarray:
    """Compute time (µs) of each worker op in one traced step, in ``index`` order.

    An op's time is its new contribution to the union of busy intervals plus the
    idle gap before it, unless that gap is explained by waiting for a pull the
    op consumes that arrived (in this same step) after the previous op ended.
    """
    w = ops.filter((pl.col("step") == step) & (pl.col("role") == "worker")).sort("start_us", "name")
    p = transfers.filter((pl.col("step") == step) & (pl.col("direction") == "pull"))
    arrival: dict[int, float] = defaultdict(lambda: -np.inf)
    for recv, start, dur in p.select("recv_node", "start_us", "dur_us").iter_rows():
        i = consumers.get(recv) if recv else None
        if i is not None:
            arrival[i] = max(arrival[i], float(start + dur))
    out = np.zeros(len(index))
    rows = w.select("name", "start_us", "dur_us").rows()
    prev_end = float(rows[0][1]) if rows else 0.0
    for name, s, d in rows:
        e = float(s + d)
        new = max(0.0, e - max(s, prev_end))
        i = index.get(name)
        arr = arrival.get(i, -np.inf) if i is not None else -np.inf
        gap = max(0.0, s - max(prev_end, arr)) if arr > prev_end else max(0.0, s - prev_end)
        if i is not None:
            out[i] = new + gap
        prev_end = max(prev_end, e)
    return out


def match_pushes_to_pulls(
    pull_tensors: list[str], push_tensors: list[str], params: pl.DataFrame | None
) -> np.ndarray:
    """(Q,) index into ``pull_tensors`` of the pull carrying each push's variable, −1 = none.

    A push is matched through the params table (see
    :func:`sgdsim.traces.normalize.params_table`): the row whose
    ``gradient_tensor`` is the push's tensor names the variable's
    ``pull_tensor``. Pushes of no variable, variables not pulled, and a second
    push claiming an already matched pull get −1 (each pull at most once, as
    :class:`Workload` requires). ``params`` None (or without ``pull_tensor``,
    tables written before it existed): all −1.
    """
    out = np.full(len(push_tensors), -1, np.int64)
    if params is None or "pull_tensor" not in params.columns:
        return out
    pull_of = {
        g: p
        for g, p in params.select("gradient_tensor", "pull_tensor").iter_rows()
        if g is not None and p is not None
    }
    pull_index = {t: i for i, t in enumerate(pull_tensors)}
    taken: set[int] = set()
    for q, t in enumerate(push_tensors):
        i = pull_index.get(pull_of.get(t, ""), -1)
        if i >= 0 and i not in taken:
            out[q] = i
            taken.add(i)
    return out


def build_workload(
    ops: pl.DataFrame,
    transfers: pl.DataFrame,
    untraced_s: list[float],
    traced_s: list[float],
    batch_size: int,
    meta: dict[str, Any] | None = None,
    ps_tasks: int | None = None,
    params: pl.DataFrame | None = None,
) -> Workload:
    """Build the calibrated single-worker :class:`Workload` from a profile's tables.

    Args:
        ops: op rows of all traced steps (see :data:`sgdsim.traces.parse.OPS_SCHEMA`).
        transfers: transfer rows of all traced steps.
        untraced_s, traced_s: client wall times of untraced and traced steps, seconds.
        batch_size: samples per step.
        meta: provenance stored in the workload.
        ps_tasks: PS tasks (shards) of the profiled cluster; None: one more than
            the highest ``ps_task`` of the transfers.
        params: the profile's params table (:func:`sgdsim.traces.normalize.params_table`);
            gives ``Workload.push_param``. None: ``push_param`` all −1 (unknown).

    Raises:
        TraceError: the tables hold no worker ops, or a transfer's shard is not
            below ``ps_tasks``.
    """
    f = tracing_factor(untraced_s, traced_s)
    med = (
        ops.group_by("role", "name")
        .agg(
            pl.col("start_us").median().alias("start"),
            pl.col("dur_us").median().alias("dur"),
            pl.col("inputs").first(),
        )
        .sort("start", "name")
    )
    w_ops = med.filter(pl.col("role") == "worker")
    if w_ops.is_empty():
        raise TraceError("trace holds no worker ops: was the worker traced with FULL_TRACE?")
    names = w_ops["name"].to_list()
    inputs = w_ops["inputs"].to_list()
    index = {n: i for i, n in enumerate(names)}

    tmed = (
        transfers.group_by("direction", "tensor")
        .agg(
            pl.col("bytes").max(),
            pl.col("start_us").median().alias("start"),
            (pl.col("start_us") + pl.col("dur_us")).median().alias("end"),
            pl.col("recv_node").first(),
            pl.col("src_op").first(),
            pl.col("ps_task").fill_null(0).first(),
        )
        .sort("direction", "tensor")
    )
    # pulls in the order they arrived in the trace (median end over steps): each
    # connection serves its flows in issue order, see sgdsim.simulation.link
    pulls = tmed.filter(pl.col("direction") == "pull").sort("end", "tensor")
    pushes = tmed.filter(pl.col("direction") == "push")

    # first consumer of each pull in replay order
    consumers: dict[str, int] = {}
    for i, ins in enumerate(inputs):
        for name in ins:
            consumers.setdefault(name, i)
    n_ops = len(names)
    pull_op = [consumers.get(r, n_ops) if r else n_ops for r in pulls["recv_node"].to_list()]
    # mean, not median, over steps: a step's time is a sum of op times, and
    # scheduling gaps land on a different op each step (sum of medians would
    # drop them; sum of means is the mean of sums)
    op_time = np.mean(
        np.stack(
            [
                _op_times(ops, transfers, step, index, consumers)
                for step in sorted(set(ops["step"].to_list()))
            ]
        ),
        axis=0,
    )

    push_op = [index.get(s, -1) if s else -1 for s in pushes["src_op"].to_list()]
    # segment boundaries: before first consumers of pulls, after producers of pushes
    starts_seg = (
        {0} | {i for i in pull_op if i < n_ops} | {i + 1 for i in push_op if 0 <= i < n_ops - 1}
    )
    bounds = sorted(starts_seg)
    seg_of_op = np.searchsorted(np.asarray(bounds), np.arange(n_ops), side="right") - 1
    seg_dur = np.add.reduceat(op_time, bounds) * f * 1e-6
    n_seg = len(bounds)
    pull_gate = [int(seg_of_op[i]) if i < n_ops else n_seg for i in pull_op]
    push_seg = [int(seg_of_op[i]) if i >= 0 else -1 for i in push_op]

    # PS update cost of each push: PS ops reachable from its _Recv node
    ps_ops = med.filter(pl.col("role") == "ps")
    ps_dur = dict(zip(ps_ops["name"].to_list(), ps_ops["dur"].to_list(), strict=True))
    children: dict[str, list[str]] = defaultdict(list)
    for name, ins in zip(ps_ops["name"].to_list(), ps_ops["inputs"].to_list(), strict=True):
        for x in ins:
            children[x].append(name)
    claimed: set[str] = set()
    push_update = []
    for r in pushes["recv_node"].to_list():
        total, queue = 0.0, deque(children.get(r, []) if r else [])
        while queue:
            op = queue.popleft()
            if op in claimed:
                continue
            claimed.add(op)
            total += float(ps_dur.get(op, 0.0))
            queue.extend(children.get(op, []))
        push_update.append(total * f * 1e-6)

    steps = ops.group_by("step").agg(
        pl.col("start_us").min().alias("t0"),
        (pl.col("start_us") + pl.col("dur_us")).max().alias("t1"),
    )
    span_us = statistics.fmean((steps["t1"] - steps["t0"]).to_list())
    overhead = max(0.0, statistics.fmean(traced_s) - span_us * 1e-6) * f
    pull_start = (
        transfers.filter(pl.col("direction") == "pull")
        .group_by("step")
        .agg(pl.col("start_us").min())
    )["start_us"].median()
    assert pull_start is None or isinstance(pull_start, int | float)
    net, _ = profile_network(transfers)
    # The fit's intercept is software time before the first pull lands (PS
    # partition start, ReadVariableOp, gRPC): it is CPU time, slowed by
    # tracing like compute, and it is paid once per step whatever the network,
    # so it belongs to the step's pull start offset, not to the network.
    pull_start_us = float(pull_start or 0.0) + net.latency_s * 1e6
    tasks = transfers["ps_task"].drop_nulls().to_list()
    seen = max(tasks, default=0) + 1
    shards = seen if ps_tasks is None else ps_tasks
    if seen > shards:
        raise TraceError(
            f"trace has transfers of PS task {seen - 1}, but the profile says ps_tasks = "
            f"{shards}; the trace and its meta.json do not belong together"
        )
    info = dict(meta or {})
    info.update(
        tracing_factor=f,
        trace_span_s=span_us * 1e-6,
        profile_bandwidth_Bps=net.bandwidth_Bps,
        profile_latency_s=net.latency_s,
        worker_ops=n_ops,
    )
    return Workload(
        seg_dur_s=np.asarray(seg_dur, dtype=np.float64),
        pull_bytes=pulls["bytes"].to_numpy().astype(np.float64),
        pull_gate=np.asarray(pull_gate, dtype=np.int64),
        push_bytes=pushes["bytes"].to_numpy().astype(np.float64),
        push_seg=np.asarray(push_seg, dtype=np.int64),
        push_update_s=np.asarray(push_update, dtype=np.float64),
        pull_start_s=pull_start_us * f * 1e-6,
        overhead_s=overhead,
        batch_size=batch_size,
        meta=info,
        pull_shard=pulls["ps_task"].to_numpy().astype(np.int64),
        push_shard=pushes["ps_task"].to_numpy().astype(np.int64),
        ps_tasks=shards,
        push_param=match_pushes_to_pulls(
            pulls["tensor"].to_list(), pushes["tensor"].to_list(), params
        ),
        pull_orders=step_pull_orders(transfers, pulls["tensor"].to_list()),
    )


def step_pull_orders(transfers: pl.DataFrame, pull_tensors: list[str]) -> np.ndarray | None:
    """(K·P,) each traced step's pulls in the order they arrived (end time, then
    name), as indices into ``pull_tensors``, one step after another; steps that
    miss one of the P pulls are left out. None without pulls or whole steps.

    Source: the trace's ``transfers`` table (one row per tensor and step).
    """
    index = {t: i for i, t in enumerate(pull_tensors)}
    steps = (
        transfers.filter(pl.col("direction") == "pull")
        .with_columns((pl.col("start_us") + pl.col("dur_us")).alias("end"))
        .sort("step", "end", "tensor")
        .group_by("step", maintain_order=True)
        .agg(pl.col("tensor"))
    )
    rows = [
        [index[t] for t in tensors]
        for tensors in steps["tensor"].to_list()
        if len(tensors) == len(index) and set(tensors) == index.keys()
    ]
    return np.asarray(rows, np.int64).ravel() if rows and index else None
