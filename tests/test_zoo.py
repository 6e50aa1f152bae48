"""Every zoo model profiles for real on CPU and normalizes consistently."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import small_spec

from sgdsim.models import MODEL_NAMES, min_image_size
from sgdsim.profiling import run_profile
from sgdsim.simulation import Workload
from sgdsim.traces import normalize_profile
from sgdsim.traces.calibrate import match_pushes_to_pulls


def profile_and_normalize(tmp: Path, model: str, **kw) -> Path:
    spec = small_spec(
        model=model,
        batch_size=2,
        image_size=max(32, min_image_size(model)),
        warmup_steps=1,
        timed_steps=1,
        timeout_s=600,
        **kw,
    )
    prof = run_profile(spec, tmp / "profile")
    normalize_profile(prof, tmp / "tables", tmp / "w.json")
    return tmp / "tables"


def one_pull_and_one_push_per_variable(tables: Path) -> None:
    params = pl.read_parquet(tables / "params.parquet").filter("trainable")
    ops = pl.read_parquet(tables / "ops.parquet")
    tr = pl.read_parquet(tables / "transfers.parquet").filter(pl.col("bytes") > 0)
    reads = ops.filter((pl.col("role") == "ps") & (pl.col("op_type") == "ReadVariableOp"))
    read_of = reads.select("name", pl.col("inputs").list.first().alias("variable")).unique()
    pulls = tr.filter(pl.col("direction") == "pull").join(
        read_of, left_on="src_op", right_on="name"
    )
    # (non-trainable BatchNorm statistics are pulled too: fused BN reads them)
    per_var = (
        pulls.filter(pl.col("variable").is_in(params["variable"].to_list()))
        .group_by("variable", "step")
        .len()
    )
    steps = tr["step"].n_unique()
    assert set(per_var["variable"]) == set(params["variable"])
    assert (per_var["len"] == 1).all(), per_var.filter(pl.col("len") != 1)
    assert per_var.height == params.height * steps
    # one gradient push per variable and step, into its own update op (one op may
    # produce several gradients: fused BatchNorm's yields gamma's and beta's)
    assert params["gradient_tensor"].null_count() == 0
    assert params["gradient_tensor"].n_unique() == params.height
    pushes = tr.filter(
        (pl.col("direction") == "push")
        & pl.col("tensor").is_in(params["gradient_tensor"].to_list())
    )
    counts = pushes.group_by("tensor", "step").len()["len"].to_list()
    assert counts == [1] * (params.height * steps)
    assert pushes["bytes"].sum() == params["bytes"].sum() * steps


def pushes_map_to_their_own_pulls(tables: Path, workload: Workload) -> None:
    """Every trainable variable's gradient push points (``push_param``) at the pull of
    that same variable: names checked on the traced ops, independently of the params
    table (the variable a pull's ``ReadVariableOp`` reads on the PS is the one the
    push's ``ResourceApply*`` op updates), bytes and shards on the workload."""
    params = pl.read_parquet(tables / "params.parquet")
    trainable = params.filter("trainable")
    ps = pl.read_parquet(tables / "ops.parquet").filter(pl.col("role") == "ps")
    tr = pl.read_parquet(tables / "transfers.parquet").unique(["direction", "tensor"])
    read_var = {
        n: ins[0]
        for n, t, ins in ps.select("name", "op_type", "inputs").iter_rows()
        if t == "ReadVariableOp"
    }
    applied_var = {
        x: ins[0]
        for t, ins in ps.select("op_type", "inputs").iter_rows()
        if t.startswith("ResourceApply")
        for x in ins[1:]
    }
    pulls = tr.filter(pl.col("direction") == "pull").sort("tensor", descending=True)
    pushes = tr.filter(pl.col("direction") == "push").sort("tensor")
    pp = match_pushes_to_pulls(pulls["tensor"].to_list(), pushes["tensor"].to_list(), params)
    pull_var = [read_var.get(s) for s in pulls["src_op"].to_list()]
    push_var = [applied_var.get(r) for r in pushes["recv_node"].to_list()]
    matched = {push_var[q]: pull_var[p] for q, p in enumerate(pp.tolist()) if p >= 0}
    assert matched == {v: v for v in trainable["variable"].to_list()}
    size = dict(trainable.select("variable", "bytes").iter_rows())
    for q, p in enumerate(pp.tolist()):
        if p >= 0:
            assert pushes["bytes"][q] == pulls["bytes"][p] == size[push_var[q]]
    # the workload, built from the same tables: one pull per gradient push, same bytes
    # and shard; the other pushes (learning rate, BatchNorm batch statistics) get -1
    w = workload.pushes_param
    q = np.flatnonzero(w >= 0)
    assert len(q) == trainable.height == len(set(w[q].tolist()))
    assert (workload.push_bytes[q] == workload.pull_bytes[w[q]]).all()
    assert (workload.pushes_shard[q] == workload.pulls_shard[w[q]]).all()
    assert sorted(workload.push_bytes[q].tolist()) == sorted(map(float, trainable["bytes"]))


@pytest.mark.slow
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_zoo_model_profiles_and_normalizes(model: str, tmp_path: Path):
    # one traced step: each model's graph is what is under test here; which step a
    # transfer belongs to is checked over two steps below and in test_traces
    tables = profile_and_normalize(tmp_path, model, traced_steps=1)
    prof = pl.read_parquet(tables / "profile.parquet").row(0, named=True)
    params = pl.read_parquet(tables / "params.parquet").filter("trainable")
    assert params["bytes"].sum() == prof["param_bytes"] == 4 * prof["param_count"]
    one_pull_and_one_push_per_variable(tables)
    pushes_map_to_their_own_pulls(tables, Workload.load(str(tables.parent / "w.json")))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("optimizer", "apply_op"),
    [("momentum", "ResourceApplyMomentum"), ("adam", "ResourceApplyAdam")],
)
def test_optimizer_slots_live_on_the_ps(optimizer: str, apply_op: str, tmp_path: Path):
    tables = profile_and_normalize(tmp_path, "LeNet5", optimizer=optimizer)
    params = pl.read_parquet(tables / "params.parquet")
    trainable = params.filter("trainable")
    assert trainable["update_op"].str.ends_with(apply_op).all()
    slots = params.filter(~pl.col("trainable") & pl.col("shard").str.contains("/job:ps"))
    per_var = {"momentum": 1, "adam": 2}[optimizer]
    assert slots.filter(pl.col("bytes") > 8)["bytes"].sum() == per_var * trainable["bytes"].sum()
    one_pull_and_one_push_per_variable(tables)


