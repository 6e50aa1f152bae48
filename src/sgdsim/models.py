"""Model zoo: the networks sgdsim can profile, selectable by name.

A model name (``models[].name`` in ``config.yaml``) is one of:

- a constructor of ``tf_keras.applications`` (graph-mode capable Keras 2),
  built with ``weights=None``: ``MobileNetV2``, ``ResNet50``, ``VGG16``,
  ``VGG19``, ``EfficientNetB0``, ``NASNetMobile``, … (every capitalised
  callable of that module; :func:`keras_application_names` lists them);
- a network defined here, since the throughput-prediction literature
  validates on them and Keras does not ship them: ``AlexNet`` (Krizhevsky,
  Sutskever, Hinton, NIPS 2012), ``GoogLeNet`` (Inception v1, Szegedy et al.,
  CVPR 2015), ``VGG11`` (configuration A of Simonyan and Zisserman, ICLR
  2015) and the tiny ``LeNet5`` (LeCun et al., 1998) for quick end-to-end
  runs. Their layers keep the published widths; padding is "same" so that
  they also run at the small image sizes of a laptop profile;
- a user's own builder, ``module:function`` (see :func:`build_model` for the
  function's arguments), importable in the processes that profile and
  measure it (on ``PYTHONPATH`` or installed).

TensorFlow is imported lazily so that the rest of the library (simulation,
store, dashboard) never pays for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

#: Networks defined in this module (names accepted without importing TensorFlow).
DEFINED_NAMES: tuple[str, ...] = ("LeNet5", "AlexNet", "GoogLeNet", "VGG11")

#: Model names of the zoo that the tests and docs use; any
#: :func:`keras_application_names` entry and any ``module:function`` are accepted too.
MODEL_NAMES: tuple[str, ...] = (
    *DEFINED_NAMES,
    "MobileNetV2",
    "ResNet50",
    "VGG16",
    "InceptionV3",
    "DenseNet121",
)

#: Optimizers a profile can train with (``models[].optimizer``); slot
#: variables (momentum, Adam's m and v) live on the PS beside their variable.
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam")

#: Smallest input size (pixels) of the models whose minimum is above 32 (the
#: schema's floor); Keras checks the others when it builds them.
MIN_IMAGE_SIZE: dict[str, int] = {
    "InceptionV3": 75,
    "InceptionResNetV2": 75,
    "Xception": 71,
}

#: How to find valid names, appended to every unknown-name error.
HOW_TO_LIST = (
    "valid names: "
    + ", ".join(DEFINED_NAMES)
    + ", any tf_keras.applications constructor (list them with `sgdsim models`), "
    "or module:function for your own builder"
)


class UnknownModelError(ValueError):
    """A model name that is neither in the zoo, nor a ``tf_keras.applications``
    constructor, nor an importable ``module:function``."""


def min_image_size(name: str) -> int:
    """Smallest input size in pixels that model ``name`` accepts (32 when not known)."""
    return MIN_IMAGE_SIZE.get(name, 32)


def keras_application_names() -> tuple[str, ...]:
    """Every constructor of ``tf_keras.applications`` (capitalised callables), sorted.

    Imports TensorFlow (seconds).
    """
    import tf_keras

    apps = tf_keras.applications
    return tuple(sorted(n for n in dir(apps) if n[:1].isupper() and callable(getattr(apps, n))))


def user_builder(name: str) -> Callable[..., Any]:
    """The function named by ``module:function``.

    Raises:
        UnknownModelError: not of that form, the module does not import, or it
            has no such callable.
    """
    module, sep, func = name.partition(":")
    if not sep or not module or not func:
        raise UnknownModelError(f"{name!r} is not of the form module:function")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise UnknownModelError(
            f"model {name!r}: cannot import module {module!r} ({e}); put it on PYTHONPATH"
        ) from e
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise UnknownModelError(f"model {name!r}: module {module!r} has no function {func!r}")
    return fn


def check_model_name(name: str) -> None:
    """Raise :class:`UnknownModelError` unless :func:`build_model` knows ``name``.

    Names of :data:`MODEL_NAMES` pass without importing anything; others import
    TensorFlow (a ``tf_keras.applications`` name) or the user's module.
    """
    if name in MODEL_NAMES:
        return
    if ":" in name:
        user_builder(name)
        return
    if name not in keras_application_names():
        raise UnknownModelError(f"unknown model {name!r}; {HOW_TO_LIST}")


def build_model(name: str, inputs: Any, classes: int) -> Any:
    """Build model ``name`` on the graph-mode tensor ``inputs``.

    A user's builder ``module:function`` is called as ``function(inputs,
    classes)`` inside the graph and device scope of the training step:
    ``inputs`` is the float32 input tensor of shape ``(batch, size, size, 3)``
    (build on it with ``tf_keras.Input(tensor=inputs)``), ``classes`` the
    number of logits. It returns a ``tf_keras.Model`` whose ``output`` is the
    ``(batch, classes)`` logits tensor (no softmax), for example::

        def small_cnn(inputs, classes):
            x = inp = tf_keras.Input(tensor=inputs)
            x = tf_keras.layers.Conv2D(16, 3, activation="relu")(x)
            x = tf_keras.layers.GlobalAveragePooling2D()(x)
            return tf_keras.Model(inp, tf_keras.layers.Dense(classes)(x))

    Args:
        name: a zoo name, a ``tf_keras.applications`` constructor, or
            ``module:function`` (see the module docstring).
        inputs: float32 tensor of shape ``(batch, size, size, 3)``.
        classes: number of output logits.

    Returns:
        A ``tf_keras.Model`` whose ``output`` is the logits tensor of shape
        ``(batch, classes)`` (no softmax).

    Raises:
        UnknownModelError: unknown name (the message says how to list valid ones).
        ValueError: image size below the model's minimum (:func:`min_image_size`,
            or Keras's own check), or a builder whose output is not
            ``(batch, classes)`` logits.
    """
    import tf_keras

    check_model_name(name)
    size = int(inputs.shape[1])
    if size < min_image_size(name):
        raise ValueError(f"model {name} needs image_size >= {min_image_size(name)}, got {size}")
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
    if ":" in name:
        model = user_builder(name)(inputs, classes)
        shape = tuple(getattr(getattr(model, "output", None), "shape", ()))
        if len(shape) != 2 or shape[1] != classes:
            raise ValueError(
                f"model {name!r}: the builder must return a tf_keras.Model whose output is "
                f"the (batch, {classes}) logits; got output shape {shape}"
            )
        return model
    app = getattr(tf_keras.applications, name)
    # Some constructors (MobileNetV3*) take only a Keras tensor; the others wrap
    # a plain one into the same Input layer themselves. The zoo's own Keras
    # models keep the plain tensor so that their graphs stay as profiled before.
    tensor = inputs if name in MODEL_NAMES else tf_keras.Input(tensor=inputs)
    try:
        return app(weights=None, input_tensor=tensor, classes=classes, classifier_activation=None)
    except (ValueError, TypeError) as e:  # Keras's own input checks
        raise ValueError(
            f"model {name}: tf_keras.applications.{name} cannot be built at image_size "
            f"{size}: {type(e).__name__}: {e}"
        ) from e


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


def make_keras_optimizer(name: str, learning_rate: float = 0.01) -> Any:
    """The ``tf_keras`` optimizer that does what :func:`make_optimizer`'s does
    (same rule and rates), for eager and ``tf.distribute`` training.

    Raises:
        ValueError: unknown name.
    """
    import tf_keras

    opts = tf_keras.optimizers
    if name == "sgd":
        return opts.SGD(learning_rate)
    if name == "momentum":
        return opts.SGD(learning_rate, momentum=0.9)
    if name == "adam":
        return opts.Adam(learning_rate * 0.1)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
