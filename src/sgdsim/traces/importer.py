"""Import RunMetadata protobufs taken outside sgdsim (e.g. on a GPU cluster).

``sgdsim import TRACE.pb [...] --model M --hardware H`` turns one or more
serialized ``tensorflow.RunMetadata`` messages (taken with ``FULL_TRACE`` and
``output_partition_graphs=True`` on a worker/PS cluster) into the same raw
profile directory the profile stage writes, then normalizes it. Without
sgdsim's ``variables.json``, variables are read from the PS partition graphs
(``VarHandleOp`` nodes with their dtype and shape); a variable counts as
trainable when an ``Apply*`` op on the PS updates it. The pipeline's publish
stage loads every complete import under ``results/imported/tables`` into the
store (see :func:`sgdsim.store.imported_tables_dirs`). Traces of a cluster with
several PS tasks import as they are: each variable keeps the task it was
placed on, and the profile's ``ps_tasks`` is the number of PS tasks seen.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from sgdsim.errors import TraceError
from sgdsim.io import atomic_path
from sgdsim.traces.normalize import normalize_profile
from sgdsim.traces.parse import load_run_metadata, ps_task_of, role_of

_DTYPE_BYTES = {1: 4, 2: 8, 3: 4, 9: 8, 19: 2, 14: 2, 10: 1, 4: 1, 6: 1}  # tf DataType enum


def variables_from_graph(md: Any) -> list[dict[str, Any]]:
    """Variables of the PS partition graphs, as ``variables.json`` lists them."""
    updated: dict[str, str] = {}
    found: dict[str, dict[str, Any]] = {}
    for g in md.partition_graphs:
        for nd in g.node:
            if role_of(nd.device) != "ps":
                continue
            if nd.op == "VarHandleOp":
                dims = [d.size for d in nd.attr["shape"].shape.dim]
                n = 1
                for d in dims:
                    n *= max(d, 0)
                found[nd.name] = {
                    "variable": nd.name,
                    "shape": dims,
                    "bytes": n * _DTYPE_BYTES.get(nd.attr["dtype"].type, 4),
                    "device": nd.device,
                }
            elif "Apply" in nd.op and nd.input:
                updated[nd.input[0].split(":")[0].lstrip("^")] = nd.name
    return [
        {**v, "trainable": k in updated, "gradient": None, "update_op": updated.get(k)}
        for k, v in sorted(found.items())
    ]


def ps_tasks_of(md: Any) -> int:
    """Number of PS tasks of a trace: one more than the highest PS task index it names."""
    devices = [d.device for d in md.step_stats.dev_stats]
    devices += [nd.device for g in md.partition_graphs for nd in g.node]
    tasks = [t for t in map(ps_task_of, devices) if t is not None]
    return max(tasks, default=0) + 1


def import_run_metadata(
    traces: list[str | os.PathLike[str]],
    model: str,
    hardware: str,
    out_root: str | os.PathLike[str] = "results/imported",
    meta_path: str | os.PathLike[str] | None = None,
    batch_size: int = 1,
) -> Path:
    """Import traces as profile ``{hardware}/{model}`` under ``out_root``.

    Writes ``{out_root}/profiles/{hardware}/{model}/`` (raw profile),
    ``{out_root}/tables/{hardware}/{model}/`` (tables) and
    ``{out_root}/workloads/{hardware}/{model}.json``. ``meta.json`` may give
    ``untraced_step_s`` (list of seconds, to calibrate), ``traced_step_s``,
    ``batch_size``, ``image_size``, ``classes``, ``device``, ``tf_version``,
    ``host``. Without untraced times, no tracing calibration is applied.

    Returns:
        The tables directory.

    Raises:
        TraceError: a trace is missing, empty, truncated or not TensorFlow's,
            or the meta file is unreadable (names the file); nothing is written.
    """
    if not traces:
        raise TraceError("import: give at least one RunMetadata file")
    for p in traces:  # the parser's advice is the profile stage's; these are the user's files
        if not Path(p).is_file():
            raise TraceError(f"{p}: trace file not found; check the path given to sgdsim import")
        if Path(p).stat().st_size == 0:
            raise TraceError(
                f"{p}: trace file is empty; take the trace again (RunOptions FULL_TRACE, "
                "output_partition_graphs=True) and import that"
            )
    mds = [load_run_metadata(p) for p in traces]
    meta: dict[str, Any] = {}
    if meta_path is not None:
        try:
            meta = json.loads(Path(meta_path).read_text())
        except (OSError, ValueError) as e:
            raise TraceError(f"{meta_path}: unreadable meta file ({e})") from e
    variables = variables_from_graph(mds[0])
    spans = []
    for md in mds:
        starts = [n.all_start_micros for d in md.step_stats.dev_stats for n in d.node_stats]
        ends = [
            n.all_start_micros + n.all_end_rel_micros
            for d in md.step_stats.dev_stats
            for n in d.node_stats
        ]
        spans.append((max(ends) - min(starts)) * 1e-6)
    traced = [float(x) for x in meta.get("traced_step_s", spans)]
    untraced = [float(x) for x in meta.get("untraced_step_s", traced)]
    trainable = [v for v in variables if v["trainable"]]
    full_meta = {
        "spec": {
            "model": model,
            "hardware": hardware,
            "device": meta.get("device", "gpu" if _has_gpu(mds[0]) else "cpu"),
            "batch_size": int(meta.get("batch_size", batch_size)),
            "image_size": int(meta.get("image_size", 0)),
            "classes": int(meta.get("classes", 0)),
            "ps_tasks": max(ps_tasks_of(md) for md in mds),
        },
        "tf_version": str(meta.get("tf_version", "unknown")),
        "host": str(meta.get("host", "imported")),
        "param_count": sum(v["bytes"] for v in trainable) // 4,
        "param_bytes": sum(v["bytes"] for v in trainable),
        "untraced_step_s": untraced,
        "traced_step_s": traced,
        "imported_from": [str(p) for p in traces],
    }
    root = Path(out_root)
    prof = root / "profiles" / hardware / model
    tables = root / "tables" / hardware / model
    # The raw profile is normalized while it still has its temporary name: on
    # error an earlier import of the same id stays whole, and each output
    # (tables directory, workload, raw profile) appears only complete.
    with atomic_path(prof) as tmp:
        tmp.mkdir(parents=True)
        for k, p in enumerate(traces):
            shutil.copyfile(p, tmp / f"trace_{k}.pb")
        (tmp / "meta.json").write_text(json.dumps(full_meta, indent=1))
        (tmp / "variables.json").write_text(json.dumps(variables, indent=1))
        normalize_profile(
            tmp, tables, root / "workloads" / hardware / f"{model}.json", f"{hardware}/{model}"
        )
    return tables


def _has_gpu(md: Any) -> bool:
    return any("/device:GPU" in d.device for d in md.step_stats.dev_stats)
