from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, schema="workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/normalize.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/validate.smk"
include: "workflow/rules/publish.smk"


rule all:
    default_target: True
    input:
        rules.publish.output.db,
        rules.report.output,
        chrome_trace_files(),
