"""Sweep benchmark: grid points per minute of ``snakemake --cores N`` wall time.

:func:`run_sweep_bench` copies the workflow and the cached profiles of a
repository into a scratch directory, runs the sweep there with the real
Snakemake CLI (so the user's ``results/`` and store are left alone, and every
simulate job runs) and splits the wall time into the simulator's own time and
everything else: Snakemake's start-up and DAG, the simulate jobs' time outside
the simulator (interpreter, imports, workload, Parquet), publish, report, and
the rest (Snakemake's work between jobs, cores left idle). The simulator's
time is the ``sim_wall_s`` of every point; job times come from the rules'
``benchmark:`` files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgdsim.config import check_config, load_yaml, merge
from sgdsim.errors import ConfigError, SgdsimError

#: Parts of a repository that make up the workflow (results/ is copied separately).
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "environment.yml")

#: Rules that must not run in a benchmark of cached profiles.
PROFILE_RULES = ("profile", "normalize")


class SweepBenchError(SgdsimError):
    """The sweep benchmark cannot run (no cached profile, a job failed, a time limit)."""


@dataclass(frozen=True)
class SweepTiming:
    """Where the wall time of one ``snakemake --cores`` sweep went (seconds).

    Attributes:
        points: grid points predicted (rows of the prediction files).
        jobs: simulate jobs run.
        cores: ``--cores`` of the run.
        wall_s: wall time of the run, Snakemake start to exit.
        startup_s: wall time of a dry run of the same sweep (Snakemake's
            start-up, config check and DAG build).
        sim_s: sum of the points' ``sim_wall_s`` (the simulator itself).
        jobs_s: sum of the simulate jobs' wall times (``benchmark:`` files).
        publish_s, report_s: wall time of the publish and report jobs.
        cpu_s: CPU seconds (user + system) of Snakemake and every process it
            started during the run: on a shared machine a steadier measure of the
            work than the wall time.
        load_before, load_after: 1-minute load average before and after the run.
    """

    points: int
    jobs: int
    cores: int
    wall_s: float
    startup_s: float
    sim_s: float
    jobs_s: float
    publish_s: float
    report_s: float
    cpu_s: float
    load_before: float
    load_after: float

    @property
    def points_per_min(self) -> float:
        """Grid points per minute of wall time."""
        return 60.0 * self.points / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def simulation_s(self) -> float:
        """Wall time of the simulator alone on ``cores`` cores: ``sim_s / cores``."""
        return self.sim_s / self.cores

    @property
    def overhead_s(self) -> float:
        """Wall time not spent simulating: ``wall_s - simulation_s``."""
        return self.wall_s - self.simulation_s

    @property
    def job_startup_s(self) -> float:
        """Wall time of the simulate jobs outside the simulator, on ``cores`` cores:
        ``(jobs_s - sim_s) / cores``."""
        return (self.jobs_s - self.sim_s) / self.cores

    @property
    def rest_s(self) -> float:
        """The remaining overhead: Snakemake between jobs, and cores left idle."""
        return (
            self.overhead_s - self.startup_s - self.job_startup_s - self.publish_s - self.report_s
        )


def _copy_inputs(repo: Path, work: Path, profiles: Sequence[tuple[str, str]]) -> None:
    """The workflow and the cached profiles of ``repo`` into ``work`` (times kept, so
    Snakemake sees the outputs as up to date)."""
    for part in WORKFLOW_PARTS:
        src = repo / part
        if src.is_dir():
            shutil.copytree(src, work / part, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, work / part)
    for hw, model in profiles:
        for sub in ("profiles", "tables"):
            rel = Path("results", sub, hw, model)
            shutil.copytree(repo / rel, work / rel)
        dest = work / "results" / "workloads" / hw / f"{model}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / "results" / "workloads" / hw / f"{model}.json", dest)


def _cached_profiles(repo: Path, cfg: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (hardware, model) of ``cfg``; raises when one is not cached in ``repo``."""
    pairs = [(h["name"], m["name"]) for h in cfg["hardware"] for m in cfg["models"]]
    for hw, model in pairs:
        for p in (
            repo / "results" / "profiles" / hw / model,
            repo / "results" / "tables" / hw / model,
            repo / "results" / "workloads" / hw / f"{model}.json",
        ):
            if not p.exists():
                raise SweepBenchError(
                    f"{p}: no cached profile of {model} on {hw}; run `make run` first "
                    "(the benchmark times a sweep over cached profiles)"
                )
    return pairs


