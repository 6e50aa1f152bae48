import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import measure_stage, profile_allreduce_stage

if snakemake.wildcards.mode == "allreduce":
    # the all-reduce path's own step, timed next to the run it predicts: the
    # VM's speed moves by tens of percent over minutes
    with stage_errors("profile_allreduce"):
        profile_allreduce_stage(
            snakemake.config,
            snakemake.wildcards.hardware,
            snakemake.wildcards.model,
            snakemake.output.step,
        )
with stage_errors("measure"):
    measure_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.input.profile,
        snakemake.output.measurement,
        dict(snakemake.wildcards),
    )
