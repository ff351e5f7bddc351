"""Attention layers: `from keras_attn.layers import BahdanauAttention, ...`."""

from keras_attn.layers.bahdanau import BahdanauAttention

__all__ = [
    "BahdanauAttention",
]
