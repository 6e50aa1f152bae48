import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline.validation import calibrate_testbed_stage

calibrate_testbed_stage(snakemake.config, snakemake.output.calibration, snakemake.wildcards.network)
