"""The tiny pipeline through a real one-node SLURM cluster (Debian's slurm-wlm and munge).

Runs ``snakemake --workflow-profile workflow/profiles/slurm`` (the executor
``snakemake-executor-plugin-slurm``) with the profile's placeholders filled in
for the test cluster, then the same workflow locally from the same profile
job's output, and compares the stores' predictions.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import yaml
from conftest import ROOT, copy_workflow, snakemake
from slurm_cluster import PARTITION, SlurmCluster, unavailable

from sgdsim.pipeline.grid import grid_points


@pytest.fixture
def slurm_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """A running one-node cluster, the SLURM clients of this test pointed at it
    (``SLURM_CONF``); stopped (jobs cancelled, daemons ended, state removed)
    when the test ends, whether it passed or not."""
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    # a short path: slurmd's and munged's socket paths must fit in sun_path
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="sgd-slurm-")))
    for var in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(var, cluster.env[var])
    try:
        yield cluster
    finally:
        cluster.stop()


def slurm_config() -> dict:
    """The smallest grid that still has every stage: one model, one network,
    N in {1, 2}, two policies; no Chrome trace, no measured validation."""
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    cfg["networks"] = cfg["networks"][:1]
    cfg.pop("cost", None)  # priced networks must exist; the dashboard is not under test here
    cfg["workers"] = [1, 2]
    cfg["policies"] = ["tf_default", "tictac"]
    cfg["simulation"]["chrome_traces"] = []
    cfg["validation"]["points"] = []
    return cfg


def fill_profile(wd: Path, cluster: SlurmCluster) -> None:
    """Fill the SLURM profile's placeholders for the test cluster: its partition,
    no account (no accounting database to check one against), its cores."""
    path = wd / "workflow" / "profiles" / "slurm" / "config.yaml"
    profile = yaml.safe_load(path.read_text())
    assert profile["default-resources"]["slurm_partition"] == "<partition>"
    profile["default-resources"]["slurm_partition"] = PARTITION
    del profile["default-resources"]["slurm_account"]
    profile["cores"] = cluster.cpus
    path.write_text(yaml.safe_dump(profile))


def job_logs(wd: Path, tail: int = 30) -> str:
    """The last lines of every SLURM job's log (the executor keeps failed jobs' logs)."""
    return "\n".join(
        f"== {f}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-tail:])
        for f in sorted((wd / ".snakemake" / "slurm_logs").rglob("*.log"))
    )


def predictions(db: Path) -> list[tuple]:
    """Every prediction row but the simulator's wall time, in a fixed order."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = [
            c
            for (c,) in con.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'predictions' ORDER BY ordinal_position"
            ).fetchall()
            if c != "sim_wall_s"
        ]
        sql = f"SELECT {', '.join(cols)} FROM predictions ORDER BY network, mode, policy, workers"
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_pipeline_on_slurm_equals_the_local_run(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    wd = copy_workflow(tmp_path / "slurm")
    fill_profile(wd, slurm_cluster)
    cfg = slurm_config()
    (wd / "slurm.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake(
        wd,
        "--workflow-profile",
        "workflow/profiles/slurm",
        "--configfile",
        "slurm.yaml",
        "--verbose",
        # no slurmdbd: poll with squeue (MinJobAge keeps finished jobs listed)
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--slurm-keep-successful-logs",
        timeout=480,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, "\n".join((out[-4000:], job_logs(wd), slurm_cluster.logs()))
    # every job went through sbatch; the profile job with the profile's settings
    calls = [line for line in out.splitlines() if "sbatch call:" in line]
    rules = {"profile", "normalize", "publish", "report"}
    for rule in rules:
        assert any(f"rule_{rule}" in c for c in calls), (rule, calls)
    assert any("group_simulate" in c or "rule_simulate" in c for c in calls), calls
    (profile_call,) = [c for c in calls if "rule_profile" in c]
    assert f"-p {PARTITION}" in profile_call and "--exclusive" in profile_call
    assert f"--cpus-per-task={slurm_cluster.cpus}" in profile_call
    assert "--gres" not in profile_call and "--gpus" not in profile_call  # a CPU entry
    # SLURM ran them: every job of this run is known to slurmctld as COMPLETED
    states = [j.rsplit("|", 1)[-1] for j in slurm_cluster.jobs()]
    assert len(states) == len(calls) and set(states) == {"COMPLETED"}, states
    slurm_db = wd / "results" / "sgdsim.duckdb"
    on_slurm = predictions(slurm_db)
    assert len(on_slurm) == len(cfg["networks"]) * len(grid_points(cfg))

    # the same workflow run locally from the same profile job's output
    local = tmp_path / "local"
    shutil.copytree(wd, local, ignore=shutil.ignore_patterns(".snakemake", ".snakemake*"))
    shutil.rmtree(local / "results" / "predictions")
    (local / "results" / "sgdsim.duckdb").unlink()
    r = snakemake(local, "--cores", "2", "--configfile", "slurm.yaml", timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    out = r.stdout + r.stderr
    assert "rule simulate:" in out and "rule profile:" not in out
    assert predictions(local / "results" / "sgdsim.duckdb") == on_slurm
