"""Parse TensorFlow ``RunMetadata`` step stats into tidy tables (polars).

Layout of a TF 2.x distributed trace (graph mode, ``FULL_TRACE``,
``output_partition_graphs=True``), as seen on TF 2.21:

- ``step_stats.dev_stats[]``: one or more entries per device; entries of one
  device are merged. ``node_stats`` named ``RecvTensor`` are transfers between
  tasks; their ``timeline_label`` reads
  ``[98304B] [1.0Gb/s] edge_6689_block_10_expand/Conv2D/ReadVariableOp from
  /job:ps/... to /job:worker/...``. Pulls (PS → worker) land on the worker
  device, gradient pushes (worker → PS) on the PS device. Sizes are in
  ``output[0].tensor_description.allocation_description.requested_bytes``.
- every other node is an executed op: ``timeline_label`` is
  ``name = OpType(input, input, ^control)``; times are ``all_start_micros``
  (epoch µs) and ``all_end_rel_micros`` (µs after start).
- on a GPU worker, ``/device:GPU:0`` entries are the kernel *launches* on
  the CPU thread; the kernels' run times are in the ``/device:GPU:0/stream:all``
  entry (per-stream ``stream:N`` and ``memcpy`` entries repeat them). Worker
  op times on a GPU come from ``stream:all`` (start of the first kernel to
  end of the last kernel of the op); the per-stream entries are skipped.
  This path is tested on step stats built to that layout; it has not yet run
  on a real GPU.
- ``partition_graphs[]`` hold the ``_Send``/``_Recv`` pairs: a ``_Recv`` node's
  ``tensor_name`` attribute is the transfer's ``edge_N_*`` name, and the
  matching ``_Send``'s input is the op that produced the tensor.
- with several PS tasks (shards), each has its own ``/job:ps/replica:0/task:j``
  device entries; a transfer's shard is the task of its PS end (``ps_task``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sgdsim.errors import TraceError

_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)*(?P<name>\S+) = (?P<type>[\w.]+)\((?P<args>.*)\)\s*$")
_RECV = re.compile(r"(?P<tensor>edge_\d+_\S+) from (?P<src>\S+) to (?P<dst>\S+)")
_SIZE = re.compile(r"^\[(?P<num>\d+(?:\.\d+)?)(?P<unit>B|KB|MB|GB)\]")
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}

OPS_SCHEMA: dict[str, Any] = {
    "step": pl.Int32,
    "role": pl.Utf8,
    "device": pl.Utf8,
    "name": pl.Utf8,
    "op_type": pl.Utf8,
    "start_us": pl.Int64,
    "dur_us": pl.Int64,
    "inputs": pl.List(pl.Utf8),
}
TRANSFERS_SCHEMA: dict[str, Any] = {
    "step": pl.Int32,
    "direction": pl.Utf8,
    "tensor": pl.Utf8,
    "src_device": pl.Utf8,
    "dst_device": pl.Utf8,
    "src_op": pl.Utf8,
    "recv_node": pl.Utf8,
    "bytes": pl.Int64,
    "start_us": pl.Int64,
    "dur_us": pl.Int64,
    "ps_task": pl.Int32,
}


def role_of(device: str) -> str:
    """``"worker"`` or ``"ps"`` from a TF device name like ``/job:ps/replica:0/...``."""
    m = re.search(r"/job:(\w+)", device)
    return m.group(1) if m else "unknown"


_JOB_TASK = re.compile(r"/job:[^/]+(?:/replica:\d+)?/task:(?P<task>\d+)")


def task_of(device: str) -> int | None:
    """Task index of a device: ``/job:worker/replica:0/task:1/...`` or ``/job:ps/task:1`` → 1.

    Returns ``None`` for a device name without a task.
    """
    m = _JOB_TASK.search(device)
    return int(m.group("task")) if m else None


def ps_task_of(device: str) -> int | None:
    """PS task (shard) index of a device: ``/job:ps/replica:0/task:1/...`` or ``/job:ps/task:1``.

    Returns ``None`` for a device of another job; ``0`` for ``/job:ps`` without a task.
    """
    if role_of(device) != "ps":
        return None
    return task_of(device) or 0


_TASK = re.compile(r"^/job:[^/]+(?:/replica:\d+)?(?:/task:\d+)?")


def step_window_us(md: Any) -> tuple[int, int]:
    """(first start, last end) of one RunMetadata's node stats, in µs since the Unix epoch.

    TensorFlow stamps ``all_start_micros`` with the host's real-time clock, the
    clock ``time.time()`` reads, so a client that stamps its ``Session.run``
    call finds how long the call took before the step's first op (dispatch)
    and after its last (return, with the trace's collection on a traced step).

    Raises:
        TraceError: the RunMetadata has no node stats.
    """
    stats = [ns for d in md.step_stats.dev_stats for ns in d.node_stats]
    if not stats:
        raise TraceError("RunMetadata has no node stats: was the step run with a trace level?")
    first = min(ns.all_start_micros for ns in stats)
    last = max(ns.all_start_micros + ns.all_end_rel_micros for ns in stats)
    return int(first), int(last)


def transfer_records(md: Any) -> tuple[int, int]:
    """(recorded, expected) counts of the transfers between tasks in one RunMetadata.

    ``expected`` counts the ``_Recv``/``_HostRecv`` nodes of the partition graphs
    whose ``send_device`` is in another task (process) than their ``recv_device``;
    each such receive is one gRPC ``RecvTensor`` call, which TensorFlow logs as a
    ``RecvTensor`` node stat on the receiving side. ``recorded`` counts those
    node stats. On a complete trace the two are equal; TensorFlow 2.21 now and
    then returns a remote task's step stats without its ``RecvTensor`` records
    (seen once in CI with two PS tasks: the five gradient pushes to one shard
    were missing), so the profiler compares the two and traces the step again.
    """
    expected = 0
    for g in md.partition_graphs:
        for nd in g.node:
            if nd.op in ("_Recv", "_HostRecv"):
                snd = _TASK.match(nd.attr["send_device"].s.decode(errors="replace"))
                rcv = _TASK.match(nd.attr["recv_device"].s.decode(errors="replace"))
                if snd and rcv and snd.group(0) != rcv.group(0):
                    expected += 1
    recorded = sum(
        1 for d in md.step_stats.dev_stats for ns in d.node_stats if ns.node_name == "RecvTensor"
    )
    return recorded, expected


def load_run_metadata(path: str | os.PathLike[str]) -> Any:
    """Read one serialized ``tensorflow.RunMetadata`` protobuf.

    Raises:
        TraceError: the file is missing, empty, truncated, not a RunMetadata, or
            holds no step stats of a worker and a PS (names the file).
    """
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import config_pb2

    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: trace file not found; run the profile stage first")
    data = p.read_bytes()
    if not data:
        raise TraceError(f"{p}: trace file is empty; re-run the profile stage for it")
    md = config_pb2.RunMetadata()
    try:
        md.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise TraceError(
            f"{p}: not a valid TensorFlow RunMetadata protobuf ({e}); the file is truncated "
            "or of another kind; take the trace again (profile stage or your own run)"
        ) from e
    roles = {role_of(d.device) for d in md.step_stats.dev_stats if d.node_stats}
    if not {"worker", "ps"} <= roles:
        raise TraceError(
            f"{p}: RunMetadata has no step stats of both a worker and a PS device (found "
            f"{sorted(roles) or 'none'}); it was not taken with FULL_TRACE on a PS cluster, "
            "or the file is truncated"
        )
    if not md.partition_graphs:
        raise TraceError(
            f"{p}: RunMetadata has no partition graphs; take it with "
            "RunOptions(output_partition_graphs=True)"
        )
    return md


def _bytes_of(ns: Any) -> int:
    if ns.output:
        ad = ns.output[0].tensor_description.allocation_description
        if ad.requested_bytes or ad.allocated_bytes:
            return int(ad.requested_bytes or ad.allocated_bytes)
    m = _SIZE.match(ns.timeline_label)
    return int(float(m.group("num")) * _UNITS[m.group("unit")]) if m else 0


@dataclass(frozen=True)
class StepTables:
    """Tables of one traced step: ``ops`` and ``transfers`` (schemas above)."""

    ops: pl.DataFrame
    transfers: pl.DataFrame


def parse_step(md: Any, step: int, source: str = "<trace>") -> StepTables:
    """Turn one RunMetadata into op and transfer rows; times relative to the step's first event.

    Raises:
        TraceError: a transfer label or partition graph cannot be read, or a
            time, size or task number does not fit its column (names ``source``).
    """
    recv_of: dict[str, str] = {}
    send_src: dict[str, str] = {}
    for g in md.partition_graphs:
        for nd in g.node:
            if nd.op in ("_Recv", "_HostRecv"):
                recv_of[nd.attr["tensor_name"].s.decode(errors="replace")] = nd.name
            elif nd.op in ("_Send", "_HostSend") and nd.input:
                send_src[nd.attr["tensor_name"].s.decode(errors="replace")] = (
                    nd.input[0].split(":")[0].lstrip("^")
                )
    stats = [(d.device, ns) for d in md.step_stats.dev_stats for ns in d.node_stats]
    if not stats:
        raise TraceError(f"{source}: no node stats")
    t0 = min(ns.all_start_micros for _, ns in stats)
    kernels: dict[str, tuple[int, int]] = {}
    for device, ns in stats:
        if device.endswith("/stream:all"):
            b, e = ns.all_start_micros, ns.all_start_micros + ns.all_end_rel_micros
            lo, hi = kernels.get(ns.node_name, (b, e))
            kernels[ns.node_name] = (min(lo, b), max(hi, e))
    ops: dict[str, list[Any]] = {k: [] for k in OPS_SCHEMA}
    tr: dict[str, list[Any]] = {k: [] for k in TRANSFERS_SCHEMA}
    for device, ns in stats:
        if "/stream:" in device or device.endswith("/memcpy"):
            continue  # GPU kernel records: folded into their op below
        start, dur = ns.all_start_micros - t0, ns.all_end_rel_micros
        if "/device:GPU" in device and ns.node_name in kernels:
            b, e = kernels[ns.node_name]
            start, dur = b - t0, e - b
        if ns.node_name == "RecvTensor":
            m = _RECV.search(ns.timeline_label)
            if not m:
                raise TraceError(f"{source}: unreadable RecvTensor label {ns.timeline_label!r}")
            tensor = m.group("tensor")
            dst_role = role_of(m.group("dst"))
            pull = dst_role == "worker"
            tr["step"].append(step)
            tr["direction"].append("pull" if pull else "push")
            tr["tensor"].append(tensor)
            tr["src_device"].append(m.group("src"))
            tr["dst_device"].append(m.group("dst"))
            tr["src_op"].append(send_src.get(tensor))
            tr["recv_node"].append(recv_of.get(tensor))
            tr["bytes"].append(_bytes_of(ns))
            tr["start_us"].append(start)
            tr["dur_us"].append(dur)
            tr["ps_task"].append(ps_task_of(m.group("src") if pull else m.group("dst")))
            continue
        m = _LABEL.match(ns.timeline_label)
        op_type, args = (m.group("type"), m.group("args")) if m else ("", "")
        inputs = [a.strip().lstrip("^").split(":")[0] for a in args.split(",") if a.strip()]
        ops["step"].append(step)
        ops["role"].append(role_of(device))
        ops["device"].append(device)
        ops["name"].append(ns.node_name)
        ops["op_type"].append(op_type)
        ops["start_us"].append(start)
        ops["dur_us"].append(dur)
        ops["inputs"].append(inputs)
    try:
        return StepTables(
            pl.DataFrame(ops, schema=OPS_SCHEMA), pl.DataFrame(tr, schema=TRANSFERS_SCHEMA)
        )
    except (OverflowError, TypeError, pl.exceptions.PolarsError) as e:
        raise TraceError(
            f"{source}: a time, size or PS task number is out of range "
            f"({str(e).strip().splitlines()[0]}); the trace is corrupt, take it again"
        ) from e
