"""Transformer encoder and decoder layers (Vaswani et al. 2017).

Both layers are built from our `MultiHeadAttention` and
`PositionwiseFeedForward`, each sublayer wrapped in dropout, a residual
connection and layer normalisation:

- post-norm (the paper, default): `x = LayerNorm(x + Dropout(Sublayer(x)))`
- pre-norm (`norm_first=True`):   `x = x + Dropout(Sublayer(LayerNorm(x)))`

A pre-norm stack usually ends with one more LayerNorm after its last layer;
that belongs to the model, not to these layers.
"""

import dataclasses

import keras

from keras_attn import _checks
from keras_attn.layers import masks, rng, scoring
from keras_attn.layers.base import (
    check_float_tensor,
    check_positive_int,
    check_rate,
    config_of,
    feature_dim,
    handed_on_signature,
)
from keras_attn.layers.feed_forward import PositionwiseFeedForward
from keras_attn.layers.multi_head import MultiHeadAttention
from keras_attn.layers.normalization import layer_norm

_and = masks.logical_and
_keras_mask = masks.keras_mask
_keras_masks_hidden = masks.keras_masks_hidden
_padding_mask = masks.padding_mask


def _check_sequence(name, x, dim):
    """`x [batch, length, dim]` of floats, `dim` as when the layer was built."""
    check_float_tensor(name, x)
    if len(x.shape) != 3 or x.shape[-1] != dim:
        raise ValueError(
            f"`{name}` must have shape [batch, length, {dim}], as when the layer was built. "
            f"Received: {name}.shape={tuple(x.shape)}"
        )


def _check_caches(self_attention_cache, self_attention_cache_index, cross_attention_cache):
    """The decoder's caches: `(key_cache, value_cache)` tuples, the self-attention cache with
    its index."""
    for name, cache in (
        ("self_attention_cache", self_attention_cache),
        ("cross_attention_cache", cross_attention_cache),
    ):
        if cache is not None and (not isinstance(cache, (tuple, list)) or len(cache) != 2):
            raise ValueError(
                f"`{name}` must be a tuple (key_cache, value_cache). "
                f"Received: {name} of type {type(cache).__name__}"
            )
    if (self_attention_cache is None) != (self_attention_cache_index is None):
        raise ValueError(
            "`self_attention_cache` and `self_attention_cache_index` go together: pass both "
            "or neither. Received: "
            f"self_attention_cache={'given' if self_attention_cache is not None else None}, "
            f"self_attention_cache_index={self_attention_cache_index!r}"
        )


def _static_length(x, axis=1):
    return None if x is None else x.shape[axis]


def _same_rows(x, cache):
    """Whether `x` and the cache have the same rows, known while tracing."""
    rows, cache_rows = x.shape[0], cache.shape[0]
    return rows is not None and rows == cache_rows


def _group_by_example(h, cache):
    """`h [N, T, d]` -> `[B, (N // B) * T, d]` for a cross-attention cache of B rows (N = B K,
    rows `b K .. b K + K - 1` those of example b): the K rows of an example are its queries."""
    return keras.ops.reshape(h, (keras.ops.shape(cache)[0], -1, h.shape[-1]))


def _ungroup_scores(scores, length):
    """Cross-attention weights `[B, heads, K T, S]` -> `[N, heads, T, S]` (`_group_by_example`
    undone: the weights of each of the N rows)."""
    batch, heads, size = keras.ops.shape(scores)[0], scores.shape[1], keras.ops.shape(scores)[-1]
    scores = keras.ops.reshape(scores, (batch, heads, -1, length, size))
    scores = keras.ops.transpose(scores, (0, 2, 1, 3, 4))
    return keras.ops.reshape(scores, (-1, heads, length, size))


