rule publish:
    """The only writer of the DuckDB store: tables over the Parquet shards (configured and imported profiles), plus views."""
    input:
        tables=profile_tables(),
        predictions=prediction_files(),
        measurements=measurement_files(),
        testbed_predictions=validation_prediction_files(),
        replays=replay_files(),
        imported=imported_tables(),
    output:
        db="results/sgdsim.duckdb",
    log:
        "results/logs/publish.log",
    benchmark:
        "results/benchmarks/publish.tsv"
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/publish.py"


rule report:
    """Markdown reports and the predicted-vs-measured plot, read from the store."""
    input:
        db=rules.publish.output.db,
    output:
        policy_gain="results/reports/policy_gain.md",
        accuracy="results/reports/accuracy.md",
        accuracy_plot="results/reports/accuracy.html",
    log:
        "results/logs/report.log",
    benchmark:
        "results/benchmarks/report.tsv"
    conda:
        "../../environment.yml"
    script:
        "../scripts/report.py"
