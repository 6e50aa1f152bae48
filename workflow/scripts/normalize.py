import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline.grid import normalize_stage

normalize_stage(snakemake.input.profile, snakemake.output.tables, snakemake.output.workload)
