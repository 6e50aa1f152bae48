"""Calibration: the simulated single-worker step matches the measured untraced step."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml
from conftest import ROOT

from sgdsim.profiling import ProfileSpec, run_profile
from sgdsim.traces import normalize_profile

DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("model", [m["name"] for m in DEFAULT["models"]])
def test_single_worker_replay_within_10_percent_of_untraced_step(model: str, tmp_path: Path):
    m = next(x for x in DEFAULT["models"] if x["name"] == model)
    h = DEFAULT["hardware"][0]
    spec = ProfileSpec(
        model=model,
        batch_size=m["batch_size"],
        image_size=m["image_size"],
        classes=m["classes"],
        intra_op_threads=h["intra_op_threads"],
        inter_op_threads=h["inter_op_threads"],
        warmup_steps=3,
        timed_steps=8,
        traced_steps=3,
        timeout_s=600,
    )
    prof = run_profile(spec, tmp_path / "profile")
    normalize_profile(prof, tmp_path / "tables", tmp_path / "w.json")
    p = pl.read_parquet(tmp_path / "tables" / "profile.parquet").row(0, named=True)
    err = p["replay_step_s"] / p["untraced_step_s"] - 1
    print(
        f"{model}: untraced {p['untraced_step_s']:.4f} s, "
        f"replay {p['replay_step_s']:.4f} s, {err:+.1%}"
    )
    assert abs(err) <= 0.10


#: Measured by a real TensorFlow 2.21 run on an emulated 100 Mbit/s network
#: (shared/DESIGN.md, "Emulated network testbed"): MobileNetV2 64 px, batch 16,
#: one intra-op thread per worker, total steps/s for N = 1..4.
DESIGN_MEASURED = {1: 0.63, 2: 0.83, 3: 1.00, 4: 0.99}


@pytest.mark.slow
def test_predictions_match_the_measured_testbed_figures_of_the_design(tmp_path: Path):
    from sgdsim.simulation import Network, Workload, simulate_async_replicated

    spec = ProfileSpec(
        model="MobileNetV2",
        batch_size=16,
        image_size=64,
        intra_op_threads=1,
        inter_op_threads=1,
        warmup_steps=3,
        timed_steps=8,
        traced_steps=3,
        timeout_s=600,
    )
    normalize_profile(run_profile(spec, tmp_path / "p"), tmp_path / "t", tmp_path / "w.json")
    w = Workload.load(str(tmp_path / "w.json"))
    net = Network.from_bits(1e8, 1e-4)
    pred = {
        n: simulate_async_replicated(
            w, net, n, 20, 3, seed=42, replications=40, workers_per_node=n
        ).steps_per_s
        for n in DESIGN_MEASURED
    }
    print({n: f"{pred[n]:.3f} vs {m}" for n, m in DESIGN_MEASURED.items()})
    # One run depends on the workers' random start offsets (std up to 0.15 steps/s
    # at N = 2), so the expectation is estimated over 40 seeds and held to the
    # project's max-error target of 12 % (the model still lacks the PS's gRPC CPU
    # contention on a 2-core host, seen as about +9 % at N = 4).
    for n, measured in DESIGN_MEASURED.items():
        assert pred[n] == pytest.approx(measured, rel=0.12)

    # the saturation is reproduced (issue criterion: same N ± 1), saturation being
    # the first N at which one more worker adds less than 10 %
    def saturation(rates: dict[int, float]) -> int:
        return next((n for n in sorted(rates)[1:] if rates[n] < 1.10 * rates[n - 1]), max(rates))

    assert abs(saturation(pred) - saturation(DESIGN_MEASURED)) <= 1
