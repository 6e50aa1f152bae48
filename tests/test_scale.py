"""A sweep-sized store: 10,000 grid points published into DuckDB, every dashboard page
under the render limit on it, in real headless Chromium.

The grid is config/sweep.yaml's (its 100 networks and 50 worker counts) on two small
synthetic workloads, simulated by the pipeline's own stage
(:func:`sgdsim.pipeline.grid.simulate_stage`, one Parquet file per model × network)
with short runs, so that the store is real but quick to make. The publish time and
each page's render time are printed at the end of the module (pytest shows them
without ``-s``).
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import ROOT

# the browser fixtures and helpers of the dashboard test; `store` is this module's
from test_dashboard_browser import (  # noqa: F401
    RENDER_LIMIT_S,
    _browser_missing,
    base_url,
    css,
    downloads,
    driver,
    open_page,
    render_times,
)

from sgdsim.config import load_yaml, merge

# times page renders: `make test` runs it by itself, after the rest (marker `alone`)
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.alone]

#: Models of the synthetic sweep: name -> compute seconds of its three segments.
MODELS = {"tinyA": (0.02, 0.03, 0.03), "tinyB": (0.05, 0.08, 0.07)}


def _workload(path: Path, seg_s: tuple[float, ...]) -> Path:
    from sgdsim.simulation import Workload

    Workload(
        seg_dur_s=np.asarray(seg_s),
        pull_bytes=np.array([4e5, 1e6]),
        pull_gate=np.array([0, 1]),
        push_bytes=np.array([1e6, 4e5]),
        push_seg=np.array([1, 2]),
        push_update_s=np.array([1e-4, 5e-5]),
        pull_start_s=1e-3,
        overhead_s=2e-3,
        batch_size=16,
    ).save(str(path))
    return path


@pytest.fixture(scope="module")
def timings(request: pytest.FixtureRequest) -> Iterator[dict[str, float]]:
    """Seconds of the store's build steps, printed when the module ends."""
    times: dict[str, float] = {}
    yield times
    text = "\n10,000-point store: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        print(text, flush=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, timings: dict[str, float]) -> Path:
    """The DuckDB store of the synthetic sweep (10,000 points)."""
    from sgdsim.pipeline.grid import publish_stage, simulate_stage

    missing = _browser_missing()
    if missing:
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("scale")
    cfg = merge(load_yaml(ROOT / "config" / "config.yaml"), load_yaml(ROOT / "config/sweep.yaml"))
    cfg["models"] = [{"name": m} for m in MODELS]
    cfg["simulation"].update(steps_per_worker=3, warmup_steps=1, replications=1)
    files = []
    t = time.perf_counter()
    for model, seg_s in MODELS.items():
        workload = _workload(root / f"{model}.json", seg_s)
        for net in cfg["networks"]:
            out = root / "predictions" / "cpu" / model / f"{net['name']}.parquet"
            wildcards = {"model": model, "hardware": "cpu", "network": net["name"]}
            with contextlib.redirect_stderr(io.StringIO()):  # progress lines
                simulate_stage(cfg, str(workload), str(out), wildcards)
            files.append(str(out))
    timings["simulate"] = time.perf_counter() - t
    db = root / "results" / "sgdsim.duckdb"
    db.parent.mkdir()
    t = time.perf_counter()
    publish_stage(str(db), [], files, cfg)
    timings["publish"] = time.perf_counter() - t
    return db


def test_store_holds_every_point_of_the_sweep(store: Path):
    cfg = merge(load_yaml(ROOT / "config" / "config.yaml"), load_yaml(ROOT / "config/sweep.yaml"))
    want = len(MODELS) * len(cfg["networks"]) * len(cfg["workers"])
    assert want >= 10_000
    con = duckdb.connect(str(store), read_only=True)
    try:
        n, points = con.execute(
            "SELECT count(*), count(DISTINCT (model, network, workers)) FROM predictions"
        ).fetchone()
        assert n == points == want
        assert con.execute("SELECT count(*) FROM scaling").fetchone()[0] == want
    finally:
        con.close()


#: Each page, and what shows that it has drawn.
PAGES: dict[str, tuple[str, Any]] = {
    "sizing": ("/", lambda d: css(d, "#sizing-heatmap .hm") and css(d, "#sizing-answer tbody tr")),
    "scaling": ("/scaling", lambda d: css(d, "#scaling-graph .scatterlayer .trace")),
    "time": ("/time", lambda d: css(d, "#time-bottleneck .scatterlayer .trace")),
    "policies": ("/policies", lambda d: css(d, "#policies-graph .scatterlayer .trace")),
    "validation": ("/validation", lambda d: css(d, "#validation-empty")),
    "run": ("/run", lambda d: css(d, "#run-config")),
    "sql": ("/sql", lambda d: css(d, "#sql-table tbody tr")),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders_within_the_limit_on_the_sweep_store(
    driver,  # noqa: F811 (the fixtures imported above)
    base_url,  # noqa: F811
    page,
    render_times,  # noqa: F811
):
    path, ready = PAGES[page]
    t = open_page(driver, base_url + path, lambda d: bool(ready(d)), page, render_times)
    assert t < RENDER_LIMIT_S, f"{page} page took {t:.2f} s on the 10,000-point store"
    assert not css(driver, "#_dash-global-error-container .dash-fe-error__title")
