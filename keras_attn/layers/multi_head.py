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

The pieces live in `multi_head_projection` (projections, cache writes),
`multi_head_attend` (the attention products, one per layout) and `masks`.
"""

import dataclasses
import math

import keras
from keras import ops

from keras_attn._checks import check_bool as _check_bool
from keras_attn._checks import check_positive as _positive_number
from keras_attn.layers import masks, rng, rotary, scoring
from keras_attn.layers import multi_head_attend as attend
from keras_attn.layers import multi_head_projection as proj
from keras_attn.layers.base import check_float_tensor, check_positive_int, check_rate


def _check_output_shape(output_shape):
    if output_shape is None:
        return None
    if isinstance(output_shape, int) and not isinstance(output_shape, bool):
        output_shape = (output_shape,)
    if isinstance(output_shape, (list, tuple)) and len(output_shape) > 0:
        dims = tuple(output_shape)
        if all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            return dims
    raise ValueError(
        "`output_shape` must be None, a positive integer or a non-empty tuple of positive "
        f"integers. Received: output_shape={output_shape!r}"
    )


def _check_attention_axes(attention_axes):
    if attention_axes is None:
        return None
    if isinstance(attention_axes, int) and not isinstance(attention_axes, bool):
        return (attention_axes,)
    if (
        isinstance(attention_axes, (list, tuple))
        and attention_axes
        and all(isinstance(a, int) and not isinstance(a, bool) for a in attention_axes)
    ):
        return tuple(attention_axes)
    raise ValueError(
        "`attention_axes` must be None, an int or a non-empty tuple of ints. "
        f"Received: attention_axes={attention_axes!r}"
    )


def _check_key_value_heads(num_heads, num_key_value_heads):
    groups = check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
    if groups is not None and num_heads % groups:
        raise ValueError(
            "`num_heads` must be divisible by `num_key_value_heads`. Received: "
            f"num_heads={num_heads}, num_key_value_heads={num_key_value_heads}"
        )
    return groups


def _check_rotary_key_dim(rotary_max_wavelength, key_dim):
    if rotary_max_wavelength is not None and key_dim % 2:
        raise ValueError(
            "Rotary embeddings rotate pairs of features: `key_dim` must be even with "
            f"`rotary_max_wavelength`. Received: key_dim={key_dim}"
        )


def _static_index_check(cache_index, new_rows, length):
    if cache_index < 0 or (None not in (length, new_rows) and cache_index + new_rows > length):
        raise ValueError(
            f"`cache_index` + the {new_rows} new rows must fit in the cache of "
            f"length {length}. Received: cache_index={cache_index}"
        )


def _checked_index(cache_index, new_rows, length, length_tensor):
    """`cache_index` as an int32 tensor, checked against the cache length: a Python int
    or a concrete tensor at once (ValueError), a TensorFlow graph tensor when the graph
    runs (InvalidArgumentError; not under XLA, which drops assertions)."""
    if isinstance(cache_index, int) and not isinstance(cache_index, bool):
        _static_index_check(cache_index, new_rows, length)
        return ops.convert_to_tensor(cache_index, "int32")
    index = ops.cast(cache_index, "int32")
    if len(index.shape) != 0:
        raise ValueError(
            f"`cache_index` must be a scalar. Received: cache_index.shape={tuple(index.shape)}"
        )
    try:
        concrete = int(ops.convert_to_numpy(index))
    except Exception:  # a symbolic tensor inside a traced function
        concrete = None
    if concrete is not None:
        _static_index_check(concrete, new_rows, length)
        return index
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # One assertion for both bounds (a decoding step pays it in every layer); a ring
        # cache (`length_tensor` None) has no end.
        fits = index >= 0
        if length_tensor is not None:
            fits = tf.logical_and(fits, index + new_rows <= tf.cast(length_tensor, "int32"))
        check = tf.debugging.Assert(
            fits,
            [
                f"`cache_index` must be >= 0 and `cache_index` + the {new_rows} new rows must "
                f"fit in the cache (length {length}). Received: cache_index=",
                index,
            ],
        )
        with tf.control_dependencies([check]):
            index = tf.identity(index)
    return index


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
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
        self._out_shape = _check_output_shape(output_shape)
        self.attention_axes = _check_attention_axes(attention_axes)
        self.sliding_window = check_positive_int("sliding_window", sliding_window, allow_none=True)
        if flash_attention is not None:
            _check_bool("flash_attention", flash_attention)
        self.flash_attention = flash_attention
        if flash_attention and self.dropout > 0:
            raise ValueError(
                "`flash_attention=True` runs keras.ops.dot_product_attention, which has no "
                f"attention dropout: set dropout=0. Received: dropout={dropout}"
            )
        self.use_gate = _check_bool("use_gate", use_gate)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be None or an integer. Received: seed={seed!r}")
        self.seed = seed
        groups = _check_key_value_heads(self.num_heads, num_key_value_heads)
        self.num_key_value_heads = groups
        self._groups = self.num_heads if groups is None else groups
        self.rotary_max_wavelength = _positive_number(
            "rotary_max_wavelength", rotary_max_wavelength, allow_none=True
        )
        self.rotary_scaling_factor = _positive_number(
            "rotary_scaling_factor", rotary_scaling_factor
        )
        _check_rotary_key_dim(self.rotary_max_wavelength, self.key_dim)
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
            rng.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy)
            if self.dropout > 0
            else None
        )

    # ------------------------------------------------------------------ build
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

    def _normalized_axes(self, rank):
        """The attention axes of the `[B, ..., N, H]` projections (rank `rank + 1`)."""
        projected = rank + 1
        if self.attention_axes is None:
            return tuple(range(1, projected - 2))
        axes = tuple(a if a >= 0 else (projected - 1) + a for a in self.attention_axes)
        if any(not 1 <= a < projected - 2 for a in axes) or len(set(axes)) != len(axes):
            raise ValueError(
                f"`attention_axes` must name distinct axes of the inputs other than batch "
                f"and features (for rank-{rank} inputs: 1 to {rank - 2}, or negative). "
                f"Received: attention_axes={self.attention_axes}"
            )
        return axes

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
    @property
    def query_dense(self):
        return getattr(self, "_query_dense", None)

    @property
    def key_dense(self):
        return getattr(self, "_key_dense", None)

    @property
    def value_dense(self):
        return getattr(self, "_value_dense", None)

    @property
    def output_dense(self):
        return getattr(self, "_output_dense", None)

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

    # ------------------------------------------------------------------ cache
    def init_cache(self, batch_size, max_length, dtype=None, ring=False):
        """A zero cache `(key_cache, value_cache)` for `max_length` positions,
        `[batch_size, S, G, key_dim]` and `[..., value_dim]` (`G` =
        `num_key_value_heads`, or `num_heads`).

        `S = max_length`, except with `ring=True`, `sliding_window` set and
        `max_length > sliding_window`: then `S = sliding_window` and the cache is a
        ring buffer (docs/multi_head.md): position `p` is written to row
        `p mod sliding_window`, so its size does not grow with the generation. A
        query never sees a key more than `sliding_window - 1` positions away, so the
        ring holds every key a one-row step can see. A ring takes one row per call
        (a chunk, such as a prompt, is written as into an ordinary cache while it
        fits in the `sliding_window` rows); `ring=False` keeps `max_length` rows for
        chunked writes."""
        dtype = dtype or self.compute_dtype
        rows = max_length
        if ring and self.sliding_window is not None and isinstance(max_length, int):
            rows = min(max_length, self.sliding_window)
        elif ring and self.sliding_window is not None:  # a tensor: the ring's static size
            rows = self.sliding_window
        return (
            ops.zeros((batch_size, rows, self._groups, self.key_dim), dtype=dtype),
            ops.zeros((batch_size, rows, self._groups, self.value_dim), dtype=dtype),
        )

    def _is_ring(self, length, cache_index):
        """Whether a cache of static `length` rows is a ring buffer: with `sliding_window`
        `w`, a self-attention cache (written at `cache_index`) of exactly `w` rows. (A
        full cache of `w` rows gives the same answers while it has room, and a ring
        goes on past it.)"""
        return (
            self.sliding_window is not None
            and cache_index is not None
            and length is not None
            and length == self.sliding_window
        )

    def compute_cache(self, value, key=None, mask=None):
        """The projected `(key, value)` of a fixed memory, for `cache=` (keys
        rotated by their positions `0..S-1` with rotary embeddings).

        `mask`: optional `[B, S]` (True = real position): the rows where it is False
        are zeroed here, once, so that whatever the padding holds (NaN, inf) is gone
        from the cache. Call the layer with that cache, the same mask as
        `value_mask` and `cache_zeroed=True`, and it is not zeroed again at every
        call (docs/multi_head.md)."""
        if not self.built:
            raise ValueError(
                "`compute_cache` needs a built layer (call it once, or `build` it, first). "
                f"Received: layer {self.name!r} not built"
            )
        value = ops.convert_to_tensor(value, dtype=self.compute_dtype)
        key = value if key is None else ops.convert_to_tensor(key, dtype=self.compute_dtype)
        values = proj.rows(self._value_dense, value, self.compute_dtype)
        keys = proj.rows(self._key_dense, key, self.compute_dtype)
        if self.rotary_max_wavelength is not None:
            keys = self._rotate(keys, ops.arange(ops.shape(keys)[1], dtype="int32"), 1)
        if mask is not None:
            mask = masks.padding_mask("mask", mask, value.shape[1])
            keys = attend.zero_masked_keys(keys, mask, 1)
            values = attend.zero_masked_keys(values, mask, 1)
        return keys, values

    def _check_cache(self, cache):
        if not isinstance(cache, (list, tuple)) or len(cache) != 2:
            raise ValueError(
                f"`cache` must be a tuple (key_cache, value_cache). Received: cache={cache!r}"
            )
        key_cache, value_cache = cache
        for name, x, dim in (
            ("key_cache", key_cache, self.key_dim),
            ("value_cache", value_cache, self.value_dim),
        ):
            shape = tuple(x.shape)
            if len(shape) != 4 or shape[2] != self._groups or shape[3] != dim:
                raise ValueError(
                    f"`{name}` must have shape [batch, max_length, {self._groups}, {dim}]. "
                    f"Received: {name}.shape={shape}"
                )
        if (
            key_cache.shape[1] is not None
            and value_cache.shape[1] is not None
            and key_cache.shape[1] != value_cache.shape[1]
        ):
            raise ValueError(
                "`key_cache` and `value_cache` must have the same length. Received: "
                f"key_cache.shape={tuple(key_cache.shape)}, "
                f"value_cache.shape={tuple(value_cache.shape)}"
            )
        return key_cache, value_cache

    # ------------------------------------------------------------------- call
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
        query_mask, value_mask, key_mask = _call_masks(mask, query_mask, value_mask, key_mask)
        cache_zeroed = self._check_call(query, value, key, return_attention_scores, cache_zeroed)
        if len(query.shape) != 3:
            return self._call_axes(
                query,
                value,
                key,
                attention_mask,
                use_causal_mask,
                return_attention_scores,
                training,
                cache,
                (query_mask, value_mask, key_mask),
            )
        if cache is None and cache_index is not None:
            raise ValueError(
                f"`cache_index` needs a `cache`. Received: cache=None, cache_index={cache_index!r}"
            )
        if cache is None or cache_index is not None:
            # A cache without an index is a precomputed memory and needs no value or key.
            value, key, value_mask = _self_attention_defaults(
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
        """Whole sequences, no cache: the inputs' padding rows zeroed, then the keys and
        values projected head-major `[B, G, S, H]` (the keys rotated by their positions), or
        for the fused kernel (`fused`) in its layout `[B, S, G, H]`; for self-attention
        through plain projections the queries and the gate with them (`proj.heads_of`,
        `proj.rows_of`), else they are left to `_project_query`."""
        batch = query.shape[0]
        masks.check_mask_shape("query_mask", query_mask, (batch, query.shape[1]))
        masks.check_mask_shape("value_mask", value_mask, (batch, value.shape[1]))
        masks.check_mask_shape("key_mask", key_mask, (batch, key.shape[1]))
        query, value, key = _zero_padding_inputs(
            query, value, key, query_mask, value_mask, key_mask
        )
        seen = None
        if attention_mask is not None:  # its shape checked before it is used
            seen = masks.keys_seen(self._attention_mask(attention_mask, query, key.shape[1]))
        if seen is not None and value is not query:  # (self-attention: a live query row)
            value = scoring.zero_masked(value, seen)
            if key is not query:
                key = value if key is value else scoring.zero_masked(key, seen)
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
        return _Projected(
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

    def _update_cache(
        self, query, value, key, cache, cache_index, value_mask, key_mask, use_causal_mask, fused
    ):
        """With a cache: the new rows written at `cache_index` (`_write_cache`), or, without
        an index, the cache attended as it is; the value/key masks placed over the cache
        positions (`_cache_mask`). One query row (a decoding step) attends in the cache's
        layout `[B, S, G, H]`; longer queries head-major, like the uncached path."""
        key_cache, value_cache = self._check_cache(cache)
        length = key_cache.shape[1]
        state = _Projected(query, key_cache, value_cache, ops.shape(key_cache)[1], None, None)
        new_rows, mask_offset = None, 0
        if cache_index is not None:
            new_rows = value.shape[1]
            written = self._write_cache(
                value,
                key,
                key_cache,
                value_cache,
                cache_index,
                use_causal_mask,
                (value_mask, key_mask),
            )
            state.keys, state.values, state.query_offset, mask_offset = written[:4]
            state.key_positions, state.visible_limit = written[4:]
        state.cache = (state.keys, state.values)
        state.value_mask = self._cache_mask("value_mask", value_mask, length, new_rows, mask_offset)
        state.key_mask = self._cache_mask("key_mask", key_mask, length, new_rows, mask_offset)
        keys = ops.cast(state.keys, self.compute_dtype)
        values = ops.cast(state.values, self.compute_dtype)
        # A precomputed cache (no index) is attended in its layout by any number of query rows
        # (`attend.rows_shared`: the hypotheses of a beam search sharing one cache per example)
        # unless a subclass's `_compute_attention` is to run.
        state.fused = fused
        if fused and isinstance(cache_index, int) and state.key_positions is None:
            state.query_offset = cache_index  # static: the kernel's causal order may count it
        state.rows_layout = (
            fused
            or query.shape[1] == 1
            or (cache_index is None and not self._attention_overridden())
        )
        if not state.rows_layout:
            keys = ops.transpose(keys, (0, 2, 1, 3))
            values = ops.transpose(values, (0, 2, 1, 3))
        state.keys, state.values = keys, values
        return state

    def _write_cache(
        self, value, key, key_cache, value_cache, cache_index, use_causal_mask, row_masks
    ):
        """The `T_new` rows of the projected `key` / `value` (keys rotated by their true
        positions) written at `cache_index`, into row `cache_index mod S` of a ring; rows
        that `row_masks` (the call's value and key masks) hide are zeroed before they are
        projected, as without a cache, so the cache never holds what a masked input row held
        (a NaN there would reach later queries through the weighted sum, weight 0 times NaN):
        `(keys, values, index, row, key_positions, visible_limit)` (`key_positions`: the
        positions a ring's rows hold, else None; `visible_limit`: key `j` is visible iff
        `j < visible_limit`, None where the causal order limits it already)."""
        length = key_cache.shape[1]
        new_rows = value.shape[1]
        # A ring takes one row per call; a chunk goes in as into an ordinary cache of
        # `sliding_window` rows (bounds-checked here).
        ring = self._is_ring(length, cache_index) and new_rows == 1
        index = _checked_index(
            cache_index,
            new_rows if new_rows is not None else ops.shape(value)[1],
            None if ring else length,
            None if ring else ops.shape(key_cache)[1],
        )
        row = ops.mod(index, length) if ring else index
        value, key = _zero_new_rows(value, key, row_masks, row, length)
        dtype = self.compute_dtype
        new_keys = proj.rows(self._key_dense, key, dtype)
        new_values = proj.rows(self._value_dense, value, dtype)
        if self.rotary_max_wavelength is not None:  # true positions, not ring rows
            positions = index + ops.arange(ops.shape(new_keys)[1], dtype="int32")
            new_keys = self._rotate(new_keys, positions, 1)
        keys, values = proj.write_rows(
            (key_cache, value_cache),
            (ops.cast(new_keys, key_cache.dtype), ops.cast(new_values, value_cache.dtype)),
            row,
        )
        key_positions = visible_limit = None
        if ring:
            # Row r holds the latest position p <= index with p mod length == r (none yet
            # where that is negative): the band is computed from these.
            key_positions = index - ops.mod(index - ops.arange(length, dtype="int32"), length)
        elif not use_causal_mask:  # (causal, the queries' positions already limit it)
            visible_limit = index + ops.cast(ops.shape(value)[1], "int32")
        return keys, values, index, row, key_positions, visible_limit

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

    def _mask_keys(
        self, state, query_positions, query_mask, attention_mask, use_causal_mask, zero_keys
    ):
        """`(visible, keys, values)`: what each query may see (`_visibility`), and the keys
        and values with the positions no query sees zeroed (`zero_keys`): padding may hold
        anything (NaN, inf)."""
        axis = 1 if state.rows_layout else 2
        if state.fused:
            visible, key_visible = self._kernel_mask(
                state, query_positions, query_mask, attention_mask, use_causal_mask
            )
        else:
            visible, key_visible = self._visibility(
                state, query_positions, query_mask, attention_mask, use_causal_mask
            )
        keys, values = state.keys, state.values
        if zero_keys:
            keys = attend.zero_masked_keys(keys, key_visible, axis)
            values = attend.zero_masked_keys(values, key_visible, axis)
        return visible, keys, values

    def _attend(self, queries, keys, values, visible, training, weights_wanted, rows=False):
        """The attention, every layout's: scaled head-major `queries [B, N, T, H]` against
        `keys` / `values [B, G, S, H]`, or (`rows`: one query row against a cache) `queries
        [B, 1, N, H]` against `[B, S, G, H]`; `visible` broadcastable to `[B, N, T, S]`.
        Returns `(context, weights [B, N, T, S] or None)`, the context in the queries'
        layout. A subclass's `_compute_attention` runs in place of the head-major products.
        With `visible` an `attend.KernelMask` (what `call` builds where the fused kernel
        runs), every query row is in the cache's layout: `queries [B, T, N, H]`."""
        if isinstance(visible, attend.KernelMask):
            return attend.fused(queries, keys, values, visible), None
        if rows:
            return self._attend_rows(queries, keys, values, visible, training, weights_wanted)
        if not self._attention_overridden():
            return self._attend_head_major(queries, keys, values, visible, training, weights_wanted)
        to_rows = (0, 2, 1, 3)
        context, weights = self._call_compute_attention(
            ops.transpose(queries / ops.cast(self._scale(), queries.dtype), to_rows),
            ops.transpose(keys, to_rows),
            ops.transpose(values, to_rows),
            visible,
            training,
            weights_wanted,
        )
        return ops.transpose(context, to_rows), weights

    def _call_compute_attention(
        self, query, key, value, attention_mask, training, return_attention_scores
    ):
        """How `_attend` calls a subclass's `_compute_attention`: in Keras' layout `query
        [B, T, N, H]` (projected, not yet scaled), `key` / `value [B, S, G, H]`, the masks,
        causal order and window folded into `attention_mask`. A subclass that calls the
        hook another way (GroupedQueryAttention: Keras' GroupQueryAttention's way) redefines
        this method."""
        return self._compute_attention(
            query,
            key,
            value,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )

    def _attend_rows(self, queries, keys, values, visible, training, weights_wanted):
        """Query rows against a cache in its layout (`_attend` with `rows`): one row
        (`attend.rows`, `attend.rows_grouped`), or several sharing a precomputed cache
        (`attend.rows_shared`)."""
        dropout = self._dropout(training)
        if queries.shape[1] != 1:
            return attend.rows_shared(queries, keys, values, visible, dropout, weights_wanted)
        if self._groups != self.num_heads:
            return attend.rows_grouped(queries, keys, values, visible, dropout)
        if visible is not None:  # [b, n, 1, S] -> [b, S, n]
            if visible.shape[1] == 1:
                visible = ops.reshape(visible, (ops.shape(visible)[0], -1, 1))
            else:
                visible = ops.transpose(visible[:, :, 0, :], (0, 2, 1))
        context, row_weights = attend.rows(queries, keys, values, visible, dropout)
        weights = None
        if weights_wanted:
            weights = ops.expand_dims(ops.transpose(row_weights, (0, 2, 1)), 2)
        return context, weights

    def _attend_head_major(self, queries, keys, values, visible, training, weights_wanted):
        """Scaled head-major `queries [B, N, T, H]`, `keys` / `values [B, G, S, H]`, `visible`
        broadcastable to `[B, N, T, S]` -> (context `[B, N, T, Hv]`, weights or None)."""
        if self._use_fused(weights_wanted, training):
            return attend.fused_head_major(queries, keys, values, visible), None
        return attend.head_major(
            queries, keys, values, visible, self._dropout(training), weights_wanted
        )

    def _dropout(self, training):
        """The attention weights' dropout as a function (None without dropout)."""
        if self._dropout_layer is None:
            return None
        return lambda w: self._dropout_layer(w, training=training)

    def _output(self, context, gate, head_major=True):
        """Each head's context times its gate (`use_gate`; None: no gate), then the output
        projection. `context` is head-major `[B, N, T, Hv]`, `[B, T, N, Hv]` with
        `head_major=False`, or `[B, ..., N, Hv]` for inputs of rank > 3; `gate` likewise."""
        if gate is not None:
            context = context * gate
        if len(context.shape) > 4:
            return proj.project(self._output_dense, context)
        return proj.output(self._output_dense, context, self.compute_dtype, head_major)

    def _attention_overridden(self):
        return type(self)._compute_attention is not MultiHeadAttention._compute_attention

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """The attention over projected heads, Keras' override point (docs/multi_head.md).

        Args:
            query: `[B, T, N, H]`, projected, not yet scaled by `1 / sqrt(key_dim)`.
            key: `[B, S, G, H]`, value: `[B, S, G, Hv]` (G key/value heads; N = G * R).
            attention_mask: bool, broadcastable to `[B, N, T, S]` (a `[B, T, S]` mask is
                taken per example), True where a query may attend; None: every key.
            use_causal_mask: also hide from each query the keys after it (and beyond
                `sliding_window`).

        Returns:
            `(context [B, T, N, Hv], weights [B, N, T, S] or None)`.

        A subclass that overrides it is called by `call` (`_attend`, through
        `_call_compute_attention`) wherever the attention runs head-major: every query but
        a one-row step against a cache (which attends in the cache's layout), inputs of
        rank > 3 with their axes folded; the layer's masks arrive folded into
        `attention_mask`."""
        to_heads = (0, 2, 1, 3)
        scale = 1.0 / math.sqrt(float(self.key_dim))
        queries = ops.transpose(query, to_heads) * ops.cast(scale, query.dtype)
        visible = None
        if attention_mask is not None:
            visible = scoring.to_bool_mask(attention_mask)
            if len(visible.shape) == 3:
                visible = ops.expand_dims(visible, 1)
        if use_causal_mask:
            positions = masks.position_mask(
                ops.arange(ops.shape(query)[1], dtype="int32"),
                ops.arange(ops.shape(key)[1], dtype="int32"),
                causal=True,
                sliding_window=self.sliding_window,
            )
            visible = masks.logical_and(visible, positions[None, None])
        context, weights = self._attend_head_major(
            queries,
            ops.transpose(key, to_heads),
            ops.transpose(value, to_heads),
            visible,
            training,
            return_attention_scores,
        )
        return ops.transpose(context, to_heads), weights

    def _rotate(self, x, positions, position_axis):
        return rotary.rotate(
            x, positions, self.rotary_max_wavelength, self.rotary_scaling_factor, position_axis
        )

    def _use_fused(self, return_attention_scores, training):
        if self.flash_attention is False or return_attention_scores:
            return False
        if self._dropout_layer is not None and training:
            return False
        # JAX's dot_product_attention needs value heads of the key heads' size.
        if self.value_dim != self.key_dim and keras.backend.backend() == "jax":
            return False
        return bool(self.flash_attention) or attend.fused_by_default()

    def _self_denses(self):
        denses = [self._query_dense, self._key_dense, self._value_dense]
        return denses + [self._gate_dense] if self.use_gate else denses

    def _fusable(self):
        return all(proj.plain(dense) for dense in self._self_denses())

    def _cache_mask(self, name, mask, length, new_rows, offset):
        """A value/key mask in cache mode, as a mask over the cache positions.

        `[B, S]` covers the cache. With `cache_index`, `[B, T_new]` covers the
        new rows (e.g. the Keras mask of `value`): it is placed at
        `[cache_index, cache_index + T_new)`, other positions left visible.
        """
        if mask is None:
            return None
        if len(mask.shape) != 2:
            raise ValueError(
                f"`{name}` must have shape [batch, positions]. Received: {name}.shape="
                f"{tuple(mask.shape)}"
            )
        size = mask.shape[1]
        if size is None or length is None or size == length:
            return mask
        if new_rows is not None and size == new_rows:
            mask = scoring.to_bool_mask(mask)
            rel = ops.arange(length, dtype="int32") - offset
            inside = ops.logical_and(rel >= 0, rel < new_rows)
            placed = ops.take(mask, ops.clip(rel, 0, new_rows - 1), axis=1)
            return ops.logical_or(placed, ops.logical_not(inside)[None])
        raise ValueError(
            f"With a cache, `{name}` must cover the cache positions [batch, {length}]"
            + (f" or the {new_rows} new rows" if new_rows is not None else "")
            + f". Received: {name}.shape={tuple(mask.shape)}"
        )

    def _visibility(self, state, query_positions, query_mask, attention_mask, use_causal_mask):
        """`(visible, key_visible)`: a bool mask broadcastable to `[B, heads, Tq, Tk]`,
        and the keys masked for every query by the padding masks, `[B, Tk]` (either None
        when nothing is masked)."""
        key_visible = None
        for m in (state.value_mask, state.key_mask):
            if m is not None:
                key_visible = masks.logical_and(key_visible, scoring.to_bool_mask(m))
        visible = None
        if key_visible is not None:
            visible = ops.reshape(key_visible, (ops.shape(key_visible)[0], 1, 1, -1))
        if query_mask is not None:
            m = scoring.to_bool_mask(query_mask)
            visible = masks.logical_and(visible, ops.reshape(m, (-1, 1, ops.shape(m)[1], 1)))
        if attention_mask is not None:
            static_keys = state.keys.shape[1 if state.rows_layout else 2]
            m = self._attention_mask(attention_mask, state.query, static_keys)
            visible = masks.logical_and(visible, m)
            # Keys no query sees are zeroed like padding (masks.keys_seen).
            key_visible = masks.logical_and(key_visible, masks.keys_seen(m))
        by_position = self._position_visibility(state, query_positions, use_causal_mask)
        if by_position is not None:
            visible = masks.logical_and(visible, by_position[None, None])
        return visible, key_visible

    def _kernel_mask(self, state, query_positions, query_mask, attention_mask, use_causal_mask):
        """`_visibility` for the fused kernel: `(attend.KernelMask, key_visible)`. The
        padding masks stay `[B, S]` / `[B, T]` (sequence lengths for the kernel), the causal
        order and the window stay flags while the queries start at position 0 of the keys
        (no cache offset, no ring); an `attention_mask`, or positions they cannot describe,
        become the dense part."""
        key_masks = [m for m in (state.value_mask, state.key_mask) if m is not None]
        if query_mask is not None and key_masks and all(m is query_mask for m in key_masks):
            # Self-attention under one padding mask (a Keras mask, or the same tensor passed
            # for the queries and the keys): one tensor, which `fused` recognises.
            key_visible = query_visible = scoring.to_bool_mask(query_mask)
        else:
            key_visible = None
            for m in key_masks:
                key_visible = masks.logical_and(key_visible, scoring.to_bool_mask(m))
            query_visible = None if query_mask is None else scoring.to_bool_mask(query_mask)
        structure = attend.KernelMask(key_visible=key_visible, query_visible=query_visible)
        if attention_mask is not None:
            m = self._attention_mask(attention_mask, state.query, state.keys.shape[1])
            structure.dense = m
            key_visible = masks.logical_and(key_visible, masks.keys_seen(m))
            structure.key_visible = key_visible
        plain_positions = (
            isinstance(state.query_offset, int)
            and state.query_offset == 0
            and state.key_positions is None
            and state.visible_limit is None
        )
        if plain_positions:
            structure.causal = bool(use_causal_mask)
            if self.sliding_window is not None:
                w = self.sliding_window - 1
                structure.window = (w, 0 if use_causal_mask else w)
        else:
            by_position = self._position_visibility(state, query_positions, use_causal_mask)
            if by_position is not None:
                structure.dense = masks.logical_and(structure.dense, by_position[None, None])
        return structure, key_visible

    def _attention_mask(self, attention_mask, query, static_keys):
        """`attention_mask` as a bool `[B|1, N|1, Tq, Tk]`, its shape checked."""
        m = scoring.to_bool_mask(attention_mask)
        rank = len(m.shape)
        if rank == 2:
            m = m[None, None]
        elif rank == 3:
            m = ops.expand_dims(m, 1)
        elif rank != 4:
            raise ValueError(
                "`attention_mask` must have shape [batch, Tq, Tk] (or broadcast to it). "
                f"Received: attention_mask.shape={tuple(m.shape)}"
            )
        target = (query.shape[0], self.num_heads, query.shape[1], static_keys)
        try:
            masks.check_mask_shape("attention_mask", m, target)
        except ValueError:
            raise ValueError(
                f"`attention_mask` must broadcast to [batch, Tq, Tk] = "
                f"{(query.shape[0], query.shape[1], static_keys)} (or "
                f"[batch, {self.num_heads}, Tq, Tk]). "
                f"Received: attention_mask.shape={tuple(attention_mask.shape)}"
            ) from None
        return m

    def _position_visibility(self, state, query_positions, use_causal_mask):
        """The `[Tq, Tk]` mask of the positions (causal order, sliding window, a ring's
        unwritten rows, the cache's end), or None."""
        key_positions = state.key_positions
        ring = key_positions is not None  # a ring cache's rows hold these positions
        if not ring:
            key_positions = ops.arange(state.num_keys, dtype="int32")
        by_position = masks.position_mask(
            query_positions, key_positions, use_causal_mask, self.sliding_window
        )
        if ring:  # rows not written yet (negative positions) are never seen
            by_position = masks.logical_and(by_position, ops.reshape(key_positions >= 0, (1, -1)))
        if state.visible_limit is not None:
            by_position = masks.logical_and(
                by_position, ops.reshape(key_positions < state.visible_limit, (1, -1))
            )
        return by_position

    def _call_axes(
        self,
        query,
        value,
        key,
        attention_mask,
        use_causal_mask,
        return_attention_scores,
        training,
        cache,
        keras_masks,
    ):
        """Inputs of rank > 3: attention over `attention_axes` (Keras' semantics). The
        other axes are folded into the batch and the attended ones into one, so the one
        attention (`_attend`, head-major) runs; its context is unfolded for `_output`."""
        self._check_axes_call(query, use_causal_mask, cache, keras_masks)
        value = query if value is None else value
        key = value if key is None else key
        q = proj.project(self._query_dense, query)
        q = q * ops.cast(self._scale(), q.dtype)
        k = proj.project(self._key_dense, key)
        v = proj.project(self._value_dense, value)
        rank = len(q.shape)  # of the projections [B, ..., N, H]
        batch_axes = [i for i in range(rank - 2) if i not in self._axes]
        perm = batch_axes + [rank - 2] + list(self._axes) + [rank - 1]
        q_attended = [q.shape[a] for a in self._axes]
        k_attended = [k.shape[a] for a in self._axes]
        if None in q_attended + k_attended + [q.shape[a] for a in batch_axes[1:]]:
            raise ValueError(
                "With inputs of rank > 3, every axis but the batch must have a known size. "
                f"Received: query.shape={tuple(query.shape)}, value.shape={tuple(value.shape)}"
            )
        visible = None
        if attention_mask is not None:
            m = scoring.to_bool_mask(attention_mask)
            outer = [ops.shape(q)[0]] + [q.shape[a] for a in batch_axes[1:]]
            m = ops.broadcast_to(m, outer + q_attended + k_attended)
            visible = ops.reshape(m, (-1, 1, _prod(q_attended), _prod(k_attended)))
        if use_causal_mask:  # along the one attention axis, as on sequences
            causal = masks.position_mask(
                ops.arange(q_attended[0], dtype="int32"),
                ops.arange(k_attended[0], dtype="int32"),
                causal=True,
            )
            visible = masks.logical_and(visible, causal[None, None])
        outer = len(batch_axes)
        context, weights = self._attend(
            *(_fold(x, perm, outer) for x in (q, k, v)), visible, training, return_attention_scores
        )
        folded = tuple(q.shape[a] for a in perm[1:-1])  # [outer..., N, attended...]
        context = ops.reshape(context, (-1,) + folded + (self.value_dim,))
        context = ops.transpose(context, [perm.index(i) for i in range(rank)])
        gate = proj.project(self._gate_dense, query) if self.use_gate else None
        output = self._output(context, gate)
        if return_attention_scores:
            return output, ops.reshape(weights, (-1,) + folded + tuple(k_attended))
        return output

    def _check_axes_call(self, query, use_causal_mask, cache, keras_masks):
        """What inputs of rank > 3 do not take (`ValueError`)."""
        for name, given in (
            ("cache", cache),
            ("sliding_window", self.sliding_window),
            ("rotary_max_wavelength", self.rotary_max_wavelength),
            (
                "query_mask / value_mask / key_mask",
                next((m for m in keras_masks if m is not None), None),
            ),
        ):
            if given is not None:
                raise ValueError(
                    f"`{name.split(' ')[0]}` works on sequences ([batch, length, dim]) only, "
                    f"not with inputs of rank {len(query.shape)}. Received: query.shape="
                    f"{tuple(query.shape)}, {name}={given!r}"
                )
        if use_causal_mask and len(self._axes) > 1:
            raise ValueError(
                "`use_causal_mask` orders the positions of one attention axis; it cannot be "
                f"used with several. Received: attention_axes={self.attention_axes!r}, "
                "use_causal_mask=True"
            )

    def compute_mask(self, query, previous_mask=None):
        if isinstance(previous_mask, (list, tuple)):
            previous_mask = previous_mask[0] if previous_mask else None
        return previous_mask

    def get_config(self):
        config = super().get_config()
        ser = keras.initializers.serialize
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_shape": self._out_shape,
                "attention_axes": self.attention_axes,
                "sliding_window": self.sliding_window,
                "flash_attention": self.flash_attention,
                "kernel_initializer": ser(self.kernel_initializer),
                "bias_initializer": ser(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": keras.regularizers.serialize(
                    self.projection_activity_regularizer
                ),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
                "use_gate": self.use_gate,
                "seed": self.seed,
                "num_key_value_heads": self.num_key_value_heads,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "rotary_scaling_factor": self.rotary_scaling_factor,
            }
        )
        return config


