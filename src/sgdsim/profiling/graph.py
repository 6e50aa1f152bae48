"""The training graph shared by the profiled worker and the testbed's workers."""

from __future__ import annotations

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
        opt: the ``tf.compat.v1.train`` optimizer.
        grads_and_vars: (gradient, variable) pairs with a gradient.
    """

    graph: Any
    train_op: Any
    init: Any
    opt: Any
    grads_and_vars: list[tuple[Any, Any]]


def build_training_graph(
    spec: ProfileSpec, cluster: dict[str, list[str]], worker_device: str
) -> TrainingGraph:
    """Build ``spec``'s training step in ``tf.compat.v1`` graph mode.

    Variables go to the PS tasks of ``cluster`` by ``replica_device_setter``
    (with k PS tasks: round-robin in creation order, TensorFlow's default
    strategy; optimizer slots are colocated with their variable), compute to
    ``worker_device``; the input is a synthetic batch of shape
    ``(batch, size, size, 3)`` with random labels; BatchNorm runs in static
    training mode (no ``tf.cond``).

    Raises:
        ValueError: unknown model or optimizer (from :mod:`sgdsim.models`).
    """
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
            grads_and_vars = [(g, v) for g, v in opt.compute_gradients(loss) if g is not None]
            apply = opt.apply_gradients(grads_and_vars, global_step=global_step)
            train_op = tf.group(apply, *model.updates, name="train_op")
        init = tf.compat.v1.global_variables_initializer()
    return TrainingGraph(graph, train_op, init, opt, grads_and_vars)
