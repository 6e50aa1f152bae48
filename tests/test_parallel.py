"""`make test` runs two pytest-xdist workers: tests marked `alone` (and every user of the
tiny pipeline run) never overlap another test, the others do run side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

pytest_plugins = ["pytester"]

SUITE = """
import json, os, time
from pathlib import Path
import pytest

LOG = Path(os.environ["SPANS"])

def span(name):
    t0 = time.time(); time.sleep(1.0)
    with LOG.open("a") as f:
        f.write(json.dumps([name, t0, time.time()]) + "\\n")

@pytest.fixture(scope="session")
def tiny_run():
    return None

@pytest.mark.parametrize("i", range(4))
def test_shared(i):
    span(f"shared{i}")

@pytest.mark.alone
@pytest.mark.parametrize("i", range(2))
def test_alone(i):
    span(f"alone{i}")

def test_uses_the_tiny_run(tiny_run):
    span("tiny")
"""


def test_alone_tests_have_the_machine_to_themselves(pytester: pytest.Pytester, tmp_path: Path):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makefile(".ini", pytest="[pytest]\nmarkers =\n    alone: runs alone\n")
    pytester.makepyfile(test_suite=SUITE)
    spans = tmp_path / "spans.jsonl"
    pytester._monkeypatch.setenv("SPANS", str(spans))
    r = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=7)
    got = {n: (a, b) for n, a, b in map(json.loads, spans.read_text().splitlines())}
    solo = {n: s for n, s in got.items() if n.startswith("alone") or n == "tiny"}
    assert len(solo) == 3 and len(got) == 7
    for n, (a, b) in solo.items():
        for m, (c, d) in got.items():
            assert m == n or d <= a or b <= c, f"{n} overlapped {m}"
    shared = sorted(s for n, s in got.items() if n not in solo)
    # the shared tests ran on both workers at once
    assert any(shared[i + 1][0] < shared[i][1] for i in range(len(shared) - 1))
