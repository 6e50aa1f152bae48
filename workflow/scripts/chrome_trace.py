import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.errors import stage_errors
from sgdsim.pipeline.grid import chrome_trace_stage

with stage_errors("chrome_trace"):
    chrome_trace_stage(
        snakemake.config,
        snakemake.input.workload,
        snakemake.output.trace,
        dict(snakemake.wildcards),
    )
