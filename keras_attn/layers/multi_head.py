"""Scaled dot-product multi-head attention with a key/value cache.

A superset of `keras.layers.MultiHeadAttention` (docs/multi_head.md): the same
constructor arguments with the same meaning and the same variables (`query`,
`key`, [`gate`], `value`, `attention_output`, each a kernel then a bias), so
weights move between the two with `set_weights`. Beyond Keras:

- `num_key_value_heads`: grouped-query attention with the variables of
  `keras.layers.GroupQueryAttention` (1 = multi-query); the cache holds only
  the key/value heads.
- `rotary_max_wavelength`: rotary position embedding of queries and keys.
- `cache` / `cache_index`: incremental decoding; causal masks, sliding
  windows and rotary positions all count the cache offset. With
  `sliding_window` the cache can be a ring of `sliding_window` rows (`init_cache(ring=True)`).
- `value=None` means self-attention, so the layer works in `keras.Sequential`.
- A query whose every key is masked gets all-zero weights and a zero
  attention context, never a uniform distribution; masked keys and values are
  zeroed, so whatever padding holds never reaches an output or a gradient.
  Scores and the softmax run in float32 under mixed precision.

This module holds the layer: its arguments, its projections and the steps of `call`. The
other concepts live beside it, each a mixin of the layer or a module of functions:
`multi_head_options` (the arguments' checks and the config), `multi_head_cache` (the cache
and its ring), `multi_head_masking` (what each query sees), `multi_head_compute` (which
attention product runs; Keras' `_compute_attention` hook), `multi_head_attend` (the products,
one per layout), `multi_head_fused` (the fused kernel), `multi_head_axes` (inputs of rank > 3),
`multi_head_projection` (projections into the head layouts) and `rotary`.
"""

import math

import keras
from keras import ops

from keras_attn._checks import check_bool as _check_bool
from keras_attn._checks import check_positive as _positive_number
from keras_attn._checks import check_seed as _check_seed
from keras_attn.layers import multi_head_masking as masking
from keras_attn.layers import multi_head_options as options
from keras_attn.layers import multi_head_projection as proj
from keras_attn.layers import rng, rotary
from keras_attn.layers.base import check_float_tensor, check_positive_int, check_rate, config_of
from keras_attn.layers.multi_head_axes import AttentionAxes
from keras_attn.layers.multi_head_cache import KeyValueCache
from keras_attn.layers.multi_head_compute import AttentionProducts
from keras_attn.layers.multi_head_masking import Visibility


