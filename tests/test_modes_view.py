"""View ``mode_comparison`` and the accuracy report by mode, on real stores built
from Parquet files written here (expected ratios worked out by hand)."""

from __future__ import annotations

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