@pytest.mark.slow
def test_batchnorm_model_on_two_ps_shards(tmp_path: Path):
    """MobileNetV2 on two PS tasks: fused BatchNorm's gamma and beta may sit on different
    shards; each variable still moves once per step, to and from its own shard."""
    tables = profile_and_normalize(tmp_path, "MobileNetV2", ps_tasks=2)
    one_pull_and_one_push_per_variable(tables)
    params = pl.read_parquet(tables / "params.parquet").filter(pl.col("variable") != "global_step")
    per_shard = dict(params.group_by("ps_task").agg(pl.col("bytes").sum()).iter_rows())
    assert set(per_shard) == {0, 1} and min(per_shard.values()) > 0
    tr = pl.read_parquet(tables / "transfers.parquet")
    for direction in ("pull", "push"):
        got = (
            tr.filter(pl.col("direction") == direction)
            .group_by("step", "ps_task")
            .agg(pl.col("bytes").sum())
        )
        # every variable but the global step is pulled (BN statistics too) and updated
        assert {(s, t): b for s, t, b in got.iter_rows()} == {
            (s, t): per_shard[t] for s in range(tr["step"].max() + 1) for t in (0, 1)
        }
    w = Workload.load(str(tables.parent / "w.json"))
    assert w.ps_tasks == 2
    pushes_map_to_their_own_pulls(tables, w)
    assert [w.pull_bytes[w.pulls_shard == j].sum() for j in (0, 1)] == [per_shard[0], per_shard[1]]
    assert [w.push_bytes[w.pushes_shard == j].sum() for j in (0, 1)] == [per_shard[0], per_shard[1]]


