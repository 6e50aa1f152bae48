"""The training graph shared by the profiled worker and the testbed's workers."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from sgdsim.profiling.spec import ProfileSpec


@dataclass(frozen=True)
class TrainingGraph:
    """A built (not finalized) ``tf.Graph`` of one worker's training step.

    Attributes:
        graph: the ``tf.Graph``.
        train_op: one SGD step: gradients, updates on the PS, BatchNorm statistics.
        init: the variable initializer.
        opt: the ``tf.compat.v1.train`` optimizer (a ``SyncReplicasOptimizer``
            around it when built with ``sync_replicas``).
        grads_and_vars: (gradient, variable) pairs with a gradient.
    """

    graph: Any
    train_op: Any
    init: Any
    opt: Any
    grads_and_vars: list[tuple[Any, Any]]


def build_training_graph(
    spec: ProfileSpec, cluster: dict[str, list[str]], worker_device: str, sync_replicas: int = 0
) -> TrainingGraph:
    """Build ``spec``'s training step in ``tf.compat.v1`` graph mode.

    Variables go to the PS tasks of ``cluster`` by ``replica_device_setter``
    (with k PS tasks: round-robin in creation order, TensorFlow's default
    strategy; optimizer slots are colocated with their variable), compute to
    ``worker_device``; the input is a synthetic batch of shape
    ``(batch, size, size, 3)`` with random labels; BatchNorm runs in static
    training mode (no ``tf.cond``).

    With ``sync_replicas`` = N > 0 the optimizer is wrapped in
    ``tf.compat.v1.train.SyncReplicasOptimizer`` (``replicas_to_aggregate`` =
    ``total_num_replicas`` = N): the worker pushes its gradients into the PS's
    accumulators and its step ends when it takes a token, which the chief's
    queue runner hands out after it applied the mean of N gradients; see
    :mod:`sgdsim.testbed.worker` for the chief's part.

    Raises:
        ValueError: unknown model or optimizer (from :mod:`sgdsim.models`), or
            ``sync_replicas`` < 0.
    """
    if sync_replicas < 0:
        raise ValueError(f"sync_replicas must be >= 0, got {sync_replicas}")
    import tensorflow as tf
    import tf_keras

    from sgdsim.models import build_model, make_optimizer

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(spec.seed)
        tf_keras.backend.set_learning_phase(1)  # static training mode: no tf.cond in BN
        setter = tf.compat.v1.train.replica_device_setter(
            worker_device=worker_device, cluster=tf.train.ClusterSpec(cluster)
        )
        with tf.compat.v1.device(setter):
            shape = (spec.batch_size, spec.image_size, spec.image_size, 3)
            x = tf.random.uniform(shape, seed=spec.seed, name="synthetic_images")
            y = tf.random.uniform(
                (spec.batch_size,),
                maxval=spec.classes,
                dtype=tf.int32,
                seed=spec.seed + 1,
                name="synthetic_labels",
            )
            model = build_model(spec.model, x, spec.classes)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=model.output),
                name="loss",
            )
            global_step = tf.compat.v1.train.get_or_create_global_step()
            opt = make_optimizer(spec.optimizer)
            if sync_replicas:
                opt = tf.compat.v1.train.SyncReplicasOptimizer(
                    opt, replicas_to_aggregate=sync_replicas, total_num_replicas=sync_replicas
                )
            grads_and_vars = [(g, v) for g, v in opt.compute_gradients(loss) if g is not None]
            apply = opt.apply_gradients(grads_and_vars, global_step=global_step)
            train_op = tf.group(apply, *model.updates, name="train_op")
        if spec.pull_order != "tf_default":
            task = re.search(r"/task:(\d+)", worker_device)
            # each worker draws its own fifo_random order
            seed = spec.seed + (int(task.group(1)) if task else 0)
            enforce_pull_order(graph, worker_device, spec.pull_order, seed)
        init = tf.compat.v1.global_variables_initializer()
    return TrainingGraph(graph, train_op, init, opt, grads_and_vars)


#: Pull orders :func:`enforce_pull_order` can impose (``tf_default`` imposes none).
PULL_ORDERS: tuple[str, ...] = ("tf_default", "tictac", "fifo_random")


def pull_reads(graph: Any, worker_device: str) -> list[Any]:
    """The parameter reads that become pulls: ``ReadVariableOp`` ops of a variable on
    a PS task whose value is consumed on ``worker_device``, in creation order.

    Such a read carries no device of its own: TensorFlow colocates it with its
    variable, so it runs on the PS and its value travels to the worker.

    Keras creates a model's variables, and the reads of its forward pass, layer by
    layer in call order, so creation order is the forward first-use order.
    """
    reads = []
    for op in graph.get_operations():
        if op.type != "ReadVariableOp" or "/job:ps" not in op.inputs[0].op.device:
            continue
        if any(c.device == worker_device for t in op.outputs for c in t.consumers()):
            reads.append(op)
    return reads


def enforce_pull_order(graph: Any, worker_device: str, order: str, seed: int = 0) -> list[str]:
    """Make the worker pull its parameters one at a time in ``order`` (TicTac's enforcement).

    TensorFlow issues every pull of a step at once. To pull in a given order, the
    read of parameter ``k + 1`` on the PS gets a control dependency on an
    ``Identity`` of parameter ``k`` placed on the worker: the PS sends ``k + 1``
    only after ``k`` has arrived (TicTac, Hashemi et al., MLSys 2019, §5, enforces
    its order with such control dependencies between transfers). Each link of the
    chain costs one control message from the worker to the PS.

    Args:
        graph: a ``tf.Graph`` built under ``replica_device_setter``, not finalized.
        worker_device: the worker's compute device (``/job:worker/task:k/device:CPU:0``).
        order: ``tictac`` (forward first-use order, see :func:`pull_reads`) or
            ``fifo_random`` (one random order drawn with ``seed``, fixed for the run).
        seed: seed of the ``fifo_random`` order.

    Returns:
        The names of the read ops in the enforced order.

    Raises:
        ValueError: unknown ``order``.
    """
    import numpy as np
    import tensorflow as tf

    if order not in ("tictac", "fifo_random"):
        raise ValueError(f"pull order {order!r} cannot be enforced; use tictac or fifo_random")
    reads = pull_reads(graph, worker_device)
    if order == "fifo_random":
        reads = [reads[i] for i in np.random.default_rng(seed).permutation(len(reads))]
    with graph.as_default():
        for k, (prev, nxt) in enumerate(itertools.pairwise(reads)):
            with tf.compat.v1.device(worker_device):
                arrived = tf.identity(prev.outputs[0], name=f"pull_order/arrived_{k}")
            nxt._add_control_input(arrived.op)
    return [op.name for op in reads]
