"""What every keras_attn tokenizer shares: reserved ids and the graph-side plumbing.

Reserved ids (the same for every tokenizer, so models and the search need not care which one
they were given):

    PAD_ID = 0    padding; also ends a sequence in `detokenize`
    START_ID = 1  decoder start token ("<s>")
    END_ID = 2    end of sequence ("</s>")
    UNK_ID = 3    anything not in the vocabulary ("<unk>")

Tokenizers are `tf.Module`s whose `tokenize` / `detokenize` use only TensorFlow ops and the TF
Text ops that stock TensorFlow Serving links, so they can be called inside the `tf.function`s
of an exported SavedModel. Input strings are first made valid UTF-8 (`tf.strings.unicode_transcode`
with `errors="replace"`): broken bytes become U+FFFD and then, usually, `UNK_ID` — never an error.
"""

from __future__ import annotations

from keras_attn import _pins
from keras_attn._ids import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID  # noqa: F401

_pins.require(__name__, ("tensorflow",))  # a JAX-only install: the pip command, in one line

import tensorflow as tf  # noqa: E402


def clean_utf8(strings):
    """Replace invalid UTF-8 byte sequences by U+FFFD (a TensorFlow op; never fails)."""
    return tf.strings.unicode_transcode(
        strings,
        input_encoding="UTF-8",
        output_encoding="UTF-8",
        errors="replace",
        replacement_char=0xFFFD,
    )


class Tokenizer(tf.Module):
    """The common interface.

    Subclasses define `vocabulary` and two graph functions:
    `_tokenize(strings)`: valid-UTF-8 `tf.string [B]` -> ragged int32 `[B, None]` (no start/end);
    `_detokenize(ids)`: ragged int32 `[B, None]` of content ids in `[0, vocab_size)` -> `tf.string [B]`.

    Attributes:
        vocab_size: number of ids, reserved ids included.
        pad_id, start_id, end_id, unk_id: the reserved ids (0, 1, 2, 3).
        vocabulary: list of `vocab_size` token strings, index = id.
    """

    pad_id = PAD_ID
    start_id = START_ID
    end_id = END_ID
    unk_id = UNK_ID

    @property
    def vocab_size(self):
        return len(self.vocabulary)

    # ---- shared -------------------------------------------------------------------------
    def tokenize(self, strings, add_start=False, add_end=False, max_length=None):
        """`tf.string [B]` -> `tf.RaggedTensor` int32 `[B, None]`.

        Args:
            strings: a 1-D string tensor (or list of str/bytes).
            add_start: prepend `start_id`.
            add_end: append `end_id`.
            max_length: if given, the content is cut so that each row (markers included) has at
                most `max_length` ids; the markers themselves are kept.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        if strings.shape.rank != 1:
            raise ValueError(
                f"`strings` must be a 1-D string tensor [B]. Received: strings with shape {strings.shape}"
            )
        ids = self._tokenize(clean_utf8(strings))
        if max_length is not None:
            budget = int(max_length) - int(bool(add_start)) - int(bool(add_end))
            if budget < 0:
                raise ValueError(
                    "`max_length` must leave room for the start/end tokens asked for. "
                    f"Received: max_length={max_length}"
                )
            ids = ids[:, :budget]
        batch = tf.shape(strings, out_type=tf.int64)[0]
        parts = []
        if add_start:
            parts.append(
                tf.RaggedTensor.from_tensor(
                    tf.fill([batch, 1], tf.constant(self.start_id, tf.int32))
                )
            )
        parts.append(ids)
        if add_end:
            parts.append(
                tf.RaggedTensor.from_tensor(tf.fill([batch, 1], tf.constant(self.end_id, tf.int32)))
            )
        if len(parts) > 1:
            ids = tf.concat(parts, axis=1)
        return ids

    def tokenize_padded(self, strings, length=None, add_start=False, add_end=False):
        """Like `tokenize`, returned dense int32 `[B, T]` padded with `pad_id`.

        With `length`, rows are cut to (see `tokenize(max_length=...)`) and padded to exactly
        `length` columns; without it, to the longest row.
        """
        ids = self.tokenize(strings, add_start=add_start, add_end=add_end, max_length=length)
        if length is None:
            return ids.to_tensor(default_value=self.pad_id)
        batch = tf.shape(ids.row_splits)[0] - 1
        return ids.to_tensor(
            default_value=self.pad_id,
            shape=tf.stack([tf.cast(batch, tf.int64), tf.constant(int(length), tf.int64)]),
        )

    def content_ids(self, ids):
        """Dense or ragged ids `[B, T]` -> ragged `[B, None]`: the ids before the first end/pad,
        start ids dropped, ids outside `[0, vocab_size)` replaced by `unk_id`."""
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self.pad_id)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        stop = tf.logical_or(tf.equal(ids, self.end_id), tf.equal(ids, self.pad_id))
        before_stop = tf.equal(tf.cumsum(tf.cast(stop, tf.int32), axis=1), 0)
        keep = tf.logical_and(before_stop, tf.not_equal(ids, self.start_id))
        in_range = tf.logical_and(ids >= 0, ids < self.vocab_size)
        ids = tf.where(in_range, ids, tf.constant(self.unk_id, tf.int32))
        return tf.ragged.boolean_mask(ids, keep)

    def detokenize(self, ids):
        """Ids `[..., T]` (dense, any rank >= 2; or ragged `[B, None]`) -> `tf.string [...]`.

        Reading stops at the first `end_id` or `pad_id`; `start_id`s are skipped; ids outside the
        vocabulary read as `unk_id`.
        """
        if isinstance(ids, tf.RaggedTensor):
            return self._detokenize(self.content_ids(ids))
        ids = tf.convert_to_tensor(ids)
        if ids.shape.rank is not None and ids.shape.rank < 2:
            raise ValueError(
                f"`ids` must have rank >= 2 ([batch, ..., time]). Received: ids with shape {ids.shape}"
            )
        shape = tf.shape(ids)
        flat = tf.reshape(ids, tf.stack([-1, shape[-1]]))
        text = self._detokenize(self.content_ids(flat))
        return tf.reshape(text, shape[:-1])

    def __repr__(self):
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"
