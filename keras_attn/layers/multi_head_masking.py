"""What each query of `MultiHeadAttention` may see, and the padding zeroed before it is used.

`Visibility` holds the layer's mask builders: the padding masks, an `attention_mask`, causal
order, the sliding window and a cache's positions folded into one bool mask (`_visibility`), or
into the fused kernel's terms (`_kernel_mask`, a `multi_head_fused.KernelMask`); the keys and
values no query sees are zeroed (`_mask_keys`). The functions here sort the call's masks and
zero the inputs' padding rows before any projection. See docs/multi_head.md, "Precision and
masking".
"""

from keras import ops

from keras_attn.layers import masks, scoring
from keras_attn.layers import multi_head_attend as attend
from keras_attn.layers import multi_head_fused as fused


def call_masks(mask, query_mask, value_mask, key_mask):
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


def self_attention_defaults(query, value, key, query_mask, value_mask):
    """`(value, key, value_mask)`: `value` defaults to the query (with its mask), `key` to
    `value`."""
    if value is None:
        value = query
        if value_mask is None:
            value_mask = query_mask
    if key is None:
        key = value
    return value, key, value_mask


def zero_padding_inputs(query, value, key, query_mask, value_mask, key_mask):
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


class Visibility:
    """The mask builders of `MultiHeadAttention` (a mixin: it reads `num_heads` and
    `sliding_window`)."""

    def _zeroed_inputs(self, query, value, key, query_mask, value_mask, key_mask, attention_mask):
        """Whole sequences, no cache: the masks' shapes checked, then the inputs' padding rows
        zeroed (`zero_padding_inputs`), and the keys and values no query sees under
        `attention_mask`: `(query, value, key)`."""
        batch = query.shape[0]
        masks.check_mask_shape("query_mask", query_mask, (batch, query.shape[1]))
        masks.check_mask_shape("value_mask", value_mask, (batch, value.shape[1]))
        masks.check_mask_shape("key_mask", key_mask, (batch, key.shape[1]))
        query, value, key = zero_padding_inputs(query, value, key, query_mask, value_mask, key_mask)
        seen = None
        if attention_mask is not None:  # its shape checked before it is used
            seen = masks.keys_seen(self._attention_mask(attention_mask, query, key.shape[1]))
        if seen is not None and value is not query:  # (self-attention: a live query row)
            value = scoring.zero_masked(value, seen)
            if key is not query:
                key = value if key is value else scoring.zero_masked(key, seen)
        return query, value, key

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
        """`_visibility` for the fused kernel: `(fused.KernelMask, key_visible)`. The
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
        structure = fused.KernelMask(key_visible=key_visible, query_visible=query_visible)
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
