"""The words a translator was trained on, and the source words it never saw (TensorFlow only).

A source word is read off its SentencePiece pieces (from a word-start piece to the next) and
stands for its keys: its runs of letters, digits and `_` (`WORD_PATTERN` splits the rest
away), case-folded. `KnownWords(texts)` holds the keys of `texts` (a run's training sources)
as sorted 64-bit fingerprints; `unknown_pieces(ids)` marks, in a graph, the pieces of each source word holding a key outside them: the words the word rules
copy whole once the answer begins one (`keras_attn.decoding.words.copied_next`; docs/serving.md,
"Word rules"). The same `word_keys` reads the training texts and the served sources, so a word
is known to the export exactly when its keys were in the texts.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# What separates a word's keys: anything but letters, digits and `_` (RE2 syntax).
WORD_PATTERN = r"[^\p{L}\p{N}_]+"
# Fingerprints of the keys (`tf.strings.to_hash_bucket_fast`'s buckets).
_BUCKETS = 2**63 - 1
_BATCH = 4096


def word_keys(texts):
    """`string [N]` -> `RaggedTensor [N, None]` of the case-folded keys of each text."""
    spaced = tf.strings.regex_replace(texts, WORD_PATTERN, " ")
    return tf.strings.split(tf.strings.lower(spaced, encoding="utf-8"))


def _fingerprints(keys):
    return tf.strings.to_hash_bucket_fast(keys, _BUCKETS)


class KnownWords(tf.Module):
    """The keys of `texts` (strings: the training sources, the `known_words` setting), as
    sorted unique fingerprints (`fingerprints`, int64 NumPy), for the source ids of a
    SentencePiece `vocabulary` (its pieces' strings, `[V]`) whose `word_start` (`[V]` bool)
    pieces start a word. Variables hold the tables the signatures read (an export stores them
    once, not in each signature's graph)."""

    def __init__(self, texts, vocabulary, word_start, reserved=4):
        texts = list(texts)  # checked by `ServingSettings`
        found = [np.zeros([0], np.int64)]
        for i in range(0, len(texts), _BATCH):
            keys = word_keys(tf.constant(texts[i : i + _BATCH], tf.string)).flat_values
            found.append(_fingerprints(keys).numpy())
        self.fingerprints = np.unique(np.concatenate(found))
        # one past the end: a value `searchsorted` may point at, never equal to a key's
        self.table = tf.Variable(np.append(self.fingerprints, 0), trainable=False)
        self.pieces = tf.Variable(list(vocabulary), trainable=False, dtype=tf.string)
        self.word_start = tf.Variable(np.asarray(word_start, bool), trainable=False)
        self.reserved = int(reserved)

    def __len__(self):
        return int(self.fingerprints.shape[0])

    def unknown_pieces(self, ids):
        """`[B, S]` bool: the pieces of `ids` (`[B, S]` int32, padded with ids below
        `reserved`: pad, start, end, unk, none of them in a word) that belong to a source word
        holding a key the texts never held. A word without keys (punctuation alone) is
        known."""
        ids = tf.cast(ids, tf.int32)
        vocab = int(self.pieces.shape[0])
        content = (ids >= self.reserved) & (ids < vocab)
        safe = tf.clip_by_value(ids, 0, vocab - 1)
        starts = tf.gather(self.word_start, safe) & content
        batch, width = tf.shape(ids)[0], tf.shape(ids)[1]
        # each piece's word: a segment per row and word (pieces before a word start: word 0)
        segment = tf.range(batch)[:, None] * (width + 1) + tf.cumsum(tf.cast(starts, tf.int32), 1)
        pieces = tf.where(content, tf.gather(self.pieces, safe), "")
        words = tf.strings.unsorted_segment_join(
            tf.reshape(pieces, [-1]), tf.reshape(segment, [-1]), batch * (width + 1)
        )
        keys = word_keys(words)
        found = _fingerprints(keys.flat_values)
        where = tf.searchsorted(self.table[:-1], found, side="left")
        known = tf.equal(tf.gather(self.table, where), found)
        if len(self) == 0:
            known = tf.zeros_like(known)
        unknown = tf.reduce_any(~keys.with_flat_values(known), axis=1)  # [B * (S + 1)]
        return tf.gather(unknown, segment) & content