def _call_masks(mask, query_mask, value_mask, key_mask):
    """`(query_mask, value_mask, key_mask)`: the explicit ones, else Keras' `mask` (one mask:
    the query's; a list: the query's, the value's, the key's)."""
    if isinstance(mask, (list, tuple)):
        masks_ = list(mask) + [None] * 3
        query_mask = masks_[0] if query_mask is None else query_mask
        value_mask = masks_[1] if value_mask is None else value_mask
        key_mask = masks_[2] if key_mask is None else key_mask
    elif query_mask is None:
        query_mask = mask
    return query_mask, value_mask, key_mask


def _self_attention_defaults(query, value, key, query_mask, value_mask):
    """`(value, key, value_mask)`: `value` defaults to the query (with its mask), `key` to
    `value`."""
    if value is None:
        value = query
        if value_mask is None:
            value_mask = query_mask
    if key is None:
        key = value
    return value, key, value_mask


@dataclasses.dataclass
class _Projected:
    """What `_project` / `_update_cache` hand on to the attention.

    `query`: the input (its padding rows zeroed); `keys` / `values`: head-major `[B, G, S, H]`,
    or `[B, S, G, H]` in `rows_layout` (one query row against a cache); `num_keys`: `S`;
    `value_mask` / `key_mask`: over the keys; `fused`: the fused kernel attends (in
    `rows_layout`, every query row); `queries` / `gate`: when projected with the
    keys (else None); `query_offset`: the first query's position; `key_positions`: the
    positions a ring cache's rows hold (None: key `j` is at `j`); `visible_limit`: key `j`
    is visible iff `j < visible_limit` (None: no limit); `cache`: the updated cache."""

    query: object
    keys: object
    values: object
    num_keys: object
    value_mask: object
    key_mask: object
    queries: object = None
    gate: object = None
    query_offset: object = 0
    key_positions: object = None
    visible_limit: object = None
    cache: object = None
    rows_layout: bool = False
    fused: bool = False


