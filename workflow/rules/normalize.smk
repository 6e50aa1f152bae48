rule normalize:
    """Parse the traces into tidy tables and calibrate the simulator's workload."""
    input:
        profile=rules.profile.output.profile,
    output:
        tables=directory("results/tables/{hardware}/{model}"),
        workload="results/workloads/{hardware}/{model}.json",
    log:
        "results/logs/normalize/{hardware}/{model}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/normalize.py"
