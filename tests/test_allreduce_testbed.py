"""Synchronous ring all-reduce training measured on the emulated network, real TensorFlow."""

from __future__ import annotations

import os

import pytest

from sgdsim.profiling import ProfileSpec
from sgdsim.simulation.bounds import tbf_payload_fraction
from sgdsim.simulation.dag import ring_allreduce_s
from sgdsim.testbed import check_available
from sgdsim.testbed.allreduce import run_allreduce_measurement
from sgdsim.testbed.netns import DEFAULT_MTU

pytestmark = pytest.mark.alone  # measures or times: `make test` runs it by itself (Makefile)

REASON = check_available()
SPEC = ProfileSpec(
    model="LeNet5", batch_size=8, image_size=32, intra_op_threads=1, inter_op_threads=1
)


def lenet_gradient_bytes() -> float:
    import tensorflow as tf
    import tf_keras

    from sgdsim.models import build_model

    with tf.Graph().as_default():
        model = build_model("LeNet5", tf_keras.Input(shape=(32, 32, 3)), 10)
        return 4.0 * model.count_params()


@pytest.mark.slow
def test_one_worker_trains_alone_on_loopback():
    r = run_allreduce_measurement(SPEC, 1, None, steps=5, warmup_steps=1, loopback=True)
    assert r.workers == 1 and len(r.step_end_times) == 1 and len(r.step_end_times[0]) == 5
    assert r.steps_per_s > 0 and r.steps_per_s == pytest.approx(1 / r.iteration_s, rel=0.5)


@pytest.mark.slow
def test_two_workers_step_together_and_no_faster_than_the_ring_on_the_wire():
    if REASON is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to run the network testbed: {REASON}")
        pytest.skip(REASON)
    rate = 1e8
    r = run_allreduce_measurement(SPEC, 2, rate, steps=8, warmup_steps=2)
    # each iteration all-reduces every gradient over the shaped ring: at least the
    # wire time of 2(P-1)/P of the gradient bytes at the NIC's payload rate
    wire = ring_allreduce_s(
        lenet_gradient_bytes(), 2, 0.0, 1 / (rate / 8 * tbf_payload_fraction(DEFAULT_MTU))
    )
    assert r.iteration_s >= wire
    assert r.iteration_s < 20 * wire  # and the shaping, not something else, dominates
    a, b = r.step_end_times
    assert len(a) == len(b) == 8
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < r.iteration_s  # lockstep
    assert r.steps_per_s == pytest.approx(2 / r.iteration_s, rel=0.25)
