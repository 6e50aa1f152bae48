import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import normalize_stage

with stage_errors("normalize"):
    normalize_stage(snakemake.input.profile, snakemake.output.tables, snakemake.output.workload)
