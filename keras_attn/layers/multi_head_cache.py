"""The key/value cache of `MultiHeadAttention` and its ring buffer.

`KeyValueCache` holds the layer's cache methods: a zero cache (`init_cache`, a ring of
`sliding_window` rows with `ring=True`), a fixed memory projected once (`compute_cache`), and,
inside `call`, the new rows written at `cache_index` (into row `cache_index mod S` of a ring)
with the masks placed over the cache positions. See docs/multi_head.md.
"""

import keras
from keras import ops

from keras_attn.layers import masks, scoring
from keras_attn.layers import multi_head_attend as attend
from keras_attn.layers import multi_head_projection as proj


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


class KeyValueCache:
    """The cache methods of `MultiHeadAttention` (a mixin: it reads the layer's sizes,
    projections and `sliding_window`)."""

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

    def _update_cache(
        self, query, value, key, cache, cache_index, value_mask, key_mask, use_causal_mask, fused
    ):
        """With a cache: the new rows written at `cache_index` (`_write_cache`), or, without
        an index, the cache attended as it is; the value/key masks placed over the cache
        positions (`_cache_mask`). One query row (a decoding step) attends in the cache's
        layout `[B, S, G, H]`; longer queries head-major, like the uncached path."""
        key_cache, value_cache = self._check_cache(cache)
        length = key_cache.shape[1]
        state = proj.Projected(query, key_cache, value_cache, ops.shape(key_cache)[1], None, None)
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
