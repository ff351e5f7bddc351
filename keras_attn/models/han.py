"""Hierarchical attention network for document classification (Yang et al. 2016).

    model = HierarchicalAttentionNetwork(vocab_size, num_classes)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
    model.fit(word_ids, labels)                      # word_ids [B, S, W] int, 0 = padding
    logits, word_weights, sentence_weights = model(word_ids, return_attention=True)

Architecture: word embeddings -> bidirectional GRU over the words of each sentence ->
`AttentionPooling` (one vector per sentence) -> bidirectional GRU over the sentences ->
`AttentionPooling` (one vector per document) -> `Dense(num_classes)` logits.

The word level runs on every sentence at once, the sentences folded into the batch axis
(`[B*S, W]`): the computation `keras.layers.TimeDistributed(AttentionPooling(...))` does, with
the word weights kept (TimeDistributed returns one output). Padding words (id 0) and padding
sentences (no word) are masked at both levels: they get weight 0, and an empty sentence pools to
zeros. `word_weights [B, S, W]`, `sentence_weights [B, S]`.

`export_classifier` writes a SavedModel whose `serving_default` takes raw documents (sentences
on lines) and returns the label, the class probabilities and both attentions.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_attn.layers.base import config_of
from keras_attn.layers.pooling import AttentionPooling
from keras_attn.models import common


@keras.saving.register_keras_serializable(package="keras_attn")
class HierarchicalAttentionNetwork(common.WordIdModel):
    """HAN classifier. See the module docstring.

    Args:
        vocab_size: word vocabulary size (id 0 = padding).
        num_classes: number of labels (the output has one logit each).
        embedding_dim: word embedding size.
        word_units, sentence_units: GRU units per direction at each level.
        attention_units: `units` of both `AttentionPooling` layers.
        dropout: dropout on the word embeddings and on the document vector.
    """

    def __init__(
        self,
        vocab_size,
        num_classes,
        embedding_dim=64,
        word_units=32,
        sentence_units=32,
        attention_units=64,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(vocab_size, embedding_dim, dropout, **kwargs)
        self.num_classes = common.check_int("num_classes", num_classes, 2)
        self.word_units = common.check_int("word_units", word_units)
        self.sentence_units = common.check_int("sentence_units", sentence_units)
        self.attention_units = common.check_int("attention_units", attention_units)
        policy = self.dtype_policy
        self.word_encoder = common.bidirectional_gru(word_units, policy, "word_encoder")
        self.word_attention = AttentionPooling(attention_units, dtype=policy, name="word_attention")
        self.sentence_encoder = common.bidirectional_gru(sentence_units, policy, "sentence_encoder")
        self.sentence_attention = AttentionPooling(
            attention_units, dtype=policy, name="sentence_attention"
        )
        self.classifier = keras.layers.Dense(num_classes, dtype=policy, name="classifier")
        self.document_dropout = keras.layers.Dropout(dropout, dtype=policy)

    def build(self, input_shape=None):
        if self.built:
            return
        self.embedding.build((None, None))
        self.word_encoder.build((None, None, self.embedding_dim))
        self.word_attention.build((None, None, 2 * self.word_units))
        self.sentence_encoder.build((None, None, 2 * self.word_units))
        self.sentence_attention.build((None, None, 2 * self.sentence_units))
        self.classifier.build((None, 2 * self.sentence_units))
        self.built = True

    def call(self, inputs, training=None, return_attention=False):
        ids = ops.cast(inputs, "int32")
        if len(ids.shape) != 3:
            raise ValueError(
                f"`inputs` must be word ids [batch, sentences, words]. Received: inputs.shape={tuple(ids.shape)}"
            )
        shape = ops.shape(ids)
        batch, sentences, words = shape[0], shape[1], shape[2]
        flat = ops.reshape(ids, (-1, words))
        word_mask = ops.not_equal(flat, common.PAD_ID)
        x = self.embedding_dropout(self.embedding(flat), training=training)
        x = self.word_encoder(x, mask=word_mask, training=training)
        sentence_vectors, word_weights = self.word_attention(
            x, mask=word_mask, return_attention_scores=True
        )
        sentence_vectors = ops.reshape(sentence_vectors, (batch, sentences, 2 * self.word_units))
        sentence_mask = ops.any(ops.not_equal(ids, common.PAD_ID), axis=-1)
        y = self.sentence_encoder(sentence_vectors, mask=sentence_mask, training=training)
        document, sentence_weights = self.sentence_attention(
            y, mask=sentence_mask, return_attention_scores=True
        )
        logits = self.classifier(self.document_dropout(document, training=training))
        if not return_attention:
            return logits
        return logits, ops.reshape(word_weights, (batch, sentences, words)), sentence_weights

    def get_config(self):
        return {**super().get_config(), **config_of(self, HierarchicalAttentionNetwork.__init__)}


def document_ids(vocabulary, documents, max_sentences=None, max_words=None):
    """Python side: documents (sentences on lines) -> int32 `[N, S, W]` word ids."""
    import numpy as np

    from keras_attn.data.words import split_sentences

    rows = [
        [vocabulary.encode(s)[:max_words] for s in split_sentences(d)[:max_sentences]]
        for d in documents
    ]
    s = max([len(r) for r in rows] + [1])
    w = max([len(x) for r in rows for x in r] + [1])
    out = np.zeros((len(rows), s, w), np.int32)
    for i, r in enumerate(rows):
        for j, x in enumerate(r):
            out[i, j, : len(x)] = x
    return out


def tf_document_ids(vocabulary, documents, max_sentences=64, max_words=64):
    """Graph side of `document_ids`: `tf.string [B]` -> int32 `[B, S, W]` (`S, W >= 1`)."""
    import tensorflow as tf

    from keras_attn.data.words import tf_split_sentences, tf_split_words

    sentences = tf_split_sentences(documents)[:, :max_sentences]
    words = tf_split_words(sentences.flat_values)[:, :max_words]
    ids = sentences.with_flat_values(vocabulary.tf_lookup(words))  # [B, S, W] ragged
    dense = ids.to_tensor(default_value=0)
    pad = tf.maximum(1 - tf.shape(dense)[1:], 0)  # at least one sentence and one word
    return tf.pad(dense, [[0, 0], [0, pad[0]], [0, pad[1]]])


def export_classifier(
    model,
    vocabulary,
    labels,
    export_dir,
    version=1,
    warmup_documents=("Hallo Welt?",),
    max_sentences=64,
    max_words=64,
    overwrite=False,
):
    """SavedModel for TF Serving, `serving_default`: `inputs` string `[B]` (a document, sentences on
    lines) -> `label` string `[B]`, `probabilities` float32 `[B, C]`, `sentence_attention` float32
    `[B, S]`, `word_attention` float32 `[B, S, W]` (`S`, `W` the batch's longest, 0 on padding)."""
    import numpy as np
    import tensorflow as tf

    from keras_attn.models.raw_text_export import write_savedmodel

    labels = [str(x) for x in labels]
    if len(labels) != model.num_classes:
        raise ValueError(
            f"`labels` must name the {model.num_classes} classes. Received: labels={labels!r}"
        )
    label_table = tf.constant(labels)
    vocabulary.table()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
    def serving_default(inputs):
        ids = tf_document_ids(vocabulary, inputs, max_sentences, max_words)
        logits, word_weights, sentence_weights = model(ids, training=False, return_attention=True)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
        return {
            "label": tf.gather(
                label_table, tf.argmax(probabilities, axis=-1, output_type=tf.int32)
            ),
            "probabilities": probabilities,
            "sentence_attention": tf.cast(sentence_weights, tf.float32),
            "word_attention": tf.cast(word_weights, tf.float32),
        }

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = vocabulary.save(f"{tmp}/words.txt")
        functions = {"serving_default": serving_default.get_concrete_function()}
        documents = np.array([d.encode("utf-8") for d in warmup_documents], dtype=object)
        return write_savedmodel(
            model,
            functions,
            export_dir,
            version,
            warmup={"serving_default": {"inputs": documents}},
            assets=[vocab_file],
            resources=[vocabulary.table()],
            overwrite=overwrite,
        )
