"""`make test` runs two pytest-xdist workers: tests marked `alone` and fixtures made once
per run (the tiny pipeline run, the LeNet5 profiles) never overlap another test, the
other tests do run side by side (docs/testing.md)."""

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

from conftest import made_once

@pytest.fixture(scope="session")
def measured(pytestconfig, tmp_path_factory):
    return made_once(pytestconfig, tmp_path_factory, "measured", lambda out: span("made"))

@pytest.mark.parametrize("i", range(4))
def test_shared(i):
    span(f"shared{i}")

@pytest.mark.alone
@pytest.mark.parametrize("i", range(2))
def test_alone(i):
    span(f"alone{i}")

@pytest.mark.parametrize("i", range(2))
def test_uses_a_fixture_made_once(measured, i):
    span(f"user{i}")
"""


def test_alone_tests_have_the_machine_to_themselves(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makefile(".ini", pytest="[pytest]\nmarkers =\n    alone: runs alone\n")
    pytester.makepyfile(test_suite=SUITE)
    spans = tmp_path / "spans.jsonl"
    monkeypatch.setenv("SPANS", str(spans))
    r = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=8)
    lines = [json.loads(line) for line in spans.read_text().splitlines()]
    got = {n: (a, b) for n, a, b in lines}
    assert len(lines) == len(got) == 9  # eight tests, and the fixture made once for both
    solo = {n: s for n, s in got.items() if n.startswith("alone") or n == "made"}
    assert len(solo) == 3
    for n, (a, b) in solo.items():
        for m, (c, d) in got.items():
            assert m == n or d <= a or b <= c, f"{n} overlapped {m}"
    shared = sorted(s for n, s in got.items() if n not in solo)
    # the shared tests ran on both workers at once
    assert any(shared[i + 1][0] < shared[i][1] for i in range(len(shared) - 1))
