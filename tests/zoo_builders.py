"""A user's own model builder, for the ``module:function`` model name in tests."""

from __future__ import annotations

from typing import Any


def small_cnn(inputs: Any, classes: int) -> Any:
    """Two convolutions and a dense layer on ``inputs`` ((batch, size, size, 3)
    float32), ``classes`` logits."""
    import tf_keras

    layers = tf_keras.layers
    inp = layers.Input(tensor=inputs)
    x = layers.Conv2D(8, 3, activation="relu", name="mine_conv1")(inp)
    x = layers.Conv2D(16, 3, strides=2, activation="relu", name="mine_conv2")(x)
    x = layers.GlobalAveragePooling2D(name="mine_pool")(x)
    return tf_keras.Model(inp, layers.Dense(classes, name="mine_logits")(x), name="small_cnn")


def wrong_output(inputs: Any, classes: int) -> Any:
    """Returns a model whose output is not (batch, classes) logits."""
    import tf_keras

    inp = tf_keras.layers.Input(tensor=inputs)
    return tf_keras.Model(inp, tf_keras.layers.Flatten()(inp))