def _built_sublayer(attribute):
    """A read-only property: the sublayer kept in `attribute`, None before `build`."""
    return property(lambda layer: getattr(layer, attribute, None))


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(
    KeyValueCache, Visibility, AttentionProducts, AttentionAxes, keras.layers.Layer
):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017).

    `head_h = softmax(Q_h K_h^T / sqrt(key_dim)) V_h`, the heads concatenated
    (each times its gate with `use_gate`) and projected back to the query's
    feature size (or `output_shape`).

    Args (Keras' `MultiHeadAttention`, same meaning):
        num_heads: number of attention (query) heads.
        key_dim: size of each head for query and key.
        value_dim: size of each head for value (defaults to `key_dim`).
        dropout: dropout rate on the attention weights (training only).
        use_bias: whether the projections have biases.
        output_shape: feature shape of the output (int or tuple); defaults to
            the query's last dimension.
        attention_axes: the axes attended over, for inputs of rank > 3
            (`[B, ..., D]`, e.g. images); None = every axis but batch and
            features. Rank-3 inputs have only axis 1.
        sliding_window: each query sees the keys less than `sliding_window`
            positions away (a symmetric band; with `use_causal_mask`, the
            `sliding_window` latest positions). Counts the cache offset.
        flash_attention: True runs `keras.ops.dot_product_attention` (no
            dropout, no returned scores; the backend picks its flash kernel where
            it has one); False never; None where it is faster (docs/multi_head.md).
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint,
        bias_constraint: of every projection.
        use_gate: gated attention: each head's context is multiplied by
            `sigmoid(query W_gate + b_gate)` before the output projection.
        seed: seed of the attention dropout.

    Args beyond Keras:
        num_key_value_heads: `G` key/value heads shared by groups of
            `num_heads // G` query heads (grouped-query attention; 1 =
            multi-query), with `keras.layers.GroupQueryAttention`'s variables.
            None = `num_heads`.
        rotary_max_wavelength: when set, queries and keys are rotated per head
            by their positions (`RotaryEmbedding` with this wavelength);
            `key_dim` must then be even.
        rotary_scaling_factor: positions are divided by it before rotating.

    Call arguments:
        query: `[B, Tq, Dq]` (or `[B, ..., Dq]` with `attention_axes`).
        value: `[B, Tv, Dv]`; `None` means self-attention (`value = query`,
            whose Keras mask then also masks the keys).
        key: `[B, Tv, Dk]`, defaults to `value`.
        attention_mask: bool, broadcastable to `[B, Tq, Tk]` (or
            `[B, heads, Tq, Tk]`); True = may attend.
        use_causal_mask: query `i` sees keys `j <= i` (`j <= cache_index + i`
            with a cache).
        return_attention_scores: also return the weights `[B, heads, Tq, Tk]`
            (before dropout).
        training: enables dropout.
        cache: `(key_cache [B, S, G, key_dim], value_cache [B, S, G,
            value_dim])` of projected (and, with rotary, rotated) keys and
            values (see `init_cache`, `compute_cache`).
        cache_index: with a cache, the position where the `T_new` rows of the
            projected `key`/`value` (`value` defaults to `query`) are written;
            key `j` is then visible iff `j < cache_index + T_new`, and the
            queries are at positions `cache_index + t`. May be a scalar tensor
            (inside a `while_loop` / XLA). With a cache and `cache_index=None`
            the cache is attended as it is (a precomputed cross-attention
            memory) and `value`/`key` may be None.
        query_mask, value_mask, key_mask, mask: Keras masks (filled in by
            Keras). With a cache, `value_mask`/`key_mask` cover the cache
            positions `[B, S]`, or (with `cache_index`) just the `T_new` new
            rows; masks of earlier rows are not remembered by the cache (pass
            `attention_mask [B, Tq, S]` or a `[B, S]` `value_mask` for those).
        cache_zeroed: with a precomputed `cache` (no `cache_index`) from
            `compute_cache(..., mask=m)` and `value_mask=m`: its masked rows are
            already zero, so the call does not zero them again (one pass over
            the cache fewer per decoding step). Default False: masked cache
            rows are zeroed at every call, whatever the cache holds.

    Returns `output [B, Tq, *output_shape]`, then the scores if asked for,
    then the (updated) cache if one was given.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        num_key_value_heads=None,
        rotary_max_wavelength=None,
        rotary_scaling_factor=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = check_positive_int("key_dim", key_dim)
        value_dim = check_positive_int("value_dim", value_dim, allow_none=True)
        self.value_dim = key_dim if value_dim is None else value_dim
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = _check_bool("use_bias", use_bias)
        self._out_shape = options.check_output_shape(output_shape)
        self.attention_axes = options.check_attention_axes(attention_axes)
        self.sliding_window = check_positive_int("sliding_window", sliding_window, allow_none=True)
        self.flash_attention = options.check_flash_attention(flash_attention, self.dropout)
        self.use_gate = _check_bool("use_gate", use_gate)
        self.seed = _check_seed("seed", seed)
        groups = options.check_key_value_heads(self.num_heads, num_key_value_heads)
        self.num_key_value_heads = groups
        self._groups = self.num_heads if groups is None else groups
        self.rotary_max_wavelength = _positive_number(
            "rotary_max_wavelength", rotary_max_wavelength, allow_none=True
        )
        self.rotary_scaling_factor = _positive_number(
            "rotary_scaling_factor", rotary_scaling_factor
        )
        options.check_rotary_key_dim(self.rotary_max_wavelength, self.key_dim)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        # Keras' MultiHeadAttention gives this to each projection (not to itself).
        self.projection_activity_regularizer = keras.regularizers.get(activity_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.supports_masking = True
        self._dropout_layer = (
            rng.Dropout(self.dropout, seed=self.seed, dtype=self.dtype_policy)
            if self.dropout > 0
            else None
        )

    def _dense(self, equation, output_shape, bias_axes, name, activation=None):
        # A fresh initializer per projection (an initializer object with a
        # fixed seed would otherwise give all of them the same values).
        def fresh(init):
            return init.__class__.from_config(init.get_config())

        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            activation=activation,
            kernel_initializer=fresh(self.kernel_initializer),
            bias_initializer=fresh(self.bias_initializer),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            activity_regularizer=self.projection_activity_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape = tuple(query_shape)
        value_shape = query_shape if value_shape is None else tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        if len(key_shape) != len(value_shape) or any(
            k is not None and v is not None and k != v
            for k, v in zip(key_shape[1:-1], value_shape[1:-1])
        ):
            raise ValueError(
                "The shapes of `key` and `value` must be equal on every axis but the last. "
                f"Received: key.shape={key_shape}, value.shape={value_shape}"
            )
        rank = len(query_shape)
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) < 3 or len(shape) != rank:
                raise ValueError(
                    f"`{name}` must have rank 3 ([batch, length, dim]), or the query's rank "
                    f"(>= 3) with `attention_axes`. Received: {name}.shape={shape}"
                )
            if shape[-1] is None:
                raise ValueError(
                    f"The last dimension of `{name}` must be known. Received: {name}.shape={shape}"
                )
        self._axes = self._normalized_axes(rank)
        self.query_feature_dim = int(query_shape[-1])
        out_shape = self._out_shape or (self.query_feature_dim,)
        heads, groups = self.num_heads, self._groups
        # [B, ..., D] x [D, N, H] -> [B, ..., N, H]
        eq, bias_axes = proj.proj_equation(rank - 1, 1, 2)
        self._query_dense = self._dense(
            eq, (None,) * (rank - 2) + (heads, self.key_dim), bias_axes, "query"
        )
        self._query_dense.build(query_shape)
        self._key_dense = self._dense(
            eq, (None,) * (rank - 2) + (groups, self.key_dim), bias_axes, "key"
        )
        self._key_dense.build(key_shape)
        if self.use_gate:
            self._gate_dense = self._dense(
                eq, (None,) * (rank - 2) + (heads, self.value_dim), bias_axes, "gate", "sigmoid"
            )
            self._gate_dense.build(query_shape)
        self._value_dense = self._dense(
            eq, (None,) * (rank - 2) + (groups, self.value_dim), bias_axes, "value"
        )
        self._value_dense.build(value_shape)
        # [B, ..., N, H] x [N, H, *out] -> [B, ..., *out]
        eq, bias_axes = proj.proj_equation(rank - 1, 2, len(out_shape))
        self._output_dense = self._dense(
            eq, (None,) * (rank - 2) + tuple(out_shape), bias_axes, "attention_output"
        )
        self._output_dense.build(query_shape[:-1] + (heads, self.value_dim))
        self.built = True

    # The projections, under Keras' names (so `layer.query_dense.enable_lora(rank)` works as
    # on keras.layers.MultiHeadAttention); None before the layer is built.
    query_dense = _built_sublayer("_query_dense")
    key_dense = _built_sublayer("_key_dense")
    value_dense = _built_sublayer("_value_dense")
    output_dense = _built_sublayer("_output_dense")

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        """The output's shape: the query's, its last axis replaced by `output_shape` when
        given. `key` and `value` must agree on every axis but the last (`ValueError`)."""
        query_shape = tuple(query_shape)
        value_shape = query_shape if value_shape is None else tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        if value_shape[1:-1] != key_shape[1:-1]:
            raise ValueError(
                "The shapes of `key` and `value` must be equal on every axis but the last. "
                f"Received: key.shape={key_shape}, value.shape={value_shape}"
            )
        if self._out_shape:
            return query_shape[:-1] + tuple(self._out_shape)
        return query_shape

    def compute_output_spec(self, *args, **kwargs):
        # The call traced symbolically (Keras' way for a layer without compute_output_shape),
        # so the attention scores and the cache get their shapes too.
        return super(keras.layers.Layer, self).compute_output_spec(*args, **kwargs)

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_index=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        mask=None,
        cache_zeroed=False,
    ):
        query_mask, value_mask, key_mask = masking.call_masks(
            mask, query_mask, value_mask, key_mask
        )
        cache_zeroed = self._check_call(query, value, key, return_attention_scores, cache_zeroed)
        if len(query.shape) != 3:
            self._check_axes_call(query, use_causal_mask, cache, (query_mask, value_mask, key_mask))
            return self._call_axes(
                query,
                value,
                key,
                attention_mask,
                use_causal_mask,
                return_attention_scores,
                training,
            )
        if cache is None and cache_index is not None:
            raise ValueError(
                f"`cache_index` needs a `cache`. Received: cache=None, cache_index={cache_index!r}"
            )
        if cache is None or cache_index is not None:
            # A cache without an index is a precomputed memory and needs no value or key.
            value, key, value_mask = masking.self_attention_defaults(
                query, value, key, query_mask, value_mask
            )
        # The fused kernel wherever the call allows it (no weights returned, no dropout on
        # them, not one query row against a cache: a decoding step has its own layout).
        fused = self._use_fused(return_attention_scores, training) and not (
            self._attention_overridden() or (cache is not None and query.shape[1] == 1)
        )
        if cache is None:
            state = self._project(
                query, value, key, query_mask, value_mask, key_mask, attention_mask, fused
            )
        else:
            state = self._update_cache(
                query, value, key, cache, cache_index, value_mask, key_mask, use_causal_mask, fused
            )
        queries, gate, query_positions = self._project_query(state)
        # A precomputed cache that `compute_cache(mask=)` zeroed already is not zeroed again.
        zero_keys = not (cache_zeroed and cache is not None and cache_index is None)
        visible, keys, values = self._mask_keys(
            state, query_positions, query_mask, attention_mask, use_causal_mask, zero_keys
        )
        context, weights = self._attend(
            queries, keys, values, visible, training, return_attention_scores, state.rows_layout
        )
        output = self._output(context, gate, head_major=not state.rows_layout)
        result = (output,)
        if return_attention_scores:
            result += (weights,)
        if state.cache is not None:
            result += (state.cache,)
        return result[0] if len(result) == 1 else result

    def _check_call(self, query, value, key, return_attention_scores, cache_zeroed):
        """The call's arguments checked (`ValueError`); returns `cache_zeroed`."""
        for name, x in (("query", query), ("value", value), ("key", key)):
            if x is not None:
                check_float_tensor(name, x)
        cache_zeroed = _check_bool("cache_zeroed", cache_zeroed)
        if self.flash_attention and return_attention_scores:
            raise ValueError(
                "`flash_attention=True` computes no attention weights to return: pass "
                "flash_attention=None or False. Received: return_attention_scores=True"
            )
        return cache_zeroed

    def _scale(self):
        """The softmax scale `1 / sqrt(key_dim)`, folded into the queries."""
        return 1.0 / math.sqrt(float(self.key_dim))

    def _project(
        self, query, value, key, query_mask, value_mask, key_mask, attention_mask, fused=False
    ):
        """Whole sequences, no cache: the inputs' padding rows zeroed (`_zeroed_inputs`), then the keys and
        values projected head-major `[B, G, S, H]` (the keys rotated by their positions), or
        for the fused kernel (`fused`) in its layout `[B, S, G, H]`; for self-attention
        through plain projections the queries and the gate with them (`proj.heads_of`,
        `proj.rows_of`), else they are left to `_project_query`."""
        query, value, key = self._zeroed_inputs(
            query, value, key, query_mask, value_mask, key_mask, attention_mask
        )
        dtype = self.compute_dtype
        queries = gate = None
        axis = 1 if fused else 2  # of the positions
        if key is query and value is query and self._fusable():
            # Self-attention: the projections of one input together.
            scales = [self._scale(), None, None, None]
            parts = (proj.rows_of if fused else proj.heads_of)(
                self._self_denses(), scales, query, dtype
            )
            queries, keys, values = parts[:3]
            gate = parts[3] if self.use_gate else None
        else:
            project = proj.rows if fused else proj.heads
            keys = project(self._key_dense, key, dtype)
            values = project(self._value_dense, value, dtype)
        num_keys = ops.shape(keys)[axis]
        if self.rotary_max_wavelength is not None:
            keys = self._rotate(keys, ops.arange(num_keys, dtype="int32"), axis)
        return proj.Projected(
            query,
            keys,
            values,
            num_keys,
            value_mask,
            key_mask,
            queries=queries,
            gate=gate,
            rows_layout=fused,
            fused=fused,
        )

    def _project_query(self, state):
        """`(queries, gate, query_positions)` in the keys' layout: the queries scaled by
        `1 / sqrt(key_dim)` and rotated by their positions (the cache offset counted), the
        gate (`use_gate`, else None); those `_project` made already are taken from it."""
        query, offset = state.query, state.query_offset
        project = proj.rows if state.rows_layout else proj.heads
        if query.shape[1] == 1 and not isinstance(offset, int):  # one query at the cache index
            positions = ops.reshape(offset, (1,))
        else:
            positions = ops.arange(ops.shape(query)[1], dtype="int32") + offset
        dtype = self.compute_dtype
        queries, gate = state.queries, state.gate
        if queries is None:
            queries = project(self._query_dense, query, dtype, self._scale())
        if self.rotary_max_wavelength is not None:
            queries = self._rotate(queries, positions, 1 if state.rows_layout else 2)
        if self.use_gate and gate is None:
            gate = project(self._gate_dense, query, dtype)
        return queries, gate, positions

    def _output(self, context, gate, head_major=True):
        """Each head's context times its gate (`use_gate`; None: no gate), then the output
        projection. `context` is head-major `[B, N, T, Hv]`, `[B, T, N, Hv]` with
        `head_major=False`, or `[B, ..., N, Hv]` for inputs of rank > 3; `gate` likewise."""
        if gate is not None:
            context = context * gate
        if len(context.shape) > 4:
            return proj.project(self._output_dense, context)
        return proj.output(self._output_dense, context, self.compute_dtype, head_major)

    def _rotate(self, x, positions, position_axis):
        return rotary.rotate(
            x, positions, self.rotary_max_wavelength, self.rotary_scaling_factor, position_axis
        )

    def _self_denses(self):
        denses = [self._query_dense, self._key_dense, self._value_dense]
        return denses + [self._gate_dense] if self.use_gate else denses

    def _fusable(self):
        return all(proj.plain(dense) for dense in self._self_denses())

    def compute_mask(self, query, previous_mask=None):
        if isinstance(previous_mask, (list, tuple)):
            previous_mask = previous_mask[0] if previous_mask else None
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update(config_of(self, self._constructor(), options.ATTRIBUTES))
        return config

    def _constructor(self):
        """The constructor whose parameters make the config (`base.config_of`): this class's;
        a subclass with other arguments names its own."""
        return MultiHeadAttention.__init__
