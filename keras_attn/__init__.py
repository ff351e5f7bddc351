"""keras-attn: attention layers, decoding and serving for Keras 3."""

__version__ = "0.1.0"

# The subpackages import on first use (`keras_attn.layers`, `from keras_attn import losses`):
# `import keras_attn` alone (the `keras-attn` command's `--help`) loads no Keras or TensorFlow.
_LAZY = ("layers", "losses")


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"keras_attn.{name}")
    raise AttributeError(f"module 'keras_attn' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
