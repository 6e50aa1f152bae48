"""The sweep benchmark: a real Snakemake sweep over cached profiles, timed in a scratch copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow

from sgdsim.bench import synthetic_resnet50
from sgdsim.pipeline.grid import simulate_stage
from sgdsim.sweep_bench import SweepBenchError, _job_counts, format_timing, run_sweep_bench

pytestmark = pytest.mark.alone  # measures or times: `make test` runs it by itself (Makefile)

SWEEP = {
    # 1Gbps: the tiny config prices a network of that name (priced networks must exist)
    "networks": [
        {"name": name, "bandwidth_bps": bw, "latency_s": 1e-4}
        for name, bw in (("1Gbps", 1e9), ("slow", 1e8), ("fast", 1e10))
    ],
    "workers": [1, 2, 3],
    "policies": ["tf_default"],
    "modes": ["async"],
    "simulation": {"chrome_traces": []},
    "validation": {"points": []},
}


def test_sweep_bench_refuses_a_repository_without_cached_profiles(tmp_path: Path):
    repo = copy_workflow(tmp_path / "repo")
    with pytest.raises(SweepBenchError, match=r"no cached profile of .*make run"):
        run_sweep_bench(repo, "config/sweep.yaml")


@pytest.mark.slow
def test_sweep_bench_times_a_sweep_of_cached_profiles(tiny_run: Path, tmp_path: Path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    before = sorted(p.name for p in (tiny_run / "results" / "predictions").rglob("*"))
    t = run_sweep_bench(
        tiny_run, sweep, cores=2, base=".test/config.yaml", keep=tmp_path / "run", networks=2
    )
    assert (t.points, t.jobs) == (2 * 3, 2)  # LeNet5 on cpu x 2 networks x 3 worker counts
    done = (tmp_path / "run" / "results" / "predictions").rglob("*.parquet")
    assert sorted(p.stem for p in done) == ["1Gbps", "fast"]  # the first and the last
    assert 0 < t.sim_s < t.jobs_s  # the simulator runs inside the simulate jobs
    assert 0 < t.startup_s < t.wall_s and t.publish_s > 0 and t.report_s > 0
    parts = t.simulation_s + t.startup_s + t.job_startup_s + t.publish_s + t.report_s + t.rest_s
    assert parts == pytest.approx(t.wall_s)
    assert "grid points/min" in format_timing(t)
    jobs = _job_counts((tmp_path / "run" / "dry-run.log").read_text())
    assert jobs["simulate"] == 2 and "profile" not in jobs and "normalize" not in jobs
    # the repository's own results are only read
    assert sorted(p.name for p in (tiny_run / "results" / "predictions").rglob("*")) == before


def test_a_simulate_job_with_filled_defaults_skips_jsonschema_and_gives_the_same_rows(
    tmp_path: Path,
):
    """The job's config comes filled by Snakemake's validate(); the stage then need not
    fill it again (nor import jsonschema), and its rows are those of a raw config."""
    import polars as pl

    from sgdsim.config import with_defaults

    cfg = {**SWEEP, "networks": SWEEP["networks"][:1], "seed": 3}
    cfg |= {"models": [{"name": "LeNet5"}], "hardware": [{"name": "cpu"}]}
    cfg["simulation"] = {"steps_per_worker": 4, "warmup_steps": 1, "replications": 2}
    (tmp_path / "cfg.json").write_text(json.dumps(with_defaults(cfg)))
    workload = tmp_path / "w.json"
    synthetic_resnet50(compute_s=0.05).save(str(workload))
    code = (
        "import json, sys\n"
        "from sgdsim.pipeline.grid import simulate_stage\n"
        f"cfg = json.load(open({str(tmp_path / 'cfg.json')!r}))\n"
        f"simulate_stage(cfg, {str(workload)!r}, {str(tmp_path / 'filled.parquet')!r}, "
        "{'model': 'm', 'hardware': 'cpu', 'network': '1Gbps'}, defaults_filled=True)\n"
        "print('jsonschema' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
    wildcards = {"model": "m", "hardware": "cpu", "network": "1Gbps"}
    simulate_stage(cfg, str(workload), str(tmp_path / "raw.parquet"), wildcards)
    filled, raw = (pl.read_parquet(tmp_path / f"{k}.parquet") for k in ("filled", "raw"))
    assert filled.height == len(SWEEP["workers"])
    assert filled.drop("sim_wall_s").equals(raw.drop("sim_wall_s"))
