"""keras-attn: attention layers, decoding and serving for Keras 3."""

__version__ = "0.1.0"

from keras_attn import (
    layers,
    losses,
)
