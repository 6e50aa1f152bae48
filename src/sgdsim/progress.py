"""Progress of long jobs (profile, measure, calibrate) with tqdm, readable in a log file.

Snakemake jobs write their stderr to ``results/logs/<rule>/...log``
(docs/progress.md). On a terminal the bar redraws in place as usual; in a
file every redraw becomes one plain line, at most one per
:data:`LOG_INTERVAL_S` seconds plus the last one, instead of a stream of
carriage returns.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")

#: Least seconds between two progress lines in a log file.
LOG_INTERVAL_S = 10.0

#: One log line: what, how far, elapsed < remaining, rate (no bar: it means nothing in a file).
LOG_FORMAT = "{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class _Lines:
    """A text stream that turns tqdm's redraws (``\\r`` + status) into whole lines."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.last = ""

    def write(self, s: str) -> int:
        for part in s.replace("\n", "\r").split("\r"):
            text = part.strip()
            if text and text != self.last:
                self.stream.write(text + "\n")
                self.last = text
        return len(s)

    def flush(self) -> None:
        self.stream.flush()


def write_line(msg: str) -> None:
    """Write ``msg`` as one line to ``sys.stderr`` without breaking a bar drawn there."""
    tqdm.write(msg, file=sys.stderr)


def progress(
    iterable: Iterable[T] | None = None,
    *,
    desc: str,
    total: int | None = None,
    unit: str = "it",
    file: IO[str] | None = None,
) -> tqdm[T]:
    """A tqdm progress bar over ``iterable`` (or updated by hand, with ``total``).

    ``file`` defaults to ``sys.stderr`` as it is when called (the workflow
    scripts point it at the job's log). When ``file`` is not a terminal, each
    redraw is written as one line, at most every :data:`LOG_INTERVAL_S`
    seconds, in :data:`LOG_FORMAT`, and the final state always.
    """
    out = sys.stderr if file is None else file
    kw: dict[str, Any] = {"desc": desc, "total": total, "unit": unit}
    if out.isatty():
        return tqdm(iterable, file=out, mininterval=0.5, **kw)
    return tqdm(
        iterable,
        file=_Lines(out),
        mininterval=LOG_INTERVAL_S,
        maxinterval=LOG_INTERVAL_S,
        ascii=True,
        bar_format=LOG_FORMAT,
        dynamic_ncols=False,
        **kw,
    )
