"""The words a translator was trained on, and the source words it never saw (TensorFlow only).

A source word is read off its SentencePiece pieces (from a word-start piece to the next) and
stands for its keys: its runs of letters, digits and `_` (`WORD_PATTERN` splits the rest
away), case-folded. `KnownWords(texts)` holds the keys of `texts` (a run's training sources)
as sorted 64-bit fingerprints; `unknown_pieces(ids)` marks, in a graph, the pieces of each source word holding a key outside them: the words the word rules
copy whole once the answer begins one (`keras_attn.decoding.words.copied_next`; docs/serving.md,
"Word rules"). The same `word_keys` reads the training texts and the served sources, so a word
is known to the export exactly when its keys were in the texts.

With `keep_unknown_words`, `unknown_words(texts)` answers those keys themselves, as the source
writes them (the phrases `serving_default` asks its answer to hold), and `holds_words` whether
an answer holds each as one of its own keys (docs/serving.md, "Unknown words kept").

`UNKNOWN_WORDS` is the `known_words` setting as a served behaviour: the export's `KnownWords`
(kept by the SavedModel) and, beside the word rules' per-row tensors, the pieces of each source
word outside the known texts, which the word rules copy whole (`fixed`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_attn.serving.behaviours import Behaviour

# What separates a word's keys: anything but letters, digits and `_` (RE2 syntax).
WORD_PATTERN = r"[^\p{L}\p{N}_]+"
# Fingerprints of the keys (`tf.strings.to_hash_bucket_fast`'s buckets).
_BUCKETS = 2**63 - 1
_BATCH = 4096
# The most words `unknown_words` answers per text: each becomes a phrase the search must meet
# (`keep_unknown_words`), and a constrained step's cost grows with the square of the phrases'
# tokens.
MAX_UNKNOWN_WORDS = 8


def word_keys(texts):
    """`string [N]` -> `RaggedTensor [N, None]` of the case-folded keys of each text."""
    spaced = tf.strings.regex_replace(texts, WORD_PATTERN, " ")
    return tf.strings.split(tf.strings.lower(spaced, encoding="utf-8"))


def _fingerprints(keys):
    return tf.strings.to_hash_bucket_fast(keys, _BUCKETS)


def _row_fingerprints(rows, keys):
    """Fingerprints of `keys` tagged with their row (int64 `rows`): equal only for the same key
    in the same row (a key holds no space)."""
    return _fingerprints(tf.strings.join([tf.strings.as_string(rows), keys], separator=" "))


def _in_rows(rows, keys, texts):
    """bool `[N]`: whether each of the case-folded `keys` (`string [N]`) is a key of its row
    of `texts` (`rows`: int64 `[N]` indices into `texts`, `string [R]`)."""
    have = word_keys(texts)
    have = tf.sort(_row_fingerprints(have.value_rowids(), have.flat_values))
    have = tf.concat([have, [0]], 0)  # one past the end, as in `KnownWords`
    found = _row_fingerprints(rows, keys)
    where = tf.searchsorted(have[:-1], found, side="left")
    return tf.equal(tf.gather(have, where), found)


def holds_words(words, outputs):
    """`words` `string [B, C]` ('' pads a row) and `outputs` `string [B, K]` -> bool `[B, K]`:
    whether each output holds every word of its row as one of its keys (`word_keys`: a word
    counts whole, case-folded; `Ainu` is not held by `Ainués`)."""
    words, outputs = tf.convert_to_tensor(words), tf.convert_to_tensor(outputs)
    k = tf.shape(outputs, out_type=tf.int64)[1]
    batch = tf.shape(words, out_type=tf.int64)[0]
    # [B, K, C]: row b * K + k of the outputs against word c of row b
    wanted = tf.strings.lower(words, encoding="utf-8")[:, None, :]
    wanted = wanted + tf.fill(tf.stack([batch, k, tf.shape(words, out_type=tf.int64)[1]]), "")
    rows = tf.range(batch)[:, None, None] * k + tf.range(k)[None, :, None]
    rows = rows + tf.zeros(tf.shape(wanted, out_type=tf.int64), tf.int64)
    held = _in_rows(tf.reshape(rows, [-1]), tf.reshape(wanted, [-1]), tf.reshape(outputs, [-1]))
    held = tf.reshape(held, tf.shape(wanted))
    return tf.reduce_all(held | tf.equal(wanted, ""), axis=-1)


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

    def known(self, keys):
        """Case-folded keys (`string [N]`) -> bool `[N]`: whether the texts held each."""
        found = _fingerprints(keys)
        where = tf.searchsorted(self.table[:-1], found, side="left")
        known = tf.equal(tf.gather(self.table, where), found)
        return known if len(self) else tf.zeros_like(known)

    def unknown_words(self, texts, within=None, limit=MAX_UNKNOWN_WORDS):
        """`string [B]` -> `string [B, C]` ('' pads, `C <= limit`): the keys of each text as it
        writes them (runs of letters, digits and `_`, case kept) that the texts never held
        (case-folded), each once and in order, the first `limit` of a row. `within`
        (`string [B]`): only the keys its row holds too (the source as the model reads it:
        cut, its unknown pieces lost)."""
        texts = tf.convert_to_tensor(texts, tf.string)
        runs = tf.strings.split(tf.strings.regex_replace(texts, WORD_PATTERN, " "))
        keys = tf.strings.lower(runs.flat_values, encoding="utf-8")
        rows = runs.value_rowids()
        # the first of each (row, key): a word twice in a source is required once
        _, index = tf.unique(_row_fingerprints(rows, keys))
        position = tf.range(tf.size(index))
        first = tf.math.unsorted_segment_min(position, index, tf.size(index))
        keep = tf.equal(tf.gather(first, index), position) & ~self.known(keys)
        if within is not None:
            keep = keep & _in_rows(rows, keys, within)
        chosen = tf.ragged.boolean_mask(runs, runs.with_flat_values(keep))[:, :limit]
        batch = tf.shape(texts, out_type=tf.int64)[0]
        width = tf.reduce_max(tf.concat([chosen.row_lengths(), [0]], 0))
        return chosen.to_tensor(default_value="", shape=tf.stack([batch, width]))

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
        known = self.known(keys.flat_values)
        unknown = tf.reduce_any(~keys.with_flat_values(known), axis=1)  # [B * (S + 1)]
        return tf.gather(unknown, segment) & content


class UnknownWords(Behaviour):
    """The `known_words` setting: the keys of the known texts (`KnownWords`, reading a
    source word off the SentencePiece pieces the word rules mark as word starts) and the
    source pieces the word rules' step copies whole (`fixed`)."""

    name = "unknown words copied whole"
    settings = ("known_words",)

    def enabled(self, settings):
        return settings.known_words is not None

    def prepare(self, signatures):
        if signatures.word_start is None:
            raise ValueError(
                "`known_words` needs a SentencePiece vocabulary (the word rules read a "
                "source word off its pieces). Received: known_words with a "
                f"{type(signatures.target_tokenizer).__name__}"
            )
        signatures.known = KnownWords(
            signatures.settings.known_words,
            signatures.target_tokenizer.vocabulary,
            signatures.word_start,
        )

    def tracked(self, signatures):
        return [signatures.known]

    def source_rows(self, signatures, rows, source_ids):
        return dict(rows, fixed=signatures.known.unknown_pieces(source_ids))


UNKNOWN_WORDS = UnknownWords()
