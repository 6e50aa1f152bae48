"""Entry point of one synchronous all-reduce worker: ``python -m sgdsim.testbed.allreduce_worker``.

Synchronous data parallelism as Horovod and PyTorch DDP run it, in
TensorFlow: ``tf.distribute.MultiWorkerMirroredStrategy`` with
``CommunicationImplementation.RING`` (ring all-reduce over gRPC, CPU
collectives), one process per worker, ``TF_CONFIG`` naming every worker. Each
worker trains the zoo model as the graph-mode PS worker does (same model,
batch, optimizer and thread pools; a synthetic batch drawn every step) on its
own ``batch_size`` samples (the global batch is N × ``batch_size``); every
step all-reduces the gradients, so the workers step in lockstep. Inside the
``tf.function`` with the default ``CommunicationOptions`` (``bytes_per_pack``
0) TensorFlow packs every gradient into one all-reduce after
back-propagation (``CollectiveReplicaLauncher.batch_all_reduce``); the step
returns this replica's own loss, so that pack is the step's only all-reduce
(``collective_ops`` shows it).

The worker runs ``--warmup-steps`` steps, then ``--steps`` timed steps, and
writes ``--out`` atomically as JSON::

    {"task": k, "host": ..., "start_time": epoch s,
     "warmup_end_times": [epoch s of the end of every warm-up step],
     "step_end_times": [epoch s of the end of every timed step],
     "cpu_s": CPU seconds (user + system, all threads) of the timed steps,
     "collective_ops": {op type: count} of the collective ops in the traced step}

With ``--progress`` every step end (warm-up included) is also appended to
that file as it happens; with ``--stop`` the timed steps end after the step
with which the worker has run S steps in all (warm-up included), S the
integer the parent writes to that file (every worker stops after the same
step: an all-reduce waits for every peer), and ``--steps`` is only a bound.

With ``--probe R`` the worker does not train: it times ``--steps`` calls of
a ``tf.function`` that runs 1 and then R chained all-reduces of a 4-float
tensor, and writes ``{"one_s": [...], "many_s": [...], "repeats": R}``
(seconds per call): the slope is one small all-reduce's latency.

With ``--probe-step`` the worker trains a model of one 4-float variable
(gradient, all-reduce, update: a training step with nothing to compute) for
``--warmup-steps`` and then ``--steps`` steps, with ``--spec``'s thread
pools, and writes ``{"step_end_times": [...]}``: at P workers less alone,
what the all-reduce of a real training step costs beyond its bytes.

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


def _threads(spec: ProfileSpec) -> Any:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(spec.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(spec.inter_op_threads)
    return tf


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def run_worker(
    spec: ProfileSpec,
    workers: list[str],
    task: int,
    steps: int,
    warmup_steps: int,
    out: Path,
    progress: Path | None = None,
    stop: Path | None = None,
    min_seconds: float = 0.0,
) -> None:
    """Train ``warmup_steps + steps`` synchronous steps as worker ``task`` of
    ``workers`` (``host:port`` each) and write the step end times to ``out``.

    ``min_seconds``: keep timing steps past ``steps`` until the gaps between
    the timed step ends (the step times a caller takes from them) add up to at
    least this long; for a worker alone only, as peers of a collective must
    run the same steps.

    ``progress``: file to which every step end (epoch s) is appended as it
    happens. ``stop``: the timed steps end after the worker's S-th step
    (warm-up included) once this file holds the integer S.

    Raises:
        ValueError: ``steps`` < 1 or ``warmup_steps`` < 0.
    """
    if steps < 1 or warmup_steps < 0:
        raise ValueError(f"need steps >= 1 and warmup_steps >= 0, got {steps}, {warmup_steps}")
    tf = _threads(spec)
    strategy = _strategy(workers, task)
    import tf_keras

    from sgdsim.models import build_model, make_keras_optimizer
    from sgdsim.testbed.worker import stop_reached

    shape = (spec.image_size, spec.image_size, 3)
    with strategy.scope():
        inputs = tf_keras.Input(shape=shape)
        model = build_model(spec.model, inputs, spec.classes)
        optimizer = make_keras_optimizer(spec.optimizer)
    seed = spec.seed + task
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.SUM
    )
    global_batch = spec.batch_size * len(workers)

    def replica_step() -> Any:
        # a synthetic batch drawn every step, as the graph-mode PS worker does
        x = tf.random.uniform((spec.batch_size, *shape), seed=seed)
        y = tf.random.uniform((spec.batch_size,), maxval=spec.classes, dtype=tf.int64, seed=seed)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) / global_batch
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step() -> Any:
        # this replica's own loss: reducing it too would add an all-reduce per step
        return strategy.experimental_local_results(strategy.run(replica_step))[0]

    feed = open(progress, "a", buffering=1) if progress is not None else None  # noqa: SIM115

    def step() -> float:
        train_step().numpy()
        t = time.time()
        if feed is not None:
            feed.write(f"{t!r}\n")
        return t

    start = time.time()
    warm = [step() for _ in range(warmup_steps)]
    collectives = collective_ops(train_step.get_concrete_function().graph)
    ends: list[float] = []
    cpu0 = _cpu_s()
    while (len(ends) < steps or not ends or ends[-1] - ends[0] < min_seconds) and not stop_reached(
        stop, warmup_steps + len(ends)
    ):
        ends.append(step())
    cpu = _cpu_s() - cpu0
    if feed is not None:
        feed.close()
    with atomic_path(out) as tmp:
        tmp.write_text(
            json.dumps(
                {
                    "task": task,
                    "host": platform.node(),
                    "start_time": start,
                    "warmup_end_times": warm,
                    "step_end_times": ends,
                    "cpu_s": cpu,
                    "collective_ops": collectives,
                }
            )
        )


def collective_ops(graph: Any) -> dict[str, int]:
    """How many ops of each collective type (``Collective*``) a traced function's
    graph holds, its nested functions' included."""
    counts: dict[str, int] = {}
    seen: set[int] = set()
    todo = [graph]
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        for op in g.get_operations():
            if op.type.startswith("Collective"):
                counts[op.type] = counts.get(op.type, 0) + 1
        todo.extend(f.graph for f in getattr(g, "_functions", {}).values() if hasattr(f, "graph"))
    return counts


