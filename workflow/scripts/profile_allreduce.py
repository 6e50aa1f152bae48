import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import profile_allreduce_stage

with stage_errors("profile_allreduce"):
    profile_allreduce_stage(
        snakemake.config,
        snakemake.wildcards.hardware,
        snakemake.wildcards.model,
        snakemake.output.step,
    )
