import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import calibrate_push_join_stage

with stage_errors("calibrate_push_join"):
    calibrate_push_join_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.output.calibration,
        snakemake.wildcards.network,
        snakemake.wildcards.hardware,
        snakemake.wildcards.model,
    )
