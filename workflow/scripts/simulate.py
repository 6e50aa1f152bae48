import os
import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115
# one core per job: the simulator uses no BLAS, whose idle threads would spin
# on the core of the job beside this one
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

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
