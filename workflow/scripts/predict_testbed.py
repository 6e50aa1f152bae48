import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline.validation import predict_testbed_stage

predict_testbed_stage(
    snakemake.config,
    snakemake.input.workload,
    snakemake.input.profile,
    snakemake.output.prediction,
    dict(snakemake.wildcards),
    snakemake.input.calibration,
)
