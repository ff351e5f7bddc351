"""Grouped-query attention with `keras.layers.GroupQueryAttention`'s constructor and variables.

`GroupedQueryAttention(head_dim, num_query_heads, num_key_value_heads, ...)` is our
`MultiHeadAttention(num_heads=num_query_heads, key_dim=head_dim, num_key_value_heads=...)`
under Keras' names: one attention path, so the key/value cache (`init_cache`, `cache=`,
`cache_index=`, the ring buffer of a sliding window), rotary embeddings and the speed of
grouped heads (nothing repeated at run time) are those of `MultiHeadAttention`.
See docs/multi_head.md, "GroupedQueryAttention".
"""

import keras
from keras import ops

from keras_attn.layers.base import check_positive_int, handed_on_signature
from keras_attn.layers.multi_head import MultiHeadAttention

# MultiHeadAttention's arguments of the layout, which this layer takes under Keras' names.
_MHA_LAYOUT = {
    "num_heads": " (its query heads are `num_query_heads`)",
    "key_dim": " (its heads' size is `head_dim`)",
    "value_dim": " (its heads' size is `head_dim`)",
    "output_shape": " (its output has the query's feature size)",
    "attention_axes": " (it attends over the sequence axis)",
}


@keras.saving.register_keras_serializable(package="keras_attn")
class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention (Ainslie et al., 2023), a drop-in for
    `keras.layers.GroupQueryAttention` (Keras 3.15).

    `num_key_value_heads` key/value heads, each shared by `num_query_heads //
    num_key_value_heads` query heads (1 = multi-query attention, `num_query_heads` =
    multi-head attention); every head has `head_dim` features and the output has the
    query's feature size. The variables are Keras' (`query`, `key`, [`gate`], `value`,
    `attention_output`, each a kernel then a bias), so weights move between the two
    layers with `set_weights`.

    Args (Keras' `GroupQueryAttention`, same meaning):
        head_dim: size of each query, key and value head.
        num_query_heads: number of query heads.
        num_key_value_heads: number of key/value heads; divides `num_query_heads`.
        dropout: dropout rate on the attention weights (training only).
        use_bias: whether the projections have biases.
        sliding_window: each query sees the keys less than `sliding_window` positions
            away (a symmetric band; with `use_causal_mask`, the `sliding_window` latest
            positions). Counts the cache offset.
        flash_attention: True runs `keras.ops.dot_product_attention`; False never; None
            where it is faster (as `MultiHeadAttention`).
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: of every projection.
        activity_regularizer: of every projection's output and of the layer's outputs,
            as in Keras.
        use_gate: each head's context is multiplied by `sigmoid(query W_gate + b_gate)`
            before the output projection.
        seed: seed of the attention dropout.

    Args beyond Keras: `rotary_max_wavelength`, `rotary_scaling_factor` (rotary position
    embeddings of queries and keys, as in `MultiHeadAttention`).

    Call arguments: Keras' (`query`, `value`, `key`, `query_mask`, `value_mask`,
    `key_mask`, `attention_mask`, `return_attention_scores`, `training`,
    `use_causal_mask`), then `cache`, `cache_index` and `cache_zeroed`, as in
    `MultiHeadAttention` (the cache holds `num_key_value_heads` heads). `value=None`
    means self-attention.

    Returns `output [B, Tq, D]`, then the weights `[B, num_query_heads, Tq, Tk]` if asked
    for, then the (updated) cache if one was given.

    `_compute_attention`, Keras' override point, is called as Keras calls it: a subclass
    that overrides it gets the projected `query [B, T, N, H]`, `key` and `value` repeated
    to `[B, S, N, H]`, every mask of the call folded into `attention_mask`, and reads
    `self._return_attention_scores`.
    """

    def __init__(self, head_dim, num_query_heads, num_key_value_heads, **options):
        """`options`: `MultiHeadAttention`'s arguments but its layout (`num_heads`, `key_dim`,
        `value_dim`, `output_shape`, `attention_axes`), checked by `MultiHeadAttention`.

        One table of arguments: `MultiHeadAttention.__init__` lists them, with their defaults
        and their documentation; this constructor names only its own and hands the rest on.
        Written out here again they would drift apart (a new argument added to one and not
        the other). So that `help()`, `inspect.signature` and an interactive editor's hints
        still show every argument with its default, `__signature__` is built from that table
        (`base.handed_on_signature`, below); a static editor's go-to-definition of an
        argument leads to `MultiHeadAttention.__init__`, where it is documented."""
        for name in sorted(options.keys() & _MHA_LAYOUT.keys()):
            raise ValueError(
                f"`{name}` is an argument of MultiHeadAttention, not of GroupedQueryAttention"
                f"{_MHA_LAYOUT[name]}. Received: {name}={options[name]!r}"
            )
        head_dim = check_positive_int("head_dim", head_dim)
        num_query_heads = check_positive_int("num_query_heads", num_query_heads)
        num_key_value_heads = check_positive_int("num_key_value_heads", num_key_value_heads)
        if num_query_heads % num_key_value_heads:
            raise ValueError(
                "`num_query_heads` must be divisible by `num_key_value_heads`. Received: "
                f"num_query_heads={num_query_heads}, num_key_value_heads={num_key_value_heads}"
            )
        super().__init__(
            num_heads=num_query_heads,
            key_dim=head_dim,
            value_dim=head_dim,
            num_key_value_heads=num_key_value_heads,
            **options,
        )
        self.head_dim = head_dim
        self.num_query_heads = num_query_heads
        self.num_repeats = num_query_heads // num_key_value_heads
        # Keras' GroupQueryAttention regularizes the projections' outputs and its own.
        self.activity_regularizer = self.projection_activity_regularizer

    def build(self, query_shape, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        self.feature_dim = self.query_feature_dim

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_index=None,
        cache_zeroed=False,
        mask=None,
    ):
        # Keras' GroupQueryAttention's order of the arguments, MultiHeadAttention's call.
        return super().call(
            query, value, key, attention_mask, use_causal_mask, return_attention_scores,
            training, cache, cache_index, query_mask, value_mask, key_mask, mask, cache_zeroed,
        )  # fmt: skip

    def _call_compute_attention(
        self, query, key, value, attention_mask, training, return_attention_scores
    ):
        """A subclass's `_compute_attention` called as Keras' `GroupQueryAttention` calls it:
        keys and values repeated to the `num_query_heads` heads of the query, and whether the
        scores are wanted in `self._return_attention_scores` rather than an argument."""
        self._return_attention_scores = return_attention_scores
        heads = query.shape[2]
        if key.shape[2] != heads:
            key = ops.repeat(key, heads // key.shape[2], axis=2)
        if value.shape[2] != heads:
            value = ops.repeat(value, heads // value.shape[2], axis=2)
        return self._compute_attention(
            query, key, value, attention_mask=attention_mask, training=training
        )

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        """The query's shape. As in Keras, `query` and `value` must have the same feature
        size here, and `key` and `value` the same shape but for the last axis (`ValueError`)."""
        if value_shape is not None and query_shape[-1] != value_shape[-1]:
            raise ValueError(
                "The last dimension of `query` and `value` must be equal. Received: "
                f"query_shape={tuple(query_shape)}, value_shape={tuple(value_shape)}"
            )
        return super().compute_output_shape(query_shape, value_shape, key_shape)

    def _constructor(self):
        return GroupedQueryAttention.__init__


# Its own three arguments, then `MultiHeadAttention`'s but the layout (the one table, see
# `__init__`), then `**kwargs` (Keras' layer arguments: `name`, `dtype`, ...).
GroupedQueryAttention.__init__.__signature__ = handed_on_signature(
    GroupedQueryAttention.__init__, MultiHeadAttention.__init__, leave_out=_MHA_LAYOUT
)
