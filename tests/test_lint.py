"""The code base stays clean: ruff, mypy, snakefmt and snakemake --lint."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "cmd",
    [
        ("ruff", "check", "src", "tests", "dashboard", "workflow/scripts"),
        ("ruff", "format", "--check", "src", "tests", "dashboard", "workflow/scripts"),
        ("mypy", "src", "dashboard"),
        ("snakefmt", "--check", "Snakefile", "workflow/rules"),
    ],
    ids=lambda c: c[0],
)
def test_tool_is_clean(cmd: tuple[str, ...]):
    r = run(*cmd)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


def test_snakemake_lint_is_clean():
    r = run("snakemake", "--lint", "--cores", "1")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Lints for" not in out, out[-4000:]