def run_probe(
    workers: list[str], task: int, calls: int, repeats: int, out: Path, floats: int = 4
) -> None:
    """Time ``calls`` calls of one and of ``repeats`` chained all-reduces of a
    tensor of ``floats`` float32 (one thread per pool) as worker ``task``; write
    them to ``out``.

    The all-reduces of one call are chained (each reduces the previous one's
    result), so they run one after another; the difference between the two
    timings over ``repeats`` − 1 is one small all-reduce, the function call's
    own cost cancelled.

    Raises:
        ValueError: ``calls`` < 1 or ``repeats`` < 2.
    """
    if calls < 1 or repeats < 2 or floats < 1:
        raise ValueError(
            f"need calls >= 1, repeats >= 2 and floats >= 1, got {calls}, {repeats}, {floats}"
        )
    tf = _threads(ProfileSpec(model="probe", intra_op_threads=1, inter_op_threads=1))
    strategy = _strategy(workers, task)

    def chained(n: int) -> Any:
        def replica() -> Any:
            ctx = tf.distribute.get_replica_context()
            v = tf.ones([floats])
            for _ in range(n):
                v = ctx.all_reduce(tf.distribute.ReduceOp.SUM, v) * 0.5
            return v

        return tf.function(lambda: strategy.run(replica))

    one, many = chained(1), chained(repeats)
    for f in (one, many):  # trace and warm up
        f()
    timings: dict[str, list[float]] = {"one_s": [], "many_s": []}
    for _ in range(calls):
        for key, f in (("one_s", one), ("many_s", many)):
            t0 = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), f())
            timings[key].append(time.perf_counter() - t0)
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps({"task": task, "repeats": repeats, "floats": floats, **timings}))


def run_step_probe(
    workers: list[str], task: int, steps: int, warmup_steps: int, out: Path, spec: ProfileSpec
) -> None:
    """Train a model of one 4-float variable for ``warmup_steps + steps`` steps as
    worker ``task`` of ``workers`` (each step: the loss's gradient, its
    all-reduce, the update, the loss back on the host), with ``spec``'s thread
    pools, and write the timed steps' end times (epoch s) to ``out``.

    Raises:
        ValueError: ``steps`` < 2 or ``warmup_steps`` < 0.
    """
    if steps < 2 or warmup_steps < 0:
        raise ValueError(f"need steps >= 2 and warmup_steps >= 0, got {steps}, {warmup_steps}")
    tf = _threads(spec)
    strategy = _strategy(workers, task)
    with strategy.scope():
        v = tf.Variable(tf.ones([4]))

    def replica() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v) * 1e-6
        grad = tape.gradient(loss, v)
        grad = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grad)
        v.assign_sub(0.01 * grad)
        return loss

    @tf.function
    def step() -> Any:
        return strategy.experimental_local_results(strategy.run(replica))[0]

    for _ in range(warmup_steps):
        step().numpy()
    ends = []
    for _ in range(steps):
        step().numpy()
        ends.append(time.time())
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps({"task": task, "step_end_times": ends}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--spec", required=True, help="ProfileSpec as JSON")
    p.add_argument("--workers", required=True, help="comma-separated host:port of every worker")
    p.add_argument("--task", required=True, type=int, help="this worker's index")
    p.add_argument("--steps", required=True, type=int, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    p.add_argument(
        "--min-seconds", type=float, default=0.0, help="time steps past --steps for this long"
    )
    p.add_argument("--out", required=True, type=Path, help="JSON file to write")
    p.add_argument("--lifetime", type=float, default=600.0, help="seconds before giving up")
    p.add_argument("--progress", type=Path, default=None, help="file to append step ends to")
    p.add_argument("--stop", type=Path, default=None, help="file with the step count to stop at")
    p.add_argument("--probe", type=int, default=0, help="R: time small all-reduces instead")
    p.add_argument("--probe-floats", type=int, default=4, help="float32 per probed tensor")
    p.add_argument(
        "--probe-step", action="store_true", help="time training steps of a 4-float model instead"
    )
    a = p.parse_args(argv)
    timer = threading.Timer(a.lifetime, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    try:
        if a.probe:
            run_probe(a.workers.split(","), a.task, a.steps, a.probe, a.out, a.probe_floats)
        elif a.probe_step:
            spec = ProfileSpec(**json.loads(a.spec))
            run_step_probe(a.workers.split(","), a.task, a.steps, a.warmup_steps, a.out, spec)
        else:
            spec = ProfileSpec(**json.loads(a.spec))
            run_worker(
                spec, a.workers.split(","), a.task, a.steps, a.warmup_steps, a.out,
                a.progress, a.stop, a.min_seconds,
            )  # fmt: skip
    except Exception as e:  # one line for the parent's log, then a clear exit code
        log(f"task {a.task}: {type(e).__name__}: {e}")
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gRPC collective threads keep the interpreter alive otherwise


if __name__ == "__main__":
    sys.exit(main())