def _fold(x, perm, outer):
    """Projections `[B, ..., N, H]` permuted by `perm` to `[batch axes..., N, attended...,
    H]`, then the `outer` batch axes folded into one and the attended axes into one:
    head-major `[B', N, T', H]`."""
    x = ops.transpose(x, perm)
    return ops.reshape(x, (-1, x.shape[outer], _prod(x.shape[outer + 1 : -1]), x.shape[-1]))


def _prod(dims):
    out = 1
    for d in dims:
        out *= d
    return out


def _zero_new_rows(value, key, row_masks, row, length):
    """`(value, key)` of a cached call with the new rows its masks hide set to 0: a mask of
    the `T_new` new rows is used as it is, one over the `length` cache rows is read at the
    rows written (from `row`). A mask of any other shape is left to `_cache_mask` to refuse."""
    new_rows = value.shape[1]
    kv_mask = None
    for mask in row_masks:
        if mask is None or len(mask.shape) != 2:
            continue
        size = mask.shape[1]
        if size is not None and size == new_rows:
            part = scoring.to_bool_mask(mask)
        elif size is not None and size == length and new_rows is not None:
            part = masks.cache_rows(scoring.to_bool_mask(mask), row, new_rows)
        else:
            continue
        kv_mask = masks.logical_and(kv_mask, part)
    if kv_mask is None:
        return value, key
    if key is value:
        value = key = scoring.zero_masked(value, kv_mask)
        return value, key
    return scoring.zero_masked(value, kv_mask), scoring.zero_masked(key, kv_mask)


