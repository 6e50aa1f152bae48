rule simulate:
    """Discrete-event simulation of one grid point."""
    input:
        workload=rules.normalize.output.workload,
    output:
        prediction="results/predictions/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.parquet",
    log:
        "results/logs/simulate/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.log",
    group:
        "simulate"
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/simulate.py"
