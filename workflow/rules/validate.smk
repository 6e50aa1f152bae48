rule measure:
    """Real asynchronous training, one PS and N workers, on the emulated network."""
    input:
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
    output:
        measurement="results/validation/measurements/{hardware}/{model}/{network}/{policy}/w{workers}.parquet",
    log:
        "results/logs/measure/{hardware}/{model}/{network}/{policy}/w{workers}.log",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: every testbed host shares its cores
    resources:
        mem_mb=8000,
        runtime=20,
    script:
        "../scripts/measure.py"


rule calibrate_testbed:
    """Kernel CPU per byte that the emulated network adds to loopback, per network."""
    output:
        calibration="results/validation/calibration/{network}.json",
    log:
        "results/logs/calibrate_testbed/{network}.log",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: it reads the machine's CPU counters
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/calibrate_testbed.py"


rule predict_testbed:
    """Prediction of one measured point, for the testbed's placement (every host on this node)."""
    input:
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
        calibration=rules.calibrate_testbed.output.calibration,
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
