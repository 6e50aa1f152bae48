"""The code base stays clean: ruff, mypy, snakefmt and snakemake --lint."""

from __future__ import annotations

import re
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


#: What makes a test file measure or time something: such a file must be marked
#: ``alone`` so that `make test` runs it by itself (Makefile). Tests of the shared
#: tiny run are marked by conftest.py.
_ALONE_SIGNS = re.compile(
    r"\b(run_\w+_measurement|pull_join_delay|push_join_delay|model_push_join_delay"
    r"|training_join_delays|network_cpu_per_byte)\(|\bRENDER_LIMIT_S\b"
)


def test_every_test_file_that_measures_is_marked_alone():
    unmarked = [
        p.name
        for p in sorted((ROOT / "tests").glob("test_*.py"))
        if p.name != "test_lint.py"
        and _ALONE_SIGNS.search(text := p.read_text())
        and "pytest.mark.alone" not in text
    ]
    assert not unmarked, f"mark these pytest.mark.alone (they measure or time): {unmarked}"
