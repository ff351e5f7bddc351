"""Attention-over-attention (Cui et al. 2017): a query-to-document attention `alpha` per query
word, averaged with weights `beta_bar` that say how much each query word matters. No weights."""

import keras
from keras import ops

from keras_attn.layers import scoring
from keras_attn.layers.base import check_float_tensor
from keras_attn.layers.pooling import zero_masked


def _pair_mask(document_mask, query_mask, td, tq):
    """`[B, Td, Tq]` bool: True where both the document and the query word are real."""
    if document_mask is None and query_mask is None:
        return None
    if document_mask is None:
        return ops.broadcast_to(ops.expand_dims(query_mask, 1), (ops.shape(query_mask)[0], td, tq))
    if query_mask is None:
        return ops.broadcast_to(
            ops.expand_dims(document_mask, 2), (ops.shape(document_mask)[0], td, tq)
        )
    return ops.logical_and(ops.expand_dims(document_mask, 2), ops.expand_dims(query_mask, 1))


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionOverAttention(keras.layers.Layer):
    """Attention-over-attention of Cui et al. (2017); it has no weights.

    `M = document . query^T` `[B, Td, Tq]`; `alpha` = softmax of `M` over the document axis
    (one distribution over the document per query word); `beta` = softmax of `M` over the
    query axis (one per document word); `beta_bar` = mean of `beta` over the unmasked document
    words `[B, Tq]`; the document-level attention is `s = alpha . beta_bar` `[B, Td]`.

    Masked document or query positions get 0 in `alpha`, `beta_bar` and `s`, and never
    influence anything else whatever they hold; an all-masked document (or query) gives zeros.
    `M` and both softmaxes are computed in float32 (mixed precision included); outputs are in
    the layer's compute dtype.

    Call arguments:
        document: `[B, Td, D]`; query: `[B, Tq, D]` (e.g. bidirectional GRU outputs).
        document_mask, query_mask: `[B, Td]`, `[B, Tq]` bool (or the inputs' Keras masks).
        return_attention_scores: return `(s, alpha [B, Td, Tq], beta_bar [B, Tq])`.

    The document's Keras mask is passed on to `s` (and `alpha`); the query's to `beta_bar`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, document_shape, query_shape=None):
        document_shape = tuple(document_shape)
        query_shape = tuple(query_shape) if query_shape is not None else None
        self._check_shapes(document_shape, query_shape)
        self.built = True

    @staticmethod
    def _check_shapes(document_shape, query_shape):
        for name, shape in (("document", document_shape), ("query", query_shape)):
            if shape is not None and len(shape) != 3:
                raise ValueError(
                    f"`{name}` must have rank 3 ([batch, steps, dim]). Received: {name}.shape={shape}"
                )
        if query_shape is not None and None not in (document_shape[-1], query_shape[-1]):
            if document_shape[-1] != query_shape[-1]:
                raise ValueError(
                    "`document` and `query` must have the same last dimension. "
                    f"Received: document.shape={document_shape}, query.shape={query_shape}"
                )

    def call(
        self, document, query, document_mask=None, query_mask=None, return_attention_scores=False
    ):
        check_float_tensor("document", document)
        check_float_tensor("query", query)
        self._check_shapes(tuple(document.shape), tuple(query.shape))
        dm = scoring.to_bool_mask(document_mask)
        qm = scoring.to_bool_mask(query_mask)
        for name, m, x in (("document_mask", dm, document), ("query_mask", qm, query)):
            if m is not None and (
                len(m.shape) != 2
                or (None not in (m.shape[1], x.shape[1]) and m.shape[1] != x.shape[1])
            ):
                raise ValueError(
                    f"`{name}` must have shape [batch, steps] matching its input. "
                    f"Received: {name}.shape={tuple(m.shape)}, input shape={tuple(x.shape)}"
                )
        dtype = document.dtype
        doc = ops.cast(zero_masked(document, dm), "float32")
        qry = ops.cast(zero_masked(query, qm), "float32")
        td, tq = ops.shape(doc)[1], ops.shape(qry)[1]
        scores = ops.einsum("bid,bjd->bij", doc, qry)  # M [B, Td, Tq]
        pair = _pair_mask(dm, qm, td, tq)
        alpha = scoring.masked_softmax(scores, pair, axis=1)
        beta = scoring.masked_softmax(scores, pair, axis=2)
        if dm is None:
            beta_bar = ops.mean(beta, axis=1)
        else:
            count = ops.sum(ops.cast(dm, "float32"), axis=1, keepdims=True)
            beta_bar = ops.sum(beta, axis=1) / ops.maximum(count, 1.0)  # masked rows of beta are 0
        s = ops.einsum("bij,bj->bi", alpha, beta_bar)
        s = ops.cast(s, dtype)
        if return_attention_scores:
            return s, ops.cast(alpha, dtype), ops.cast(beta_bar, dtype)
        return s

    def compute_output_shape(self, document_shape, query_shape):
        s = (document_shape[0], document_shape[1])
        return s

    def compute_output_spec(
        self, document, query, document_mask=None, query_mask=None, return_attention_scores=False
    ):
        dtype = self.compute_dtype
        batch, td, tq = document.shape[0], document.shape[1], query.shape[1]
        s = keras.KerasTensor((batch, td), dtype=dtype)
        if return_attention_scores:
            return (
                s,
                keras.KerasTensor((batch, td, tq), dtype=dtype),
                keras.KerasTensor((batch, tq), dtype=dtype),
            )
        return s

    def compute_mask(self, document, previous_mask=None):
        # Keras hands over the first input's (the document's) mask.
        if isinstance(previous_mask, (list, tuple)):
            previous_mask = previous_mask[0] if previous_mask else None
        return previous_mask
