"""Synthetic multi-worker execution trace as Chrome trace JSON.

Opens in Perfetto (https://ui.perfetto.dev, "Open trace file") and in
chrome://tracing. Format: the Trace Event Format's complete events
(``"ph": "X"``, ``ts`` and ``dur`` in microseconds) and metadata events naming
processes and threads (Google, "Trace Event Format", 2016).

Layout: process 0 is the parameter server (threads: update, one per PS shard;
the link directions are not drawn since flows of many workers overlap there);
process ``w + 1`` is worker ``w`` with threads compute, and pull and push per
PS shard (one connection each). Every thread is serialized in the simulator
(segments run one at a time, each connection serves one unit at a time, each
shard's PS CPU one update at a time), so events on a thread never overlap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

#: Record kinds the simulator emits: (kind, worker, index, start_s, end_s[, shard]).
COMPUTE, PULL, PUSH, UPDATE = "compute", "pull", "push", "update"
_TID = {COMPUTE: 1, PULL: 2, PUSH: 3, UPDATE: 1}

#: One span; a sixth element, the PS shard of a transfer or update, appears when
#: the workload has several shards (absent = shard 0).
TraceRecord = tuple[str, int, int, float, float] | tuple[str, int, int, float, float, int]


def _tid(kind: str, shard: int) -> int:
    """Thread of a span: compute 1; pull 2 + 2s and push 3 + 2s for shard s; update 1 + s."""
    if kind == UPDATE:
        return 1 + shard
    if kind == COMPUTE:
        return 1
    return _TID[kind] + 2 * shard


def chrome_trace(
    records: Iterable[TraceRecord], workers: int, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Build a Chrome trace JSON object from simulator trace records.

    Args:
        records: ``(kind, worker, index, start_s, end_s[, shard])`` tuples as
            filled by ``simulate_async(..., trace=...)``; ``index`` is the
            segment, pull or push index within the step (of the first tensor
            of a unit when a policy cuts or groups tensors).
        workers: number of workers N.
        meta: written under ``otherData`` (model, network, policy, …).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.
    """
    records = list(records)
    shards = 1 + max((r[5] for r in records if len(r) > 5), default=0)
    ev: list[dict[str, Any]] = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": 0,
            "tid": 0,
            "args": {"name": "parameter server"},
        },
    ]
    for s in range(shards):
        name = "update" if shards == 1 else f"update shard {s}"
        ev.append(
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1 + s, "args": {"name": name}}
        )
    for w in range(workers):
        ev.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": w + 1,
                "tid": 0,
                "args": {"name": f"worker {w}"},
            }
        )
        lanes = [(COMPUTE, 0)] + [(k, s) for s in range(shards) for k in (PULL, PUSH)]
        for kind, s in lanes:
            ev.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": w + 1,
                    "tid": _tid(kind, s),
                    "args": {
                        "name": kind if shards == 1 or kind == COMPUTE else f"{kind} shard {s}"
                    },
                }
            )
    for r in records:
        kind, w, idx, t0, t1 = r[:5]
        shard = r[5] if len(r) > 5 else 0
        pid = 0 if kind == UPDATE else w + 1
        name = {COMPUTE: f"segment {idx}", PULL: f"pull {idx}", PUSH: f"push {idx}"}.get(
            kind, f"update w{w} #{idx}"
        )
        ev.append(
            {
                "ph": "X",
                "name": name,
                "cat": kind,
                "pid": pid,
                "tid": _tid(kind, shard),
                "ts": t0 * 1e6,
                "dur": max(0.0, (t1 - t0) * 1e6),
                "args": {"worker": w, "index": idx},
            }
        )
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": dict(meta or {})}


def write_chrome_trace(path: str | os.PathLike[str], trace: dict[str, Any]) -> None:
    """Write a trace object as JSON (atomically)."""
    from sgdsim.io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(trace))
