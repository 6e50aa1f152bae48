"""Shared fixtures: real profiles and a real tiny pipeline run, made once per session."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sgdsim.profiling import ProfileSpec

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", ".test", "environment.yml")


# ------------------------------------------------------------------ running tests in parallel
# `make test` runs the suite on two pytest-xdist workers (`-n 2`). Tests that time
# something or build network namespaces (the leak checks list every namespace) must
# have the machine to themselves: they carry the `alone` mark. They run last, each under
# an exclusive lock that every other test takes shared; session fixtures that measure
# (the tiny pipeline run, the LeNet5 profiles) are made once per run, alone. (Not
# xdist's `loadgroup`: with pytest 9.2 its groups are silently ignored.)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that must run alone and move them to the end."""
    for it in items:
        it.stash[_ALONE] = it.get_closest_marker("alone") is not None
    items.sort(key=lambda it: it.stash[_ALONE])  # stable: collection order otherwise


_ALONE = pytest.StashKey[bool]()


class MachineLock:
    """A readers-writer lock over the machine, shared by the xdist workers of one run
    (``flock`` on a file in the run's base temporary directory); a no-op without xdist."""

    def __init__(self, config: pytest.Config) -> None:
        self.fd: int | None = None
        self.mode = 0
        if hasattr(config, "workerinput"):  # an xdist worker: basetemp is <run>/popen-gwN
            path = Path(config.option.basetemp).parent / "machine.lock"
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def hold(self, mode: int) -> None:
        """Hold the lock in ``mode`` (``fcntl.LOCK_SH`` or ``LOCK_EX``), waiting for it."""
        if self.fd is not None and mode != self.mode:
            fcntl.flock(self.fd, mode)
        self.mode = mode

    def release(self) -> None:
        if self.fd is not None and self.mode:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.mode = 0


_LOCK = pytest.StashKey[MachineLock]()


def machine_lock(config: pytest.Config) -> MachineLock:
    if _LOCK not in config.stash:
        config.stash[_LOCK] = MachineLock(config)
    return config.stash[_LOCK]


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Take the machine (before pytest-timeout's clock starts): exclusively for a test
    that runs alone, kept while this worker's next test runs alone too; shared for any
    other."""
    lock = machine_lock(item.config)
    solo = item.stash.get(_ALONE, False)
    lock.hold(fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
    try:
        yield
    finally:
        if not (solo and nextitem is not None and nextitem.stash.get(_ALONE, False)):
            lock.release()


@contextmanager
def alone(config: pytest.Config) -> Iterator[None]:
    """The machine to itself for a block (a fixture that measures, inside a shared test)."""
    lock = machine_lock(config)
    before = lock.mode
    lock.hold(fcntl.LOCK_EX)
    try:
        yield
    finally:
        if before:
            lock.hold(before)
        else:
            lock.release()


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


def made_once(
    config: pytest.Config,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    make: Callable[[Path], object],
) -> Path:
    """``make(path)`` once per test run, with the machine to itself; returns ``path``.

    Under xdist the first worker to ask makes it while the other waits, then finds it
    made (or the failure, which it reports too)."""
    root = tmp_path_factory.getbasetemp()
    if hasattr(config, "workerinput"):
        root = root.parent  # <run>/popen-gwN: the run's directory, shared by the workers
    out, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    with alone(config):
        if failed.exists():
            pytest.fail(f"making {name} failed on another worker:\n{failed.read_text()}")
        if not done.exists():
            try:
                make(out)
            except BaseException as e:
                failed.write_text(f"{type(e).__name__}: {e}")
                raise
            done.touch()
    return out


@pytest.fixture(scope="session")
def tiny_run(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete real run of the pipeline on ``.test/config.yaml``; returns its workdir
    (made once per test run)."""

    def run(wd: Path) -> None:
        copy_workflow(wd)
        r = snakemake(wd, "--cores", "2", "--configfile", ".test/config.yaml")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    return made_once(pytestconfig, tmp_path_factory, "tiny", run)


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
def lenet_profile(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real TensorFlow profile of LeNet5 (one worker, one PS, two traced steps),
    taken once per test run with the machine to itself (tests check its timings)."""
    from sgdsim.profiling import run_profile

    return made_once(
        pytestconfig, tmp_path_factory, "lenet", lambda out: run_profile(small_spec(), out)
    )


@pytest.fixture(scope="session")
def lenet_profile_2ps(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Path:
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
    return made_once(
        pytestconfig,
        tmp_path_factory,
        "lenet2ps",
        lambda out: profile_stage(config, "cpu2ps", s.model, str(out)),
    )
