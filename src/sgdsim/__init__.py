"""sgdsim: predict distributed SGD throughput on N workers from a profile of one.

Public API: the simulator (:func:`simulate_async`, :class:`Workload`,
:class:`Network`), profiling (:func:`run_profile`), normalization
(:func:`normalize_profile`, :func:`build_workload`) and the store
(:func:`publish`).
"""

__version__ = "0.1.0"

from sgdsim.errors import ConfigError, ProfileError, SgdsimError, TraceError
from sgdsim.simulation import POLICIES, AsyncResult, Network, Workload, simulate_async

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
