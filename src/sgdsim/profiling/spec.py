"""What one profile run does: the model, the node kind and the step counts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ProfileSpec:
    """One single-worker profile: one worker and ``ps_tasks`` parameter-server (PS) tasks.

    Attributes:
        model: model name (see :func:`sgdsim.models.build_model`).
        hardware: name of the hardware entry (recorded, used in paths).
        device: ``"cpu"`` or ``"gpu"``: where the worker computes; the PS is on CPU.
        batch_size: samples per step.
        image_size: input height = width in pixels.
        classes: number of output classes.
        optimizer: ``sgd``, ``momentum`` or ``adam`` (see :func:`sgdsim.models.make_optimizer`).
        intra_op_threads, inter_op_threads: TensorFlow thread pools of each process.
        warmup_steps: untimed steps first.
        timed_steps: untraced steps whose wall times (seconds) calibrate the model.
        traced_steps: steps run with ``FULL_TRACE``; one RunMetadata file each.
        timeout_s: hard limit in seconds on the whole run.
        seed: TensorFlow graph seed.
        pull_order: order in which the worker pulls the parameters each step:
            ``tf_default`` (TensorFlow's own: every pull at once) or, enforced one
            at a time with control dependencies (:func:`sgdsim.profiling.graph.enforce_pull_order`),
            ``tictac`` (forward first-use order) or ``fifo_random`` (a seeded random order).
        ps_tasks: PS tasks (shards), each its own process; ``replica_device_setter``
            places the variables on them (round-robin in creation order).
        runs: independent runs (fresh PS and worker processes each) whose steps,
            traces and CPU and RPC samples are pooled into one profile
            (:func:`sgdsim.profiling.run_profile`).
    """

    model: str
    hardware: str = "cpu"
    device: str = "cpu"
    batch_size: int = 16
    image_size: int = 64
    classes: int = 10
    optimizer: str = "sgd"
    intra_op_threads: int = 2
    inter_op_threads: int = 2
    warmup_steps: int = 3
    timed_steps: int = 8
    traced_steps: int = 3
    timeout_s: float = 900.0
    seed: int = 42
    pull_order: str = "tf_default"
    ps_tasks: int = 1
    runs: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProfileSpec:
        return cls(**json.loads(text))
