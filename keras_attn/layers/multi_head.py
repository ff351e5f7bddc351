"""Scaled dot-product multi-head attention with a key/value cache.

The variables are those of `keras.layers.MultiHeadAttention` (same names,
shapes and order: `query`, `key`, `value`, `attention_output`, each a kernel
then a bias), so weights move between the two with `set_weights`. What
differs from Keras:

- `value=None` means self-attention, so the layer works in `keras.Sequential`
  and takes the Keras mask of its single input (`mask`).
- A query whose every key is masked gets all-zero weights and a zero
  attention context (its output is the output projection's bias), never a
  uniform distribution, on every path. The softmax always runs in float32.
- `cache` / `cache_index` support incremental decoding (see `call`).
"""

import math

import keras
from keras import ops
from keras_attn import _keras_compat as keras_backend  # Keras masks: no public accessor

from keras_attn.layers import scoring
from keras_attn.layers import rng
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


def _letters(n, offset=0):
    return "".join(chr(ord("a") + offset + i) for i in range(n))


def _project(dense, x):
    """`dense(x)` without handing `x`'s Keras mask to the projection.

    The masks are applied by the attention itself; an EinsumDense would only
    warn that it drops them. The mask is put back on `x` afterwards so that
    other consumers of `x` (e.g. a residual connection) still see it.
    """
    _check_projection_input(dense, x)
    mask = keras_backend.get_keras_mask(x)
    if mask is None:
        return dense(x)
    keras_backend.set_keras_mask(x, None)
    try:
        return dense(x)
    finally:
        keras_backend.set_keras_mask(x, mask)


def _check_projection_input(dense, x):
    expected = dense.kernel.shape[0]
    if len(x.shape) != 3 or x.shape[-1] != expected:
        raise ValueError(
            f"`{dense.name}` must have shape [batch, length, {expected}], as when the layer "
            f"was built. Received: {dense.name}.shape={tuple(x.shape)}"
        )


def _plain(dense):
    """Whether `dense` is a plain float EinsumDense whose kernel we may use directly."""
    return getattr(dense, "quantization_mode", None) is None and not getattr(
        dense, "lora_enabled", False
    )


def _kernel_and_bias(dense, dtype, scale=None):
    """A plain `dense`'s kernel `[D, N, H]` and bias `[N, H]` (or None) in `dtype`, both times
    `scale` if given: scaling the weights costs less than scaling the `[B, T, N, H]` output."""
    kernel = ops.cast(dense.kernel, dtype)
    bias = None if dense.bias is None else ops.cast(dense.bias, dtype)
    if scale is not None:
        scale = ops.cast(scale, dtype)
        kernel = kernel * scale
        bias = None if bias is None else bias * scale
    return kernel, bias


def _project_own_way(dense, x, scale=None):
    """`dense(x) * scale` by the layer's own arithmetic (quantized / LoRA kernels):
    `[B, T, N, H]`."""
    y = _project(dense, x)
    return y if scale is None else y * ops.cast(scale, y.dtype)


def _project_heads(dense, x, dtype, scale=None):
    """`x [B, T, D]` projected by `dense` (kernel `[D, N, H]`) straight into the head-major
    layout `[B, N, T, H]`, times `scale` if given.

    Head-major projections make both attention products plain batched matmuls over
    `[B, N]` (no transposes of the `[B, N, Tq, Tk]`-sized operands, forward or backward),
    and the scale is applied to the `[D, N, H]` kernel instead of the `[B, T, N, H]` output.
    Same variables and the same numbers as `dense(x)` (up to float rounding).
    """
    _check_projection_input(dense, x)
    if not _plain(dense):
        return ops.transpose(_project_own_way(dense, x, scale), (0, 2, 1, 3))
    kernel, bias = _kernel_and_bias(dense, dtype, scale)
    y = ops.einsum("abc,cde->adbe", ops.cast(x, dtype), kernel)
    if bias is not None:
        y = y + ops.expand_dims(bias, 1)  # [N, 1, H]
    return y