def _zero_padding_inputs(query, value, key, query_mask, value_mask, key_mask):
    """The call's inputs with their masked rows set to 0 before any projection: a projection's
    kernel gradient sums input rows times output gradients, so a NaN or inf held by a padded
    row would reach it (NaN * 0) even though the row's output gradient is 0, and a padded
    query row would reach the keys' gradients through the scores (docs/multi_head.md,
    "Precision and masking"). Keys and values share one mask (a position hidden by either
    is never attended to); one input used as query, key and value under one mask is zeroed
    once and stays one tensor (the fused self-attention projection).

    One input under the keys' padding alone (no query mask: a self-attention whose padded
    query rows attend like any other) also stays one tensor,
    not zeroed: its padded rows are live queries, so what they hold reaches the query
    projection's kernel gradient whatever is done to the keys, and the keys and values they
    project to are selected away after the projection (`zero_masked_keys`), as the zeroed
    copy's were. The outputs are the same, and the three projections stay one matmul."""
    kv_mask = value_mask
    if key_mask is not None:
        kv_mask = key_mask if value_mask is None else ops.logical_and(value_mask, key_mask)
    same = key is query and value is query
    if same and (query_mask is kv_mask or query_mask is None):
        zeroed = query if query_mask is None else scoring.zero_masked(query, query_mask)
        return zeroed, zeroed, zeroed
    if query_mask is not None:
        query = scoring.zero_masked(query, query_mask)
    if kv_mask is not None:
        if key is value:
            value = key = scoring.zero_masked(value, kv_mask)
        else:
            value = scoring.zero_masked(value, kv_mask)
            key = scoring.zero_masked(key, kv_mask)
    return query, value, key
