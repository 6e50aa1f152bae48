"""The dashboard's analysis and figures as plain functions (no browser; the pages in
headless Chromium are tests/test_dashboard_browser.py)."""

from __future__ import annotations

import json
import math
import random

import polars as pl
import pytest

from dashboard.analysis import (
    NEAR_PEAK,
    baseline_policy,
    best_index,
    best_points,
    bottleneck,
    cost_per_million_samples,
    with_band,
)
from dashboard.export import to_bytes
from dashboard.figures import (
    colors_for,
    merge_spans,
    mode_figure,
    policy_figure,
    scaling_figure,
    sizing_heatmap,
    step_windows,
    timeline_figure,
    timeline_spans,
    validation_figure,
)
from sgdsim.config import check_config
from sgdsim.errors import ConfigError
from sgdsim.simulation.chrome_trace import chrome_trace
from sgdsim.store import price_rows


def curve(network: str, bw: float, samples: list[float], **extra: list[float]) -> pl.DataFrame:
    """Prediction-like rows of one curve at N = 1, 2, 4, 8 (batch 10)."""
    n = len(samples)
    workers = [1, 2, 4, 8][:n]
    steps = [x / 10 for x in samples]
    cols = {
        "model": ["M"] * n,
        "hardware": ["cpu"] * n,
        "network": [network] * n,
        "bandwidth_bps": [bw] * n,
        "mode": ["async"] * n,
        "policy": ["tf_default"] * n,
        "workers": workers,
        "workers_per_node": [1] * n,
        "batch_size": [10] * n,
        "samples_per_s": samples,
        "steps_per_s": steps,
        "steps_per_s_std": [0.1 * x for x in steps],
        "speedup": [x / steps[0] for x in steps],
        "efficiency": [x / steps[0] / w for x, w in zip(steps, workers, strict=True)],
        "ps_down_util": [0.2] * n,
        "ps_up_util": [0.1] * n,
        "blocked_fraction": [0.1] * n,
        "sim_steps_per_s": steps,
        "cpu_bound_steps_per_s": [None] * n,
    }
    cols.update(extra)
    return pl.DataFrame(cols)


def test_best_n_is_the_smallest_n_within_five_percent_of_the_peak():
    # peak 100 at N = 8; N = 4 gives 96 (within 5 %), N = 2 gives 80
    df = curve("1Gbps", 1e9, [50.0, 80.0, 96.0, 100.0])
    best = best_points(df)
    assert best.height == 1
    row = best.row(0, named=True)
    assert row["best_workers"] == 4 and row["peak_samples_per_s"] == 100.0
    assert row["samples_per_s"] == 96.0
    assert row["efficiency"] == pytest.approx(96.0 / (4 * 50.0))
    assert row["cost_per_m_samples"] is None  # nothing priced
    # just outside the 5 %: the next N
    df2 = curve("1Gbps", 1e9, [50.0, 80.0, 100 * NEAR_PEAK - 0.01, 100.0])
    assert best_points(df2)["best_workers"][0] == 8


def test_best_points_agrees_with_best_index_on_every_curve_of_a_mixed_frame():
    # many curves in one frame, shuffled rows, ties at the peak, one curve without N = 1
    rng = random.Random(3)
    parts = []
    for i in range(40):
        samples = [rng.choice([10.0, 50.0, 95.0, 99.0, 100.0]) for _ in range(4)]
        df = curve(f"net{i}", 1e9 + i, samples)
        parts.append(df.filter(pl.col("workers") != 1) if i == 7 else df)
    frame = pl.concat(parts).sample(fraction=1.0, shuffle=True, seed=5)
    best = best_points(frame)
    assert best.height == 40
    for part in parts:
        d = part.sort("workers")
        want = d["workers"][best_index(d["samples_per_s"].to_list())]
        got = best.filter(pl.col("network") == d["network"][0]).row(0, named=True)
        assert got["best_workers"] == want
        assert got["peak_samples_per_s"] == max(d["samples_per_s"])
        assert (got["efficiency"] is None) == (d["workers"][0] != 1)


