"""Model zoo: the networks sgdsim can profile, selectable by name.

Keras applications come from ``tf_keras`` (graph-mode capable Keras 2) with
``weights=None``. Defined here, since the throughput-prediction literature
validates on them and Keras does not ship them: ``AlexNet`` (Krizhevsky,
Sutskever, Hinton, NIPS 2012), ``GoogLeNet`` (Inception v1, Szegedy et al.,
CVPR 2015), ``VGG11`` (configuration A of Simonyan and Zisserman, ICLR 2015)
and the tiny ``LeNet5`` (LeCun et al., 1998) for quick end-to-end runs. Their
layers keep the published widths; padding is "same" so that they also run at
the small image sizes of a laptop profile. TensorFlow is imported lazily so
that the rest of the library (simulation, store, dashboard) never pays for it.
"""

from __future__ import annotations

from typing import Any

#: Model names accepted in ``config.yaml`` (``models[].name``).
MODEL_NAMES: tuple[str, ...] = (
    "LeNet5",
    "AlexNet",
    "GoogLeNet",
    "VGG11",
    "MobileNetV2",
    "ResNet50",
    "VGG16",
    "InceptionV3",
    "DenseNet121",
)

#: Optimizers a profile can train with (``models[].optimizer``); slot
#: variables (momentum, Adam's m and v) live on the PS beside their variable.
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam")

#: Smallest input size (pixels) each Keras application accepts.
MIN_IMAGE_SIZE: dict[str, int] = {
    "LeNet5": 32,
    "AlexNet": 32,
    "GoogLeNet": 32,
    "VGG11": 32,
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
    if name in _DEFINED:
        inp = tf_keras.layers.Input(tensor=inputs)
        return tf_keras.Model(inp, _DEFINED[name](tf_keras.layers, inp, classes), name=name)
    app = getattr(tf_keras.applications, name)
    return app(weights=None, input_tensor=inputs, classes=classes, classifier_activation=None)


def _alexnet(layers: Any, x: Any, classes: int) -> Any:
    """AlexNet: five convolutions (96, 256, 384, 384, 256) and three dense layers."""
    x = layers.Conv2D(96, 11, strides=4, padding="same", activation="relu", name="conv1")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool1")(x)
    x = layers.Conv2D(256, 5, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool2")(x)
    x = layers.Conv2D(384, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.Conv2D(384, 3, padding="same", activation="relu", name="conv4")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu", name="conv5")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool5")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(4096, activation="relu", name="fc6")(x)
    x = layers.Dense(4096, activation="relu", name="fc7")(x)
    return layers.Dense(classes, name="fc8")(x)


def _inception(
    layers: Any, x: Any, name: str, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int
) -> Any:
    """Inception module: 1x1, 1x1→3x3, 1x1→5x5 and pool→1x1 branches, concatenated."""

    def conv(t: Any, c: int, k: int, n: str) -> Any:
        return layers.Conv2D(c, k, padding="same", activation="relu", name=f"{name}_{n}")(t)

    b1 = conv(x, c1, 1, "1x1")
    b2 = conv(conv(x, c3r, 1, "3x3_reduce"), c3, 3, "3x3")
    b3 = conv(conv(x, c5r, 1, "5x5_reduce"), c5, 5, "5x5")
    b4 = conv(
        layers.MaxPooling2D(3, strides=1, padding="same", name=f"{name}_pool")(x),
        cp,
        1,
        "pool_proj",
    )
    return layers.Concatenate(name=f"{name}_concat")([b1, b2, b3, b4])


def _googlenet(layers: Any, x: Any, classes: int) -> Any:
    """GoogLeNet (Inception v1) without the auxiliary classifiers."""
    x = layers.Conv2D(64, 7, strides=2, padding="same", activation="relu", name="conv1")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool1")(x)
    x = layers.Conv2D(64, 1, padding="same", activation="relu", name="conv2_reduce")(x)
    x = layers.Conv2D(192, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool2")(x)
    x = _inception(layers, x, "3a", 64, 96, 128, 16, 32, 32)
    x = _inception(layers, x, "3b", 128, 128, 192, 32, 96, 64)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool3")(x)
    for n, c in (
        ("4a", (192, 96, 208, 16, 48, 64)),
        ("4b", (160, 112, 224, 24, 64, 64)),
        ("4c", (128, 128, 256, 24, 64, 64)),
        ("4d", (112, 144, 288, 32, 64, 64)),
        ("4e", (256, 160, 320, 32, 128, 128)),
    ):
        x = _inception(layers, x, n, *c)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool4")(x)
    x = _inception(layers, x, "5a", 256, 160, 320, 32, 128, 128)
    x = _inception(layers, x, "5b", 384, 192, 384, 48, 128, 128)
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    return layers.Dense(classes, name="logits")(x)


def _vgg11(layers: Any, x: Any, classes: int) -> Any:
    """VGG-11 (configuration A): 8 convolutions and three dense layers."""
    i = 0
    for width in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if width == "M":
            x = layers.MaxPooling2D(2, padding="same", name=f"pool{i}")(x)
        else:
            i += 1
            x = layers.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{i}")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(4096, activation="relu", name="fc1")(x)
    x = layers.Dense(4096, activation="relu", name="fc2")(x)
    return layers.Dense(classes, name="logits")(x)


_DEFINED = {"AlexNet": _alexnet, "GoogLeNet": _googlenet, "VGG11": _vgg11}


def make_optimizer(name: str, learning_rate: float = 0.01) -> Any:
    """A ``tf.compat.v1.train`` optimizer: ``sgd``, ``momentum`` (0.9) or ``adam``.

    Raises:
        ValueError: unknown name.
    """
    import tensorflow as tf

    train = tf.compat.v1.train
    if name == "sgd":
        return train.GradientDescentOptimizer(learning_rate)
    if name == "momentum":
        return train.MomentumOptimizer(learning_rate, momentum=0.9)
    if name == "adam":
        return train.AdamOptimizer(learning_rate * 0.1)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
