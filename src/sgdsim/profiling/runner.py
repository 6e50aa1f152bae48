"""Orchestrate one profile run: a PS process and a worker process on loopback."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sgdsim.errors import ProfileError
from sgdsim.hostcpu import HostCpu, steal_warning
from sgdsim.io import atomic_path
from sgdsim.profiling.procs import free_ports, ps_argv, spawn, stop
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.progress import progress, write_line

#: Files a complete profile directory holds besides ``trace_{k}.pb``.
PROFILE_FILES = ("meta.json", "variables.json")


def run_profile(spec: ProfileSpec, out_dir: str | os.PathLike[str]) -> Path:
    """Profile one worker against ``spec.ps_tasks`` PS tasks; write the raw profile to ``out_dir``.

    Each of the ``spec.runs`` runs starts ``tf.distribute.Server`` processes
    ``ps:0`` … ``ps:{k-1}`` and ``worker:0`` on free loopback ports; the worker
    process builds the graph (variables placed on the PS tasks by
    ``replica_device_setter``) and runs the steps (see
    :mod:`sgdsim.profiling.worker`). All processes are stopped on success,
    error, timeout or Ctrl-C, and die with this process. With several runs the
    profile pools them (:func:`merge_runs`): step times vary more between
    process launches (thread placement, memory layout) than within one, so
    medians over several launches are the repeatable figure (Georges, Buytaert
    and Eeckhout, "Statistically Rigorous Java Performance Evaluation",
    OOPSLA 2007, §4: repeat over independent invocations, not only
    iterations). The output directory is written under a temporary name and
    renamed only when complete.

    ``meta.json`` also records ``host_cpu_busy`` and ``host_cpu_steal``, the
    node's CPU shares over all runs (:class:`sgdsim.hostcpu.HostCpu`): step
    times taken under the hypervisor's steal are slower than a quiet host's.

    Returns:
        ``out_dir`` as a Path, holding ``meta.json``, ``variables.json`` and
        ``trace_0.pb`` … ``trace_{R·K-1}.pb`` (``R = spec.runs``, ``K =
        spec.traced_steps``).

    Raises:
        ProfileError: a process failed, the run exceeded ``spec.timeout_s``, or
            ``ps_tasks`` or ``runs`` is < 1.
    """
    if spec.ps_tasks < 1:
        raise ProfileError(f"profile {spec.hardware}/{spec.model}: ps_tasks must be >= 1")
    if spec.runs < 1:
        raise ProfileError(f"profile {spec.hardware}/{spec.model}: runs must be >= 1")
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        with HostCpu() as host:
            if spec.runs == 1:
                _run_once(spec, tmp)
            else:
                dirs = [tmp / f"run_{r}" for r in range(spec.runs)]
                for d in progress(dirs, desc=f"[profile] {spec.model} runs", unit="run"):
                    d.mkdir()
                    _run_once(spec, d)
                merge_runs(dirs, tmp)
                for d in dirs:
                    shutil.rmtree(d)
        meta = json.loads((tmp / "meta.json").read_text())
        meta |= {"host_cpu_busy": host.busy, "host_cpu_steal": host.steal}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        warn = steal_warning(f"the profile of {spec.hardware}/{spec.model}", host.steal)
        if warn is not None:
            write_line(f"[profile] {warn}")
    return Path(out_dir)


#: meta.json lists with one entry per step (or traced probe) of a run, in seconds.
PER_STEP_LISTS = (
    "untraced_step_s",
    "traced_step_s",
    "worker_cpu_s",
    "ps_cpu_s",
    "traced_dispatch_s",
    "traced_return_s",
    "probe_dispatch_s",
    "probe_return_s",
)


def merge_runs(run_dirs: list[Path], out: Path) -> None:
    """Pool the raw profiles in ``run_dirs`` into ``out`` (one profile of all their steps).

    ``meta.json`` keeps the first run's fields, with the per-step lists
    (:data:`PER_STEP_LISTS`) concatenated, ``rpc_rtt_s`` and ``session_call_s``
    the median of the runs' medians (seconds) and
    ``runs`` the per-run medians of the untraced step (seconds, for the
    record); the traces are renumbered in run order.

    Raises:
        ProfileError: the runs profiled different variables (not the same graph).
    """
    metas = [json.loads((d / "meta.json").read_text()) for d in run_dirs]
    variables = [(d / "variables.json").read_text() for d in run_dirs]
    if any(json.loads(v) != json.loads(variables[0]) for v in variables[1:]):
        raise ProfileError(f"{out}: the profile runs built different variables")
    meta = dict(metas[0])
    for key in PER_STEP_LISTS:
        meta[key] = [x for m in metas for x in (m.get(key) or [])]
    meta["rpc_rtt_s"] = statistics.median(m["rpc_rtt_s"] for m in metas)
    calls = [m["session_call_s"] for m in metas if "session_call_s" in m]
    if calls:
        meta["session_call_s"] = statistics.median(calls)
    meta["runs"] = [statistics.median(m["untraced_step_s"]) for m in metas]
    (out / "variables.json").write_text(variables[0])
    k = 0
    for d in run_dirs:
        traces = sorted(d.glob("trace_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        for t in traces:
            t.rename(out / f"trace_{k}.pb")
            k += 1
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def _run_once(spec: ProfileSpec, tmp: Path) -> None:
    """One run: fresh PS and worker processes writing a raw profile into ``tmp``."""
    *ps_ports, worker_port = free_ports(spec.ps_tasks + 1)
    cluster = {
        "ps": [f"127.0.0.1:{p}" for p in ps_ports],
        "worker": [f"127.0.0.1:{worker_port}"],
    }
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    env.setdefault("CUDA_VISIBLE_DEVICES", "" if spec.device == "cpu" else "0")
    ps_procs = [
        spawn(
            ps_argv(
                cluster,
                spec.intra_op_threads,
                spec.inter_op_threads,
                spec.timeout_s + 30,
                task,
            ),
            env,
        )
        for task in range(spec.ps_tasks)
    ]
    worker = spawn(
        [
            sys.executable,
            "-m",
            "sgdsim.profiling.worker",
            "--spec",
            spec.to_json(),
            "--cluster",
            json.dumps(cluster),
            "--out",
            str(tmp),
            "--ps-pids",
            ",".join(str(ps.pid) for ps in ps_procs),
        ],
        env,
    )
    try:
        deadline = time.monotonic() + spec.timeout_s
        while True:
            try:
                rc = worker.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            for task, ps in enumerate(ps_procs):
                if ps.poll() is not None:
                    raise ProfileError(
                        f"profile {spec.hardware}/{spec.model}: the PS process (task "
                        f"{task}) exited with code {ps.returncode} before the worker "
                        "finished (see the log above)"
                    )
            if time.monotonic() > deadline:
                raise ProfileError(
                    f"profile {spec.hardware}/{spec.model} exceeded profile.timeout_s = "
                    f"{spec.timeout_s:g} s; raise it in the config or use a smaller model"
                )
        if rc != 0:
            raise ProfileError(
                f"profile {spec.hardware}/{spec.model}: worker process failed with exit "
                f"code {rc} (its error is in the log above)"
            )
    finally:
        stop(worker)
        for ps in ps_procs:
            stop(ps)
    missing = [f for f in PROFILE_FILES if not (tmp / f).exists()]
    missing += [
        f"trace_{k}.pb" for k in range(spec.traced_steps) if not (tmp / f"trace_{k}.pb").exists()
    ]
    if missing:
        raise ProfileError(f"profile {spec.hardware}/{spec.model}: missing {', '.join(missing)}")
