"""Importing external traces, and the GPU layout of step stats."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from test_zoo import pushes_map_to_their_own_pulls

from sgdsim.errors import StoreError, TraceError
from sgdsim.simulation import Workload
from sgdsim.store import imported_tables_dirs, publish
from sgdsim.traces import normalize_profile, parse_step
from sgdsim.traces.importer import import_run_metadata

PS = "/job:ps/replica:0/task:0/device:CPU:0"
WCPU = "/job:worker/replica:0/task:0/device:CPU:0"
GPU = "/job:worker/replica:0/task:0/device:GPU:0"


def test_import_recovers_variables_from_the_partition_graphs(lenet_profile: Path, tmp_path: Path):
    meta = json.loads((lenet_profile / "meta.json").read_text())
    (tmp_path / "m.json").write_text(
        json.dumps({"untraced_step_s": meta["untraced_step_s"], "batch_size": 8})
    )
    tables = import_run_metadata(
        [lenet_profile / "trace_0.pb", lenet_profile / "trace_1.pb"],
        "MyLeNet",
        "cluster",
        tmp_path / "imp",
        tmp_path / "m.json",
    )
    prof = pl.read_parquet(tables / "profile.parquet").row(0, named=True)
    assert prof["profile_id"] == "cluster/MyLeNet"
    assert prof["param_count"] == meta["param_count"]
    params = pl.read_parquet(tables / "params.parquet").filter("trainable")
    assert params["bytes"].sum() == 4 * meta["param_count"]
    assert params["update_op"].str.contains("ResourceApplyGradientDescent").all()
    assert (tmp_path / "imp" / "workloads" / "cluster" / "MyLeNet.json").is_file()
    assert prof["replay_step_s"] > 0
    # P3's pull after update works on imported traces too
    w = Workload.load(str(tmp_path / "imp" / "workloads" / "cluster" / "MyLeNet.json"))
    pushes_map_to_their_own_pulls(tables, w)


@pytest.mark.parametrize(
    "content", [b"", b"\x08\x96\x01 definitely not a RunMetadata \xff\xfe", None]
)
def test_import_of_a_bad_file_names_it_and_writes_nothing(
    lenet_profile: Path, tmp_path: Path, content
):
    bad = tmp_path / "bad.pb"
    data = (lenet_profile / "trace_0.pb").read_bytes()
    bad.write_bytes(data[: len(data) // 3] if content is None else content)
    with pytest.raises(TraceError, match=r"bad\.pb"):
        import_run_metadata([bad], "X", "Y", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgdsim.cli",
            "import",
            str(bad),
            "--model",
            "X",
            "--hardware",
            "Y",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "bad.pb" in r.stderr
    assert not (tmp_path / "out").exists()


def gpu_step_stats():
    """RunMetadata of one step of a GPU worker, built to TensorFlow's documented layout."""
    from tensorflow.core.framework import step_stats_pb2
    from tensorflow.core.protobuf import config_pb2

    md = config_pb2.RunMetadata()

    def node(dev, name, label, start, dur, out_bytes=None):
        ns = dev.node_stats.add(
            node_name=name, timeline_label=label, all_start_micros=start, all_end_rel_micros=dur
        )
        if out_bytes is not None:
            ns.output.add().tensor_description.allocation_description.requested_bytes = out_bytes
        return ns

    ps = md.step_stats.dev_stats.add(device=PS)
    node(ps, "w/read", "w/read = ReadVariableOp(w)", 1000, 5)
    node(ps, "RecvTensor", f"[1024B] [1Gb/s] edge_2_grad from {GPU} to {PS}", 1400, 30, 1024)
    node(ps, "update", "update = ResourceApplyGradientDescent(w, lr, grad_S9)", 1440, 12)
    cpu = md.step_stats.dev_stats.add(device=WCPU)
    node(cpu, "RecvTensor", f"[1024B] [1Gb/s] edge_1_w/read from {PS} to {WCPU}", 1010, 40, 1024)
    gpu = md.step_stats.dev_stats.add(device=GPU)
    node(gpu, "conv", "conv = Conv2D(x, w/read_S1)", 1060, 3)  # launch: 3 µs on the CPU thread
    node(gpu, "grad", "grad = Conv2DBackpropFilter(x, conv)", 1070, 2)
    allk = md.step_stats.dev_stats.add(device=GPU + "/stream:all")
    node(allk, "conv", "conv_kernel", 1065, 200)  # the kernels really ran 200 µs ...
    node(allk, "grad", "grad_kernel", 1270, 100)  # ... and 100 µs
    s7 = md.step_stats.dev_stats.add(device=GPU + "/stream:7")
    node(s7, "conv", "conv_kernel", 1065, 200)  # duplicate per-stream record
    g = md.partition_graphs.add()
    r = g.node.add(name="w/read_S1", op="_Recv", device=GPU)
    r.attr["tensor_name"].s = b"edge_1_w/read"
    snd = g.node.add(name="w/read_S0", op="_Send", device=PS, input=["w/read"])
    snd.attr["tensor_name"].s = b"edge_1_w/read"
    r2 = g.node.add(name="grad_S9", op="_Recv", device=PS)
    r2.attr["tensor_name"].s = b"edge_2_grad"
    s2 = g.node.add(name="grad_S8", op="_Send", device=GPU, input=["grad"])
    s2.attr["tensor_name"].s = b"edge_2_grad"
    assert isinstance(md.step_stats, step_stats_pb2.StepStats)
    return md


