import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import predict_testbed_stage

with stage_errors("predict_testbed"):
    predict_testbed_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.input.profile,
        snakemake.output.prediction,
        dict(snakemake.wildcards),
        snakemake.input.calibration,
        snakemake.input.allreduce_step or None,
        snakemake.input.push_join or None,
    )
