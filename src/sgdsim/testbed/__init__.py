"""Emulated network testbed: real TensorFlow processes in shaped network namespaces."""

from sgdsim.testbed.netns import Link, Testbed, TestbedError, TestbedUnavailable, check_available
from sgdsim.testbed.run import MeasurementError, MeasurementResult, run_async_measurement
from sgdsim.testbed.steady import run_steady_measurement
from sgdsim.testbed.sync import run_sync_measurement

__all__ = [
    "Link",
    "MeasurementError",
    "MeasurementResult",
    "Testbed",
    "TestbedError",
    "TestbedUnavailable",
    "check_available",
    "run_async_measurement",
    "run_steady_measurement",
    "run_sync_measurement",
]
