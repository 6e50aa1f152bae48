import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: SIM115

from sgdsim.pipeline.grid import chrome_trace_stage

chrome_trace_stage(
    snakemake.config,
    snakemake.input.workload,
    snakemake.output.trace,
    dict(snakemake.wildcards),
)
