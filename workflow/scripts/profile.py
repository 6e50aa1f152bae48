import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline.grid import profile_stage

profile_stage(
    snakemake.config,
    snakemake.wildcards.hardware,
    snakemake.wildcards.model,
    snakemake.output.profile,
)
