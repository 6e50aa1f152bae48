"""The dashboard: figure functions directly, and the real page in headless Chromium."""

from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT

from dashboard.figures import policy_figure, scaling_figure, validation_figure
from sgdsim.profiling.procs import free_ports, spawn, stop


def test_scaling_figure_has_one_line_per_network_sorted_by_bandwidth():
    df = pl.DataFrame(
        {
            "network": ["fast", "fast", "slow", "slow"],
            "bandwidth_bps": [1e10, 1e10, 1e8, 1e8],
            "workers": [2, 1, 1, 2],
            "samples_per_s": [20.0, 10.0, 5.0, 6.0],
        }
    )
    fig = scaling_figure(df, "M", "samples_per_s")
    assert [t.name for t in fig.data] == ["slow", "fast"]
    assert list(fig.data[1].x) == [1, 2] and list(fig.data[1].y) == [10.0, 20.0]
    assert "M" in fig.layout.title.text
    with pytest.raises(ValueError, match="metric"):
        scaling_figure(df, "M", "nope")


def test_policy_figure_has_one_line_per_policy():
    df = pl.DataFrame(
        {
            "policy": ["tictac", "tictac", "fifo_random", "fifo_random"],
            "workers": [2, 1, 1, 2],
            "steps_per_s": [3.0, 2.0, 2.0, 2.5],
            "gain_vs_fifo_random": [1.2, 1.0, 1.0, 1.0],
        }
    )
    fig = policy_figure(df, "M", "1Gbps")
    assert [t.name for t in fig.data] == ["fifo_random", "tictac"]
    assert list(fig.data[1].x) == [1, 2] and list(fig.data[1].y) == [2.0, 3.0]
    assert "1Gbps" in fig.layout.title.text


def test_validation_figure_pairs_measured_markers_with_predicted_lines():
    df = pl.DataFrame(
        {
            "network": ["200Mbps", "100Mbps", "100Mbps", "100Mbps"],
            "bandwidth_bps": [2e8, 1e8, 1e8, 1e8],
            "policy": ["tf_default", "tf_default", "tf_default", "tictac"],
            "workers": [1, 2, 1, 1],
            "measured_steps_per_s": [2.0, 1.8, 1.0, 0.9],
            "measured_steps_per_s_std": [0.1, None, 0.05, 0.02],
            "predicted_steps_per_s": [2.1, 1.7, 1.1, 0.8],
            "ape_pct": [5.0, 5.6, 10.0, 11.1],
        }
    )
    fig = validation_figure(df, "M")
    # slowest network first, then policy; measured (markers) before predicted (lines)
    assert [t.name for t in fig.data] == [
        "100Mbps · tf_default measured",
        "100Mbps · tf_default predicted",
        "100Mbps · tictac measured",
        "100Mbps · tictac predicted",
        "200Mbps · tf_default measured",
        "200Mbps · tf_default predicted",
    ]
    measured, predicted = fig.data[0], fig.data[1]
    assert measured.mode == "markers" and predicted.mode == "lines"
    assert list(measured.x) == [1, 2] and list(measured.y) == [1.0, 1.8]
    assert list(measured.error_y.array) == [0.05, 0.0]  # a missing std draws no bar
    assert list(predicted.y) == [1.1, 1.7]
    assert measured.marker.color == predicted.line.color


def measured_ok(run: Path) -> bool:
    """Whether the tiny run measured its validation points (root), from its store."""
    import duckdb

    con = duckdb.connect(str(run / "results" / "sgdsim.duckdb"), read_only=True)
    try:
        return (
            con.execute("SELECT count(*) FROM measurements WHERE status = 'ok'").fetchone()[0] > 0
        )
    finally:
        con.close()


def tiny_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())


def tiny_config_workers() -> list[int]:
    return tiny_config()["workers"]


def _browser_missing() -> str | None:
    for exe in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not Path(exe).exists():
            return f"{exe} not installed (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture
def dashboard_url(tiny_run: Path) -> Iterator[str]:
    (port,) = free_ports(1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = spawn(
        [
            sys.executable,
            "-m",
            "dashboard.app",
            "--db",
            str(tiny_run / "results" / "sgdsim.duckdb"),
            "--port",
            str(port),
        ],
        env,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield url
    finally:
        stop(proc)


@pytest.mark.slow
@pytest.mark.browser
def test_scaling_page_renders_and_reacts_in_headless_chromium(dashboard_url: str, tiny_run: Path):
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"browser test must run in CI: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1200,900",
    ):
        opts.add_argument(flag)
    profile_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"sgdsim-chrome-{os.getpid()}"
    opts.add_argument(f"--user-data-dir={profile_dir}")
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.set_page_load_timeout(60)
        driver.get(dashboard_url)
        wait = WebDriverWait(driver, 60)
        traces = lambda d: d.find_elements(By.CSS_SELECTOR, "#scaling-graph .scatterlayer .trace")
        wait.until(lambda d: len(traces(d)) == 2)
        title = driver.find_element(By.CSS_SELECTOR, "#scaling-graph .gtitle").text
        assert "LeNet5 (tf_default)" in title
        # one point per worker count on each line: policies are not mixed
        n_workers = len(tiny_config_workers())
        points = driver.find_elements(By.CSS_SELECTOR, "#scaling-graph .scatterlayer .trace .point")
        assert len(points) == 2 * n_workers
        legend = [
            e.text for e in driver.find_elements(By.CSS_SELECTOR, "#scaling-graph .legendtext")
        ]
        assert legend == ["100Mbps", "1Gbps"]
        # untick one network: the graph redraws with one line
        box = driver.find_element(By.CSS_SELECTOR, "#scaling-networks input[value='100Mbps']")
        box.click()
        wait.until(lambda d: len(traces(d)) == 1)
        assert [
            e.text for e in driver.find_elements(By.CSS_SELECTOR, "#scaling-graph .legendtext")
        ] == ["1Gbps"]
        # the policies page: one line per policy of the tiny config
        driver.find_element(By.LINK_TEXT, "Policies").click()

        def policy_lines(d):
            return d.find_elements(By.CSS_SELECTOR, "#policies-graph .scatterlayer .trace")

        policies = sorted(tiny_config()["policies"])
        wait.until(lambda d: len(policy_lines(d)) == len(policies))
        legend = driver.find_elements(By.CSS_SELECTOR, "#policies-graph .legendtext")
        assert sorted(e.text for e in legend) == policies
        # the validation page: measured and predicted per network and policy measured
        driver.find_element(By.LINK_TEXT, "Validation").click()
        measured = {
            (net, pol)
            for p in tiny_config()["validation"]["points"]
            for net in [n["name"] for n in tiny_config()["validation"]["networks"]]
            for pol in p.get("policies", ["tf_default"])
        }
        if measured_ok(tiny_run):
            wait.until(
                lambda d: (
                    len(d.find_elements(By.CSS_SELECTOR, "#validation-graph .trace"))
                    == 2 * len(measured)
                )
            )
            rows = driver.find_elements(By.CSS_SELECTOR, "#validation-table tr")
            assert len(rows) == 1 + len(measured)  # header + one row per network and policy
        else:  # the testbed skipped every point: the page says why
            text = driver.find_element(By.ID, "validation-empty").text
            assert "needs root" in text
    finally:
        driver.quit()
        shutil.rmtree(profile_dir, ignore_errors=True)
