"""Which attention product `MultiHeadAttention` runs, and Keras' `_compute_attention` hook.

`AttentionProducts._attend` takes the queries, keys and values in the layout the call
made them in and runs the product for it: the fused kernel (`multi_head_fused`), one query
row against a cache, several rows sharing a precomputed cache, or whole sequences
head-major (`multi_head_attend`); a subclass's `_compute_attention` runs in place of the
head-major products. See docs/multi_head.md, "How `call` is organised, and where to override".
"""

import keras
from keras import ops

from keras_attn.layers import masks, scoring
from keras_attn.layers import multi_head_attend as attend
from keras_attn.layers import multi_head_fused as fused


def _swapped(*tensors):
    """Each of `tensors` from `[B, T, N, H]` (Keras' layout, a cache's) to head-major `[B, N,
    T, H]`, or back."""
    return [ops.transpose(x, (0, 2, 1, 3)) for x in tensors]


class AttentionProducts:
    """The attention step of `MultiHeadAttention` (a mixin: it reads `num_heads`,
    `key_dim`, `sliding_window` and the attention dropout)."""

    # Whether `_compute_attention` computes the weights when its caller does not say: a
    # subclass that calls the hook Keras' `GroupQueryAttention`'s way sets it per call.
    _return_attention_scores = False

    def _attend(self, queries, keys, values, visible, training, weights_wanted, rows=False):
        """The attention, every layout's: scaled head-major `queries [B, N, T, H]` against
        `keys` / `values [B, G, S, H]`, or (`rows`: one query row against a cache) `queries
        [B, 1, N, H]` against `[B, S, G, H]`; `visible` broadcastable to `[B, N, T, S]`.
        Returns `(context, weights [B, N, T, S] or None)`, the context in the queries'
        layout. A subclass's `_compute_attention` runs in place of the head-major products.
        With `visible` a `fused.KernelMask` (what `call` builds where the fused kernel
        runs), every query row is in the cache's layout: `queries [B, T, N, H]`."""
        if isinstance(visible, fused.KernelMask):
            return fused.fused(queries, keys, values, visible), None
        if rows:
            return self._attend_rows(queries, keys, values, visible, training, weights_wanted)
        if not self._attention_overridden():
            return self._attend_head_major(queries, keys, values, visible, training, weights_wanted)
        q, k, v = _swapped(queries / ops.cast(self._scale(), queries.dtype), keys, values)
        context, weights = self._call_compute_attention(q, k, v, visible, training, weights_wanted)
        return _swapped(context)[0], weights

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
            return fused.fused_head_major(queries, keys, values, visible), None
        return attend.head_major(
            queries, keys, values, visible, self._dropout(training), weights_wanted
        )

    def _dropout(self, training):
        """The attention weights' dropout as a function (None without dropout)."""
        if self._dropout_layer is None:
            return None
        return lambda w: self._dropout_layer(w, training=training)

    def _attention_overridden(self):
        return type(self)._compute_attention is not AttentionProducts._compute_attention

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=None,
        use_causal_mask=False,
    ):
        """The attention over projected heads, Keras' override point (docs/multi_head.md).

        Args:
            query: `[B, T, N, H]`, projected, not yet scaled by `1 / sqrt(key_dim)`.
            key: `[B, S, G, H]`, value: `[B, S, G, Hv]` (G key/value heads; N = G * R).
            attention_mask: bool, broadcastable to `[B, N, T, S]` (a `[B, T, S]` mask is
                taken per example), True where a query may attend; None: every key.
            return_attention_scores: compute the weights; None: as
                `self._return_attention_scores` says (False unless a subclass's way of
                calling the hook sets it: `GroupedQueryAttention`, as Keras' does).
            use_causal_mask: also hide from each query the keys after it (and beyond
                `sliding_window`).

        Returns:
            `(context [B, T, N, Hv], weights [B, N, T, S] or None)`.

        A subclass that overrides it is called by `call` (`_attend`, through
        `_call_compute_attention`) wherever the attention runs head-major: every query but
        a one-row step against a cache (which attends in the cache's layout), inputs of
        rank > 3 with their axes folded; the layer's masks arrive folded into
        `attention_mask`."""
        if return_attention_scores is None:
            return_attention_scores = self._return_attention_scores
        queries, keys, values = _swapped(query * ops.cast(self._scale(), query.dtype), key, value)
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
            queries, keys, values, visible, training, return_attention_scores
        )
        return _swapped(context)[0], weights

    def _use_fused(self, return_attention_scores, training):
        if self.flash_attention is False or return_attention_scores:
            return False
        if self._dropout_layer is not None and training:
            return False
        # JAX's dot_product_attention needs value heads of the key heads' size.
        if self.value_dim != self.key_dim and keras.backend.backend() == "jax":
            return False
        return bool(self.flash_attention) or fused.fused_by_default()
