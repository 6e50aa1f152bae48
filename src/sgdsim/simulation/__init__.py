"""The simulator: a pure library (no I/O, no Snakemake, no global state)."""

from sgdsim.simulation.async_ps import (
    POLICIES,
    AsyncResult,
    simulate_async,
    simulate_async_replicated,
)
from sgdsim.simulation.link import PSLink
from sgdsim.simulation.workload import Network, Workload

__all__ = [
    "POLICIES",
    "AsyncResult",
    "Network",
    "PSLink",
    "Workload",
    "simulate_async",
    "simulate_async_replicated",
]
