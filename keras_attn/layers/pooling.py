"""Attention pooling of hierarchical attention networks (Yang et al. 2016).

One learned context vector `u_c` asks "which step matters?" of every step of a sequence:
`u_t = tanh(h_t W + b)`, `alpha = softmax_t(u_t . u_c)` over the unmasked steps, and the
output is `sum_t alpha_t h_t`. A HAN applies it twice: to the words of each sentence, then to
the sentences of a document (docs/attention_family.md).
"""

import keras
from keras import ops

from keras_attn.layers import scoring
from keras_attn.layers.base import check_float_tensor, check_positive_int, config_of


def zero_masked(x, mask):
    """`x [B, T, ...]` with the rows where `mask [B, T]` is False set to 0.

    Done first, before any arithmetic, so that whatever a masked position holds (NaN, inf,
    1e30) can reach neither an output nor a gradient: `0 * NaN` would.
    """
    if mask is None:
        return x
    keep = ops.reshape(mask, tuple(ops.shape(mask)) + (1,) * (len(x.shape) - len(mask.shape)))
    return ops.where(keep, x, ops.zeros((), x.dtype))


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionPooling(keras.layers.Layer):
    """Pools `[B, T, D]` to `[B, D]` with a learned context vector (Yang et al. 2016).

    `u_t = tanh(h_t W + b)`, `alpha_t = softmax_t(u_t . u_c)` over the unmasked steps,
    output `sum_t alpha_t h_t`. A sequence whose every step is masked pools to zeros (and
    zero weights). The scores and the softmax run in float32 under mixed precision.

    Args:
        units: size of the attention space (`W [D, units]`, `b [units]`, `u_c [units]`).

    Call arguments:
        inputs: `[B, T, D]` float.
        mask: `[B, T]` bool (or the Keras mask of `inputs`, e.g. from `Embedding(mask_zero=True)`).
        return_attention_scores: also return `alpha [B, T]`.

    Weights, in order: `W` (`kernel`), `b` (`bias`), `u_c` (`context_vector`).

    Works in `keras.Sequential` after a sequence layer, and inside
    `keras.layers.TimeDistributed` to pool the words of every sentence of `[B, S, W, D]`.
    """

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = check_positive_int("units", units)
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "`inputs` must have shape [batch, steps, dim] with a known dim. "
                f"Received: inputs.shape={input_shape}"
            )
        dim = int(input_shape[-1])
        self.kernel = self.add_weight(
            name="kernel", shape=(dim, self.units), initializer="glorot_uniform"
        )
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
        self.context_vector = self.add_weight(
            name="context_vector", shape=(self.units,), initializer="glorot_uniform"
        )
        self.built = True

    def call(self, inputs, mask=None, return_attention_scores=False):
        check_float_tensor("inputs", inputs)
        if len(inputs.shape) != 3:
            raise ValueError(
                f"`inputs` must have rank 3 ([batch, steps, dim]). Received: inputs.shape={tuple(inputs.shape)}"
            )
        mask = scoring.to_bool_mask(mask)
        if mask is not None and len(mask.shape) != 2:
            raise ValueError(
                f"`mask` must have shape [batch, steps]. Received: mask.shape={tuple(mask.shape)}"
            )
        h = zero_masked(inputs, mask)
        u = ops.tanh(scoring.project(h, self.kernel) + self.bias)
        scores = ops.einsum(
            "btu,u->bt", ops.cast(u, "float32"), ops.cast(self.context_vector, "float32")
        )
        weights = ops.cast(scoring.masked_softmax(scores, mask), h.dtype)
        pooled = ops.einsum("bt,btd->bd", weights, h)
        if return_attention_scores:
            return pooled, weights
        return pooled

    def compute_output_spec(self, inputs, mask=None, return_attention_scores=False):
        pooled = keras.KerasTensor((inputs.shape[0], inputs.shape[-1]), dtype=self.compute_dtype)
        if return_attention_scores:
            return pooled, keras.KerasTensor(tuple(inputs.shape[:2]), dtype=self.compute_dtype)
        return pooled

    def compute_mask(self, inputs, previous_mask=None):
        return None  # the steps axis is pooled away

    def get_config(self):
        return {**super().get_config(), **config_of(self, AttentionPooling.__init__)}
