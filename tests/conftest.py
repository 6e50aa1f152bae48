"""Shared fixtures: real profiles and a real tiny pipeline run, made once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sgdsim.profiling import ProfileSpec

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", ".test", "environment.yml")


def copy_workflow(dest: Path) -> Path:
    """Copy the workflow (not results/) into ``dest`` so a test can run it there."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(
                src, dest / part, ignore=shutil.ignore_patterns("results", "__pycache__")
            )
        else:
            shutil.copy2(src, dest / part)
    return dest


def snakemake(workdir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real Snakemake CLI in ``workdir``; returns the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of the shared tiny run ``alone``: the run measures on the testbed,
    and one session makes it once."""
    for item in items:
        if "tiny_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.alone)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete real run of the pipeline on ``.test/config.yaml``; returns its workdir."""
    wd = copy_workflow(tmp_path_factory.mktemp("tiny"))
    r = snakemake(wd, "--cores", "2", "--configfile", ".test/config.yaml")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return wd


def small_spec(**overrides: Any) -> ProfileSpec:
    """A quick profile spec: LeNet5, 32 px, batch 8, one thread, few steps."""
    from sgdsim.profiling import ProfileSpec

    base: dict[str, Any] = dict(
        model="LeNet5",
        batch_size=8,
        image_size=32,
        warmup_steps=2,
        timed_steps=3,
        traced_steps=2,
        intra_op_threads=1,
        inter_op_threads=1,
        timeout_s=300,
    )
    return ProfileSpec(**(base | overrides))


@pytest.fixture(scope="session")
def lenet_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real TensorFlow profile of LeNet5 (one worker, one PS, two traced steps)."""
    from sgdsim.profiling import run_profile

    return run_profile(small_spec(), tmp_path_factory.mktemp("lenet") / "profile")


@pytest.fixture(scope="session")
def lenet_profile_2ps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real TensorFlow profile of LeNet5 against two PS tasks (shards), taken from a
    config with ``hardware[].ps_tasks: 2`` as the profile stage takes it."""
    from sgdsim.pipeline.grid import profile_stage

    s = small_spec()
    config = {
        "models": [{"name": s.model, "batch_size": s.batch_size, "image_size": s.image_size}],
        "hardware": [{"name": "cpu2ps", "intra_op_threads": 1, "inter_op_threads": 1}],
        "networks": [{"name": "1Gbps", "bandwidth_bps": 1e9}],
        "profile": {"warmup_steps": 2, "timed_steps": 3, "traced_steps": 2, "timeout_s": 300},
    }
    config["hardware"][0]["ps_tasks"] = 2
    out = tmp_path_factory.mktemp("lenet2ps") / "profile"
    profile_stage(config, "cpu2ps", s.model, str(out))
    return out
