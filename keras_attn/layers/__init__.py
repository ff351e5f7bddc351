"""Attention layers: `from keras_attn.layers import BahdanauAttention, ...`."""

from keras_attn.layers.bahdanau import BahdanauAttention
from keras_attn.layers.luong import LuongAttention
from keras_attn.layers.feed_forward import PositionwiseFeedForward

__all__ = [
    "BahdanauAttention",
    "LuongAttention",
    "PositionwiseFeedForward",
]
