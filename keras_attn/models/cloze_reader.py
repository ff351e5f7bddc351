"""Attention-over-attention cloze reader (Cui et al. 2017).

    model = AttentionOverAttentionReader(vocab_size)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(), ["accuracy"])
    model.fit({"document": d, "query": q, "candidates": c}, answer_index)
    probabilities, s = model(inputs, return_attention=True)

A shared word embedding, a bidirectional GRU over the document and one over the query,
`AttentionOverAttention` over their outputs giving the document-level attention `s [B, Td]`,
and the pointer sum `P(w | D, Q) = sum_{i: D_i = w} s_i` evaluated for each candidate word:
the output is `P [B, C]` for the `C` candidates. Training maximises the log-probability of the
answer among the candidates (Keras' `SparseCategoricalCrossentropy` on probabilities
renormalises `P` over the candidates). Padding (id 0) is masked in document and query; a
candidate never matches a padding position.

`export_reader` writes a SavedModel whose `serving_default` takes the raw document, query
(with the blank written `@blank`) and candidates (words separated by spaces).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_attn.layers.attention_over_attention import AttentionOverAttention
from keras_attn.layers.base import config_of
from keras_attn.models import common


def pointer_sum(s, document_ids, candidate_ids):
    """`P[b, c] = sum_{i: D[b, i] = C[b, c]} s[b, i]`; `s [B, Td]`, ids `[B, Td]`, `[B, C]`."""
    same = ops.equal(
        ops.expand_dims(document_ids, 2), ops.expand_dims(candidate_ids, 1)
    )  # [B, Td, C]
    same = ops.logical_and(same, ops.expand_dims(ops.not_equal(document_ids, common.PAD_ID), 2))
    return ops.einsum("bi,bic->bc", ops.cast(s, "float32"), ops.cast(same, "float32"))


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionOverAttentionReader(common.WordIdModel):
    """AoA cloze reader. See the module docstring.

    Args:
        vocab_size: word vocabulary size (id 0 = padding).
        embedding_dim: shared word embedding size.
        units: GRU units per direction (document and query encoders).
        dropout: dropout on the embeddings.

    Inputs: `{"document" [B, Td], "query" [B, Tq], "candidates" [B, C]}` int word ids.
    Output: `P [B, C]` float32 (with `return_attention=True`: `(P, s [B, Td])`).
    """

    def __init__(self, vocab_size, embedding_dim=64, units=64, dropout=0.0, **kwargs):
        super().__init__(vocab_size, embedding_dim, dropout, **kwargs)
        self.units = common.check_int("units", units)
        policy = self.dtype_policy
        self.document_encoder = common.bidirectional_gru(units, policy, "document_encoder")
        self.query_encoder = common.bidirectional_gru(units, policy, "query_encoder")
        self.aoa = AttentionOverAttention(dtype=policy, name="attention_over_attention")

    def build(self, input_shape=None):
        if self.built:
            return
        self.embedding.build((None, None))
        self.document_encoder.build((None, None, self.embedding_dim))
        self.query_encoder.build((None, None, self.embedding_dim))
        self.built = True

    def call(self, inputs, training=None, return_attention=False):
        for key in ("document", "query", "candidates"):
            if not isinstance(inputs, dict) or key not in inputs:
                raise ValueError(
                    "`inputs` must be a dict with 'document', 'query' and 'candidates' word ids. "
                    f"Received: inputs={type(inputs).__name__}"
                    + (f" with keys {sorted(inputs)}" if isinstance(inputs, dict) else "")
                )
        document = ops.cast(inputs["document"], "int32")
        query = ops.cast(inputs["query"], "int32")
        candidates = ops.cast(inputs["candidates"], "int32")
        dm = ops.not_equal(document, common.PAD_ID)
        qm = ops.not_equal(query, common.PAD_ID)
        d = self.document_encoder(
            self.embedding_dropout(self.embedding(document), training=training),
            mask=dm,
            training=training,
        )
        q = self.query_encoder(
            self.embedding_dropout(self.embedding(query), training=training),
            mask=qm,
            training=training,
        )
        s = self.aoa(d, q, document_mask=dm, query_mask=qm)
        probabilities = pointer_sum(s, document, candidates)
        if return_attention:
            return probabilities, ops.cast(s, "float32")
        return probabilities

    def get_config(self):
        return {**super().get_config(), **config_of(self, AttentionOverAttentionReader.__init__)}


def question_ids(vocabulary, questions):
    """Python side: `ClozeQuestion`s -> `({"document", "query", "candidates"}, answer_index)`."""
    import numpy as np

    from keras_attn.data.padding import pad_ids

    x = {
        "document": pad_ids([vocabulary.encode(q.document) for q in questions]),
        "query": pad_ids([vocabulary.encode(q.query) for q in questions]),
        "candidates": pad_ids([vocabulary.ids(q.candidates) for q in questions]),
    }
    y = np.array([q.candidates.index(q.answer) for q in questions], np.int32)
    return x, y


def _tf_ids(vocabulary, strings, max_words):
    import tensorflow as tf

    from keras_attn.data.words import tf_split_words

    words = tf_split_words(strings)[:, :max_words]
    dense = vocabulary.tf_lookup(words).to_tensor(default_value=0)
    return tf.pad(dense, [[0, 0], [0, tf.maximum(1 - tf.shape(dense)[1], 0)]])


def export_reader(
    model,
    vocabulary,
    export_dir,
    version=1,
    max_words=512,
    overwrite=False,
    warmup=("The reader reads the document.", "the @blank reads", "reader document"),
):
    """SavedModel for TF Serving, `serving_default`: `document`, `query` (blank written `@blank`),
    `candidates` (words separated by spaces), each string `[B]` -> `answer` string `[B]` (the
    candidate with the highest `P`), `probabilities` float32 `[B, C]`, `document_attention`
    float32 `[B, Td]` (`s`; 0 on padding)."""
    import tempfile

    import numpy as np
    import tensorflow as tf

    from keras_attn.data.words import tf_split_words
    from keras_attn.models.raw_text_export import write_savedmodel

    vocabulary.table()
    specs = [tf.TensorSpec([None], tf.string, name=n) for n in ("document", "query", "candidates")]

    @tf.function(input_signature=specs, autograph=False)
    def serving_default(document, query, candidates):
        words = tf_split_words(candidates)
        candidate_ids = vocabulary.tf_lookup(words).to_tensor(default_value=0)
        candidate_ids = tf.pad(
            candidate_ids, [[0, 0], [0, tf.maximum(1 - tf.shape(candidate_ids)[1], 0)]]
        )
        inputs = {
            "document": _tf_ids(vocabulary, document, max_words),
            "query": _tf_ids(vocabulary, query, max_words),
            "candidates": candidate_ids,
        }
        probabilities, s = model(inputs, training=False, return_attention=True)
        # A padding slot (fewer candidates in this row) can never be the answer.
        probabilities = tf.where(tf.equal(candidate_ids, 0), tf.constant(-1.0), probabilities)
        best = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        texts = words.to_tensor(default_value="")
        texts = tf.pad(texts, [[0, 0], [0, tf.maximum(1 - tf.shape(texts)[1], 0)]])
        return {
            "answer": tf.gather(texts, best, batch_dims=1),
            "probabilities": tf.maximum(probabilities, 0.0),
            "document_attention": s,
        }

    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = vocabulary.save(f"{tmp}/words.txt")
        functions = {"serving_default": serving_default.get_concrete_function()}
        request = {
            k: np.array([v.encode("utf-8")], dtype=object)
            for k, v in zip(("document", "query", "candidates"), warmup)
        }
        return write_savedmodel(
            model,
            functions,
            export_dir,
            version,
            warmup={"serving_default": request},
            assets=[vocab_file],
            resources=[vocabulary.table()],
            overwrite=overwrite,
        )
