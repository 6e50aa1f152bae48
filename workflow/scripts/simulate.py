import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import simulate_stage

with stage_errors("simulate"):
    simulate_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.output.prediction,
        dict(snakemake.wildcards),
        defaults_filled=True,  # the Snakefile's validate() filled them
    )