def test_best_points_prices_the_nodes_rented():
    df = curve("1Gbps", 1e9, [50.0, 80.0, 96.0, 100.0])
    best = best_points(df, {("hardware", "cpu"): 2.0, ("network", "1Gbps"): 0.5})
    # 4 worker nodes + 1 PS node at 2.5 per node-hour; 96 samples/s
    hours_per_m = 1e6 / 96.0 / 3600.0
    assert best["cost_per_m_samples"][0] == pytest.approx(5 * 2.5 * hours_per_m)
    assert cost_per_million_samples(10.0, 1, 0.0, 0.0) is None


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"sim_steps_per_s": 5.0, "cpu_bound_steps_per_s": 4.0}, "PS CPU"),
        (
            {"workers": 4, "blocked_fraction": 0.8, "ps_down_util": 0.7, "ps_up_util": 0.6},
            "PS NIC out",
        ),
        (
            {"workers": 4, "blocked_fraction": 0.8, "ps_down_util": 0.5, "ps_up_util": 0.75},
            "PS NIC in",
        ),
        (
            {"workers": 1, "blocked_fraction": 0.8, "ps_down_util": 0.7, "ps_up_util": 0.7},
            "worker NIC",
        ),
        (
            {"workers": 4, "blocked_fraction": 0.8, "ps_down_util": 0.1, "ps_up_util": 0.1},
            "worker NIC",
        ),
        (
            {"workers": 4, "blocked_fraction": 0.1, "ps_down_util": 0.9, "ps_up_util": 0.2},
            "PS NIC out",
        ),
        (
            {"workers": 4, "blocked_fraction": 0.1, "ps_down_util": 0.3, "ps_up_util": 0.2},
            "compute",
        ),
        (
            {"sim_steps_per_s": 5.0, "cpu_bound_steps_per_s": None, "blocked_fraction": 0.0},
            "compute",
        ),
    ],
)
def test_bottleneck_names_the_limiting_resource(row, expected):
    assert bottleneck(row) == expected


def test_band_prefers_explicit_edges_over_the_replication_spread():
    df = curve("1Gbps", 1e9, [50.0, 80.0])
    spread = with_band(df, "samples_per_s")
    assert spread["band_lo"].to_list() == pytest.approx([45.0, 72.0])
    assert spread["band_hi"].to_list() == pytest.approx([55.0, 88.0])
    # N = 2 capped: simulated 10 ± 0.8 steps/s, bound (the rate) 8.2 steps/s
    capped = with_band(
        df.with_columns(
            pl.Series("steps_per_s", [5.0, 8.2]),
            pl.Series("samples_per_s", [50.0, 82.0]),
            pl.Series("sim_steps_per_s", [5.0, 10.0]),
            pl.Series("steps_per_s_std", [0.5, 0.8]),
            pl.Series("cpu_bound_steps_per_s", [None, 8.2]),
        ),
        "samples_per_s",
    )
    assert capped["band_lo"].to_list() == pytest.approx([45.0, 82.0])
    assert capped["band_hi"].to_list() == pytest.approx([55.0, 82.0])
    edges = with_band(
        df.with_columns(
            pl.Series("steps_per_s_lo", [4.0, 6.0]), pl.Series("steps_per_s_hi", [6.0, 9.0])
        ),
        "samples_per_s",
    )
    assert edges["band_lo"].to_list() == pytest.approx([40.0, 60.0])
    assert edges["band_hi"].to_list() == pytest.approx([60.0, 90.0])


def test_baseline_is_a_policy_that_exists():
    assert baseline_policy(["tictac", "fifo_random", "tf_default"]) == "fifo_random"
    assert baseline_policy(["tictac", "tf_default"]) == "tf_default"
    assert baseline_policy(["p3", "tictac"]) == "p3"
    assert baseline_policy([]) is None


def test_scaling_figure_lines_ideal_band_best_n_and_stable_colours():
    df = pl.concat(
        [
            curve("fast", 1e10, [10.0, 20.0, 40.0, 41.0]),
            curve("slow", 1e8, [5.0, 6.0, 6.1, 6.0]),
        ]
    )
    colors = colors_for(["slow", "fast", "other"])
    fig = scaling_figure(df, "M", "samples_per_s", colors)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == ["slow", "fast"]
    assert [t.line.color for t in lines] == [colors["slow"], colors["fast"]]
    ideal = {t.name: list(t.y) for t in fig.data if t.name.endswith(" ideal")}
    assert ideal["fast ideal"] == [10.0, 20.0, 40.0, 80.0]
    assert sum(1 for t in fig.data if t.name.endswith(" band")) == 4
    star = fig.data[-1]
    assert star.name.startswith("best N")
    assert list(star.x) == [2, 4]  # slow: 6.0 ≥ 0.95·6.1; fast: 40 ≥ 0.95·41
    assert fig.layout.hovermode == "x unified"
    assert "samples/s" in lines[0].hovertemplate and "per worker" in lines[0].hovertemplate
    # hiding a network keeps the other's colour
    only_fast = scaling_figure(df.filter(pl.col("network") == "fast"), "M", colors=colors)
    assert [t.line.color for t in only_fast.data if t.mode == "lines+markers"] == [colors["fast"]]
    empty = scaling_figure(df.clear(), "M")
    assert not empty.data and "No network selected" in empty.layout.annotations[0].text
    with pytest.raises(ValueError, match="metric"):
        scaling_figure(df, "M", "nope")


