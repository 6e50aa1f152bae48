from sgdsim.config import check_config
from sgdsim.pipeline.grid import capture_settings, grid_points, joins_path
from sgdsim.store import imported_tables_dirs

check_config(config, "config (" + " + ".join(map(str, workflow.configfiles)) + ")")


wildcard_constraints:
    hardware=r"[A-Za-z0-9_.-]+",
    model=r"[A-Za-z0-9_.:-]+",
    network=r"[A-Za-z0-9_.-]+",
    policy=r"[a-z0-9_]+",
    mode=r"[a-z_]+",
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
    """One Parquet file per hardware x model x network, a row per policy x mode x N."""
    return expand(
        "results/predictions/{hardware}/{model}/{network}.parquet",
        hardware=HARDWARE,
        model=MODELS,
        network=NETWORKS,
    )


def grid_point_names(wildcards):
    """The policy/mode/N points a simulate job computes (a change re-runs it)."""
    return [f"{p}/{m}/w{n}" for p, m, n in grid_points(config)]


def network_joins(wildcards):
    """The joins JSON the network entry names for the model (networks[].joins), if any;
    with joins: capture the file of rule capture_joins."""
    path = joins_path(config, wildcards.network, wildcards.model, wildcards.hardware)
    return [] if path is None else [path]


def capture_params(wildcards):
    """What rule capture_joins captures the network with (rate, port, N, length), so
    that a changed setting captures it again."""
    return capture_settings(config, wildcards.network)


def chrome_trace_files():
    """Synthetic execution traces of the grid points listed in simulation.chrome_traces."""
    return [
        f"results/chrome_traces/{t['hardware']}/{t['model']}/{t['network']}/"
        f"{t.get('policy', 'tf_default')}/async/w{t['workers']}.json"
        for t in config["simulation"].get("chrome_traces", [])
    ]


def node_cores(wildcards):
    """Threads of a job that must run alone on its machine: all of --cores
    (on a cluster, the profile's cores of one node; 1 when not given)."""
    return workflow.resource_settings.cores or 1


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


def profile_gres(wildcards):
    """SLURM GRES of a profile job: the hardware entry's gres, else gpu:N for its N GPUs."""
    res = _hardware_resources(wildcards)
    gpus = res.get("gpu", 0)
    return res.get("gres") or (f"gpu:{gpus}" if gpus else "")


from sgdsim.config import validation_points

VALIDATION = validation_points(config)


def _validation_files(kind, points=VALIDATION):
    return [
        f"results/validation/{kind}/{p['hardware']}/{p['model']}/{p['network']}/"
        f"{p['policy']}/{p['mode']}/w{p['workers']}.parquet"
        for p in points
    ]


def measurement_files():
    """One Parquet file per measured testbed run of the validation subset."""
    return _validation_files("measurements")


def validation_prediction_files():
    """One Parquet file per prediction of a measured point (testbed placement)."""
    return _validation_files("predictions")


def replay_files():
    """One Parquet file per steady asynchronous point with N > 1: its prediction
    replayed from the measured launch's phases (rule replay_testbed)."""
    steady = [
        p
        for p in VALIDATION
        if p["protocol"] == "steady" and p["mode"] == "async" and p["workers"] > 1
    ]
    return _validation_files("replays", steady)


def _point_key(p):
    return tuple(
        str(p[k]) for k in ("hardware", "model", "network", "policy", "mode", "workers")
    )


RUNS = {_point_key(p): p["runs"] for p in VALIDATION}


def measure_runtime(wildcards):
    """Wall-time limit (minutes) of a measure job: 20 per launch of its point."""
    return 20 * RUNS.get(_point_key(wildcards), 1)


def join_runtime(wildcards):
    """Wall-time limit (minutes) of a join calibration: 20 per pooled capture of each N."""
    return 20 * int(config["validation"]["join_capture_runs"])


def push_join_file(wildcards):
    """The model's push join delay on the point's network (async points only: the
    synchronous modes have no worker that joins another's push)."""
    if wildcards.mode != "async":
        return []
    w = wildcards
    return (
        f"results/validation/calibration/{w.network}/{w.hardware}/{w.model}.push.json"
    )


def allreduce_step_file(wildcards):
    """The all-reduce path's own step time, timed by the point's measure job right
    before its run (allreduce points only)."""
    if wildcards.mode != "allreduce":
        return []
    w = wildcards
    point = f"{w.hardware}/{w.model}/{w.network}/{w.policy}/{w.mode}/w{w.workers}"
    return f"results/validation/allreduce_step/{point}.json"
