"""Bahdanau (additive) attention with query and key projections."""

import math

import keras
from keras import ops

from keras_attn import _checks
from keras_attn.layers import scoring
from keras_attn.layers.base import CrossAttention, check_positive_int, config_of


@keras.saving.register_keras_serializable(package="keras_attn")
class BahdanauAttention(CrossAttention):
    """Additive attention of Bahdanau et al. (2015).

    `e_ts = v . tanh(W_q q_t + W_k k_s)`; with `normalize=True` the
    weight-normalised form `e_ts = g (v / |v|) . tanh(W_q q_t + W_k k_s + b)`.
    The weights are the softmax of `e` over the unmasked source positions.

    Args:
        units: size of the projected space (`W_q [Dq, units]`, `W_k [Dk, units]`).
        normalize: use weight normalisation (adds the scalar `g` and bias `b`).
        dropout: dropout rate on the attention weights (training only).

    Call arguments are those of every cross-attention layer:
    `layer(query, value, key=None, value_mask=None,
    return_attention_scores=False, training=None)`, with `query [B, Tq, Dq]`
    or `[B, Dq]` for one decoder step.

    Weights, in order: `W_q`, `W_k`, `v`, then `g`, `b` if `normalize`.
    """

    def __init__(self, units, normalize=False, dropout=0.0, **kwargs):
        super().__init__(dropout=dropout, **kwargs)
        self.units = check_positive_int("units", units)
        self.normalize = _checks.check_bool("normalize", normalize)
        self.scorer = scoring.Score("additive", units=self.units)

    def build_extra(self, query_dim, key_dim):
        if self.normalize:
            # Not autocast: the score is computed in float32 (see scoring.Score).
            self.attention_g = self.add_weight(
                name="attention_g",
                shape=(),
                initializer=keras.initializers.Constant(math.sqrt(1.0 / self.units)),
                autocast=False,
            )
            self.attention_b = self.add_weight(
                name="attention_b", shape=(self.units,), initializer="zeros", autocast=False
            )

    def score_vector(self):
        """The vector the tanh features are projected on (`v` or `g v/|v|`), in the
        variables' dtype (float32 under mixed precision)."""
        v = ops.convert_to_tensor(self.scorer.vector)
        if not self.normalize:
            return v
        g = ops.convert_to_tensor(self.attention_g)
        return g * v / ops.sqrt(ops.sum(ops.square(v)) + 1e-12)

    def attend(self, query, keys, value, value_mask, return_weights, training):
        bias = self.attention_b if self.normalize else None
        scores = self.scorer(query, keys, vector=self.score_vector(), bias=bias)  # float32
        mask = None if value_mask is None else ops.expand_dims(value_mask, 1)
        weights = ops.cast(scoring.masked_softmax(scores, mask), value.dtype)
        value = scoring.zero_masked(value, value_mask)  # padding may hold anything
        context = scoring.weighted_sum(self.apply_dropout(weights, training), value)
        return context, weights

    def get_config(self):
        return {**super().get_config(), **config_of(self, BahdanauAttention.__init__)}
