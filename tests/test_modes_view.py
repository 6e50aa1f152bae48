"""View ``mode_comparison`` and the accuracy report by mode, on real stores built
from Parquet files written here (expected ratios worked out by hand)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from sgdsim.reports import accuracy_report
from sgdsim.store import publish

#: Every NOT NULL column of table ``predictions`` besides the keys and rates set per row.
FILLER: dict[str, Any] = {
    "hardware": "cpu",
    "bandwidth_bps": 1e9,
    "latency_s": 1e-4,
    "batch_size": 10,
    "steps_per_worker": 10,
    "warmup_steps": 2,
    "workers_per_node": 1,
    "ps_discipline": "fair",
    "mean_step_s": 0.1,
    "ps_down_util": 0.1,
    "ps_up_util": 0.1,
    "blocked_fraction": 0.1,
    "sim_time_s": 1.0,
    "bytes_pulled": 1.0,
    "bytes_pushed": 1.0,
    "events": 1,
    "sim_wall_s": 0.01,
    "seed": 1,
    "replications": 1,
    "steps_per_s_std": 0.0,
}


def prediction(model: str, network: str, n: int, mode: str, policy: str, samples: float) -> dict:
    # batch 10: steps/s is a tenth of samples/s
    return {
        **FILLER,
        "model": model,
        "network": network,
        "workers": n,
        "mode": mode,
        "policy": policy,
        "samples_per_s": samples,
        "steps_per_s": samples / 10,
    }


@pytest.fixture
def store(tmp_path: Path) -> Path:
    rows = [
        # M, net a, N = 4: async best 120 (tictac), sync_ps 90, allreduce best 150 (buckets)
        prediction("M", "a", 4, "async", "tf_default", 100.0),
        prediction("M", "a", 4, "async", "tictac", 120.0),
        prediction("M", "a", 4, "sync_ps", "tf_default", 90.0),
        prediction("M", "a", 4, "allreduce", "none", 130.0),
        prediction("M", "a", 4, "allreduce", "buckets", 150.0),
        # N = 2: sync_ps wins 80 over async 64 (1.25) and allreduce 40 (2.0)
        prediction("M", "a", 2, "async", "tf_default", 64.0),
        prediction("M", "a", 2, "sync_ps", "tf_default", 80.0),
        prediction("M", "a", 2, "allreduce", "single", 40.0),
        # N = 1: a tie (the alphabetically first mode is named fastest)
        prediction("M", "a", 1, "async", "tf_default", 50.0),
        prediction("M", "a", 1, "allreduce", "single", 50.0),
        # another network: one mode only, nothing to compare with
        prediction("M", "b", 4, "async", "tf_default", 70.0),
    ]
    shard = tmp_path / "predictions.parquet"
    pl.DataFrame(rows).write_parquet(shard)
    db = tmp_path / "sgdsim.duckdb"
    publish(db, [], [shard])
    return db


def view(db: Path, where: str) -> dict[str, dict[str, Any]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(f"SELECT * FROM mode_comparison WHERE {where}")
        cols = [d[0] for d in cur.description]
        return {r[cols.index("mode")]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}
    finally:
        con.close()


def test_each_mode_best_policy_and_the_fastest_mode_by_how_much(store):
    rows = view(store, "network = 'a' AND workers = 4")
    assert {m: r["policy"] for m, r in rows.items()} == {
        "async": "tictac",
        "sync_ps": "tf_default",
        "allreduce": "buckets",
    }
    assert {m: r["policies_compared"] for m, r in rows.items()} == {
        "async": 2,
        "sync_ps": 1,
        "allreduce": 2,
    }
    assert {r["fastest_mode"] for r in rows.values()} == {"allreduce"}
    assert {r["fastest_policy"] for r in rows.values()} == {"buckets"}
    assert {m: r["mode_rank"] for m, r in rows.items()} == {
        "allreduce": 1,
        "async": 2,
        "sync_ps": 3,
    }
    # 150 / 120 = 1.25 (25 % faster than async); 150 / 90 = 5/3 (66.7 % faster than sync_ps)
    assert rows["async"]["fastest_ratio"] == pytest.approx(1.25)
    assert rows["async"]["fastest_gain_pct"] == pytest.approx(25.0)
    assert rows["sync_ps"]["fastest_ratio"] == pytest.approx(5 / 3)
    assert rows["sync_ps"]["fastest_gain_pct"] == pytest.approx(200 / 3)
    assert rows["allreduce"]["fastest_ratio"] == 1.0
    # the lead over the runner-up (async at 120): 1.25, the same on every row
    for r in rows.values():
        assert (r["runner_up_mode"], r["runner_up_policy"]) == ("async", "tictac")
        assert r["lead_ratio"] == pytest.approx(1.25) and r["lead_pct"] == pytest.approx(25.0)
        assert r["modes_compared"] == 3 and r["fastest_samples_per_s"] == 150.0
    assert rows["sync_ps"]["steps_per_s"] == 9.0


def test_other_points_ties_and_a_lone_mode(store):
    two = view(store, "network = 'a' AND workers = 2")
    assert two["async"]["fastest_mode"] == "sync_ps"
    assert two["allreduce"]["fastest_ratio"] == pytest.approx(2.0)  # 80 / 40
    assert two["sync_ps"]["lead_ratio"] == pytest.approx(1.25)  # 80 / 64
    one = view(store, "network = 'a' AND workers = 1")
    assert {r["fastest_mode"] for r in one.values()} == {"allreduce"}
    assert one["async"]["fastest_ratio"] == 1.0 and one["async"]["lead_pct"] == 0.0
    lone = view(store, "network = 'b'")
    assert list(lone) == ["async"]
    r = lone["async"]
    assert r["fastest_mode"] == "async" and r["modes_compared"] == 1
    assert r["runner_up_mode"] is None and r["lead_ratio"] is None


def measured_point(n: int, measured: float, predicted: float) -> tuple[dict, dict]:
    """One ok measurement of LeNet5 on network n and its testbed prediction."""
    key = {"model": "LeNet5", "hardware": "cpu", "network": "n", "bandwidth_bps": 1e8}
    key |= {"policy": "tf_default", "workers": n, "batch_size": 10}
    m = {**key, "latency_s": 0.0, "duration_s": 5.0, "warmup_s": 1.0, "status": "ok"}
    m |= {"reason": "", "loopback": False, "steps_per_s": measured, "samples_per_s": 10 * measured}
    p = {**FILLER, **key, "predicted_bandwidth_Bps": 1.2e7, "steps_per_s": predicted}
    p |= {"samples_per_s": 10 * predicted, "workers_per_node": n}
    for k in ("latency_s", "ps_discipline"):
        p.pop(k)
    return m, p


def measured_store(
    tmp_path: Path, pts: list[tuple[dict, dict]] | None = None, replays: Sequence[dict] = ()
) -> Path:
    """``pts`` (default: two asynchronous points, errors +10 % and −10 %) and
    ``replays`` (rows of table testbed_replays) as a store (shards without a mode
    column, as stores written before measurements carried it)."""
    if pts is None:
        pts = [measured_point(1, 10.0, 11.0), measured_point(2, 20.0, 18.0)]
    files = []
    for i, (m, p) in enumerate(pts):
        for kind, row in (("m", m), ("p", p)):
            files.append(tmp_path / f"{kind}{i}.parquet")
            pl.DataFrame([row]).write_parquet(files[-1])
    shards = []
    for i, row in enumerate(replays):
        shards.append(tmp_path / f"r{i}.parquet")
        pl.DataFrame([row]).write_parquet(shards[-1])
    db = tmp_path / "sgdsim.duckdb"
    publish(
        db, [], [], measurement_files=files[0::2], testbed_prediction_files=files[1::2],
        replay_files=shards,
    )  # fmt: skip
    return db


def test_accuracy_report_without_a_mode_column_is_all_async(tmp_path):
    db = measured_store(tmp_path)
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "**All 2 points: MAPE 10.0 %, max error 10.0 %.**" in text
    assert "| model | policy | network | points |" in text  # one mode: no mode column
    assert "| mode |" not in text


def moded_store(tmp_path: Path) -> Path:
    """:func:`measured_store` (its two points async) plus an allreduce point (+5 %)
    and a skipped sync_ps one."""
    db = measured_store(tmp_path)
    m, p = measured_point(2, 10.0, 10.5)  # allreduce: +5 %
    con = duckdb.connect(str(db))
    try:
        skipped = {**m, "mode": "sync_ps", "status": "skipped", "reason": "no root"}
        for i, (table, row) in enumerate(
            (
                ("measurements", {**m, "mode": "allreduce"}),
                ("testbed_predictions", {**p, "mode": "allreduce"}),
                ("measurements", skipped),
            )
        ):
            shard = tmp_path / f"mode{i}.parquet"
            pl.DataFrame([row]).write_parquet(shard)
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?)", [str(shard)])
    finally:
        con.close()
    return db


def test_accuracy_report_groups_by_mode_when_measurements_carry_it(tmp_path):
    db = moded_store(tmp_path)
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    # (10 + 10 + 5) / 3 = 8.3 % over all; per mode 10.0 (async) and 5.0
    assert "**All 3 points: MAPE 8.3 %, max error 10.0 %.**" in text
    assert "- allreduce: 1 point, MAPE 5.0 %, max error 5.0 %" in text
    assert "- async: 2 points, MAPE 10.0 %, max error 10.0 %" in text
    assert "| mode | model | policy | network | points |" in text
    assert "| allreduce | LeNet5 | tf_default | n | 1 | 5.0 | 5.0 |" in text
    assert "| async | LeNet5 | tf_default | n | 2 | 10.0 | 10.0 |" in text
    assert "| sync_ps | LeNet5 | n | tf_default | 2 | no root |" in text


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The dashboard's page modules as the app loads them; the store is set per test."""
    from dashboard.app import create_app

    def load(db: Path) -> dict[str, Any]:
        monkeypatch.setenv("SGDSIM_DB", str(db))
        create_app()
        return {n.split(".")[-1]: m for n, m in sys.modules.items() if n.startswith("pages.")}

    return load