def _project_row(dense, x, dtype, scale=None):
    """`x [B, 1, D]` (one decoding step) projected by `dense` (kernel `[D, N, H]`) to
    `[B, 1, N, H]` with one 2-D matmul whose bias add TensorFlow fuses into it (an einsum or
    EinsumDense call costs several ops more, which a step pays in every layer)."""
    _check_projection_input(dense, x)
    if not _plain(dense):
        return _project_own_way(dense, x, scale)
    kernel, bias = _kernel_and_bias(dense, dtype, scale)
    features, heads, size = kernel.shape
    rows = ops.reshape(ops.cast(x, dtype), (-1, features))
    y = ops.matmul(rows, ops.reshape(kernel, (features, -1)))
    if bias is not None:
        y = y + ops.reshape(bias, (-1,))
    return ops.reshape(y, (-1, 1, heads, size))


def _softmax(scores, visible, axis=-1):
    """Masked softmax over `axis` (`scoring.masked_softmax`). float32/float64 scores skip its
    clip (a full pass over `[B, N, Tq, Tk]`); half-precision scores, which can overflow, keep it."""
    return scoring.masked_softmax(
        scores, visible, axis=axis, clip=scores.dtype not in ("float32", "float64")
    )


def _softmax_keys_axis1(scores, visible):
    """`_softmax(scores, visible, axis=1)` for one-query scores `[B, S, N]`, written out:
    TensorFlow's softmax kernel works on the last axis only, so `axis=1` would transpose the
    scores there and back, two kernels that cost more than this arithmetic on a step's small
    tensors. Computed in float32; a fully masked row gets all-zero weights."""
    dtype = scores.dtype
    s = ops.cast(scores, "float32")
    if visible is not None:
        s = ops.where(visible, s, scoring.MASK_FILL)
    e = ops.exp(s - ops.max(s, axis=1, keepdims=True))
    if visible is not None:
        e = ops.where(visible, e, 0.0)
    total = ops.sum(e, axis=1, keepdims=True)
    return ops.cast(e / ops.maximum(total, 1e-30), dtype)


def _check_mask_shape(name, mask, target):
    """A mask whose static shape cannot broadcast to `target` is a clear ValueError."""
    if mask is None:
        return
    shape = tuple(mask.shape)
    ok = len(shape) <= len(target) and all(
        m is None or t is None or m in (1, t) for m, t in zip(shape[::-1], tuple(target)[::-1])
    )
    if not ok:
        raise ValueError(
            f"`{name}` must broadcast to shape {tuple(target)}. Received: {name}.shape={shape}"
        )


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return ops.logical_and(a, b)



def _write_rows(cache, rows, index):
    """`cache[:, index : index + T] = rows` for `cache [B, L, ...]`, `rows [B, T, ...]`.

    Not `ops.slice_update`, whose TF kernel (XlaDynamicUpdateSlice) TensorFlow
    Serving does not have: one row (a decoding step) is a scatter of B slices,
    several rows a gather and a select. Both run under XLA too.
    """
    length = ops.shape(cache)[1]
    if rows.shape[1] == 1:
        # One row: a scatter, which TensorFlow may do in place (it reuses the old cache's
        # buffer when nothing else reads it), far cheaper than a select over the whole cache
        # (benchmarks/RESULTS.md, "Incremental decoding", has the current numbers).
        batch = ops.shape(cache)[0]
        at = ops.stack([ops.arange(batch, dtype="int32"), ops.ones((batch,), "int32") * index], 1)
        return ops.scatter_update(cache, at, rows[:, 0])
    count = ops.shape(rows)[1]
    rel = ops.arange(length, dtype="int32") - index
    inside = ops.logical_and(rel >= 0, rel < count)
    placed = ops.take(rows, ops.clip(rel, 0, count - 1), axis=1)
    inside = ops.reshape(inside, (1, -1) + (1,) * (len(cache.shape) - 2))
    return ops.where(inside, placed, cache)