@dataclasses.dataclass(frozen=True)
class AttentionOptions:
    """The `MultiHeadAttention` options a Transformer layer gives every attention sublayer
    (docs/multi_head.md): the layers' and the `Transformer` model's arguments of these names.
    `checked` refuses a bad value (by `MultiHeadAttention`'s checks) when they are given."""

    num_key_value_heads: int | None = None
    sliding_window: int | None = None
    use_gate: bool = False
    rotary_max_wavelength: float | None = None
    flash_attention: bool | None = None

    def checked(self, num_heads):
        """These options, once a `MultiHeadAttention` of `num_heads` heads has taken them."""
        MultiHeadAttention(num_heads, 2, **self.arguments())
        return self

    def arguments(self, cross=False):
        """`{name: value}` for `MultiHeadAttention`. Positions mean nothing across two
        sequences, so a cross-attention (`cross=True`) has no rotary embedding and no
        sliding window."""
        options = dataclasses.asdict(self)
        if cross:
            options.update(rotary_max_wavelength=None, sliding_window=None)
        return options


class _TransformerLayer(keras.layers.Layer):
    """What the encoder and decoder layers share: arguments, config, sublayers."""

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        key_dim=None,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        norm_first=False,
        activation_dropout=0.0,
        num_key_value_heads=None,
        sliding_window=None,
        use_gate=False,
        rotary_max_wavelength=None,
        flash_attention=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        options = AttentionOptions(
            num_key_value_heads, sliding_window, use_gate, rotary_max_wavelength, flash_attention
        )
        self.attention_options = options.checked(self.num_heads)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.key_dim = check_positive_int("key_dim", key_dim, allow_none=True)
        self.dropout = check_rate("dropout", dropout)
        self.activation_dropout = check_rate("activation_dropout", activation_dropout)
        try:
            self.activation = keras.activations.get(activation)
        except ValueError as e:
            raise ValueError(
                "`activation` must be a Keras activation name or a callable. "
                f"Received: activation={activation!r}"
            ) from e
        self.layer_norm_epsilon = _checks.check_positive("layer_norm_epsilon", layer_norm_epsilon)
        self.norm_first = _checks.check_bool("norm_first", norm_first)
        self.supports_masking = True

    # ---------------------------------------------------------------- helpers
    def _model_dim(self, shape, name):
        shape = tuple(shape)
        dim = feature_dim(shape, name, rank=3)
        if self.key_dim is None and dim % self.num_heads != 0:
            raise ValueError(
                f"`key_dim` was not given, so it defaults to dim // num_heads, but the "
                f"model dimension {dim} is not divisible by num_heads={self.num_heads}. "
                f"Pass `key_dim`, or change num_heads. Received: num_heads={self.num_heads}, "
                f"{name}.shape={shape}"
            )
        return dim

    def _head_dim(self, model_dim):
        return self.key_dim if self.key_dim is not None else model_dim // self.num_heads

    def _attention(self, name, cross=False):
        """A self-attention (`cross=False`) or cross-attention sublayer. Positions mean
        nothing across two sequences, so cross-attention has no rotary embedding and no
        sliding window (docs/multi_head.md)."""
        return MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self._head_dim(self.model_dim),
            dropout=self.dropout,
            dtype=self.dtype_policy,
            name=name,
            **self.attention_options.arguments(cross),
        )

    def _layer_norm(self, name, shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(shape)
        return norm

    def _dropout(self, name):
        return rng.Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_self_attention(self, shape, name):
        """The model dimension (from the shape of the input `name`) and the self-attention
        sublayer with its LayerNorm and dropout, the first of every layer's weights; returns
        the shape as a tuple."""
        shape = tuple(shape)
        self.model_dim = self._model_dim(shape, name)
        self.self_attention_layer = self._attention("self_attention")
        self.self_attention_layer.build(shape, shape)
        self.self_attention_layer_norm = self._layer_norm("self_attention_layer_norm", shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        return shape

    def _build_feed_forward(self, shape):
        """The feed-forward sublayer with its LayerNorm and dropout, the last weights."""
        self.feed_forward = PositionwiseFeedForward(
            self.intermediate_dim,
            activation=self.activation,
            dropout=self.activation_dropout,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward.build(shape)
        self.feed_forward_layer_norm = self._layer_norm("feed_forward_layer_norm", shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")

    def _residual(self, x, sublayer_fn, norm, dropout, training):
        """Apply one sublayer with dropout, residual and LayerNorm.

        `sublayer_fn(h)` returns `(output, *extras)`; the extras are returned.
        """
        h = layer_norm(x, norm) if self.norm_first else x
        out = sublayer_fn(h)
        extras = ()
        if isinstance(out, tuple):
            out, extras = out[0], out[1:]
        y = x + dropout(out, training=training)
        if not self.norm_first:
            y = layer_norm(y, norm)
        return y, extras

    def _ffn_block(self, x, training):
        y, _ = self._residual(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_layer_norm,
            self.feed_forward_dropout,
            training,
        )
        return y

    def get_config(self):
        activation = keras.activations.serialize(self.activation)
        values = {**self.attention_options.arguments(), "activation": activation}
        return {
            **super().get_config(),
            **config_of(self, _TransformerLayer.__init__, values=values),
        }


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoderLayer(_TransformerLayer):
    """One Transformer encoder layer: self-attention, then a feed-forward block.

    Post-norm (Vaswani et al. 2017, the default)::

        x = LayerNorm_1(x + Dropout(SelfAttention(x)))
        y = LayerNorm_2(x + Dropout(FFN(x)))

    Pre-norm (`norm_first=True`)::

        x = x + Dropout(SelfAttention(LayerNorm_1(x)))
        y = x + Dropout(FFN(LayerNorm_2(x)))

    `dropout` is used where the paper (Vaswani et al. 2017, section 5.4) uses
    it: on the attention weights and on each sublayer's output before the
    residual addition. `activation_dropout` drops the feed-forward block's
    hidden activations (tensor2tensor's `relu_dropout`, fairseq's
    `activation_dropout`, PyTorch's layers reuse `dropout` there); the paper
    has none, hence the default 0 (docs/layers.md).

    Args:
        num_heads: number of attention heads.
        intermediate_dim: hidden width of the feed-forward block (`d_ff`).
        key_dim: size of each head; defaults to `d_model // num_heads`
            (a `ValueError` at build time when `d_model` is not divisible).
        num_key_value_heads, sliding_window, use_gate, rotary_max_wavelength,
        flash_attention: passed to every `MultiHeadAttention` sublayer
            (docs/multi_head.md), except that cross-attention gets no rotary
            embedding and no sliding window.
        dropout: dropout rate (see above).
        activation: activation of the feed-forward block.
        layer_norm_epsilon: epsilon of both LayerNorms.
        norm_first: pre-norm instead of post-norm.
        activation_dropout: dropout rate on the feed-forward block's hidden
            activations (see above; default 0).

    Call arguments:
        inputs: `[B, T, d_model]`.
        padding_mask: `[B, T]`, True (or 1) for real positions, combined
            (logical AND) with the Keras mask of `inputs` when there is one
            (a Keras mask and the same `padding_mask` give identical
            outputs). A padded position is padding throughout: its input row
            is zeroed first and the self-attention masks it as a query (a
            zero context) and as a key, so what it holds reaches no output
            and no gradient; it still gets an output, that of a zero row
            (docs/layers.md).
        attention_mask: `[B, T, T]`, True where query `i` may attend to key
            `j`; combined with the padding mask.
        training: dropout on or off.
        return_attention_scores: also return the self-attention weights
            `[B, num_heads, T, T]`.

    Returns `outputs [B, T, d_model]` (with `inputs`'s Keras mask passed on),
    then the scores if asked. A sequence whose every position is masked gets
    finite outputs (the attention contributes zeros).

    Sublayers (and weight order): `self_attention_layer`
    (`MultiHeadAttention`), `self_attention_layer_norm`, `feed_forward`
    (`PositionwiseFeedForward`), `feed_forward_layer_norm`.
    """

    def build(self, input_shape):
        input_shape = self._build_self_attention(input_shape, "inputs")
        self._build_feed_forward(input_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        _check_sequence("inputs", inputs, self.model_dim)
        length = _static_length(inputs)
        key_mask = _and(
            _padding_mask("padding_mask", padding_mask, length),
            _keras_mask(inputs),
        )
        mask = None
        if attention_mask is not None:
            attention_mask = scoring.to_bool_mask(attention_mask)
            if len(attention_mask.shape) != 3 or any(
                m is not None and t is not None and m != t
                for m, t in zip(attention_mask.shape, (inputs.shape[0], length, length))
            ):
                raise ValueError(
                    f"`attention_mask` must have shape [batch, T, T] with T={length}. "
                    f"Received: attention_mask.shape={tuple(attention_mask.shape)}"
                )
            mask = attention_mask
        # Padded rows are zeroed and are padding as queries too (docs/layers.md).
        inputs = scoring.zero_masked(inputs, key_mask)

        def attend(h):
            with _keras_masks_hidden(h):
                return self.self_attention_layer(
                    h,
                    h,
                    attention_mask=mask,
                    query_mask=key_mask,
                    value_mask=key_mask,
                    return_attention_scores=return_attention_scores,
                    training=training,
                )

        x, extras = self._residual(
            inputs,
            attend,
            self.self_attention_layer_norm,
            self.self_attention_dropout,
            training,
        )
        outputs = self._ffn_block(x, training)
        if return_attention_scores:
            return outputs, extras[0]
        return outputs


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoderLayer(_TransformerLayer):
    """One Transformer decoder layer: causal self-attention, cross-attention, FFN.

    Post-norm (default)::

        x = LayerNorm_1(x + Dropout(SelfAttention(x, causal)))
        x = LayerNorm_2(x + Dropout(CrossAttention(x, encoder_sequence)))
        y = LayerNorm_3(x + Dropout(FFN(x)))

    Pre-norm (`norm_first=True`): `x = x + Dropout(Sublayer(LayerNorm(x)))`
    for each of the three. With `cross_attention=False` the middle block is
    absent (a decoder-only / language-model layer).

    Args: those of `TransformerEncoderLayer` (in the same order), plus
        cross_attention: whether the layer attends to an encoder output (by keyword).

    Call arguments:
        decoder_sequence: `[B, T, d_model]` (a chunk of `T` new positions
            when decoding with a cache).
        encoder_sequence: `[B, S, d_enc]`; required when
            `cross_attention=True` unless `cross_attention_cache` is given
            (then the cache is used and `encoder_sequence` is ignored).
            Must be None when `cross_attention=False`.
        decoder_padding_mask: `[B, T]` True for real decoder positions,
            padding throughout as in the encoder layer (rows zeroed, masked
            as self-attention queries and keys); combined (AND) with the
            Keras mask of `decoder_sequence`. With a self-attention cache it
            covers the cache positions instead, `[B, max_length]`, the
            chunk's rows are padding where it says so at the positions they
            are written to, and the Keras mask of the chunk is not used.
        encoder_padding_mask: `[B, S]` True for real encoder positions;
            combined (AND) with the Keras mask of `encoder_sequence`. Pass it
            explicitly along with a cross-attention cache. An example whose
            every encoder position is masked gets a zero cross-attention
            (finite outputs).
        self_attention_cache: `(key_cache, value_cache)`, each
            `[B, max_length, num_heads, head_dim]`, from `init_cache` or a
            previous call. Requires `self_attention_cache_index`.
        self_attention_cache_index: where the new positions go (a Python int
            or a scalar tensor, e.g. the step of a `while_loop`). The chunk
            attends causally to the cached positions before it and to itself.
        cross_attention_cache: `(key_cache, value_cache)` of the projected
            encoder output, from `compute_cross_cache`. It may hold one row per
            example for several decoder rows each (beam search): with
            `decoder_sequence [N, T, d]` and a cache of `B` rows (`N = B K`,
            decoder rows `b K .. b K + K - 1` those of example `b`), the `K T`
            queries of an example attend its cache row together, and
            `encoder_padding_mask` is `[B, S]`. The cache is then read once per
            example, not once per decoder row.
        cross_attention_cache_zeroed: True when `cross_attention_cache` came
            from `compute_cross_cache(encoder_sequence, encoder_padding_mask)`
            with the `encoder_padding_mask` of this call: its padding rows are
            already zero and are not zeroed again (one pass over the cache
            fewer per step). Default False: they are zeroed at every call.
        use_causal_mask: causal self-attention (default True).
        return_attention_scores: also return the cross-attention weights
            `[B, num_heads, T, S]` (the self-attention weights
            `[B, num_heads, T, T_keys]` when `cross_attention=False`).
        training: dropout on or off.

    Returns `outputs [B, T, d_model]` (with the decoder's Keras mask passed
    on), then the scores if asked, then `(self_attention_cache,
    cross_attention_cache)` when either cache was given: the updated
    self-attention cache and the cross-attention cache as given (None for a
    cache that was not given). The caches are plain tensor tuples, so a
    search can hold them in its loop state and reorder them along beams
    with `ops.take(..., axis=0)`.

    Sublayers (and weight order): `self_attention_layer`,
    `self_attention_layer_norm`, then if `cross_attention`:
    `cross_attention_layer`, `cross_attention_layer_norm`; then
    `feed_forward`, `feed_forward_layer_norm`.
    """

    def __init__(self, num_heads, intermediate_dim, *args, cross_attention=True, **kwargs):
        """The encoder layer's arguments (one table: `_TransformerLayer.__init__`, in the same
        order), and `cross_attention` by keyword; `__signature__` shows them all (below)."""
        super().__init__(num_heads, intermediate_dim, *args, **kwargs)
        self.cross_attention = _checks.check_bool("cross_attention", cross_attention)

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        shape = self._build_self_attention(decoder_sequence_shape, "decoder_sequence")
        if self.cross_attention:
            if encoder_sequence_shape is None:
                raise ValueError(
                    "A decoder layer with cross_attention=True is built from the shapes of "
                    "`decoder_sequence` and `encoder_sequence`: call it with an "
                    "`encoder_sequence` first, or pass `encoder_sequence_shape` to `build`. "
                    "Received: encoder_sequence_shape=None"
                )
            encoder_sequence_shape = tuple(encoder_sequence_shape)
            feature_dim(encoder_sequence_shape, "encoder_sequence", rank=3)
            self.cross_attention_layer = self._attention("cross_attention", cross=True)
            self.cross_attention_layer.build(shape, encoder_sequence_shape)
            self.cross_attention_layer_norm = self._layer_norm("cross_attention_layer_norm", shape)
            self.cross_attention_dropout = self._dropout("cross_attention_dropout")
        self._build_feed_forward(shape)
        self.built = True

    # ----------------------------------------------------------------- caches
    def _require_built(self, what):
        if not self.built:
            raise ValueError(
                f"`{what}` needs the layer's weights: call the layer once or `build()` it "
                f"first. Received: {what} on an unbuilt layer {self.name!r}"
            )

    def init_cache(self, batch_size, max_length, dtype=None, ring=False):
        """An all-zero self-attention cache `(key_cache, value_cache)`.

        Each is `[batch_size, max_length, num_heads, head_dim]` (`num_key_value_heads`
        heads with grouped-query attention), in the layer's compute dtype unless
        `dtype` is given. With `ring=True`, `sliding_window=w` and `max_length > w` it
        is a ring buffer of `w` rows written one row per call (docs/multi_head.md): its
        size does not grow with the generation (the decoding steps ask for it)."""
        self._require_built("init_cache")
        return self.self_attention_layer.init_cache(batch_size, max_length, dtype=dtype, ring=ring)

    def compute_cross_cache(self, encoder_sequence, encoder_padding_mask=None):
        """The projected encoder keys and values `(key_cache, value_cache)`.

        Compute them once per source and pass them as `cross_attention_cache`
        at every decoding step (with `encoder_padding_mask`). Given
        `encoder_padding_mask [B, S]`, the rows of padding are zeroed here, once:
        pass the same mask and `cross_attention_cache_zeroed=True` at each step
        and the step does not zero them again (docs/decoding.md).
        """
        if not self.cross_attention:
            raise ValueError(
                "`compute_cross_cache` needs a layer with cross-attention. "
                "Received: cross_attention=False"
            )
        self._require_built("compute_cross_cache")
        if encoder_padding_mask is not None:
            encoder_padding_mask = _padding_mask(
                "encoder_padding_mask", encoder_padding_mask, _static_length(encoder_sequence)
            )
        return self.cross_attention_layer.compute_cache(encoder_sequence, mask=encoder_padding_mask)

    # ------------------------------------------------------------------- call
    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        self_attention_cache_index=None,
        cross_attention_cache=None,
        use_causal_mask=True,
        return_attention_scores=False,
        training=None,
        cross_attention_cache_zeroed=False,
    ):
        self._check_cross_arguments(encoder_sequence, encoder_padding_mask, cross_attention_cache)
        _check_caches(self_attention_cache, self_attention_cache_index, cross_attention_cache)
        self._check_sequences(decoder_sequence, encoder_sequence)
        _checks.check_bool("cross_attention_cache_zeroed", cross_attention_cache_zeroed)
        x, scores, new_self_cache = self._self_attention_block(
            decoder_sequence,
            decoder_padding_mask,
            self_attention_cache,
            self_attention_cache_index,
            use_causal_mask,
            return_attention_scores and not self.cross_attention,
            training,
        )
        if self.cross_attention:
            x, scores = self._cross_attention_block(
                x,
                encoder_sequence,
                encoder_padding_mask,
                cross_attention_cache,
                cross_attention_cache_zeroed,
                return_attention_scores,
                training,
            )
        outputs = self._ffn_block(x, training)
        result = (outputs,)
        if return_attention_scores:
            result += (scores,)
        if self_attention_cache is not None or cross_attention_cache is not None:
            result += ((new_self_cache, cross_attention_cache),)
        return result[0] if len(result) == 1 else result

    def _self_attention_block(
        self, decoder_sequence, padding_mask, cache, cache_index, causal, weights_wanted, training
    ):
        """The self-attention sublayer with its residual: `(x, weights or None, the updated
        cache or None)`. Its keys are the chunk itself, or the whole cache; the chunk's own
        rows (padding as queries too, zeroed: docs/layers.md) are those keys or their rows of
        the cache."""
        x = decoder_sequence
        if cache is not None:
            key_mask = _padding_mask("decoder_padding_mask", padding_mask, _static_length(cache[0]))
            query_mask = masks.cache_rows(key_mask, cache_index, keras.ops.shape(x)[1])
        else:
            key_mask = query_mask = _and(
                _padding_mask("decoder_padding_mask", padding_mask, _static_length(x)),
                _keras_mask(decoder_sequence),
            )
        x = scoring.zero_masked(x, query_mask)

        def self_attend(h):
            kwargs = {}
            if cache is not None:
                kwargs = {"cache": cache, "cache_index": cache_index}
            with _keras_masks_hidden(h):
                out = self.self_attention_layer(
                    h,
                    h,
                    query_mask=query_mask,
                    value_mask=key_mask,
                    use_causal_mask=causal,
                    return_attention_scores=weights_wanted,
                    training=training,
                    **kwargs,
                )
            return out if isinstance(out, tuple) else (out,)

        x, extras = self._residual(
            x, self_attend, self.self_attention_layer_norm, self.self_attention_dropout, training
        )
        extras = list(extras)
        new_cache = extras.pop() if cache is not None else None
        return x, (extras[0] if extras else None), new_cache

    def _cross_attention_block(
        self, x, encoder_sequence, padding_mask, cache, cache_zeroed, weights_wanted, training
    ):
        """The cross-attention sublayer with its residual: `(x, weights or None)`, the keys
        the encoder's sequence or its precomputed `cache`."""
        if cache is not None:
            enc_mask = _padding_mask("encoder_padding_mask", padding_mask, _static_length(cache[0]))
        else:
            enc_mask = _and(
                _padding_mask(
                    "encoder_padding_mask", padding_mask, _static_length(encoder_sequence)
                ),
                _keras_mask(encoder_sequence),
            )

        def cross_attend(h):
            with _keras_masks_hidden(h, encoder_sequence):
                if cache is not None:
                    out = self._attend_cross_cache(
                        h, cache, enc_mask, cache_zeroed, weights_wanted, training
                    )
                else:
                    out = self.cross_attention_layer(
                        h,
                        encoder_sequence,
                        value_mask=enc_mask,
                        return_attention_scores=weights_wanted,
                        training=training,
                    )
            out = out if isinstance(out, tuple) else (out,)
            return out[:2] if weights_wanted else out[:1]

        x, extras = self._residual(
            x, cross_attend, self.cross_attention_layer_norm, self.cross_attention_dropout, training
        )
        return x, (extras[0] if weights_wanted else None)

    def _attend_cross_cache(self, h, cache, enc_mask, cache_zeroed, weights_wanted, training):
        """Cross-attention over a precomputed cache. A cache of fewer rows than `h` is per
        example: the K rows of an example attend it together (no positions in
        cross-attention), and come back to their rows after."""
        grouped = not _same_rows(h, cache[0])
        queries = _group_by_example(h, cache[0]) if grouped else h
        out = self.cross_attention_layer(
            queries,
            value_mask=enc_mask,
            return_attention_scores=weights_wanted,
            training=training,
            cache=cache,
            cache_zeroed=cache_zeroed,
        )
        if not grouped:
            return out
        out = out if isinstance(out, tuple) else (out,)
        length = h.shape[1] or keras.ops.shape(h)[1]
        restored = (keras.ops.reshape(out[0], keras.ops.shape(h)),)
        if weights_wanted:
            restored += (_ungroup_scores(out[1], length),)
        return restored

    def _check_cross_arguments(self, encoder_sequence, encoder_padding_mask, cross_attention_cache):
        """What the call gives for the cross-attention: something to attend to with it, nothing
        without it."""
        if self.cross_attention:
            if encoder_sequence is None and cross_attention_cache is None:
                raise ValueError(
                    "A decoder layer with cross_attention=True needs `encoder_sequence` or "
                    "`cross_attention_cache`. Received: encoder_sequence=None, "
                    "cross_attention_cache=None"
                )
            return
        for name, value in (
            ("encoder_sequence", encoder_sequence),
            ("encoder_padding_mask", encoder_padding_mask),
            ("cross_attention_cache", cross_attention_cache),
        ):
            if value is not None:
                raise ValueError(
                    f"`{name}` was given to a decoder layer built with "
                    f"cross_attention=False. Received: {name} of type {type(value).__name__}"
                )

    def _check_sequences(self, decoder_sequence, encoder_sequence):
        _check_sequence("decoder_sequence", decoder_sequence, self.model_dim)
        if encoder_sequence is not None and self.cross_attention:
            _check_sequence(
                "encoder_sequence",
                encoder_sequence,
                self.cross_attention_layer._key_dense.kernel.shape[0],
            )

    def get_config(self):
        config = super().get_config()
        config["cross_attention"] = self.cross_attention
        return config


TransformerDecoderLayer.__init__.__signature__ = handed_on_signature(
    TransformerDecoderLayer.__init__, _TransformerLayer.__init__
)
