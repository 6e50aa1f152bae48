"""Markdown reports written from the store (read-only) by the ``report`` rule."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sgdsim.io import atomic_path
from sgdsim.store import connect_read_only


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; floats with 3 decimals."""

    def cell(x: Any) -> str:
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def policy_gain_report(db_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> None:
    """Write the gain of each transmission policy over ``fifo_random`` per model and network.

    Gain = predicted steps/s of the policy / steps/s of ``fifo_random`` at the
    same model, hardware, network and N; the report gives its mean, minimum
    and maximum over the worker counts of the grid.
    """
    con = connect_read_only(db_path)
    try:
        rows = con.execute(
            """
            SELECT model, hardware, network, policy,
                   avg(gain_vs_fifo_random), min(gain_vs_fifo_random),
                   max(gain_vs_fifo_random), count(*)
            FROM policy_gain
            WHERE gain_vs_fifo_random IS NOT NULL AND policy <> 'fifo_random'
            GROUP BY ALL ORDER BY model, hardware, network, policy
            """
        ).fetchall()
    finally:
        con.close()
    text = [
        "# Transmission policies: predicted gain over fifo_random",
        "",
        "Steps/s of each policy divided by steps/s of `fifo_random` (one tensor at a time in",
        "a random order) at the same model, hardware, network and number of workers N;",
        "mean, minimum and maximum over the N of the grid. Written by the `report` rule",
        "from `results/sgdsim.duckdb` (view `policy_gain`).",
        "",
    ]
    if rows:
        text.append(
            markdown_table(
                ["model", "hardware", "network", "policy", "mean gain", "min", "max", "N values"],
                rows,
            )
        )
    else:
        text.append("No comparison: add `fifo_random` and another policy to `policies:`.")
    with atomic_path(out_path) as tmp:
        Path(tmp).write_text("\n".join(text) + "\n")
