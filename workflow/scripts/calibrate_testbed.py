import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import calibrate_testbed_stage

with stage_errors("calibrate_testbed"):
    calibrate_testbed_stage(
        snakemake.config, snakemake.output.calibration, snakemake.wildcards.network
    )