def test_scaling_hover_says_how_each_point_was_simulated():
    """A steady row's hover gives its interval and whether the rule held; rows run
    over fixed steps, and stores written before the column, get no note."""
    df = curve("net", 1e9, [10.0, 18.0, 30.0, 31.0]).with_columns(
        protocol=pl.Series(["steps", "steady", "steady", "steady"]),
        converged=pl.Series([None, True, False, None], dtype=pl.Boolean),
        rel_half_width=pl.Series([None, 0.021, 0.074, None]),
        window_s=pl.Series([None, 41.0, 300.0, None]),
    )
    line = next(t for t in scaling_figure(df, "M").data if t.name == "net")
    notes = [c[3] for c in line.customdata]
    assert notes == [
        "",
        "<br>long-run rate: ± 2.1 % after 41 s",
        "<br>long-run rate: ± 7.4 %, cut at 300 s",
        "",
    ]
    assert "%{customdata[3]}" in line.hovertemplate
    old = next(
        t for t in scaling_figure(curve("net", 1e9, [1.0, 2.0]), "M").data if t.name == "net"
    )
    assert [c[3] for c in old.customdata] == ["", ""]


def test_scaling_hover_says_whether_async_points_took_a_join_capture():
    """networks[].joins: an async row with N > 1 names the capture it took, or says
    it is the bare simulator's; one worker (it joins no one) and sync rows say nothing."""
    df = curve("net", 1e9, [10.0, 18.0, 30.0, 31.0]).with_columns(
        mode=pl.Series(["async", "async", "async", "sync_ps"]),
        joins_path=pl.Series([None, "results/joins/cpu/M/net.json", None, None]),
    )
    line = next(t for t in scaling_figure(df, "M").data if t.name == "net")
    assert [c[3] for c in line.customdata] == [
        "",
        "<br>joins: captured (net.json)",
        "<br>joins: none, bare simulator (may read low)",
        "",
    ]


def test_a_dense_scaling_curve_is_a_line_and_a_sparse_one_keeps_its_markers():
    from dashboard.figures import MARKED_POINTS

    n = MARKED_POINTS + 1
    dense = curve("dense", 1e9, [10.0] * 4).sample(n, with_replacement=True, seed=1)
    dense = dense.with_columns(workers=pl.Series(range(1, n + 1)))
    both = pl.concat([dense, curve("sparse", 1e8, [5.0, 6.0, 6.1, 6.0])])
    modes = {t.name: t.mode for t in scaling_figure(both, "M").data}
    assert modes["dense"] == "lines" and modes["sparse"] == "lines+markers"


