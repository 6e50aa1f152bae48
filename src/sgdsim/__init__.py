"""sgdsim: predict distributed SGD throughput on N workers from a profile of one.

Public API: the simulator (:func:`simulate_async`, :class:`Workload`,
:class:`Network`), profiling (:func:`run_profile`), normalization
(:func:`normalize_profile`, :func:`build_workload`) and the store
(:func:`publish`).
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from sgdsim.errors import ConfigError, ProfileError, SgdsimError, TraceError

if TYPE_CHECKING:
    from sgdsim.simulation import POLICIES, AsyncResult, Network, Workload, simulate_async

#: the simulator's names, imported on first use: a testbed process (a worker, the
#: PS) imports ``sgdsim`` too, and the simulator's compiled loops cost it ~0.7 s
_SIMULATION = {"POLICIES", "AsyncResult", "Network", "Workload", "simulate_async"}


def __getattr__(name: str) -> Any:
    if name in _SIMULATION:
        import sgdsim.simulation

        return getattr(sgdsim.simulation, name)
    raise AttributeError(f"module 'sgdsim' has no attribute {name!r}")


__all__ = [
    "POLICIES",
    "AsyncResult",
    "ConfigError",
    "Network",
    "ProfileError",
    "SgdsimError",
    "TraceError",
    "Workload",
    "__version__",
    "simulate_async",
]
