"""Attention layers: `from keras_attn.layers import BahdanauAttention, ...`."""

from keras_attn.layers.attention_cell import AttentionDecoder, AttentionRNNCell
from keras_attn.layers.attention_over_attention import AttentionOverAttention
from keras_attn.layers.bahdanau import BahdanauAttention
from keras_attn.layers.feed_forward import PositionwiseFeedForward
from keras_attn.layers.grouped_query import GroupedQueryAttention
from keras_attn.layers.hard import HardAttention
from keras_attn.layers.luong import LuongAttention
from keras_attn.layers.multi_head import MultiHeadAttention
from keras_attn.layers.multi_step import MultiStepAttention
from keras_attn.layers.pooling import AttentionPooling
from keras_attn.layers.positional import PositionalEncoding
from keras_attn.layers.rotary import RotaryEmbedding
from keras_attn.layers.transformer import TransformerDecoderLayer, TransformerEncoderLayer

__all__ = [
    "AttentionDecoder",
    "AttentionOverAttention",
    "AttentionPooling",
    "AttentionRNNCell",
    "BahdanauAttention",
    "GroupedQueryAttention",
    "HardAttention",
    "LuongAttention",
    "MultiHeadAttention",
    "MultiStepAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "RotaryEmbedding",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
]
