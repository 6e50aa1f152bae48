import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import profile_stage

with stage_errors("profile"):
    profile_stage(
        snakemake.config,
        snakemake.wildcards.hardware,
        snakemake.wildcards.model,
        snakemake.output.profile,
    )
