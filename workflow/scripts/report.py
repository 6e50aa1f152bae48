import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import report_stage

with stage_errors("report"):
    report_stage(
        snakemake.input.db,
        snakemake.output.policy_gain,
        snakemake.output.accuracy,
        snakemake.output.accuracy_plot,
    )
