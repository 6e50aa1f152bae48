"""Model zoo: the networks sgdsim can profile, selectable by name.

Keras applications come from ``tf_keras`` (graph-mode capable Keras 2) with
``weights=None``; ``LeNet5`` (LeCun et al., 1998) is defined here as a tiny
model for quick end-to-end runs. TensorFlow is imported lazily so that the
rest of the library (simulation, store, dashboard) never pays for it.
"""

from __future__ import annotations

from typing import Any

#: Model names accepted in ``config.yaml`` (``models[].name``).
MODEL_NAMES: tuple[str, ...] = (
    "LeNet5",
    "MobileNetV2",
    "ResNet50",
    "VGG16",
    "InceptionV3",
    "DenseNet121",
)

#: Smallest input size (pixels) each Keras application accepts.
MIN_IMAGE_SIZE: dict[str, int] = {
    "LeNet5": 32,
    "MobileNetV2": 32,
    "ResNet50": 32,
    "VGG16": 32,
    "InceptionV3": 75,
    "DenseNet121": 32,
}


def build_model(name: str, inputs: Any, classes: int) -> Any:
    """Build model ``name`` on the graph-mode tensor ``inputs``.

    Args:
        name: one of :data:`MODEL_NAMES`.
        inputs: float32 tensor of shape ``(batch, size, size, 3)``.
        classes: number of output logits.

    Returns:
        A ``tf_keras.Model`` whose ``output`` is the logits tensor of shape
        ``(batch, classes)`` (no softmax).

    Raises:
        ValueError: unknown name, or image size below :data:`MIN_IMAGE_SIZE`.
    """
    import tf_keras

    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
    size = int(inputs.shape[1])
    if size < MIN_IMAGE_SIZE[name]:
        raise ValueError(f"model {name} needs image_size >= {MIN_IMAGE_SIZE[name]}, got {size}")
    if name == "LeNet5":
        layers = tf_keras.layers
        inp = layers.Input(tensor=inputs)
        x = layers.Conv2D(6, 5, activation="relu", name="conv1")(inp)
        x = layers.MaxPooling2D(2, name="pool1")(x)
        x = layers.Conv2D(16, 5, activation="relu", name="conv2")(x)
        x = layers.MaxPooling2D(2, name="pool2")(x)
        x = layers.Flatten(name="flatten")(x)
        x = layers.Dense(120, activation="relu", name="fc1")(x)
        x = layers.Dense(84, activation="relu", name="fc2")(x)
        logits = layers.Dense(classes, name="logits")(x)
        return tf_keras.Model(inp, logits, name="LeNet5")
    app = getattr(tf_keras.applications, name)
    return app(weights=None, input_tensor=inputs, classes=classes, classifier_activation=None)
