rule measure:
    """Real asynchronous training, one PS and N workers, on the emulated network."""
    output:
        measurement="results/validation/measurements/{hardware}/{model}/{network}/{policy}/w{workers}.parquet",
    log:
        "results/logs/measure/{hardware}/{model}/{network}/{policy}/w{workers}.log",
    conda:
        "../../environment.yml"
    threads: workflow.cores  # alone on the node: every testbed host shares its cores
    resources:
        mem_mb=8000,
        runtime=20,
    script:
        "../scripts/measure.py"


rule predict_testbed:
    """Prediction of one measured point, for the testbed's placement (every host on this node)."""
    input:
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
    output:
        prediction="results/validation/predictions/{hardware}/{model}/{network}/{policy}/w{workers}.parquet",
    log:
        "results/logs/predict_testbed/{hardware}/{model}/{network}/{policy}/w{workers}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/predict_testbed.py"
