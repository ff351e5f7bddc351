"""Word-level text for the document models (HAN, the cloze reader): one splitting rule, written
twice so that it runs the same in Python (building data and vocabularies) and inside a
TensorFlow graph (the raw-text signatures of an exported SavedModel).

Rule: lower-case (Unicode), put spaces around each character of `PUNCTUATION`, split on
whitespace. Sentences of a document are its lines (`"\\n"`); empty lines are dropped.

`WordVocabulary` maps words to ids with the reserved ids of `keras_attn.text` (pad 0, start 1,
end 2, unk 3) and looks them up in the graph with a `tf.lookup.StaticHashTable` (core TF ops,
which stock TensorFlow Serving has).
"""

from __future__ import annotations

import collections
import os
import re

from keras_attn._ids import PAD_ID, RESERVED_TOKENS, UNK_ID

PUNCTUATION = ".,;:!?()[]{}\"'«»¿¡…“”„‘’"
_PUNCT_CLASS = "[" + re.escape(PUNCTUATION) + "]"
_PUNCT_RE = re.compile("(" + _PUNCT_CLASS + ")")
# RE2 (TensorFlow) spelling of the same class: every character escaped where RE2 needs it.
_TF_PUNCT_CLASS = "[" + "".join("\\" + c if c in "[]\\^-" else c for c in PUNCTUATION) + "]"


def split_words(text):
    """`str` -> list of words (Python side of the rule)."""
    return _PUNCT_RE.sub(r" \1 ", text.lower()).split()


def split_sentences(document):
    """A document (sentences on lines) -> list of sentences, empty lines dropped."""
    return [line.strip() for line in document.split("\n") if line.strip()]


def tf_split_words(strings):
    """`tf.string [...]` -> ragged words `[..., None]` (graph side of the rule)."""
    import tensorflow as tf

    from keras_attn.text.base import clean_utf8

    lower = tf.strings.lower(clean_utf8(strings), encoding="utf-8")
    spaced = tf.strings.regex_replace(lower, "(" + _TF_PUNCT_CLASS + ")", " \\1 ")
    return tf.strings.split(spaced)


def tf_split_sentences(documents):
    """`tf.string [B]` -> ragged sentences `[B, None]` (lines; blank ones dropped)."""
    import tensorflow as tf

    lines = tf.strings.split(documents, sep="\n")
    stripped = tf.strings.strip(lines)
    return tf.ragged.boolean_mask(stripped, tf.strings.length(stripped) > 0)


class WordVocabulary:
    """Words <-> ids. Ids 0-3 are the reserved tokens; words start at id 4.

    Args:
        words: the content words, in id order (use `WordVocabulary.build(texts)`).
    """

    def __init__(self, words):
        words = list(words)
        if len(set(words)) != len(words):
            raise ValueError("`words` must be distinct. Received: duplicate words")
        bad = [w for w in words if not isinstance(w, str) or not w or any(c.isspace() for c in w)]
        if bad:
            raise ValueError(
                f"`words` must be non-empty strings without whitespace. Received: {bad[:3]!r}"
            )
        self.words = tuple(words)
        self.vocabulary = list(RESERVED_TOKENS) + list(words)
        self._index = {w: i for i, w in enumerate(self.vocabulary)}
        self._table = None

    @classmethod
    def build(cls, texts, min_count=1, max_size=None):
        """From an iterable of str: words seen `>= min_count` times, most frequent first."""
        counts = collections.Counter()
        for text in texts:
            counts.update(split_words(text))
        words = [w for w, n in counts.items() if n >= min_count and w not in RESERVED_TOKENS]
        words.sort(key=lambda w: (-counts[w], w))
        return cls(words[:max_size] if max_size else words)

    @property
    def vocab_size(self):
        return len(self.vocabulary)

    pad_id = PAD_ID
    unk_id = UNK_ID

    def ids(self, words):
        return [self._index.get(w, UNK_ID) for w in words]

    def encode(self, text):
        """`str` -> word ids (Python)."""
        return self.ids(split_words(text))

    def save(self, path):
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(self.vocabulary) + "\n")
        return path

    @classmethod
    def load(cls, path):
        with open(os.fspath(path), encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if tuple(lines[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"Not a word vocabulary file (first lines must be {list(RESERVED_TOKENS)}). Received: path={path!r}"
            )
        return cls(lines[len(RESERVED_TOKENS) :])

    # ---- graph side ----------------------------------------------------------------------
    def table(self):
        """The `tf.lookup.StaticHashTable` word -> id (unknown -> unk), built once."""
        import tensorflow as tf

        if self._table is None:
            keys = tf.constant(list(self.words) or [""], tf.string)
            values = tf.range(
                len(RESERVED_TOKENS), len(RESERVED_TOKENS) + max(len(self.words), 1), dtype=tf.int64
            )
            self._table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(keys, values), default_value=UNK_ID
            )
        return self._table

    def tf_lookup(self, words):
        """Ragged (or dense) `tf.string` words -> int32 ids of the same shape."""
        import tensorflow as tf

        if isinstance(words, tf.RaggedTensor):
            return words.with_flat_values(self.tf_lookup(words.flat_values))
        return tf.cast(self.table().lookup(words), tf.int32)
