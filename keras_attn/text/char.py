"""Character-level tokenizer: one id per Unicode code point, vocabulary built from training text.

Graph side: `tf.strings.unicode_split` (code points, broken bytes already replaced by U+FFFD)
then a `tf.lookup.StaticHashTable`; detokenizing gathers from a constant vocabulary tensor and
joins. Only core TensorFlow ops.

Vocabulary file: UTF-8 text, one token per line, line `i` (0-based) is id `i`; the first four lines
are the reserved tokens `<pad>`, `<s>`, `</s>`, `<unk>`. Characters that cannot sit on a line of
their own ("\\n", "\\r") are never put in the vocabulary (they tokenize to `unk_id`).
"""

from __future__ import annotations

import collections
import os

import tensorflow as tf

from keras_attn._checks import check_int
from keras_attn.text.base import RESERVED_TOKENS, UNK_ID, Tokenizer

# Rendered for `unk_id` by `detokenize`.
UNK_CHAR = "\ufffd"
_UNSTORABLE = frozenset("\n\r")


class CharTokenizer(Tokenizer):
    """Character vocabulary tokenizer.

    Args:
        characters: the content characters, in id order (ids start at 4, after the reserved ids).
            Use `CharTokenizer.build(texts)` to make one from training text.
        vocab_file: optional path the vocabulary was read from / written to (kept for export).
    """

    def __init__(self, characters, vocab_file=None, name=None):
        super().__init__(name=name)
        characters = list(characters)
        for ch in characters:
            if not isinstance(ch, str) or len(ch) != 1:
                raise ValueError(
                    f"`characters` must be single characters. Received: characters containing {ch!r}"
                )
            if ch in _UNSTORABLE:
                raise ValueError(
                    f"`characters` cannot contain line breaks. Received: characters containing {ch!r}"
                )
        if len(set(characters)) != len(characters):
            dupes = sorted({c for c in characters if characters.count(c) > 1})
            raise ValueError(f"`characters` must be distinct. Received: duplicates {dupes!r}")
        self._characters = tuple(characters)
        self.vocab_file = vocab_file
        self._vocab_tensor = tf.constant(
            list(RESERVED_TOKENS[:3]) + [UNK_CHAR] + characters, dtype=tf.string
        )
        # Reserved ids render as "" (pad/start/end never reach _detokenize anyway) except unk.
        keys = (
            tf.constant(characters, dtype=tf.string) if characters else tf.constant([], tf.string)
        )
        values = tf.range(
            len(RESERVED_TOKENS), len(RESERVED_TOKENS) + len(characters), dtype=tf.int64
        )
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                keys, values, key_dtype=tf.string, value_dtype=tf.int64
            ),
            default_value=UNK_ID,
        )

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, texts, min_count=1, max_size=None, name=None):
        """Vocabulary from an iterable of str: characters seen at least `min_count` times, most
        frequent first (ties by code point), at most `max_size` content characters."""
        min_count = check_int("min_count", min_count)
        max_size = check_int("max_size", max_size, 0, allow_none=True)
        counts = collections.Counter()
        for text in texts:
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            counts.update(text)
        chars = [c for c, n in counts.items() if n >= min_count and c not in _UNSTORABLE]
        chars.sort(key=lambda c: (-counts[c], ord(c)))
        if max_size is not None:
            chars = chars[: int(max_size)]
        return cls(chars, name=name)

    @property
    def characters(self):
        """The content characters, id `4 + i` for `characters[i]`."""
        return self._characters

    @property
    def vocabulary(self):
        return list(RESERVED_TOKENS) + list(self._characters)

    def save(self, path):
        """Write the vocabulary file (see module docstring); returns the path."""
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8", newline="") as f:
            for token in self.vocabulary:
                f.write(token + "\n")
        self.vocab_file = path
        return path

    @classmethod
    def load(cls, path, name=None):
        """Read a vocabulary file written by `save`."""
        path = os.fspath(path)
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if tuple(lines[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"Not a character vocabulary file: the first lines must be {list(RESERVED_TOKENS)}. "
                f"Received: path={path!r} starting with {lines[:4]!r}"
            )
        return cls(lines[len(RESERVED_TOKENS) :], vocab_file=path, name=name)

    # ---- graph --------------------------------------------------------------------------
    def _tokenize(self, strings):
        chars = tf.strings.unicode_split(
            strings, "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        ids = self._table.lookup(chars.flat_values)
        return chars.with_flat_values(tf.cast(ids, tf.int32))

    def _detokenize(self, ids):
        pieces = tf.gather(self._vocab_tensor, ids.flat_values)
        return tf.strings.reduce_join(ids.with_flat_values(pieces), axis=1)
