"""Synthetic multi-worker execution trace as Chrome trace JSON.

Opens in Perfetto (https://ui.perfetto.dev, "Open trace file") and in
chrome://tracing. Format: the Trace Event Format's complete events
(``"ph": "X"``, ``ts`` and ``dur`` in microseconds) and metadata events naming
processes and threads (Google, "Trace Event Format", 2016).

Layout: process 0 is the parameter server (threads: update, and one per link
direction is not drawn since flows of many workers overlap there); process
``w + 1`` is worker ``w`` with threads compute, pull and push. Every thread is
serialized in the simulator (segments run one at a time, each connection
serves one tensor at a time, the PS CPU one update at a time), so events on a
thread never overlap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

#: Record kinds the simulator emits: (kind, worker, index, start_s, end_s).
COMPUTE, PULL, PUSH, UPDATE = "compute", "pull", "push", "update"
_TID = {COMPUTE: 1, PULL: 2, PUSH: 3, UPDATE: 1}

TraceRecord = tuple[str, int, int, float, float]


def chrome_trace(
    records: Iterable[TraceRecord], workers: int, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Build a Chrome trace JSON object from simulator trace records.

    Args:
        records: ``(kind, worker, index, start_s, end_s)`` tuples as filled by
            ``simulate_async(..., trace=...)``; ``index`` is the segment, pull or
            push index within the step.
        workers: number of workers N.
        meta: written under ``otherData`` (model, network, policy, …).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.
    """
    ev: list[dict[str, Any]] = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": 0,
            "tid": 0,
            "args": {"name": "parameter server"},
        },
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "update"}},
    ]
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
        for kind in (COMPUTE, PULL, PUSH):
            ev.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": w + 1,
                    "tid": _TID[kind],
                    "args": {"name": kind},
                }
            )
    for kind, w, idx, t0, t1 in records:
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
                "tid": _TID[kind],
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
