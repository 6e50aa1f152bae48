"""Entry point of one synchronous all-reduce worker: ``python -m sgdsim.testbed.allreduce_worker``.

Synchronous data parallelism as Horovod and PyTorch DDP run it, in
TensorFlow: ``tf.distribute.MultiWorkerMirroredStrategy`` with
``CommunicationImplementation.RING`` (ring all-reduce over gRPC, CPU
collectives), one process per worker, ``TF_CONFIG`` naming every worker. Each
worker trains the zoo model on its own synthetic batch of ``batch_size``
samples (the global batch is N × ``batch_size``); every step all-reduces the
gradients, so the workers step in lockstep.

The worker runs ``--warmup-steps`` steps, then ``--steps`` timed steps, and
writes ``--out`` atomically as JSON::

    {"task": k, "host": ..., "start_time": epoch s,
     "step_end_times": [epoch s of the end of every timed step]}

A step ends when its loss is back on the host (``.numpy()``), i.e. after the
all-reduce and the update. Exit code 1 on any error, 3 when ``--lifetime``
seconds ran out (a peer that never joins must not hang the run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sgdsim.io import atomic_path
from sgdsim.profiling.spec import ProfileSpec


def log(msg: str) -> None:
    print(f"[allreduce-worker] {msg}", file=sys.stderr, flush=True)


def _strategy(workers: list[str], task: int) -> Any:
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": task}}
    )
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation.RING
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def run_worker(
    spec: ProfileSpec, workers: list[str], task: int, steps: int, warmup_steps: int, out: Path
) -> None:
    """Train ``warmup_steps + steps`` synchronous steps as worker ``task`` of
    ``workers`` (``host:port`` each) and write the timed steps' end times to ``out``.

    Raises:
        ValueError: ``steps`` < 1 or ``warmup_steps`` < 0.
    """
    if steps < 1 or warmup_steps < 0:
        raise ValueError(f"need steps >= 1 and warmup_steps >= 0, got {steps}, {warmup_steps}")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(spec.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(spec.inter_op_threads)
    strategy = _strategy(workers, task)
    import tf_keras

    from sgdsim.models import build_model

    shape = (spec.image_size, spec.image_size, 3)
    with strategy.scope():
        inputs = tf_keras.Input(shape=shape)
        model = build_model(spec.model, inputs, spec.classes)
        optimizer = tf_keras.optimizers.SGD(0.01)
    rng = tf.random.Generator.from_seed(spec.seed + task)
    x = rng.normal((spec.batch_size, *shape))
    y = rng.uniform((spec.batch_size,), maxval=spec.classes, dtype=tf.int64)
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.SUM
    )
    global_batch = spec.batch_size * len(workers)

    def replica_step() -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) / global_batch
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step() -> Any:
        per_replica = strategy.run(replica_step)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    start = time.time()
    for _ in range(warmup_steps):
        train_step().numpy()
    ends = []
    for _ in range(steps):
        train_step().numpy()
        ends.append(time.time())
    with atomic_path(out) as tmp:
        tmp.write_text(
            json.dumps(
                {
                    "task": task,
                    "host": platform.node(),
                    "start_time": start,
                    "step_end_times": ends,
                }
            )
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--spec", required=True, help="ProfileSpec as JSON")
    p.add_argument("--workers", required=True, help="comma-separated host:port of every worker")
    p.add_argument("--task", required=True, type=int, help="this worker's index")
    p.add_argument("--steps", required=True, type=int, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    p.add_argument("--out", required=True, type=Path, help="JSON file to write")
    p.add_argument("--lifetime", type=float, default=600.0, help="seconds before giving up")
    a = p.parse_args(argv)
    timer = threading.Timer(a.lifetime, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    try:
        spec = ProfileSpec(**json.loads(a.spec))
        run_worker(spec, a.workers.split(","), a.task, a.steps, a.warmup_steps, a.out)
    except Exception as e:  # one line for the parent's log, then a clear exit code
        log(f"task {a.task}: {type(e).__name__}: {e}")
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gRPC collective threads keep the interpreter alive otherwise


if __name__ == "__main__":
    sys.exit(main())