def test_policy_figure_gains_against_the_given_baseline_and_y_from_zero():
    df = pl.DataFrame(
        {
            "policy": ["tictac", "tictac", "tf_default", "tf_default"],
            "workers": [2, 1, 1, 2],
            "steps_per_s": [3.0, 2.0, 2.0, 2.5],
        }
    )
    fig = policy_figure(df, "M on 1Gbps", "tf_default")
    assert [t.name for t in fig.data] == ["tf_default", "tictac"]
    assert [c[0] for c in fig.data[1].customdata] == pytest.approx([1.0, 3.0 / 2.5])
    assert "vs tf_default" in fig.data[1].hovertemplate
    assert fig.layout.yaxis.rangemode == "tozero"


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
    # slowest network first, then mode (async where the rows name none) and
    # policy; measured (markers) before predicted (lines)
    assert [t.name for t in fig.data] == [
        "100Mbps · async · tf_default measured",
        "100Mbps · async · tf_default predicted",
        "100Mbps · async · tictac measured",
        "100Mbps · async · tictac predicted",
        "200Mbps · async · tf_default measured",
        "200Mbps · async · tf_default predicted",
    ]
    # a synchronous point at the same network and policy is a curve of its own
    sync = df.with_columns(mode=pl.Series(["async", "sync_ps", "async", "async"]))
    names = [t.name for t in validation_figure(sync, "M").data]
    assert names[:4] == [
        "100Mbps · async · tf_default measured",
        "100Mbps · async · tf_default predicted",
        "100Mbps · async · tictac measured",
        "100Mbps · async · tictac predicted",
    ]
    assert "100Mbps · sync_ps · tf_default measured" in names and len(names) == 8
    measured, predicted = fig.data[0], fig.data[1]
    assert measured.mode == "markers" and predicted.mode == "lines"
    # a point launched three times: each launch a marker after its curve's line
    runs = df.with_columns(measured_run_steps_per_s=pl.Series([None, [1.7, 1.8, 1.9], [1.0], None]))
    launched = validation_figure(runs, "M").data
    assert [t.name for t in launched][:3] == [
        "100Mbps · async · tf_default measured",
        "100Mbps · async · tf_default predicted",
        "100Mbps · async · tf_default launches",
    ]
    assert list(launched[2].x) == [2, 2, 2] and list(launched[2].y) == [1.7, 1.8, 1.9]
    assert len(launched) == 7  # one launch is no trace
    # a replayed steady point: a cross at its replayed rate after its curve's line
    replayed = validation_figure(
        df.with_columns(replayed_steps_per_s=pl.Series([None, 1.75, None, None])), "M"
    ).data
    assert replayed[2].name == "100Mbps · async · tf_default replayed from measured phases"
    assert list(replayed[2].x) == [2] and list(replayed[2].y) == [1.75]
    assert replayed[2].marker.symbol == "x-thin" and len(replayed) == 7
    assert list(measured.x) == [1, 2] and list(measured.y) == [1.0, 1.8]
    assert list(measured.error_y.array) == [0.05, 0.0]  # a missing std draws no bar
    # a steady point's bar is its batch-means interval, and its hover says if max_s cut it
    steady = df.with_columns(
        measured_steps_per_s_half_width=pl.Series([None, 0.3, 0.01, None]),
        measured_converged=pl.Series([None, False, True, None]),
        # the cut point's batches climb 1, 2, 3, 4: +120 % across its window, on a line
        measured_batch_steps_per_s=pl.Series([None, [1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0], None]),
    )
    point = validation_figure(steady, "M").data[0]
    assert list(point.error_y.array) == [0.01, 0.3]
    assert [c[1] for c in point.customdata] == [
        "<br>± 0.01 (batch-means interval)",
        "<br>± 0.3 (batch-means interval, cut at max_s)<br>still moving: +120 % across the window",
    ]
    assert list(predicted.y) == [1.1, 1.7]
    assert measured.marker.color == predicted.line.color


def test_sizing_heatmap_cells_say_best_n_and_bottleneck():
    df = pl.concat([curve("fast", 1e10, [10.0, 20.0, 40.0, 41.0]), curve("slow", 1e8, [5.0, 6.0])])
    fig = sizing_heatmap(best_points(df), ["slow", "fast"])
    h = fig.data[0]
    assert list(h.x) == ["slow", "fast"] and list(h.y) == ["M · cpu"]
    assert list(h.z[0]) == [math.log2(2), math.log2(4)]
    assert "N = 4" in h.text[0][1] and "compute" in h.text[0][1]


def test_timeline_spans_lanes_and_waiting_from_a_chrome_trace():
    records = [
        ("compute", 0, 0, 0.0, 1.0),
        ("pull", 0, 0, 1.0, 2.0),
        ("compute", 0, 0, 2.0, 3.0),  # a second step's segment 0
        ("compute", 0, 1, 3.5, 4.0),
        ("compute", 0, 0, 5.0, 6.0),
        ("push", 1, 0, 0.5, 0.7),
        ("update", 1, 0, 0.7, 0.8),
    ]
    spans = timeline_spans(json.loads(json.dumps(chrome_trace(records, 2, {"model": "M"}))))
    lanes = spans.select("lane", "pid", "tid").unique().sort("pid", "tid")["lane"].to_list()
    assert lanes[0] == "PS · update"
    assert {"worker 0 · compute", "worker 0 · pull", "worker 1 · push"} <= set(lanes)
    waits = spans.filter(pl.col("kind") == "waiting").sort("start_s")
    assert list(zip(waits["start_s"], waits["end_s"], strict=True)) == [
        (1.0, 2.0),
        (3.0, 3.5),
        (4.0, 5.0),
    ]
    assert step_windows(spans) == [(0.0, 2.0), (2.0, 5.0)]
    fig = timeline_figure(spans, "T", (2.0, 5.0))
    assert list(fig.layout.xaxis.range) == [2.0, 5.0]
    assert {t.name for t in fig.data} == {"compute", "waiting"}  # only spans in the window


