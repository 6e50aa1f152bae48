rule profile:
    """Real TensorFlow training of one worker against one PS, with FULL_TRACE steps."""
    output:
        profile=directory("results/profiles/{hardware}/{model}"),
    log:
        "results/logs/profile/{hardware}/{model}.log",
    conda:
        "../../environment.yml"
    threads: node_cores  # alone on the node: other jobs would skew the timings
    resources:
        mem_mb=profile_mem_mb,
        runtime=profile_runtime,
        gpu=profile_gpu,
        gres=profile_gres,
    script:
        "../scripts/profile.py"