def test_gpu_worker_op_times_come_from_stream_all():
    st = parse_step(gpu_step_stats(), 0)
    ops = {r["name"]: r for r in st.ops.iter_rows(named=True)}
    t0 = 1000
    assert ops["conv"]["dur_us"] == 200 and ops["conv"]["start_us"] == 1065 - t0
    assert ops["grad"]["dur_us"] == 100 and ops["grad"]["role"] == "worker"
    assert st.ops.filter(pl.col("name") == "conv").height == 1  # stream records not duplicated
    pulls = st.transfers.filter(pl.col("direction") == "pull").row(0, named=True)
    assert (
        pulls["recv_node"] == "w/read_S1" and pulls["src_op"] == "w/read" and pulls["bytes"] == 1024
    )
    push = st.transfers.filter(pl.col("direction") == "push").row(0, named=True)
    assert push["src_op"] == "grad" and push["recv_node"] == "grad_S9"


def import_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sgdsim import`` as a user would, in ``cwd`` (default --out results/imported)."""
    return subprocess.run(
        [sys.executable, "-m", "sgdsim.cli", "import", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_imported_profile_is_published_and_half_written_imports_are_not(
    lenet_profile: Path, tmp_path: Path
):
    meta = json.loads((lenet_profile / "meta.json").read_text())
    (tmp_path / "m.json").write_text(json.dumps({"untraced_step_s": meta["untraced_step_s"]}))
    traces = [str(lenet_profile / "trace_0.pb"), str(lenet_profile / "trace_1.pb")]
    r = import_cli(
        tmp_path, *traces, "--model", "MyLeNet", "--hardware", "cluster", "--meta", "m.json"
    )
    assert r.returncode == 0, r.stderr
    assert "loads it into results/sgdsim.duckdb" in r.stdout
    imported = tmp_path / "results" / "imported" / "tables" / "cluster" / "MyLeNet"
    configured = tmp_path / "results" / "tables" / "cpu" / "LeNet5"
    normalize_profile(lenet_profile, configured, tmp_path / "results" / "workloads" / "w.json")
    # an import that crashed or is still being written (temporary name), and an
    # incomplete directory, are never loaded
    for name in (".Half.tmp-999", "Partial"):
        (imported.parent / name).mkdir()
        shutil.copy(imported / "profile.parquet", imported.parent / name)
    dirs = imported_tables_dirs(tmp_path / "results" / "imported")
    assert dirs == [imported]

    db = tmp_path / "results" / "sgdsim.duckdb"
    publish(db, [configured], [], imported_dirs=dirs)
    con = duckdb.connect(str(db), read_only=True)
    assert dict(con.execute("SELECT profile_id, source FROM profiles").fetchall()) == {
        "cpu/LeNet5": "profile",
        "cluster/MyLeNet": "imported",
    }
    got = con.execute(
        "SELECT count(*), sum(bytes), count(DISTINCT ps_task) FROM params "
        "WHERE profile_id = 'cluster/MyLeNet' AND trainable"
    ).fetchone()
    assert got == (10, 4 * meta["param_count"], 1)
    assert (
        con.execute(
            "SELECT count(*) FROM transfers WHERE profile_id = 'cluster/MyLeNet'"
        ).fetchone()[0]
        == con.execute("SELECT count(*) FROM transfers WHERE profile_id = 'cpu/LeNet5'").fetchone()[
            0
        ]
    )
    con.close()

    # an import under a configured profile's id is refused, naming both; the store stays
    clash = import_run_metadata(traces, "LeNet5", "cpu", tmp_path / "results" / "imported")
    with pytest.raises(StoreError, match=r"'cpu/LeNet5' is also in .*re-import"):
        publish(db, [configured], [], imported_dirs=imported_tables_dirs(clash.parents[2]))
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM profiles").fetchone()[0] == 2
    con.close()


def test_a_failed_reimport_leaves_the_earlier_import_whole(
    lenet_profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = tmp_path / "imp"
    tables = import_run_metadata([lenet_profile / "trace_0.pb"], "M", "H", root)
    before = {f.name: f.read_bytes() for f in tables.iterdir()}
    write = pl.DataFrame.write_parquet

    def crash_on_ops(df: pl.DataFrame, file: Any, *a: Any, **kw: Any) -> None:
        if Path(file).name == "ops.parquet":
            raise OSError("disk full")
        write(df, file, *a, **kw)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", crash_on_ops)
    with pytest.raises(OSError, match="disk full"):
        import_run_metadata([lenet_profile / "trace_1.pb"], "M", "H", root)
    assert imported_tables_dirs(root) == [tables]
    assert {f.name: f.read_bytes() for f in tables.iterdir()} == before
    assert [p.name for p in root.rglob(".*")] == []  # no temporary left behind
