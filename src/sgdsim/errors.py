"""Exceptions raised by sgdsim, each naming the file or key at fault and the fix."""

from __future__ import annotations


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


class WorkloadError(SgdsimError):
    """A workload JSON is missing, not JSON, or lacks a field (names the file and field)."""
