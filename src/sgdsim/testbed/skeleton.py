"""The skeleton of a profiled step: its transfers through TensorFlow, its compute as waits.

A worker that runs :func:`build_skeleton_graph` moves exactly the bytes of one
profiled step (:class:`~sgdsim.simulation.Workload`) in the order and at the
times the profile gives them: it reads one PS variable per pull
(``pull_bytes``), each read gating its segment (``pull_gate``); every compute
segment is a wait of its profiled duration (``seg_dur_s``, a host-side sleep
that uses no core); every push (``push_bytes``) leaves as the segment that
produces it ends (``push_seg``) and is subtracted from a PS variable shared by
all workers, as a gradient is applied. So N such workers put the profile's
traffic on a network through the same gRPC stack and TCP connections as N
training workers, with neither the model, its data nor its accelerator: what
:func:`sgdsim.testbed.calibrate.training_join_delays` captures with
``skeleton`` (docs/steady-state-log.md, "The step's skeleton").
"""

from __future__ import annotations

import time
from typing import Any

from sgdsim.profiling.graph import TrainingGraph


def _wait(seconds: float) -> Any:
    """A graph op that sleeps ``seconds`` on the host and returns a float32 0."""
    import numpy as np
    import tensorflow as tf

    def sleep() -> Any:
        time.sleep(seconds)
        return np.float32(0.0)

    return tf.compat.v1.py_func(sleep, [], tf.float32, stateful=True)


def build_skeleton_graph(
    workload: Any, cluster: dict[str, list[str]], worker_device: str
) -> TrainingGraph:
    """Build the skeleton of ``workload``'s step in ``tf.compat.v1`` graph mode.

    Variables (float32; ``bytes // 4`` elements, at least one) live on
    ``/job:ps/task:0``: one per pull and one per push, shared by every worker;
    the waits and the pushed tensors on ``worker_device``.

    Args:
        workload: the profiled step (:class:`~sgdsim.simulation.Workload`):
            ``pull_bytes`` (P,), ``pull_gate`` (P,), ``seg_dur_s`` (S,) in
            seconds, ``push_bytes`` (Q,) and ``push_seg`` (Q,).
        cluster: the cluster spec (one PS task; its name is ``ps``).
        worker_device: this worker's device, e.g. ``/job:worker/task:0/device:CPU:0``.

    Returns:
        A :class:`~sgdsim.profiling.graph.TrainingGraph` whose ``train_op`` runs
        one skeleton step (``opt`` None, ``grads_and_vars`` empty).

    Raises:
        ValueError: a workload with more than one PS task.
    """
    import tensorflow as tf

    if workload.ps_tasks != 1 or len(cluster.get("ps", ())) != 1:
        raise ValueError("the skeleton step supports one PS task")
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/job:ps/task:0"):

            def variable(name: str, size: float) -> Any:
                return tf.compat.v1.get_variable(
                    name,
                    [max(1, int(size) // 4)],
                    initializer=tf.compat.v1.zeros_initializer(),
                    use_resource=True,
                )

            pulled = [variable(f"pull_{i}", b) for i, b in enumerate(workload.pull_bytes)]
            pushed = [variable(f"push_{j}", b) for j, b in enumerate(workload.push_bytes)]
        with tf.device(worker_device):
            gated: dict[int, list[Any]] = {}
            for v, s in zip(pulled, workload.pull_gate, strict=True):
                gated.setdefault(int(s), []).append(tf.reduce_sum(tf.identity(v.read_value())))
            segments: list[Any] = []
            for s, seconds in enumerate(workload.seg_dur_s):
                with tf.control_dependencies(segments[-1:] + gated.get(s, [])):
                    segments.append(_wait(float(seconds)))
            grads = []
            for v, s in zip(pushed, workload.push_seg, strict=True):
                with tf.control_dependencies([segments[int(s)]] if s >= 0 else []):
                    grads.append(tf.fill(v.shape.as_list(), 1e-6))
        with tf.device("/job:ps/task:0"):
            updates = [v.assign_sub(g) for v, g in zip(pushed, grads, strict=True)]
        train_op = tf.group(*updates, *segments)
        init = tf.compat.v1.variables_initializer([*pulled, *pushed])
    return TrainingGraph(graph, train_op, init, None, [])
