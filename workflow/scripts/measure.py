import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.validation import measure_stage

with stage_errors("measure"):
    measure_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.input.profile,
        snakemake.output.measurement,
        dict(snakemake.wildcards),
    )
