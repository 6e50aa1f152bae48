"""Single-worker profiling of real TensorFlow training against one parameter server."""

from sgdsim.profiling.runner import run_profile
from sgdsim.profiling.spec import ProfileSpec

__all__ = ["ProfileSpec", "run_profile"]
