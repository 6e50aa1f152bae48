"""Exceptions raised by sgdsim, each naming the file or key at fault and the fix."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


class SgdsimError(Exception):
    """Base class of every error sgdsim raises on purpose."""


class ConfigError(SgdsimError):
    """The configuration is invalid (names the key and the fix)."""


class ProfileError(SgdsimError):
    """Profiling failed: TensorFlow process died, timed out or found no GPU."""


class TraceError(SgdsimError):
    """A trace file is missing, truncated, empty or not a TensorFlow RunMetadata."""


class StoreError(SgdsimError):
    """The store cannot be built from its inputs (names the file and the fix)."""


class StoreUnreadable(SgdsimError):
    """The store cannot be opened: missing, locked by a writer, corrupt, or not an sgdsim store."""


class WorkloadError(TraceError):
    """A workload JSON is missing, not JSON, or lacks a field (names the file and field)."""


def debug_enabled() -> bool:
    """True when ``SGDSIM_DEBUG`` is set to anything but ``""``/``0``: show tracebacks."""
    import os

    return os.environ.get("SGDSIM_DEBUG", "") not in ("", "0")


@contextlib.contextmanager
def stage_errors(stage: str) -> Iterator[None]:
    """Turn a pipeline stage's known failures into one line and exit code 1.

    Used by the workflow's scripts around their one call. The line
    (``error in <stage>: <message>``) goes to the stage's log (``sys.stderr``,
    which the scripts redirect) and to the console Snakemake runs in
    (``sys.__stderr__``). Known failures are :class:`SgdsimError` (names the
    input and the fix) and ``OSError`` (names the file). With
    ``SGDSIM_DEBUG=1`` the exception propagates with its traceback.

    Raises:
        SystemExit: code 1 after a known failure.
    """
    try:
        yield
    except (SgdsimError, OSError) as e:
        if debug_enabled():
            raise
        line = f"error in {stage}: {e} (SGDSIM_DEBUG=1 shows the traceback)"
        for stream in {id(s): s for s in (sys.stderr, sys.__stderr__) if s is not None}.values():
            print(line, file=stream, flush=True)
        raise SystemExit(1) from None
