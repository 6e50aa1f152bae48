"""Trace parsing, normalization and calibration."""

from sgdsim.traces.calibrate import (
    build_workload,
    match_pushes_to_pulls,
    profile_network,
    tracing_factor,
)
from sgdsim.traces.normalize import normalize_profile
from sgdsim.traces.parse import load_run_metadata, parse_step, transfer_records

__all__ = [
    "build_workload",
    "load_run_metadata",
    "match_pushes_to_pulls",
    "normalize_profile",
    "parse_step",
    "profile_network",
    "tracing_factor",
    "transfer_records",
]
