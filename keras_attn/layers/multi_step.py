"""The multi-step attention of convolutional sequence to sequence learning (Gehring et al. 2017):
every decoder layer attends on its own, with a query that adds the target embedding to the
layer's state and values that add the source embedding to the encoder output."""

import keras
from keras import ops

from keras_attn import _checks
from keras_attn.layers import scoring
from keras_attn.layers.base import check_float_tensor, config_of
from keras_attn.layers.pooling import zero_masked

_NAMES = ("decoder_state", "target_embedding", "encoder_output", "source_embedding")


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiStepAttention(keras.layers.Layer):
    """ConvS2S attention of one decoder layer (Gehring et al. 2017).

    `d_i = h_i W + b + g_i`; `a_ij = softmax_j(d_i . z_j)` over the unmasked source positions;
    `c_i = sum_j a_ij (z_j + e_j)`, times `sqrt(m)` when `scale_context` (`m` = the number of
    unmasked source positions of the example), which keeps the context's variance from
    shrinking with the source length as the paper does.

    Args:
        scale_context: multiply the context by `sqrt(m)`.

    Call arguments:
        decoder_state: `h [B, Tq, Dh]`, the decoder layer's output (before its residual).
        target_embedding: `g [B, Tq, E]`, embedding (+ position) of the previous target token.
        encoder_output: `z [B, Ts, E]`, the encoder's last layer.
        source_embedding: `e [B, Ts, E]`, the source's input embedding (+ position).
        source_mask: `[B, Ts]` bool (default: the Keras mask of `encoder_output`).
        return_attention_scores: also return `a [B, Tq, Ts]`.

    Returns `c [B, Tq, E]` (and `a`). A fully masked source gives zeros; masked source
    positions (and masked query rows, from `decoder_state`'s Keras mask) never influence any
    output, whatever they hold. Scores and softmax run in float32 under mixed precision.

    Weights, in order: `W [Dh, E]` (`kernel`), `b [E]` (`bias`).
    """

    def __init__(self, scale_context=True, **kwargs):
        super().__init__(**kwargs)
        self.scale_context = _checks.check_bool("scale_context", scale_context)
        self.supports_masking = True

    def build(
        self,
        decoder_state_shape,
        target_embedding_shape=None,
        encoder_output_shape=None,
        source_embedding_shape=None,
    ):
        shapes = [
            decoder_state_shape,
            target_embedding_shape,
            encoder_output_shape,
            source_embedding_shape,
        ]
        shapes = [None if s is None else tuple(s) for s in shapes]
        self._check_shapes(*shapes)
        embed = next((s[-1] for s in shapes[1:] if s is not None and s[-1] is not None), None)
        if shapes[0][-1] is None or embed is None:
            raise ValueError(
                "The last dimensions of `decoder_state` and `encoder_output` must be known. "
                f"Received: decoder_state.shape={shapes[0]}, encoder_output.shape={shapes[2]}"
            )
        self.state_dim, self.embed_dim = int(shapes[0][-1]), int(embed)
        self.kernel = self.add_weight(
            name="kernel", shape=(self.state_dim, self.embed_dim), initializer="glorot_uniform"
        )
        self.bias = self.add_weight(name="bias", shape=(self.embed_dim,), initializer="zeros")
        self.built = True

    @staticmethod
    def _check_shapes(*shapes):
        for name, shape in zip(_NAMES, shapes):
            if shape is not None and len(shape) != 3:
                raise ValueError(f"`{name}` must have rank 3. Received: {name}.shape={shape}")
        dims = {
            n: s[-1] for n, s in zip(_NAMES[1:], shapes[1:]) if s is not None and s[-1] is not None
        }
        if len(set(dims.values())) > 1:
            raise ValueError(
                "`target_embedding`, `encoder_output` and `source_embedding` must share their last "
                f"dimension E. Received: {', '.join(f'{k}.shape[-1]={v}' for k, v in dims.items())}"
            )
        for a, b, what in ((0, 1, "decoder steps"), (2, 3, "source positions")):
            sa, sb = shapes[a], shapes[b]
            if sa is not None and sb is not None and None not in (sa[1], sb[1]) and sa[1] != sb[1]:
                raise ValueError(
                    f"`{_NAMES[a]}` and `{_NAMES[b]}` must have the same number of {what}. "
                    f"Received: {_NAMES[a]}.shape={sa}, {_NAMES[b]}.shape={sb}"
                )

    def call(
        self,
        decoder_state,
        target_embedding,
        encoder_output,
        source_embedding,
        source_mask=None,
        return_attention_scores=False,
        decoder_state_mask=None,
        encoder_output_mask=None,
    ):
        inputs = (decoder_state, target_embedding, encoder_output, source_embedding)
        for name, x in zip(_NAMES, inputs):
            check_float_tensor(name, x)
        self._check_shapes(*(tuple(x.shape) for x in inputs))
        if decoder_state.shape[-1] is not None and decoder_state.shape[-1] != self.state_dim:
            raise ValueError(
                f"`decoder_state` last dimension must be {self.state_dim}, as when the layer was built. "
                f"Received: decoder_state.shape={tuple(decoder_state.shape)}"
            )
        mask = scoring.to_bool_mask(source_mask if source_mask is not None else encoder_output_mask)
        if mask is not None and len(mask.shape) != 2:
            raise ValueError(
                f"`source_mask` must have shape [batch, Ts]. Received: source_mask.shape={tuple(mask.shape)}"
            )
        query_mask = scoring.to_bool_mask(decoder_state_mask)
        dtype = decoder_state.dtype
        h = zero_masked(decoder_state, query_mask)
        g = zero_masked(target_embedding, query_mask)
        z = ops.cast(zero_masked(encoder_output, mask), "float32")
        e = ops.cast(zero_masked(source_embedding, mask), "float32")
        d = ops.cast(scoring.project(h, self.kernel) + self.bias + g, "float32")
        scores = ops.einsum("bqe,bse->bqs", d, z)
        weights = scoring.masked_softmax(scores, None if mask is None else ops.expand_dims(mask, 1))
        context = ops.einsum("bqs,bse->bqe", weights, z + e)
        if self.scale_context:
            if mask is None:
                m = ops.cast(ops.shape(z)[1], "float32")
            else:
                m = ops.reshape(ops.sum(ops.cast(mask, "float32"), axis=1), (-1, 1, 1))
            context = context * ops.sqrt(m)
        if query_mask is not None:
            keep = ops.expand_dims(query_mask, -1)
            context = ops.where(keep, context, 0.0)
            weights = ops.where(keep, weights, 0.0)
        context = ops.cast(context, dtype)
        if return_attention_scores:
            return context, ops.cast(weights, dtype)
        return context

    def compute_mask(self, decoder_state, previous_mask=None):
        if isinstance(previous_mask, (list, tuple)):
            previous_mask = previous_mask[0] if previous_mask else None
        return previous_mask

    def get_config(self):
        return {**super().get_config(), **config_of(self, MultiStepAttention.__init__)}
