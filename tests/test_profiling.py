"""Profile runs end cleanly: errors, timeouts and a missing GPU leave no process and no output."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest
from conftest import small_spec

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