def cells(table: Any) -> list[list[str]]:
    """The body cells of a :func:`dashboard.ui.table` (one HTML string), row by row."""
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[list[str]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag == "tr":
                self.rows.append([])
            elif tag == "td":
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag == "td" and self.cell is not None:
                self.rows[-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    parser = Cells()
    parser.feed(getattr(table, "data-html"))  # dashboard.ui.table: the markup of its host
    return [r for r in parser.rows if r]  # the header row has no td


def test_modes_page_names_the_fastest_mode_and_policy_choices_follow_the_mode(store, pages):
    from dashboard.data import pick_policy

    modes = pages(store)["modes"]
    fig, note, table, query = modes.update_modes("M", "cpu", "a")
    assert note.startswith("Best policy of each of 3 modes")
    assert query == "?model=M&hardware=cpu&network=a"
    assert [t.name for t in fig.data] == ["allreduce", "async", "sync_ps"]
    assert list(fig.data[0].y) == [50.0, 40.0, 150.0]  # allreduce's best at N = 1, 2, 4
    assert list(fig.data[1].customdata) == ["tf_default", "tf_default", "tictac"]
    rows = cells(table)
    assert [r[0] for r in rows] == ["1", "2", "4"]
    assert rows[2][:3] == ["4", "allreduce (buckets)", "×1.25 (+25.0 %) over async"]
    assert rows[2][3:] == [
        "150 (buckets)",
        "120 (tictac), ×1.25 behind",
        "90 (tf_default), ×1.67 behind",
    ]
    assert rows[0][5] == "–"  # no sync_ps at N = 1
    _, note, table, _ = modes.update_modes("M", "cpu", "b")
    assert "one SGD mode here (async)" in note
    # the policy dropdowns offer the mode's own policies (allreduce: fusion rules)
    assert pick_policy(None, "allreduce") == (["buckets", "none", "single"], "buckets")
    assert pick_policy("tictac", "async") == (["tf_default", "tictac"], "tictac")
    assert pick_policy("none", "sync_ps") == (["tf_default"], "tf_default")
    assert pages(store)["policies"].baselines_of_mode("allreduce", "tictac")[1] == "buckets"


def test_validation_page_selects_the_mode(tmp_path, pages):
    (tmp_path / "plain").mkdir()
    validation = pages(measured_store(tmp_path / "plain"))["validation"]
    assert validation.measured_modes() == ["async"]
    assert validation.rows("LeNet5", "async").height == 2
    validation = pages(moded_store(tmp_path))["validation"]
    assert validation.measured_modes() == ["allreduce", "async"]
    _, table, query, phases = validation.update_validation("LeNet5", "allreduce")
    assert query == "?model=LeNet5&mode=allreduce"
    assert phases == []  # no steady pair
    row = [c.children for c in table.children[1].children]
    # no profile-only prediction, no measured interval
    assert row == ["n", "tf_default", 1, "5.0", "5.0", "—", "—"]
    assert validation.rows("LeNet5", "async")["workers"].to_list() == [1, 2]


def test_validation_view_and_report_say_which_points_are_inside_the_phase_band(tmp_path):
    # measured 10 in [9, 12]: inside; measured 20 in [15, 19]: outside; one without a band
    pts = [
        (measured_point(2, 10.0, 11.0), (9.0, 12.0)),
        (measured_point(3, 20.0, 18.0), (15.0, 19.0)),
        (measured_point(1, 5.0, 5.0), (None, None)),
    ]
    files = []
    for i, ((m, p), (lo, hi)) in enumerate(pts):
        p = {**p, "steps_per_s_lo": lo, "steps_per_s_hi": hi}
        for kind, row in (("m", m), ("p", p)):
            files.append(tmp_path / f"{kind}{i}.parquet")
            pl.DataFrame([row], schema_overrides={"steps_per_s_lo": pl.Float64,
                                                  "steps_per_s_hi": pl.Float64}
                         if kind == "p" else None).write_parquet(files[-1])  # fmt: skip
    db = tmp_path / "sgdsim.duckdb"
    publish(db, [], [], measurement_files=files[0::2], testbed_prediction_files=files[1::2])
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute("SELECT workers, inside_band FROM validation ORDER BY workers").fetchall()
    finally:
        con.close()
    assert got == [(1, None), (2, True), (3, False)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    assert "): 1 of the 2 points that have one." in out.read_text()


def test_a_synchronous_measurement_keeps_each_launch(tmp_path):
    m, p = measured_point(1, 10.0, 11.0)
    m |= {"mode": "allreduce", "policy": "single", "runs": 3, "run_steps_per_s": [9.0, 10.0, 11.0]}
    p |= {"mode": "allreduce", "policy": "single"}
    files = [tmp_path / "m.parquet", tmp_path / "p.parquet"]
    pl.DataFrame([m]).write_parquet(files[0])
    pl.DataFrame([p]).write_parquet(files[1])
    db = tmp_path / "sgdsim.duckdb"
    publish(db, [], [], measurement_files=files[:1], testbed_prediction_files=files[1:])
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("SELECT runs, run_steps_per_s, steps_per_s FROM measurements").fetchone()
    assert row == (3, [9.0, 10.0, 11.0], 10.0)


def test_accuracy_report_shows_the_phase_distance_of_steady_points(tmp_path):
    one, two = measured_point(1, 10.0, 11.0), measured_point(2, 20.0, 18.0)
    two[0]["phase_distance"], two[1]["phase_distance"] = 0.04, 0.47
    db = measured_store(tmp_path, [one, two])
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(
            "SELECT workers, measured_phase_distance, predicted_phase_distance "
            "FROM validation ORDER BY workers"
        ).fetchall()
    finally:
        con.close()
    assert got == [(1, None, None), (2, 0.04, 0.47)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "| phase measured / simulated |" in text
    assert "| -10.0 | 0.04 / 0.47 |" in text and "| +10.0 | — |" in text
    # a store without phases keeps the table as it was
    (tmp_path / "old").mkdir()
    accuracy_report(measured_store(tmp_path / "old"), out)
    assert "phase measured" not in out.read_text()


def test_validation_view_and_report_set_the_profile_only_prediction_beside_the_captured_one(
    tmp_path, pages
):
    # N = 2: captured 18 (-10 %), from the profile alone 25 (+25 %); N = 3: 33 / 27
    # (+10 % / -10 %); N = 1 has no second prediction
    one, two, three = (measured_point(n, 10.0 * n, p) for n, p in ((1, 11.0), (2, 18.0), (3, 33.0)))
    two[1]["profile_only_steps_per_s"], three[1]["profile_only_steps_per_s"] = 25.0, 27.0
    db = measured_store(tmp_path, [one, two, three])
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT workers, profile_only_steps_per_s, round(profile_only_error_pct, 6) "
            "FROM validation ORDER BY workers"
        ).fetchall()
    assert got == [(1, None, None), (2, 25.0, 25.0), (3, 27.0, -10.0)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    # over the same two points: 17.5 % and 25 % without, 10 % and 10 % with the capture
    assert (
        "Without the join capture (the 2 asynchronous points with N > 1 predicted with a "
        in out.read_text().replace("\n", " ")
    )
    assert "MAPE 17.5 %, max error 25.0 % (with the capture: 10.0 %, 10.0 %)." in out.read_text()
    # and the validation page's table beside the network's MAPE
    _, table, _, _ = pages(db)["validation"].update_validation("LeNet5", "async")
    assert [c.children for c in table.children[1].children][-2] == "17.5 / 25.0"
    # a store without such points says nothing of it
    (tmp_path / "old").mkdir()
    accuracy_report(measured_store(tmp_path / "old"), out)
    assert "Without the join capture" not in out.read_text()


def test_accuracy_report_sets_each_skeleton_capture_beside_its_simulation(tmp_path):
    # N = 2 captured 0.40 steps/s at phase 0.45, simulated 0.36 at 0.40 (-10 %);
    # N = 4 captured 0.50 at 0.20, simulated 0.55 at 0.05 (+10 %); N = 3 not captured
    points = [measured_point(n, 1.0, 1.0) for n in (2, 3, 4)]
    points[0][1].update({"capture_steps_per_s": 0.4, "capture_phase_distance": 0.45})
    points[0][1].update({"skeleton_steps_per_s": 0.36, "skeleton_phase_distance": 0.4})
    points[2][1].update({"capture_steps_per_s": 0.5, "capture_phase_distance": 0.2})
    points[2][1].update({"skeleton_steps_per_s": 0.55, "skeleton_phase_distance": 0.05})
    db = measured_store(tmp_path, points)
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "## The join captures against their own simulation" in text
    assert "2 captures: MAPE 10.0 %, max error 10.0 %." in text
    assert "| 2 | 0.4 | 0.36 | -10.0 | 0.45 / 0.40 |" in text
    assert "| 4 | 0.5 | 0.55 | +10.0 | 0.20 / 0.05 |" in text
    assert "| 3 | 0.4" not in text and "| 3 | 0.5" not in text
    # a store without captures says nothing of them
    (tmp_path / "old").mkdir()
    accuracy_report(measured_store(tmp_path / "old"), out)
    assert "own simulation" not in out.read_text()


def test_accuracy_report_counts_the_points_within_the_predictions_spread_over_starts(tmp_path):
    # N = 2: 18 ± 1.5 against 20 (within 2 sd); N = 3: 20 ± 2 against 30 (not); N = 1: one run
    one, two, three = (
        measured_point(n, m, p) for n, m, p in ((1, 10.0, 11.0), (2, 20.0, 18.0), (3, 30.0, 20.0))
    )
    two[1]["steps_per_s_std"], three[1]["steps_per_s_std"] = 1.5, 2.0
    db = measured_store(tmp_path, [one, two, three])
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT workers, predicted_steps_per_s_std FROM validation ORDER BY workers"
        ).fetchall()
    assert got == [(1, 0.0), (2, 1.5), (3, 2.0)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "docs/steady-state.md): 1 of the 2 points that have one." in text
    assert "| ± over starts |" in text and "| launches: lowest–highest |" not in text
    assert "| 18.000 | ± 1.500 | -10.0 |" in text and "| 11.000 | — | +10.0 |" in text
    # every prediction one run: no column, no count
    (tmp_path / "one").mkdir()
    accuracy_report(measured_store(tmp_path / "one"), out)
    assert "over starts" not in out.read_text()


def test_accuracy_report_scores_the_mean_of_several_launches_against_the_spread_over_root_k(
    tmp_path,
):
    # N = 2 launched 4 times, mean 20 from 16 … 24; predicted 18 ± 1.5 over starts: one
    # launch 2 away would be within 2 sd (3), the mean of 4 is not (2 × 1.5 / √4 = 1.5)
    m, p = measured_point(2, 20.0, 18.0)
    m |= {"runs": 4, "run_steps_per_s": [16.0, 18.0, 22.0, 24.0]}
    p["steps_per_s_std"] = 1.5
    db = measured_store(tmp_path, [(m, p), measured_point(1, 10.0, 11.0)])
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT workers, measured_run_steps_per_s FROM validation ORDER BY workers"
        ).fetchall()
    assert got == [(1, None), (2, [16.0, 18.0, 22.0, 24.0])]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "docs/steady-state.md): 0 of the 1 points that have one." in text
    assert "| launches: lowest–highest |" in text and "| 4: 16.000–24.000 | 18.000 |" in text
    assert "the mean of its k launches" in text


def test_validation_view_and_report_show_a_steady_points_replay(tmp_path):
    """A replay shard (rule replay_testbed) joins its point in the view: measured 20,
    predicted 18 (−10 %), replayed from the measured phases 21 (+5 %); a skipped
    replay and points without one show nothing."""
    one, two = measured_point(1, 10.0, 11.0), measured_point(2, 20.0, 18.0)
    two[0]["phase_distance"], two[1]["phase_distance"] = 0.22, 0.04
    key = {"model": "LeNet5", "hardware": "cpu", "network": "n", "mode": "async"}
    key |= {"policy": "tf_default", "workers": 2}
    ok = {**key, "replay_status": "ok", "replay_reason": "", "replay_after_step": 3}
    ok |= {"replay_offsets_s": [[0.0, 0.7]], "replay_steps_per_s": 21.0}
    ok |= {"replay_phase_distance": 0.2}
    skipped = {**key, "workers": 1, "replay_status": "skipped", "replay_reason": "one worker"}
    db = measured_store(tmp_path, [one, two], [ok, skipped])
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(
            "SELECT workers, error_pct, replayed_steps_per_s, replayed_error_pct, "
            "replayed_phase_distance FROM validation ORDER BY workers"
        ).fetchall()
    finally:
        con.close()
    assert got[0] == (1, pytest.approx(10.0), None, None, None)
    assert got[1] == (2, pytest.approx(-10.0), 21.0, pytest.approx(5.0), 0.2)
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "## Replays from the measured phases" in text
    assert "| LeNet5 | n | tf_default | 2 | 20.000 | 18.000 | -10.0 | 21.000 | +5.0 |" in text
    assert "| 0.22 / 0.04 / 0.20 |" in text
    # a store without replays has no such section
    (tmp_path / "old").mkdir()
    accuracy_report(measured_store(tmp_path / "old"), out)
    assert "Replays" not in out.read_text()


def phase_pair() -> tuple[dict, dict]:
    """A steady pair, two launches: 40 s in phase (2 s steps, 1 step/s) and about
    20 s alternating (1 s steps, 2 steps/s); the prediction's first run alternates
    and its pair run from every start phase gives 0.96 in phase and 2.1 alternating.
    Launch 2 counts up to its first worker's last step end (20 s), so the measured
    shares are 82 s and 41 s of stepping time: 2/3 in phase, 1/3 alternating."""
    a1 = [2.0 * k for k in range(-2, 21)]
    launch1 = [a1, [t + 0.1 for t in a1]]
    a2 = [float(k) for k in range(-2, 21)]
    launch2 = [a2, [t + 0.5 for t in a2]]
    m, p = measured_point(2, 1.4, 1.9)
    m |= {"protocol": "steady", "window_s": 40.0, "step_end_times": launch1}
    m |= {"runs": 2, "run_step_end_times": [launch1, launch2]}
    p |= {"protocol": "steady", "window_s": 20.0, "step_end_times": launch2}
    p["steps_per_s_by_phase"] = [0.96, None, None, None, 2.1]
    return m, p


def test_accuracy_report_splits_a_steady_pair_by_phase(tmp_path):
    m, p = phase_pair()
    db = measured_store(tmp_path, [measured_point(1, 1.0, 1.0), (m, p)])
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "## Throughput by phase (N = 2)" in text
    assert "| LeNet5 | n | tf_default | 2 | 67 / 0 | 0 / 0 | 0 / 0 | 0 / 0 | 33 / 100 |" in text
    # the measured phases at the simulated rates: 2/3 × 0.96 + 1/3 × 2.1 = 1.34
    assert "| 1 / 0.96 | — / — | — / — | — / — | 2 / 2.1 | 1.34 |" in text
    # without the pair run from every start phase: the first run's rates, and no
    # price for the phases it never stepped at
    p.pop("steps_per_s_by_phase")
    (tmp_path / "old").mkdir()
    accuracy_report(measured_store(tmp_path / "old", [(m, p)]), out)
    text = out.read_text()
    assert "| 1 / — | — / — | — / — | — / — | 2 / 2 | — |" in text
    # a store without steady pairs has no such section
    accuracy_report(measured_store(tmp_path / "old"), out)
    assert "by phase" not in out.read_text()


def test_accuracy_report_shows_four_workers_splitting_into_groups(tmp_path):
    # measured: two pairs taking turns (phase 0, spread 0.5); simulated: one group
    # 0.1 s apart in turn (phase 0.05, spread 0.15 of its 2 s step)
    ends = [2.0 * k for k in range(-2, 21)]
    m, p = measured_point(4, 2.0, 1.8)
    m |= {"protocol": "steady", "window_s": 40.0}
    m["step_end_times"] = [ends, ends, [t + 1.0 for t in ends], [t + 1.0 for t in ends]]
    p |= {"protocol": "steady", "window_s": 40.0}
    p["step_end_times"] = [[t + 0.1 * k for t in ends] for k in range(4)]
    two = phase_pair()  # a pair has no row here: its phase is its spread
    db = measured_store(tmp_path, [measured_point(1, 1.0, 1.0), two, (m, p)])
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "## Groups (N ≥ 3)" in text
    assert "| LeNet5 | n | tf_default | 4 | -10.0 | 0.00 / 0.05 | 0.50 / 0.15 |" in text
    assert "| LeNet5 | n | tf_default | 2 | +" not in text.split("## Groups")[1]
    # a store without such points has no such section
    (tmp_path / "old").mkdir()
    accuracy_report(measured_store(tmp_path / "old", [two]), out)
    assert "Groups" not in out.read_text()


def test_validation_page_splits_a_steady_pair_by_phase(tmp_path, pages):
    m, p = phase_pair()
    validation = pages(measured_store(tmp_path, [measured_point(1, 1.0, 1.0), (m, p)]))[
        "validation"
    ]
    _, _, _, phases = validation.update_validation("LeNet5", "async")
    heading, _, graph, table = phases
    assert heading.children == "Throughput by phase (N = 2)"
    shares = [t for t in graph.figure.data if t.type == "bar"]
    assert [t.name for t in shares] == ["measured", "simulated"]
    assert [round(y) for y in shares[0].y] == [67, 0, 0, 0, 33]
    assert [round(y) for y in shares[1].y] == [0, 0, 0, 0, 100]
    rates = [t for t in graph.figure.data if t.type == "scatter"]
    assert list(rates[0].y) == [pytest.approx(1.0), None, None, None, pytest.approx(2.0)]
    assert list(rates[1].y) == [0.96, None, None, None, 2.1]
    # measured 1.4, predicted 1.9 (+36 %), priced 2/3 × 0.96 + 1/3 × 2.1 = 1.34 (−4 %)
    assert cells(table) == [["n", "tf_default", "1.4", "1.9 (+36 %)", "1.34 (-4 %)"]]
    # another model, or a mode without phases: no section
    assert validation.phase_section("VGG16", "async", validation.rows("VGG16")) == []
    assert validation.phase_section("LeNet5", "sync_ps", validation.rows("LeNet5")) == []


def test_validation_view_and_report_name_the_steady_points_still_moving(tmp_path):
    # N = 1: flat batches; N = 2: climbing 8, 9, ..., 12 (+40 % of 10 across, exact
    # line); N = 3: 29, 31, 29, 31, 30 (no trend); N = 4: climbing but launched twice,
    # so its batches are two launches' and the view gives none; N = 5: episodes
    pts = []
    for n, windows, runs, protocol in (
        (1, [10.0, 10.0, 10.0], 1, "steady"),
        (2, [8.0, 9.0, 10.0, 11.0, 12.0], 1, "steady"),
        (3, [29.0, 31.0, 29.0, 31.0, 30.0], 1, "steady"),
        (4, [1.0, 2.0, 3.0, 4.0], 2, "steady"),
        (5, [1.0, 2.0, 3.0, 4.0], 1, "episodes"),
    ):
        m, p = measured_point(n, sum(windows) / len(windows), 10.0)
        m |= {"protocol": protocol, "runs": runs, "steps_per_s_windows": windows}
        if protocol == "steady":
            m |= {"converged": False, "steps_per_s_half_width": 1.0}
        pts.append((m, p))
    db = measured_store(tmp_path, pts)
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT workers, measured_batch_steps_per_s FROM validation ORDER BY workers"
        ).fetchall()
    assert [g[1] is not None for g in got] == [True, True, True, False, False]
    assert got[1][1] == [8.0, 9.0, 10.0, 11.0, 12.0]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "6 % or more across the window): 1 of 3 single-launch steady points: " in text
    assert "LeNet5 n N = 2 (+40 %)." in text  # slope 1 * 4 batches / mean 10
    # a store of episodes only has no such line
    (tmp_path / "episodes").mkdir()
    accuracy_report(measured_store(tmp_path / "episodes"), out)
    assert "Still moving" not in out.read_text()


def test_accuracy_report_warns_of_points_with_an_input_taken_under_cpu_steal(tmp_path):
    # N = 1 quiet; N = 2's measurement 3 % (under the 5 % mark) but its calibrations
    # 8 %; N = 3's measurement 12 %
    one, two, three = (measured_point(n, 10.0 * n, 10.0 * n) for n in (1, 2, 3))
    one[0]["cpu_steal"], two[0]["cpu_steal"], three[0]["cpu_steal"] = 0.0, 0.03, 0.12
    one[1]["calibration_cpu_steal"] = two[1]["calibration_cpu_steal"] = 0.08
    one[1]["calibration_cpu_steal"] = 0.01
    db = measured_store(tmp_path, [one, two, three])
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute("SELECT workers, max_cpu_steal FROM validation ORDER BY 1").fetchall()
    assert got == [(1, 0.01), (2, 0.08), (3, 0.12)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text().replace("\n", " ")
    assert "Warning: 2 points had an input taken while the hypervisor stole more than 5 %" in text
    assert "LeNet5 n N = 2 (3 / — / 8 %); LeNet5 n N = 3 (12 / — / — %)." in text
    (tmp_path / "quiet").mkdir()
    accuracy_report(measured_store(tmp_path / "quiet", [one]), out)
    assert "hypervisor stole" not in out.read_text()


def test_validation_view_report_and_page_weigh_each_error_against_the_measurements_interval(
    tmp_path, pages
):
    # N = 1: 10 (± 0.1, rule met) against 11: 10 % off, 9 % beyond the interval;
    # N = 2: 20 (± 3, cut at max_s) against 18: 10 % off, inside the interval;
    # N = 3: 30 (± 1.5, cut) against 24: 20 % off, (6 − 1.5) / 30 = 15 % beyond
    pts = []
    for n, meas, pred, converged, half in (
        (1, 10.0, 11.0, True, 0.1),
        (2, 20.0, 18.0, False, 3.0),
        (3, 30.0, 24.0, False, 1.5),
    ):
        m, p = measured_point(n, meas, pred)
        m |= {"protocol": "steady", "converged": converged, "steps_per_s_half_width": half}
        pts.append((m, p))
    db = measured_store(tmp_path, pts)
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT workers, measured_converged, round(ape_beyond_interval_pct, 9) "
            "FROM validation ORDER BY workers"
        ).fetchall()
    assert got == [(1, True, 9.0), (2, False, 0.0), (3, False, 15.0)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    assert "met before `steady.max_s`: 1 point, MAPE 10.0 %, max error 10.0 %" in text
    assert (
        "cut at `steady.max_s` before it held: 2 points, MAPE 15.0 %, max error 20.0 % "
        "(their intervals ± 5.0–15.0 %, median 10.0 %)"
    ) in text
    assert "(`ape_beyond_interval_pct`): MAPE 8.0 %, max 15.0 %" in text
    assert "| 10.000 | — | ± 1.0 % | 11.000 |" in text  # no std recorded: —
    assert "| ± 15.0 % cut |" in text and "| ± 5.0 % cut |" in text
    # the validation page's table: the same beside the network's MAPE
    _, table, _, _ = pages(db)["validation"].update_validation("LeNet5", "async")
    assert [c.children for c in table.children[1].children][-1] == "8.0 / 15.0"
    # episode points have no interval: no error beyond it, no column, no line
    (tmp_path / "episodes").mkdir()
    episodes = measured_store(tmp_path / "episodes")
    with duckdb.connect(str(episodes), read_only=True) as con:
        got = con.execute("SELECT ape_beyond_interval_pct FROM validation").fetchall()
    assert got == [(None,), (None,)]
    accuracy_report(episodes, out)
    assert "interval" not in out.read_text()


def test_accuracy_report_sets_the_cpu_per_step_of_busy_points_beside_the_models(tmp_path):
    # N = 2 kept the cores 90 % busy: 10 + 4 + 1 ms measured per step; N = 1 at 40 % is
    # not listed; N = 3 at 80 % has no split (a store row written before it) and is not
    one, two, three = (measured_point(n, 10.0 * n, 10.0 * n + 1) for n in (1, 2, 3))
    one[0].update({"cpu_busy": 0.4, "worker_cpu_s_per_step": 0.01})
    one[0].update({"ps_cpu_s_per_step": 0.004, "other_cpu_s_per_step": 0.001})
    two[0].update({"cpu_busy": 0.9, "worker_cpu_s_per_step": 0.01})
    two[0].update({"ps_cpu_s_per_step": 0.004, "other_cpu_s_per_step": 0.001})
    three[0].update({"cpu_busy": 0.8})
    db = measured_store(tmp_path, [one, two, three])
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute(
            "SELECT workers, round(measured_cpu_s_per_step, 6) FROM validation ORDER BY workers"
        ).fetchall()
    assert got == [(1, 0.015), (2, 0.015), (3, None)]
    out = tmp_path / "accuracy.md"
    accuracy_report(db, out)
    text = out.read_text()
    section = text[text.index("## CPU per step") :]
    assert "| LeNet5 | n | tf_default | 2 | 90 | 15 (10 + 4 + 1) | — | +5.0 |" in section
    assert "| 1 | 40 |" not in section and "| 3 | 80 |" not in section
    # a store where no point came near the cores has no such section
    (tmp_path / "quiet").mkdir()
    accuracy_report(measured_store(tmp_path / "quiet", [one]), out)
    assert "## CPU per step" not in out.read_text()
