import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import publish_stage

with stage_errors("publish"):
    publish_stage(
        snakemake.output.db,
        list(snakemake.input.tables),
        list(snakemake.input.predictions),
        snakemake.config,
        measurement_files=list(snakemake.input.measurements),
        testbed_prediction_files=list(snakemake.input.testbed_predictions),
        replay_files=list(snakemake.input.replays),
        imported_dirs=list(snakemake.input.imported),
    )