def _job_counts(text: str) -> dict[str, int]:
    """``rule -> jobs`` from the job table Snakemake prints."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", text, re.M)}


def _benchmark_s(path: Path) -> float:
    """Wall seconds (column ``s``) of one Snakemake ``benchmark:`` file."""
    head, row = path.read_text().splitlines()[:2]
    return float(row.split("\t")[head.split("\t").index("s")])


def run_sweep_bench(
    repo: str | os.PathLike[str] = ".",
    configfile: str | os.PathLike[str] = "config/sweep.yaml",
    cores: int = 2,
    networks: int | None = None,
    workers: Sequence[int] | None = None,
    base: str | os.PathLike[str] | None = None,
    keep: str | os.PathLike[str] | None = None,
    timeout_s: float = 4 * 3600,
) -> SweepTiming:
    """Run the sweep ``configfile`` of ``repo`` with ``snakemake --cores cores`` in a
    scratch copy, and time it (see :class:`SweepTiming`).

    Args:
        repo: repository with the workflow and cached profiles under ``results/``.
        configfile: the sweep, merged into ``config/config.yaml`` (and ``base``) as
            ``--configfile`` is.
        cores: ``--cores`` of the run.
        networks: only this many networks of the sweep, spread evenly over its list
            (the first and the last included): a shorter run with the sweep's mix.
        workers: these worker counts in place of the sweep's (e.g. ``[1, 2]``: many
            jobs with little simulation, to see the overhead).
        base: a config merged into ``config/config.yaml`` before the sweep (the one
            the profiles were made with, when not the default).
        keep: new or empty directory to run in and keep (default: a temporary
            one, removed at the end).
        timeout_s: limit of the dry run and the run together, seconds.

    Raises:
        ConfigError: the merged config is invalid, or ``networks`` < 1.
        SweepBenchError: a profile is not cached, the sweep would profile again,
            Snakemake failed, or the run took longer than ``timeout_s``.
    """
    repo = Path(repo).resolve()
    cfg = load_yaml(repo / "config" / "config.yaml")
    for extra in [base] if base else []:
        cfg = merge(cfg, load_yaml(repo / extra))
    cfg = merge(cfg, load_yaml(repo / configfile))
    if networks is not None:
        if networks < 1:
            raise ConfigError(f"--networks {networks}: give at least 1")
        nets = cfg["networks"]
        k = min(networks, len(nets))
        step = (len(nets) - 1) / max(k - 1, 1)
        cfg["networks"] = [nets[round(i * step)] for i in range(k)]
    if workers:
        cfg["workers"] = list(workers)
    check_config(cfg, f"config/config.yaml + {configfile}")
    profiles = _cached_profiles(repo, cfg)
    if keep and Path(keep).exists() and any(Path(keep).iterdir()):
        raise SweepBenchError(f"--keep {keep}: the directory is not empty; give a new one")
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="sgdsim-sweep-bench-"))
    deadline = time.monotonic() + timeout_s
    try:
        work.mkdir(parents=True, exist_ok=True)
        _copy_inputs(repo, work, profiles)
        import yaml

        (work / "config" / "bench.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores)]
        cmd += ["--configfile", "config/bench.yaml"]

        def run(args: list[str], log: str) -> float:
            from sgdsim.profiling.procs import stop

            t = time.perf_counter()
            with open(work / log, "w") as out:  # followed with tail -f while it runs
                # its own process group, so that a time limit or Ctrl-C stops every job
                proc = subprocess.Popen(
                    cmd + args,
                    cwd=work,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                try:
                    rc = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
                except subprocess.TimeoutExpired as e:
                    raise SweepBenchError(
                        f"the sweep took longer than {timeout_s:g} s; give a longer "
                        "--timeout-s or fewer --networks"
                    ) from e
                finally:
                    stop(proc, grace_s=10.0)
            wall = time.perf_counter() - t
            if rc != 0:
                last = ((work / log).read_text().strip().splitlines() or [""])[-1]
                raise SweepBenchError(
                    f"snakemake {' '.join(args)} failed (exit {rc}): {last} "
                    "(run with --keep DIR to keep its output in DIR/" + log + ")"
                )
            return wall

        startup = run(["-n", "--quiet", "rules"], "dry-run.log")
        counts = _job_counts((work / "dry-run.log").read_text())
        again = [r for r in PROFILE_RULES if counts.get(r)]
        if again:
            raise SweepBenchError(
                f"the sweep would run {', '.join(again)} again (--keep DIR keeps its dry run "
                "in DIR/dry-run.log); the benchmark times a sweep over cached profiles: run "
                "`make run` first"
            )
        print(
            f"[bench-sweep] {counts.get('simulate', 0)} simulate jobs in "
            f"{work}; follow them with: tail -f {work / 'run.log'}",
            file=sys.stderr,
            flush=True,
        )
        load_before = os.getloadavg()[0]
        cpu = _children_cpu_s()
        wall = run(["--quiet", "rules"], "run.log")  # job details off, progress on
        cpu = _children_cpu_s() - cpu
        load_after = os.getloadavg()[0]
        return _timing(work, cores, wall, startup, cpu, load_before, load_after)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of the finished child processes, and theirs."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timing(
    work: Path,
    cores: int,
    wall: float,
    startup: float,
    cpu: float,
    load_before: float,
    load_after: float,
) -> SweepTiming:
    import polars as pl

    files = sorted((work / "results" / "predictions").glob("*/*/*.parquet"))
    df = pl.read_parquet(files) if files else pl.DataFrame({"sim_wall_s": []})
    bench = work / "results" / "benchmarks"
    jobs = sorted((bench / "simulate").glob("*/*/*.tsv"))
    return SweepTiming(
        points=df.height,
        jobs=len(jobs),
        cores=cores,
        wall_s=wall,
        startup_s=startup,
        sim_s=float(df["sim_wall_s"].sum()),
        jobs_s=sum(_benchmark_s(p) for p in jobs),
        publish_s=_benchmark_s(bench / "publish.tsv"),
        report_s=_benchmark_s(bench / "report.tsv"),
        cpu_s=cpu,
        load_before=load_before,
        load_after=load_after,
    )


def format_timing(t: SweepTiming) -> str:
    """The benchmark's answer as text: points per minute, then where the wall time went."""

    def line(label: str, s: float, note: str = "") -> str:
        share = f"{100 * s / t.wall_s:5.1f} %" if t.wall_s > 0 else ""
        return f"  {label:<34} {s:9.1f} s {share}  {note}".rstrip()

    return "\n".join(
        [
            f"sweep: {t.points:,} grid points in {t.jobs} simulate jobs, "
            f"snakemake --cores {t.cores}",
            f"  {'wall':<34} {t.wall_s:9.1f} s          {t.points_per_min:,.0f} grid points/min",
            line(
                "simulation",
                t.simulation_s,
                f"(sum of sim_wall_s {t.sim_s:.1f} s / {t.cores} cores)",
            ),
            line("overhead", t.overhead_s),
            line("  start-up and DAG", t.startup_s, "(a dry run of the same sweep)"),
            line(
                "  simulate jobs outside simulator",
                t.job_startup_s,
                f"(jobs {t.jobs_s:.1f} s - simulation {t.sim_s:.1f} s) / {t.cores} cores: "
                "interpreter, imports, workload, Parquet",
            ),
            line("  publish", t.publish_s),
            line("  report", t.report_s),
            line("  rest", t.rest_s, "(Snakemake between jobs, idle cores)"),
            f"CPU time of the run: {t.cpu_s:.1f} s (user + system of every process; "
            "sim_wall_s is wall time, above the CPU time when other work shares the cores)",
            f"load average (1 min): {t.load_before:.2f} before, {t.load_after:.2f} after "
            f"({os.cpu_count()} CPUs)",
        ]
    )
