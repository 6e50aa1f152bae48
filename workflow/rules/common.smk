from sgdsim.config import check_config
from sgdsim.store import imported_tables_dirs

check_config(config, "config (" + " + ".join(map(str, workflow.configfiles)) + ")")


wildcard_constraints:
    hardware=r"[A-Za-z0-9_.-]+",
    model=r"[A-Za-z0-9_.:-]+",
    network=r"[A-Za-z0-9_.-]+",
    policy=r"[a-z0-9_]+",
    mode=r"[a-z]+",
    workers=r"\d+",


MODELS = [m["name"] for m in config["models"]]
HARDWARE = [h["name"] for h in config["hardware"]]
NETWORKS = [n["name"] for n in config["networks"]]


def profile_tables():
    """Normalized table directories of every (hardware, model) profile."""
    return expand("results/tables/{hardware}/{model}", hardware=HARDWARE, model=MODELS)


def imported_tables():
    """Complete tables directories written by `sgdsim import` (default --out results/imported).

    Found when Snakemake builds the DAG: a new, re-imported or deleted import
    changes publish's inputs, so publish runs again.
    """
    return [str(d) for d in imported_tables_dirs("results/imported")]


def prediction_files():
    """One Parquet file per grid point: hardware x model x network x policy x mode x workers."""
    return expand(
        "results/predictions/{hardware}/{model}/{network}/{policy}/{mode}/w{workers}.parquet",
        hardware=HARDWARE,
        model=MODELS,
        network=NETWORKS,
        policy=config["policies"],
        mode=config["modes"],
        workers=config["workers"],
    )


def chrome_trace_files():
    """Synthetic execution traces of the grid points listed in simulation.chrome_traces."""
    return [
        f"results/chrome_traces/{t['hardware']}/{t['model']}/{t['network']}/"
        f"{t.get('policy', 'tf_default')}/async/w{t['workers']}.json"
        for t in config["simulation"].get("chrome_traces", [])
    ]


def _hardware_resources(wildcards):
    entry = next(h for h in config["hardware"] if h["name"] == wildcards.hardware)
    return entry.get("resources", {})


def profile_mem_mb(wildcards):
    """Memory (MB) of a profile job, from its hardware entry."""
    return _hardware_resources(wildcards).get("mem_mb", 4000)


def profile_runtime(wildcards):
    """Wall-time limit (minutes) of a profile job, from its hardware entry."""
    return _hardware_resources(wildcards).get("runtime", 30)


def profile_gpu(wildcards):
    """GPUs of a profile job, from its hardware entry."""
    return _hardware_resources(wildcards).get("gpu", 0)


from sgdsim.config import validation_points

VALIDATION = validation_points(config)


def _validation_files(kind):
    return [
        f"results/validation/{kind}/{p['hardware']}/{p['model']}/{p['network']}/"
        f"{p['policy']}/w{p['workers']}.parquet"
        for p in VALIDATION
    ]


def measurement_files():
    """One Parquet file per measured testbed run of the validation subset."""
    return _validation_files("measurements")


def validation_prediction_files():
    """One Parquet file per prediction of a measured point (testbed placement)."""
    return _validation_files("predictions")
