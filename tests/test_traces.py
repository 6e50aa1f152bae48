"""Parsing and normalizing real TensorFlow traces; bad traces fail cleanly."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from test_zoo import one_pull_and_one_push_per_variable, pushes_map_to_their_own_pulls

from sgdsim.errors import TraceError
from sgdsim.simulation import Network, Workload, simulate_async
from sgdsim.traces import load_run_metadata, normalize_profile, parse_step, transfer_records


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


def test_transfer_records_spot_a_trace_that_lost_its_recvtensor_stats(lenet_profile_2ps: Path):
    # TensorFlow sometimes returns a PS task's step stats without its RecvTensor
    # records (CI lost one shard's five gradient pushes once); the profiler retakes
    # such a step, which needs the check to see the loss in a real trace.
    for trace in sorted(lenet_profile_2ps.glob("trace_*.pb")):
        md = load_run_metadata(trace)
        recorded, expected = transfer_records(md)
        assert recorded == expected == parse_step(md, 0).transfers.height
        shard1 = next(d for d in md.step_stats.dev_stats if "/job:ps/replica:0/task:1" in d.device)
        kept = [ns for ns in shard1.node_stats if ns.node_name != "RecvTensor"]
        lost = len(shard1.node_stats) - len(kept)
        assert lost > 0  # gradient pushes into shard 1
        del shard1.node_stats[:]
        shard1.node_stats.extend(kept)
        assert transfer_records(md) == (expected - lost, expected)


def test_normalize_writes_tables_and_a_calibrated_workload(lenet_profile: Path, tmp_path: Path):
    normalize_profile(lenet_profile, tmp_path / "tables", tmp_path / "w.json")
    prof = pl.read_parquet(tmp_path / "tables" / "profile.parquet").row(0, named=True)
    params = pl.read_parquet(tmp_path / "tables" / "params.parquet")
    trainable = params.filter("trainable")
    assert trainable["bytes"].sum() == prof["param_bytes"] == 4 * prof["param_count"]
    assert prof["ps_tasks"] == 1 and (params["ps_task"] == 0).all()
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
    # the workload carries each untraced step over its run's mean
    meta = json.loads((lenet_profile / "meta.json").read_text())
    ratios = Workload.load(str(tmp_path / "w.json")).step_scale
    assert ratios is not None and len(ratios) == len(meta["untraced_step_s"])
    assert statistics.fmean(ratios) == pytest.approx(1.0)


def test_step_ratios_are_each_step_over_its_runs_mean():
    from sgdsim.traces.calibrate import step_time_ratios

    # two runs of two steps: run 2 is 10x slower, which stays out of the ratios
    assert step_time_ratios([1.0, 3.0, 10.0, 30.0], runs=2) == [0.5, 1.5, 0.5, 1.5]
    assert step_time_ratios([1.0, 3.0, 2.0], runs=2) == [0.5, 1.5, 1.0]  # one group
    with pytest.raises(TraceError, match="untraced_step_s"):
        step_time_ratios([1.0, 0.0])


def test_each_gradient_push_points_at_the_pull_of_its_variable(lenet_profile: Path, tmp_path: Path):
    normalize_profile(lenet_profile, tmp_path / "tables", tmp_path / "w.json")
    w = Workload.load(str(tmp_path / "w.json"))
    pushes_map_to_their_own_pulls(tmp_path / "tables", w)
    # the learning rate is pushed too, but carries no variable
    assert (w.pushes_param == -1).sum() == len(w.push_bytes) - 10


def test_each_traced_steps_pull_order_is_kept_in_arrival_order(lenet_profile: Path, tmp_path: Path):
    normalize_profile(lenet_profile, tmp_path / "tables", tmp_path / "w.json")
    w = Workload.load(str(tmp_path / "w.json"))
    rows = w.pull_order_rows
    t = pl.read_parquet(tmp_path / "tables" / "transfers.parquet").filter(
        pl.col("direction") == "pull"
    )
    steps = sorted(set(t["step"].to_list()))
    assert rows is not None and rows.shape == (len(steps), len(w.pull_bytes))
    # the workload's pulls are in median arrival order: tensor names in that order
    names = (
        t.group_by("tensor")
        .agg((pl.col("start_us") + pl.col("dur_us")).median().alias("end"))
        .sort("end", "tensor")["tensor"]
        .to_list()
    )
    for step, row in zip(steps, rows, strict=True):
        ends = dict(
            t.filter(pl.col("step") == step)
            .select("tensor", pl.col("start_us") + pl.col("dur_us"))
            .iter_rows()
        )
        arrived = [ends[names[i]] for i in row]
        assert sorted(row.tolist()) == list(range(len(names)))
        assert arrived == sorted(arrived)


def test_p3_on_a_real_profile_pulls_after_update_and_is_not_slower_than_fifo_random(
    lenet_profile: Path, tmp_path: Path
):
    """On a slow network the real LeNet5 step is communication bound: P3's pull after
    update overlaps the next step's pulls with this step's pushes (both directions of
    the full-duplex NICs), so it is not slower than fifo_random on average over seeds,
    and faster than P3 without push_param (pulls at step start)."""
    import dataclasses

    normalize_profile(lenet_profile, tmp_path / "tables", tmp_path / "w.json")
    w = Workload.load(str(tmp_path / "w.json"))
    unknown = dataclasses.replace(w, push_param=None)
    net = Network.from_bits(10e6, 1e-4, "10Mbit")

    def mean_rate(workload: Workload, policy: str, workers: int) -> float:
        return float(
            np.mean(
                [
                    simulate_async(workload, net, workers, 12, 2, policy=policy, seed=s).steps_per_s
                    for s in range(4)
                ]
            )
        )

    for n in (1, 4):
        p3 = mean_rate(w, "p3", n)
        assert p3 >= mean_rate(w, "fifo_random", n)
        assert p3 > mean_rate(unknown, "p3", n)


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


def placed_by_tensorflow(md: Any) -> dict[str, tuple[int, int]]:
    """Variable -> (PS task, bytes) as TensorFlow placed it: the VarHandleOp nodes of the
    partition graphs the PS tasks ran (not sgdsim's variables.json)."""
    import tensorflow as tf

    placed = {}
    for g in md.partition_graphs:
        for nd in g.node:
            if nd.op == "VarHandleOp":
                task = re.fullmatch(r"/job:ps/replica:0/task:(\d+)/device:CPU:0", nd.device)
                assert task, nd.device
                n = math.prod(d.size for d in nd.attr["shape"].shape.dim)
                size = tf.dtypes.as_dtype(nd.attr["dtype"].type).size
                placed[nd.name] = (int(task.group(1)), n * size)
    return placed


def test_two_ps_shards_hold_the_variables_where_tensorflow_placed_them(
    lenet_profile_2ps: Path, tmp_path: Path
):
    tables = tmp_path / "tables"
    normalize_profile(lenet_profile_2ps, tables, tmp_path / "w.json")
    prof = pl.read_parquet(tables / "profile.parquet").row(0, named=True)
    params = pl.read_parquet(tables / "params.parquet")
    assert prof["ps_tasks"] == 2 and prof["profile_id"] == "cpu2ps/LeNet5"
    placed = placed_by_tensorflow(load_run_metadata(lenet_profile_2ps / "trace_0.pb"))
    assert dict(params.select("variable", "ps_task").iter_rows()) == {
        v: t for v, (t, _) in placed.items()
    }
    for k in range(1, prof["traced_steps"]):
        assert (
            placed_by_tensorflow(load_run_metadata(lenet_profile_2ps / f"trace_{k}.pb")) == placed
        )
    by_shard = {t: 0 for t, _ in placed.values()}
    for t, b in placed.values():
        by_shard[t] += b
    table = dict(params.group_by("ps_task").agg(pl.col("bytes").sum()).iter_rows())
    assert table == by_shard
    trainable = dict(
        params.filter("trainable").group_by("ps_task").agg(pl.col("bytes").sum()).iter_rows()
    )
    assert set(trainable) == {0, 1} and min(trainable.values()) > 0  # both shards carry params
    assert sum(trainable.values()) == prof["param_bytes"] == 4 * prof["param_count"]
    one_pull_and_one_push_per_variable(tables)

    # every transfer comes from / goes to the shard of its variable
    tr = pl.read_parquet(tables / "transfers.parquet")
    assert tr["ps_task"].null_count() == 0
    grads = params.filter("trainable").select("gradient_tensor", "ps_task")
    pushed = tr.join(grads, left_on="tensor", right_on="gradient_tensor", suffix="_var")
    assert pushed.height == prof["traced_steps"] * params.filter("trainable").height
    assert (pushed["ps_task"] == pushed["ps_task_var"]).all()
    for step in range(prof["traced_steps"]):
        pulls = tr.filter((pl.col("step") == step) & (pl.col("direction") == "pull"))
        assert dict(pulls.group_by("ps_task").agg(pl.col("bytes").sum()).iter_rows()) == trainable

    # the workload's shard arrays agree with the tables
    w = Workload.load(str(tmp_path / "w.json"))
    assert w.ps_tasks == 2
    step0 = tr.filter(pl.col("step") == 0)
    for j in (0, 1):
        assert w.pull_bytes[w.pulls_shard == j].sum() == trainable[j]
        pushes_j = step0.filter((pl.col("direction") == "push") & (pl.col("ps_task") == j))
        assert sorted(w.push_bytes[w.pushes_shard == j]) == sorted(pushes_j["bytes"].to_list())
    assert np.isin(w.pulls_shard, [0, 1]).all() and np.isin(w.pushes_shard, [0, 1]).all()


def test_profile_measures_cpu_per_step_and_the_rpc_round_trip(lenet_profile: Path, tmp_path: Path):
    meta = json.loads((lenet_profile / "meta.json").read_text())
    n = len(meta["untraced_step_s"])
    assert len(meta["worker_cpu_s"]) == n and len(meta["ps_cpu_s"]) == n
    # the worker computes every step: it used CPU; LeNet5 on one thread cannot use
    # more than (threads + gRPC's own threads) x wall time, so stay within 4 x wall
    for cpu, wall in zip(meta["worker_cpu_s"], meta["untraced_step_s"], strict=True):
        assert 0 < cpu < 4 * wall
    assert all(c > 0 for c in meta["ps_cpu_s"])  # the PS served pulls and pushes
    assert 0 <= meta["rpc_rtt_s"] < 0.1
    assert meta["node_cores"] >= 1
    normalize_profile(str(lenet_profile), str(tmp_path / "t"), str(tmp_path / "w.json"))
    w = Workload.load(str(tmp_path / "w.json"))
    assert w.worker_cpu_s == pytest.approx(statistics.median(meta["worker_cpu_s"]))
    assert w.ps_cpu_s == pytest.approx(statistics.median(meta["ps_cpu_s"]))
    assert w.rpc_rtt_s == pytest.approx(meta["rpc_rtt_s"]) and w.node_cores == meta["node_cores"]
    prof = pl.read_parquet(tmp_path / "t" / "profile.parquet")
    assert prof["worker_cpu_s"][0] == pytest.approx(w.worker_cpu_s)


def test_profile_times_each_traced_call_before_its_first_op_and_after_its_last(
    lenet_profile: Path, tmp_path: Path
):
    from sgdsim.profiling.worker import TRACED_PROBES

    meta = json.loads((lenet_profile / "meta.json").read_text())
    k = len(meta["traced_step_s"])
    assert len(meta["traced_dispatch_s"]) == k and len(meta["traced_return_s"]) == k
    # both parts lie inside the call (a few ms of clock reads' slack: time.time vs
    # perf_counter), and the ops' span fills the rest of it
    for d, r, wall in zip(
        meta["traced_dispatch_s"], meta["traced_return_s"], meta["traced_step_s"], strict=True
    ):
        assert min(d, r) > -1e-3 and d + r < wall
    assert len(meta["probe_dispatch_s"]) == TRACED_PROBES == len(meta["probe_return_s"])
    assert all(-1e-3 < x < 0.1 for x in meta["probe_dispatch_s"] + meta["probe_return_s"])
    assert 0 < meta["session_call_s"] < 0.1
    normalize_profile(str(lenet_profile), str(tmp_path / "t"), str(tmp_path / "w.json"))
    prof = pl.read_parquet(tmp_path / "t" / "profile.parquet").row(0, named=True)
    assert prof["dispatch_s"] == pytest.approx(statistics.median(meta["traced_dispatch_s"]))
    assert prof["return_s"] == pytest.approx(statistics.median(meta["traced_return_s"]))
    assert prof["probe_return_s"] == pytest.approx(statistics.median(meta["probe_return_s"]))
    assert prof["session_call_s"] == pytest.approx(meta["session_call_s"])


def test_step_window_is_the_first_start_and_last_end_of_any_device():
    from tensorflow.core.protobuf.config_pb2 import RunMetadata

    from sgdsim.traces.parse import step_window_us

    md = RunMetadata()
    worker, ps = md.step_stats.dev_stats.add(), md.step_stats.dev_stats.add()
    for dev, start, rel in ((worker, 1_000_050, 30), (worker, 1_000_020, 5), (ps, 1_000_010, 200)):
        ns = dev.node_stats.add()
        ns.all_start_micros, ns.all_end_rel_micros = start, rel
    assert step_window_us(md) == (1_000_010, 1_000_210)
    with pytest.raises(TraceError, match="no node stats"):
        step_window_us(RunMetadata())
