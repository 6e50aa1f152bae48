import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline.grid import report_stage

report_stage(
    snakemake.input.db,
    snakemake.output.policy_gain,
    snakemake.output.accuracy,
    snakemake.output.accuracy_plot,
)
