import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import replay_testbed_stage

with stage_errors("replay_testbed"):
    replay_testbed_stage(
        snakemake.config,
        snakemake.input.measurement,
        snakemake.input.workload,
        snakemake.input.profile,
        snakemake.output.replay,
        dict(snakemake.wildcards),
        snakemake.input.calibration,
        snakemake.input.push_join or None,
    )
