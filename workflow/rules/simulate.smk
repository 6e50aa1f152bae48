rule simulate:
    """Discrete-event simulation of every grid point (policy x mode x N) of one workload and network."""
    input:
        workload=rules.normalize.output.workload,
        joins=network_joins,
    output:
        prediction="results/predictions/{hardware}/{model}/{network}.parquet",
    log:
        "results/logs/simulate/{hardware}/{model}/{network}.log",
    benchmark:
        "results/benchmarks/simulate/{hardware}/{model}/{network}.tsv"
    group:
        "simulate"
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        points=grid_point_names,
    script:
        "../scripts/simulate.py"


rule capture_joins:
    """Per model and grid network with joins: capture: how late a push or pull that joins others' gets its share, and the two-way share, from a capture of the PS's port while N processes run the profiled step's skeleton on the network's emulated NICs."""
    input:
        workload=rules.normalize.output.workload,
    output:
        joins="results/joins/{hardware}/{model}/{network}.json",
    log:
        "results/logs/capture_joins/{hardware}/{model}/{network}.log",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: the workers' timing is what it measures
    resources:
        mem_mb=2000,
        runtime=join_runtime,
    params:
        settings=capture_params,
    script:
        "../scripts/capture_joins.py"


rule chrome_trace:
    """Synthetic multi-worker execution trace of one grid point (Chrome trace JSON)."""
    input:
        workload=rules.normalize.output.workload,
    output:
        trace="results/chrome_traces/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.json",
    log:
        "results/logs/chrome_trace/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/chrome_trace.py"
