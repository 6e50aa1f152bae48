rule measure:
    """Real training on the emulated network: async or sync_ps (one PS, N workers)."""
    input:
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
    output:
        measurement="results/validation/measurements/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.parquet",
    log:
        "results/logs/measure/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.log",
    wildcard_constraints:
        mode="async|sync_ps",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: every testbed host shares its cores
    resources:
        mem_mb=8000,
        runtime=measure_runtime,
    script:
        "../scripts/measure.py"


rule calibrate_testbed:
    """Per network: kernel CPU per byte the emulated network adds to loopback, the PS join delay, the ring message cost."""
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


rule calibrate_push_join:
    """Per model and network: how late a push or pull that joins k other workers' gets its share, and the two-way share, from a capture of the PS's port while N processes run the profiled step's skeleton (or train the model) at each N of its async points."""
    input:
        workload=rules.normalize.output.workload,
    output:
        calibration="results/validation/calibration/{network}/{hardware}/{model}.push.json",
    log:
        "results/logs/calibrate_push_join/{hardware}/{model}/{network}.log",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: the workers' timing is what it measures
    resources:
        mem_mb=2000,
        runtime=join_runtime,
    script:
        "../scripts/calibrate_push_join.py"


rule measure_allreduce:
    """Real ring all-reduce training of N workers, right after timing one worker alone."""
    input:
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
    output:
        measurement="results/validation/measurements/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.parquet",
        step="results/validation/allreduce_step/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.json",
    log:
        "results/logs/measure/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.log",
    wildcard_constraints:
        mode="allreduce",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: it times compute, then shares the cores
    resources:
        mem_mb=8000,
        runtime=25,
    script:
        "../scripts/measure.py"


rule predict_testbed:
    """Prediction of one measured point, for the testbed's placement (every host on this node)."""
    input:
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
        calibration=rules.calibrate_testbed.output.calibration,
        push_join=push_join_file,
        allreduce_step=allreduce_step_file,
    output:
        prediction="results/validation/predictions/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.parquet",
    log:
        "results/logs/predict_testbed/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/predict_testbed.py"


rule replay_testbed:
    """Diagnostic of a measured steady point: its prediction started from the phases its real workers left warm-up with."""
    input:
        measurement=rules.measure.output.measurement,
        workload=rules.normalize.output.workload,
        profile=rules.normalize.output.tables,
        calibration=rules.calibrate_testbed.output.calibration,
        push_join=push_join_file,
    output:
        replay="results/validation/replays/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.parquet",
    log:
        "results/logs/replay_testbed/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.log",
    wildcard_constraints:
        mode="async",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/replay_testbed.py"