# ----------------------------------------------------------------- any model by name

TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
def test_a_keras_application_outside_the_zoo_list_profiles(tmp_path: Path):
    assert "EfficientNetB0" not in MODEL_NAMES
    tables = profile_and_normalize(tmp_path, "EfficientNetB0")
    prof = pl.read_parquet(tables / "profile.parquet").row(0, named=True)
    # EfficientNetB0 without its 1000-class head: about 4.0 M parameters + 10 classes
    assert 3.9e6 < prof["param_count"] < 4.2e6
    one_pull_and_one_push_per_variable(tables)


@pytest.mark.slow
def test_a_users_own_builder_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the profile's PS and worker processes import the builder's module too
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    tables = profile_and_normalize(tmp_path, "zoo_builders:small_cnn")
    prof = pl.read_parquet(tables / "profile.parquet").row(0, named=True)
    # conv 3x3x3x8 + 8, conv 3x3x8x16 + 16, dense 16x10 + 10
    assert prof["param_count"] == (3 * 3 * 3 * 8 + 8) + (3 * 3 * 8 * 16 + 16) + (16 * 10 + 10)
    assert prof["model"] == "zoo_builders:small_cnn"
    params = pl.read_parquet(tables / "params.parquet").filter("trainable")
    assert all(v.startswith("mine_") for v in params["variable"])
    one_pull_and_one_push_per_variable(tables)


def test_unknown_model_names_get_one_line_saying_how_to_find_valid_ones(
    monkeypatch: pytest.MonkeyPatch,
):
    from sgdsim.config import check_config
    from sgdsim.errors import ConfigError
    from sgdsim.models import build_model, check_model_name, keras_application_names

    monkeypatch.syspath_prepend(str(TESTS))
    names = keras_application_names()
    assert {"VGG19", "EfficientNetB0", "NASNetMobile", *MODEL_NAMES[4:]} <= set(names)
    for ok in ("VGG19", "LeNet5", "zoo_builders:small_cnn"):
        check_model_name(ok)
    cases = {
        "NoSuchNet": "unknown model 'NoSuchNet'; valid names: LeNet5",
        "no_such_module:build": "cannot import module 'no_such_module'",
        "zoo_builders:nothing": "has no function 'nothing'",
    }
    for name, message in cases.items():
        cfg = {"models": [{"name": "LeNet5"}, {"name": name}], "hardware": [], "networks": []}
        with pytest.raises(ConfigError) as e:
            check_config(cfg, "my.yaml")
        text = str(e.value)
        assert text.startswith("my.yaml: models[1].name: ") and message in text, text
        assert "\n" not in text
        if name == "NoSuchNet":
            assert "list them with `sgdsim models`" in text
    import tensorflow as tf

    with tf.Graph().as_default():
        x = tf.zeros((2, 32, 32, 3))
        with pytest.raises(ValueError, match=r"output is the \(batch, 10\) logits"):
            build_model("zoo_builders:wrong_output", x, 10)


def test_cli_lists_the_model_names():
    from click.testing import CliRunner

    from sgdsim.cli import main

    r = CliRunner().invoke(main, ["models"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "defined in sgdsim.models: LeNet5, AlexNet, GoogLeNet, VGG11"
    keras = lines[1].removeprefix("tf_keras.applications: ").split(", ")
    assert {"VGG16", "VGG19", "EfficientNetB0", "MobileNetV3Small"} <= set(keras)
    assert keras == sorted(keras) and "module:function" in lines[2]
