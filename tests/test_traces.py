"""Parsing and normalizing real TensorFlow traces; bad traces fail cleanly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from sgdsim.errors import TraceError
from sgdsim.traces import load_run_metadata, normalize_profile, parse_step


def test_profile_holds_raw_traces_and_metadata(lenet_profile: Path):
    meta = json.loads((lenet_profile / "meta.json").read_text())
    assert meta["tf_version"].startswith("2.21")
    assert meta["spec"]["model"] == "LeNet5"
    # LeNet5 at 32x32x3, 10 classes: conv 5x5x3x6+6, conv 5x5x6x16+16, fc 400x120+120,
    # 120x84+84, 84x10+10 parameters
    assert meta["param_count"] == (456 + 2416 + 48120 + 10164 + 850)
    assert len(meta["untraced_step_s"]) == 3 and len(meta["traced_step_s"]) == 2
    assert sorted(p.name for p in lenet_profile.glob("trace_*.pb")) == ["trace_0.pb", "trace_1.pb"]


def test_every_variable_is_pulled_and_pushed_once_per_step(lenet_profile: Path):
    md = load_run_metadata(lenet_profile / "trace_0.pb")
    st = parse_step(md, 0)
    variables = json.loads((lenet_profile / "variables.json").read_text())
    pulls = st.transfers.filter(pl.col("direction") == "pull")
    pushes = st.transfers.filter(pl.col("direction") == "push")
    trainable = [v for v in variables if v["trainable"]]
    total = sum(v["bytes"] for v in trainable)  # the int64 global step stays on the PS
    assert pulls["bytes"].sum() == total
    # every gradient is pushed; the learning rate and global step add a few bytes
    assert pushes.filter(pl.col("bytes") > 16)["bytes"].sum() == total
    assert st.ops.filter(pl.col("role") == "ps")["op_type"].str.contains(
        "ResourceApply"
    ).sum() == len(trainable)
    assert (st.ops["dur_us"] >= 0).all() and (st.transfers["start_us"] >= 0).all()


def test_normalize_writes_tables_and_a_calibrated_workload(lenet_profile: Path, tmp_path: Path):
    normalize_profile(lenet_profile, tmp_path / "tables", tmp_path / "w.json")
    prof = pl.read_parquet(tmp_path / "tables" / "profile.parquet").row(0, named=True)
    params = pl.read_parquet(tmp_path / "tables" / "params.parquet")
    trainable = params.filter("trainable")
    assert trainable["bytes"].sum() == prof["param_bytes"] == 4 * prof["param_count"]
    # forward first-use follows the layer order of the sequential LeNet5
    order = ["conv1/kernel", "conv2/kernel", "fc1/kernel", "fc2/kernel", "logits/kernel"]
    firsts = dict(params.select("variable", "first_consumer_op").iter_rows())
    ops = pl.read_parquet(tmp_path / "tables" / "ops.parquet").filter(pl.col("step") == 0)
    start = dict(ops.select("name", "start_us").iter_rows())
    assert [start[firsts[v]] for v in order] == sorted(start[firsts[v]] for v in order)
    assert trainable["gradient_op"].str.starts_with("gradients/").all()
    # per-parameter timing: first use grows along the layers in the forward pass,
    # gradients become ready in reverse layer order in the backward pass
    first = dict(params.select("variable", "first_use_us").iter_rows())
    ready = dict(params.select("variable", "gradient_ready_us").iter_rows())
    assert [first[v] for v in order] == sorted(first[v] for v in order)
    assert [ready[v] for v in order] == sorted((ready[v] for v in order), reverse=True)
    assert all(ready[v] > first[v] for v in order)
    assert (trainable["update_us"] >= 0).all() and (trainable["update_iqr_us"] >= 0).all()
    steps = pl.read_parquet(tmp_path / "tables" / "steps.parquet")
    assert steps.height == prof["traced_steps"] == 2
    assert (steps["worker_busy_us"] <= steps["span_us"]).all()
    assert (steps["pull_bytes"] == prof["param_bytes"]).all()
    assert 0 < prof["worker_busy_s"] <= prof["trace_span_s"]
    assert 0 < prof["tracing_factor"] < 1.5
    assert (tmp_path / "w.json").is_file()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "empty"),
        (None, "not a valid TensorFlow RunMetadata|no step stats"),  # truncated real trace
        (b"\x0a\x05hello world, not a protobuf \xff\xff\xff", "not a valid|no step stats"),
    ],
)
def test_bad_trace_fails_with_file_name_and_leaves_nothing(
    lenet_profile: Path, tmp_path: Path, content: bytes | None, match: str
):
    bad = tmp_path / "profile"
    shutil.copytree(lenet_profile, bad)
    trace = bad / "trace_1.pb"
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2] if content is None else content)
    out = tmp_path / "tables"
    with pytest.raises(TraceError, match=match) as e:
        normalize_profile(bad, out, tmp_path / "w.json")
    assert "trace_1.pb" in str(e.value)
    assert not (tmp_path / "w.json").exists()
    assert not out.exists() or not any(out.iterdir())


def test_missing_metadata_names_the_file(tmp_path: Path):
    with pytest.raises(TraceError, match=r"meta\.json.*profile stage"):
        normalize_profile(tmp_path, tmp_path / "t", tmp_path / "w.json")
