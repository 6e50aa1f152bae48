import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline import publish_stage

publish_stage(
    snakemake.output.db,
    list(snakemake.input.tables),
    list(snakemake.input.predictions),
    snakemake.config,
    list(snakemake.input.imported),
)
