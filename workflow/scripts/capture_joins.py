import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import capture_joins_stage

with stage_errors("capture_joins"):
    capture_joins_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.output.joins,
        snakemake.wildcards.network,
        snakemake.wildcards.hardware,
        snakemake.wildcards.model,
    )
