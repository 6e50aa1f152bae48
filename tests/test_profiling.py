"""Profile runs end cleanly: errors, timeouts and a missing GPU leave no process and no output."""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, small_spec

from sgdsim.errors import ProfileError
from sgdsim.profiling import ProfileSpec, run_profile


def sgdsim_processes() -> list[str]:
    """PS and worker processes started by this test process that are still alive."""
    out = subprocess.run(["ps", "-eo", "ppid=,args="], capture_output=True, text=True).stdout
    mine = str(os.getpid())
    return [
        line
        for line in out.splitlines()
        if line.split(None, 1)[0] == mine and "sgdsim.profiling." in line
    ]


def tiny(**kw) -> ProfileSpec:
    return small_spec(
        **({"batch_size": 4, "timed_steps": 2, "traced_steps": 1, "timeout_s": 120} | kw)
    )


@pytest.mark.slow
def test_gpu_entry_on_a_node_without_gpu_fails_clearly(tmp_path: Path, capfd):
    with pytest.raises(ProfileError, match="worker process failed"):
        run_profile(tiny(device="gpu", hardware="a100"), tmp_path / "p")
    err = capfd.readouterr().err
    assert "'a100' has device: gpu, but this node has no visible GPU" in err
    assert not (tmp_path / "p").exists()
    assert sgdsim_processes() == []


@pytest.mark.slow
def test_timeout_kills_ps_and_worker_and_leaves_no_output(tmp_path: Path):
    with pytest.raises(ProfileError, match=r"exceeded profile.timeout_s = 2 s"):
        run_profile(tiny(timeout_s=2), tmp_path / "p")
    assert not (tmp_path / "p").exists()
    assert list(tmp_path.iterdir()) == []
    assert sgdsim_processes() == []


def test_spec_round_trips_through_json():
    s = tiny(seed=9)
    assert ProfileSpec.from_json(s.to_json()) == s


@pytest.mark.parametrize(("untraced", "traced"), [(8, 3), (3, 2), (2, 1), (12, 4), (5, 5)])
def test_traced_steps_are_spread_among_untraced_ones(untraced: int, traced: int):
    from sgdsim.profiling.worker import step_plan

    plan = step_plan(untraced, traced)
    assert plan.count(True) == traced and plan.count(False) == untraced
    at = [i for i, t in enumerate(plan) if t]
    assert not plan[0] or untraced <= traced  # not all bunched at the start
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert not gaps or max(gaps) - min(gaps) <= 1  # evenly spaced
    assert "".join("T" if t else "u" for t in step_plan(8, 3)) == "uuTuuTuuTuu"


@pytest.mark.slow
@pytest.mark.parametrize("order", ["tictac", "fifo_random"])
def test_enforced_pull_order_holds_in_the_real_trace(tmp_path: Path, order: str):
    import polars as pl

    from sgdsim.profiling.graph import build_training_graph, enforce_pull_order, pull_reads
    from sgdsim.traces.parse import load_run_metadata, parse_step

    spec = tiny(pull_order=order, traced_steps=2)
    worker = "/job:worker/task:0/device:CPU:0"
    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    # the order the profiled worker will enforce, from a graph built the same way
    plain = build_training_graph(tiny(), cluster, worker).graph
    forward = [op.name for op in pull_reads(plain, worker)]
    expected = enforce_pull_order(plain, worker, order, seed=spec.seed)
    assert sorted(expected) == sorted(forward) and len(forward) == 10  # LeNet5: 5 layers x 2
    if order == "tictac":
        assert expected == forward and expected[0].startswith("conv1/")
    else:
        assert expected != forward
    run_profile(spec, tmp_path / "p")
    for k in range(2):
        md = load_run_metadata(tmp_path / "p" / f"trace_{k}.pb")
        pulls = (
            parse_step(md, k)
            .transfers.filter((pl.col("direction") == "pull") & (pl.col("bytes") > 0))
            .sort("start_us")
        )
        assert pulls["src_op"].to_list() == expected  # one after another, in this order
        ends = (pulls["start_us"] + pulls["dur_us"]).to_list()
        starts = pulls["start_us"].to_list()
        # pull k+1 leaves the PS only after pull k has arrived
        assert all(starts[i + 1] >= ends[i] for i in range(len(ends) - 1))


@pytest.mark.slow
def test_several_runs_pool_into_one_profile_that_normalizes(tmp_path: Path):
    import json

    import polars as pl

    from sgdsim.profiling.worker import TRACED_PROBES
    from sgdsim.traces import normalize_profile

    spec = tiny(runs=2, timed_steps=3, traced_steps=2)
    out = run_profile(spec, tmp_path / "p")
    meta = json.loads((out / "meta.json").read_text())
    # every run's steps are in the pooled profile, and no run's own directory is left
    assert len(meta["untraced_step_s"]) == 6 and len(meta["traced_step_s"]) == 4
    assert len(meta["worker_cpu_s"]) == 6 and len(meta["runs"]) == 2
    assert len(meta["traced_dispatch_s"]) == 4
    assert len(meta["probe_return_s"]) == 2 * TRACED_PROBES
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["meta.json", "variables.json"] + [f"trace_{k}.pb" for k in range(4)]
    )
    # the runs' steps in run order, each run's median recorded
    u = meta["untraced_step_s"]
    assert meta["runs"] == [statistics.median(u[:3]), statistics.median(u[3:])]
    # the node's CPU over both runs: busy (it trained), the hypervisor's steal beside it
    assert 0 < meta["host_cpu_busy"] <= 1 and 0 <= meta["host_cpu_steal"] <= 1
    normalize_profile(out, tmp_path / "t", tmp_path / "w.json")
    profile = pl.read_parquet(tmp_path / "t" / "profile.parquet").row(0, named=True)
    assert profile["runs"] == 2 and profile["traced_steps"] == 4
    assert profile["host_cpu_steal"] == meta["host_cpu_steal"]
    steps = pl.read_parquet(tmp_path / "t" / "steps.parquet")
    assert steps.height == 4


def test_runs_that_built_different_graphs_are_not_pooled(tmp_path: Path):
    import json

    from sgdsim.profiling.runner import merge_runs

    dirs = []
    for r, name in enumerate(["conv1/kernel", "dense/kernel"]):
        d = tmp_path / f"run_{r}"
        d.mkdir()
        (d / "meta.json").write_text(json.dumps({"untraced_step_s": [0.01], "rpc_rtt_s": 0.001}))
        (d / "variables.json").write_text(json.dumps([{"variable": name, "bytes": 4}]))
        dirs.append(d)
    with pytest.raises(ProfileError, match="different variables"):
        merge_runs(dirs, tmp_path)
    assert not (tmp_path / "meta.json").exists()


#: Modules the pipeline starts as ``python -m``: every module with a main guard.
ENTRY_MODULES = sorted(
    ".".join(f.relative_to(ROOT / "src").with_suffix("").parts)
    for f in (ROOT / "src" / "sgdsim").rglob("*.py")
    if 'if __name__ == "__main__":' in f.read_text()
)


@pytest.mark.parametrize("module", ENTRY_MODULES)
def test_entry_module_is_not_imported_by_its_package_before_it_runs(module: str):
    # runpy warns ("found in sys.modules ... unpredictable behaviour") in every PS
    # log when the package's __init__ imports the module it is about to run
    r = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()