def test_export_bytes_round_trip():
    df = pl.DataFrame({"a": [1, 2], "l": [[1.0, 2.0], [3.0]]})
    assert to_bytes(df, "csv").decode().splitlines() == ["a,l", "1,1.0;2.0", "2,3.0"]
    import io

    assert pl.read_parquet(io.BytesIO(to_bytes(df, "parquet"))).equals(df)
    with pytest.raises(ValueError, match="csv or parquet"):
        to_bytes(df, "xlsx")


def test_cost_config_goes_into_table_prices_and_names_are_checked():
    config = {
        "models": [{"name": "LeNet5"}],
        "hardware": [{"name": "cpu"}],
        "networks": [{"name": "1Gbps", "bandwidth_bps": 1e9}],
        "cost": {"currency": "EUR", "hardware": {"cpu": 0.4}, "networks": {"1Gbps": 0.0}},
    }
    assert price_rows(config) == [("hardware", "cpu", 0.4, "EUR")]  # 0 = not priced
    assert price_rows({}) == []
    check_config(config)
    config["cost"]["networks"] = {"10Gbps": 1.0}
    with pytest.raises(ConfigError, match=r"cost\.networks: '10Gbps' is not the name"):
        check_config(config)


def test_merge_spans_joins_only_spans_closer_than_the_tolerance():
    spans = pl.DataFrame(
        {
            "lane": ["w0 · compute"] * 3 + ["w0 · pull"],
            "kind": ["compute"] * 3 + ["pull"],
            "name": ["segment 0", "segment 1", "segment 2", "pull 0"],
            "start_s": [0.0, 1.0005, 3.0, 1.0],
            "end_s": [1.0, 2.0, 4.0, 1.5],
            "pid": [1, 1, 1, 1],
            "tid": [1, 1, 1, 2],
        }
    )
    merged = merge_spans(spans, 0.001).sort("tid", "start_s")
    assert merged.select("name", "start_s", "end_s").rows() == [
        ("segment 0 and 1 more", 0.0, 2.0),
        ("segment 2", 3.0, 4.0),
        ("pull 0", 1.0, 1.5),
    ]
    assert merge_spans(spans, 1e-6).height == 4


def test_mode_figure_has_one_line_per_mode_present():
    df = pl.DataFrame(
        {
            "mode": ["async", "async", "sync_ps", "sync_ps"],
            "workers": [1, 2, 1, 2],
            "samples_per_s": [10.0, 18.0, 10.0, 15.0],
        }
    )
    fig = mode_figure(df, "M")
    assert [t.name for t in fig.data] == ["async", "sync_ps"]
    assert list(fig.data[1].y) == [10.0, 15.0]
    assert not mode_figure(df.clear(), "M").data


def test_default_networks_spread_over_the_list_with_both_ends():
    from dashboard.analysis import DEFAULT_NETWORKS, default_networks

    few = ["a", "b", "c"]
    assert default_networks(few) == few
    nets = [f"n{i:03d}" for i in range(100)]
    got = default_networks(nets)
    assert len(got) == len(set(got)) == DEFAULT_NETWORKS
    assert got[0] == nets[0] and got[-1] == nets[-1]
    assert got == sorted(got)  # slowest first, as the list


def test_html_table_escapes_every_text_and_link():
    from dashboard.ui import table

    t = table(
        ["a<b"],
        [["<script>alert(1)</script>", ("x&y", '/p?a=1&b="2"', "t<i>")], ["two\n\nlines"]],
        "t-id",
    )
    text = getattr(t, "data-html")
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert 'href="/p?a=1&amp;b=&quot;2&quot;"' in text and 'title="t&lt;i&gt;"' in text
    assert "<th>a&lt;b</th>" in text and 'id="t-id"' in text
    assert "\n" not in text  # a cell's line breaks as character references
    assert text.count("<tr>") == 3