@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017).

    `head_h = softmax(Q_h K_h^T / sqrt(key_dim)) V_h`, the heads concatenated
    and projected back to the query's feature size (or `output_shape`).

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        value_dim: size of each head for value (defaults to `key_dim`).
        dropout: dropout rate on the attention weights (training only).
        use_bias: whether the four projections have biases.
        output_shape: feature shape of the output (int or tuple); defaults to
            the query's last dimension.
        kernel_initializer, bias_initializer: initializers of the projections.
        seed: seed of the attention dropout.

    Call arguments:
        query: `[B, Tq, Dq]`.
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
        cache: `(key_cache [B, S, heads, key_dim], value_cache
            [B, S, heads, value_dim])` of projected keys and values (see
            `init_cache`, `compute_cache`).
        cache_index: with a cache, the position where the `T_new` rows of the
            projected `key`/`value` (`value` defaults to `query`) are written;
            key `j` is then visible iff `j < cache_index + T_new`. May be a
            scalar tensor (inside a `while_loop` / XLA). With a cache and
            `cache_index=None` the cache is attended as it is (a precomputed
            cross-attention memory) and `value`/`key` may be None.
        query_mask, value_mask, key_mask, mask: Keras masks (filled in by
            Keras). With a cache, `value_mask`/`key_mask` cover the cache
            positions `[B, S]`, or (with `cache_index`) just the `T_new` new
            rows; masks of earlier rows are not remembered by the cache (pass
            `attention_mask [B, Tq, S]` for those).

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
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = check_positive_int("key_dim", key_dim)
        value_dim = check_positive_int("value_dim", value_dim, allow_none=True)
        self.value_dim = key_dim if value_dim is None else value_dim
        self.dropout = check_rate("dropout", dropout)
        if not isinstance(use_bias, bool):
            raise ValueError(f"`use_bias` must be a bool. Received: use_bias={use_bias!r}")
        self.use_bias = use_bias
        self._out_shape = _check_output_shape(output_shape)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be None or an integer. Received: seed={seed!r}")
        self.seed = seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self._dropout_layer = (
            rng.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy)
            if self.dropout > 0
            else None
        )

    # ------------------------------------------------------------------ build
    def _dense(self, equation, output_shape, bias_axes, name):
        # A fresh initializer per projection (an initializer object with a
        # fixed seed would otherwise give all four the same values).
        def fresh(init):
            return init.__class__.from_config(init.get_config())

        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=fresh(self.kernel_initializer),
            bias_initializer=fresh(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_shape = tuple(query_shape)
        value_shape = query_shape if value_shape is None else tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) != 3:
                raise ValueError(
                    f"`{name}` must have rank 3 ([batch, length, dim]). "
                    f"Received: {name}.shape={shape}"
                )
            if shape[-1] is None:
                raise ValueError(
                    f"The last dimension of `{name}` must be known. Received: {name}.shape={shape}"
                )
        if (
            key_shape[1] is not None
            and value_shape[1] is not None
            and key_shape[1] != value_shape[1]
        ):
            raise ValueError(
                "`key` and `value` must have the same length. "
                f"Received: key.shape={key_shape}, value.shape={value_shape}"
            )
        self.query_feature_dim = int(query_shape[-1])
        out_shape = self._out_shape or (self.query_feature_dim,)
        heads = self.num_heads
        # [B, T, D] x [D, N, H] -> [B, T, N, H]
        proj = "abc,cde->abde"
        self._query_dense = self._dense(proj, (None, heads, self.key_dim), "de", "query")
        self._query_dense.build(query_shape)
        self._key_dense = self._dense(proj, (None, heads, self.key_dim), "de", "key")
        self._key_dense.build(key_shape)
        self._value_dense = self._dense(proj, (None, heads, self.value_dim), "de", "value")
        self._value_dense.build(value_shape)
        # [B, T, N, H] x [N, H, *out] -> [B, T, *out]
        out = _letters(len(out_shape), offset=4)
        self._output_dense = self._dense(
            f"abcd,cd{out}->ab{out}", (None,) + tuple(out_shape), out, "attention_output"
        )
        self._output_dense.build((query_shape[0], query_shape[1], heads, self.value_dim))
        self.built = True

    # ------------------------------------------------------------------ cache
    def init_cache(self, batch_size, max_length, dtype=None):
        """A zero cache `(key_cache, value_cache)` for `max_length` positions."""
        dtype = dtype or self.compute_dtype
        return (
            ops.zeros((batch_size, max_length, self.num_heads, self.key_dim), dtype=dtype),
            ops.zeros((batch_size, max_length, self.num_heads, self.value_dim), dtype=dtype),
        )

    def compute_cache(self, value, key=None):
        """The projected `(key, value)` of a fixed memory, for `cache=`."""
        if not self.built:
            raise ValueError(
                "`compute_cache` needs a built layer (call it once, or `build` it, first). "
                f"Received: layer {self.name!r} not built"
            )
        value = ops.convert_to_tensor(value, dtype=self.compute_dtype)
        key = value if key is None else ops.convert_to_tensor(key, dtype=self.compute_dtype)
        values = _project(self._value_dense, value)
        return _project(self._key_dense, key), values

    def _check_cache(self, cache):
        if not isinstance(cache, (list, tuple)) or len(cache) != 2:
            raise ValueError(
                "`cache` must be a tuple (key_cache, value_cache). "
                f"Received: cache={cache!r}"
            )
        key_cache, value_cache = cache
        for name, x, dim in (
            ("key_cache", key_cache, self.key_dim),
            ("value_cache", value_cache, self.value_dim),
        ):
            shape = tuple(x.shape)
            if len(shape) != 4 or shape[2] != self.num_heads or shape[3] != dim:
                raise ValueError(
                    f"`{name}` must have shape [batch, max_length, {self.num_heads}, {dim}]. "
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
    ):
        if isinstance(mask, (list, tuple)):
            masks = list(mask) + [None] * 3
            query_mask = masks[0] if query_mask is None else query_mask
            value_mask = masks[1] if value_mask is None else value_mask
            key_mask = masks[2] if key_mask is None else key_mask
        elif query_mask is None:
            query_mask = mask
        if len(query.shape) != 3:
            raise ValueError(
                "`query` must have rank 3 ([batch, Tq, dim]). "
                f"Received: query.shape={tuple(query.shape)}"
            )

        for name, x in (("query", query), ("value", value), ("key", key)):
            if x is not None:
                check_float_tensor(name, x)

        scale = 1.0 / math.sqrt(float(self.key_dim))
        queries = None
        rows_layout = False  # keys/values [B, S, N, H] instead of head-major [B, N, S, H]
        offset = 0
        visible_limit = None  # key j is visible iff j < visible_limit
        new_cache = None
        if cache is None and cache_index is not None:
            raise ValueError(
                "`cache_index` needs a `cache`. Received: cache=None, "
                f"cache_index={cache_index!r}"
            )
        if cache is None or cache_index is not None:
            # Self-attention defaults; a cache without an index is a precomputed memory and
            # needs no value or key.
            if value is None:
                value = query
                if value_mask is None:
                    value_mask = query_mask
            if key is None:
                key = value
        if cache is None:
            batch = query.shape[0]
            _check_mask_shape("query_mask", query_mask, (batch, query.shape[1]))
            _check_mask_shape("value_mask", value_mask, (batch, value.shape[1]))
            _check_mask_shape("key_mask", key_mask, (batch, key.shape[1]))
            if key is query and value is query and self._fusable():
                # Self-attention: one matmul for the three projections.
                queries, keys, values = self._project_self(query, scale)
            else:
                keys = _project_heads(self._key_dense, key, self.compute_dtype)
                values = _project_heads(self._value_dense, value, self.compute_dtype)
        else:
            key_cache, value_cache = self._check_cache(cache)
            length = key_cache.shape[1]
            if cache_index is None:
                keys, values = key_cache, value_cache
                new_cache = (key_cache, value_cache)
            else:
                new_rows = value.shape[1]
                if isinstance(cache_index, int) and not isinstance(cache_index, bool):
                    if cache_index < 0 or (
                        None not in (length, new_rows) and cache_index + new_rows > length
                    ):
                        raise ValueError(
                            f"`cache_index` + the {new_rows} new rows must fit in the cache of "
                            f"length {length}. Received: cache_index={cache_index}"
                        )
                index = ops.cast(cache_index, "int32")
                # Separate projections: for a step's one row, concatenating the kernels
                # (a full copy of them) would cost more than the matmuls it saves.
                if new_rows == 1:
                    new_keys = _project_row(self._key_dense, key, self.compute_dtype)
                    new_values = _project_row(self._value_dense, value, self.compute_dtype)
                else:
                    new_keys = _project(self._key_dense, key)
                    new_values = _project(self._value_dense, value)
                key_cache = _write_rows(key_cache, ops.cast(new_keys, key_cache.dtype), index)
                value_cache = _write_rows(
                    value_cache, ops.cast(new_values, value_cache.dtype), index
                )
                keys, values = key_cache, value_cache
                new_cache = (key_cache, value_cache)
                offset = index
                visible_limit = index + ops.cast(ops.shape(value)[1], "int32")
            new_rows = None if cache_index is None else value.shape[1]
            value_mask = self._cache_mask("value_mask", value_mask, length, new_rows, offset)
            key_mask = self._cache_mask("key_mask", key_mask, length, new_rows, offset)
            keys = ops.cast(keys, self.compute_dtype)
            values = ops.cast(values, self.compute_dtype)
            # The cache is [B, S, N, H]. One query per row (a decoding step) attends in that
            # layout; longer queries run head-major like the uncached path.
            rows_layout = query.shape[1] == 1
            if not rows_layout:
                keys = ops.transpose(keys, (0, 2, 1, 3))
                values = ops.transpose(values, (0, 2, 1, 3))

        if queries is None and rows_layout:
            queries = _project_row(self._query_dense, query, self.compute_dtype, scale)
        elif queries is None:
            queries = _project_heads(self._query_dense, query, self.compute_dtype, scale)
        key_axis = 1 if rows_layout else 2
        visible = self._visibility(
            query,
            (keys.shape[key_axis], ops.shape(keys)[key_axis]),
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
            offset,
            visible_limit,
        )
        if rows_layout:
            context, weights = self._attend_rows(queries, keys, values, visible, training)
            output = self._output(context, head_major=False)
            if return_attention_scores:
                weights = weights()
        else:
            context, weights = self._attend(queries, keys, values, visible, training)
            output = self._output(context)

        result = (output,)
        if return_attention_scores:
            result += (weights,)
        if new_cache is not None:
            result += (new_cache,)
        return result[0] if len(result) == 1 else result

    def _fusable(self):
        return all(
            _plain(dense) for dense in (self._query_dense, self._key_dense, self._value_dense)
        )

    def _project_self(self, x, scale):
        """Head-major `(queries * scale, keys, values)` of self-attention on `x [B, T, D]`.

        The same numbers as three `_project_heads` calls (up to float rounding), from one
        `[B*T, D] x [D, N (2 H + H_v)]` matmul whose output is split by columns: one large
        matmul instead of three, and in the backward pass one matmul for the input's gradient
        instead of three matmuls and their sum.
        """
        dense = (self._query_dense, self._key_dense, self._value_dense)
        for layer in dense:
            _check_projection_input(layer, x)
        dtype = self.compute_dtype
        heads = self.num_heads
        dims = (self.key_dim, self.key_dim, self.value_dim)
        weights = [
            _kernel_and_bias(layer, dtype, s) for layer, s in zip(dense, (scale, None, None))
        ]
        kernels = [k for k, _ in weights]  # [D, N, H] each
        features = kernels[0].shape[0]
        kernel = ops.concatenate(
            [ops.reshape(k, (features, heads * h)) for k, h in zip(kernels, dims)], axis=1
        )
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        y = ops.matmul(ops.reshape(ops.cast(x, dtype), (-1, features)), kernel)
        if self.use_bias:
            y = y + ops.concatenate([ops.reshape(b, (-1,)) for _, b in weights], axis=0)
        if self.key_dim == self.value_dim:
            # One transpose to [3, B, N, T, H]; splitting its first axis shares the buffer.
            y = ops.reshape(y, (batch, length, 3, heads, self.key_dim))
            y = ops.transpose(y, (2, 0, 3, 1, 4))
            return tuple(ops.squeeze(part, 0) for part in ops.split(y, 3, axis=0))
        parts = ops.split(y, [heads * dims[0], heads * (dims[0] + dims[1])], axis=1)
        return tuple(
            ops.transpose(ops.reshape(part, (batch, length, heads, h)), (0, 2, 1, 3))
            for part, h in zip(parts, dims)
        )

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

    def _visibility(
        self,
        query,
        key_length,
        query_mask,
        value_mask,
        key_mask,
        attention_mask,
        use_causal_mask,
        offset,
        visible_limit,
    ):
        """A bool mask broadcastable to `[B, heads, Tq, Tk]`, or None.

        `key_length` is `(Tk as a Python int or None, Tk as a tensor)`."""
        static_keys, num_keys = key_length
        visible = None
        if query_mask is not None:
            m = scoring.to_bool_mask(query_mask)
            visible = ops.reshape(m, (-1, 1, ops.shape(m)[1], 1))
        for m in (value_mask, key_mask):
            if m is not None:
                m = scoring.to_bool_mask(m)
                visible = _and(visible, ops.reshape(m, (-1, 1, 1, ops.shape(m)[1])))
        if attention_mask is not None:
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
                _check_mask_shape("attention_mask", m, target)
            except ValueError:
                raise ValueError(
                    f"`attention_mask` must broadcast to [batch, Tq, Tk] = "
                    f"{(query.shape[0], query.shape[1], static_keys)} (or "
                    f"[batch, {self.num_heads}, Tq, Tk]). "
                    f"Received: attention_mask.shape={tuple(attention_mask.shape)}"
                ) from None
            visible = _and(visible, m)
        key_pos = ops.reshape(ops.arange(num_keys, dtype="int32"), (1, 1, 1, -1))
        if use_causal_mask:
            query_pos = ops.arange(ops.shape(query)[1], dtype="int32") + offset
            query_pos = ops.reshape(query_pos, (1, 1, -1, 1))
            visible = _and(visible, key_pos <= query_pos)
        if visible_limit is not None:
            visible = _and(visible, key_pos < visible_limit)
        return visible

    def _attend(self, queries, keys, values, visible, training):
        """Head-major: `queries [B, N, Tq, H]` (already scaled), `keys [B, N, Tk, H]`,
        `values [B, N, Tk, Hv]` -> context `[B, N, Tq, Hv]`, weights `[B, N, Tq, Tk]`."""
        scores = ops.einsum("bnqh,bnkh->bnqk", queries, keys)
        weights = _softmax(scores, visible)
        dropped = weights
        if self._dropout_layer is not None:
            dropped = self._dropout_layer(weights, training=training)
        context = ops.einsum("bnqk,bnkh->bnqh", dropped, values)
        return context, weights

    def _attend_rows(self, queries, keys, values, visible, training):
        """`_attend` for one query per row in the cache layout: `queries [B, 1, N, H]`,
        `keys [B, S, N, H]`, `values [B, S, N, Hv]` -> context `[B, 1, N, Hv]` and a
        callable giving the weights `[B, N, 1, S]` (transposed only if asked for).

        Multiply-and-sum over the cache instead of batched matmuls of one row, and the
        softmax over the key axis where it is: no transpose of the cache or the scores, so a
        decoding step's attention is a few element-wise passes (each op a step pays in every
        layer counts on a CPU)."""
        scores = ops.sum(queries * keys, axis=-1)  # [B, S, N]
        if visible is not None:  # [b, n, 1, S] -> [b, S, n]
            if visible.shape[1] == 1:
                visible = ops.reshape(visible, (ops.shape(visible)[0], -1, 1))
            else:
                visible = ops.transpose(visible[:, :, 0, :], (0, 2, 1))
        weights = _softmax_keys_axis1(scores, visible)
        dropped = weights
        if self._dropout_layer is not None:
            dropped = self._dropout_layer(weights, training=training)
        context = ops.sum(ops.expand_dims(dropped, -1) * values, axis=1)  # [B, N, Hv]

        def head_major_weights():
            return ops.expand_dims(ops.transpose(weights, (0, 2, 1)), 2)

        return ops.expand_dims(context, 1), head_major_weights

    def _output(self, context, head_major=True):
        """The output projection of the context, head-major `[B, N, Tq, Hv]` or (with
        `head_major=False`) `[B, Tq, N, Hv]`."""
        dense = self._output_dense
        if head_major:
            context = ops.transpose(context, (0, 2, 1, 3))
        if not _plain(dense):
            return dense(context)
        kernel, bias = _kernel_and_bias(dense, self.compute_dtype)  # [N, Hv, *out], [*out]
        out_shape = tuple(kernel.shape[2:])
        # [B, Tq, N * Hv] @ [N * Hv, prod(out)]: a plain 2-D matmul, so that the bias add
        # fuses into it (TensorFlow's remapper).
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        inner = kernel.shape[0] * kernel.shape[1]
        rows = ops.reshape(context, (-1, inner))
        y = ops.matmul(rows, ops.reshape(kernel, (inner, -1)))
        if bias is not None:
            y = y + ops.reshape(bias, (-1,))
        return ops.reshape(y, (batch, length) + out_shape)

    def compute_mask(self, query, previous_mask=None):
        if isinstance(previous_mask, (list, tuple)):
            previous_mask = previous_mask[0] if previous_mask else None
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_shape": self._out_shape,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "seed": self.seed,
            }
        )
        return config
