"""Attention layers: `from keras_attn.layers import BahdanauAttention, ...`."""

from keras_attn.layers.bahdanau import BahdanauAttention
from keras_attn.layers.multi_head import MultiHeadAttention
from keras_attn.layers.positional import PositionalEncoding
from keras_attn.layers.luong import LuongAttention
from keras_attn.layers.feed_forward import PositionwiseFeedForward

__all__ = [
    "BahdanauAttention",
    "MultiHeadAttention",
    "PositionalEncoding",
    "LuongAttention",
    "PositionwiseFeedForward",
]
