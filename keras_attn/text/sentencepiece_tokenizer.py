"""SentencePiece subword tokenizer: trained in-process with `sentencepiece`, run in the graph with
`tensorflow_text.SentencepieceTokenizer` (ops `SentencepieceOp`, `SentencepieceTokenizeOp`,
`SentencepieceDetokenizeOp`, all linked by stock TensorFlow Serving).

SentencePiece needs no pre-tokenization, so languages written without spaces (Chinese, Japanese)
work as well as Spanish. Models trained here use the reserved ids of `keras_attn.text.base`
(pad 0, `<s>` 1, `</s>` 2, `<unk>` 3); `SentencePieceTokenizer(model_proto)` refuses a model
trained with other ids.

Defaults chosen for translation data (override through `train(..., **options)`):
- `normalization_rule_name="identity"`: text is not NFKC-normalized, so outputs keep their
  full-width Chinese punctuation and round-trip exactly (SentencePiece's default, `nmt_nfkc`,
  would turn "，" into ",").
- `character_coverage=1.0`: every character of the training text gets a piece (right for small
  corpora; lower it, e.g. 0.9995, for large CJK corpora with a long tail of rare characters).
- `hard_vocab_limit=False`: `vocab_size` is an upper bound, so small corpora do not fail.
Whitespace is collapsed (SentencePiece's `remove_extra_whitespaces`): a round trip returns the text
with leading/trailing spaces removed and runs of spaces made single.

With `byte_fallback=True`, `detokenize` drops the byte pieces that do not complete a UTF-8
character (SentencePiece itself would write U+FFFD for each): answers are valid text, with no
replacement character the model did not write whole (`keras_attn.text.byte_pieces`).
"""

from __future__ import annotations

import os

import tensorflow as tf

from keras_attn.text.base import END_ID, PAD_ID, START_ID, UNK_ID, Tokenizer
from keras_attn.text.byte_pieces import byte_values
from keras_attn.text.sentencepiece_options import train_model_proto


class SentencePieceTokenizer(Tokenizer):
    """Subword tokenizer over a serialized SentencePiece model.

    Args:
        model_proto: the model file's bytes (`sentencepiece` ModelProto).
        model_file: optional path the model was read from / written to (kept for export).
    """

    def __init__(self, model_proto, model_file=None, name=None):
        super().__init__(name=name)
        import sentencepiece as spm

        if not isinstance(model_proto, (bytes, bytearray)) or not model_proto:
            raise ValueError(
                "`model_proto` must be the non-empty bytes of a SentencePiece model. "
                f"Received: model_proto of type {type(model_proto).__name__}"
            )
        self.model_proto = bytes(model_proto)
        self.model_file = model_file
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(self.model_proto)
        except Exception as err:  # sentencepiece raises RuntimeError / OSError variants
            raise ValueError(f"`model_proto` is not a SentencePiece model: {err}") from err
        got = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
        if got != (PAD_ID, START_ID, END_ID, UNK_ID):
            raise ValueError(
                "The SentencePiece model must use pad=0, bos=1, eos=2, unk=3 (train it with "
                "`SentencePieceTokenizer.train`). "
                f"Received: a model with pad, bos, eos, unk ids {got}"
            )
        self._vocabulary = tuple(
            processor.id_to_piece(i) for i in range(processor.get_piece_size())
        )
        self._byte_values = byte_values(processor=processor)
        # Not tracked (plain __dict__ entry): see `_call_sp`.
        self.__dict__["_eager_sp"] = None

    @property
    def vocabulary(self):
        return list(self._vocabulary)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def train(cls, texts, vocab_size=8000, name=None, **options):
        """Train on an iterable of str (one sentence each), in memory; returns the tokenizer.

        `options` go to `sentencepiece.SentencePieceTrainer.train` (e.g. `model_type="bpe"`,
        `character_coverage=0.9995`, `byte_fallback=True`, `input_sentence_size=...`); the
        reserved-id options cannot be changed.
        """
        return cls(train_model_proto(texts, vocab_size, **options), name=name)

    def save(self, path):
        """Write the model file (SentencePiece's own `.model` format); returns the path."""
        path = os.fspath(path)
        with open(path, "wb") as f:
            f.write(self.model_proto)
        self.model_file = path
        return path

    @classmethod
    def load(cls, path, name=None):
        """Read a `.model` file (written by `save` or by `spm_train` with our reserved ids)."""
        path = os.fspath(path)
        with open(path, "rb") as f:
            return cls(f.read(), model_file=path, name=name)

    # ---- graph --------------------------------------------------------------------------
    def _new_sp(self):
        import tensorflow_text as tf_text

        return tf_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32)

    def _call_sp(self, method, *args):
        """Run a `tf_text.SentencepieceTokenizer` method.

        TF Text's model resource is owned by the kernel that created it, and
        `keras.utils.clear_session()` (which clears TensorFlow's eager kernel cache) destroys it.
        So: inside a graph (tf.function, tf.data), the `SentencepieceOp` that creates the resource
        is put in that graph, where it is re-run as needed (and exported with it); eagerly, one
        tokenizer is kept and re-created once if its resource has gone.
        """
        if not tf.executing_eagerly():
            return getattr(self._new_sp(), method)(*args)
        if self._eager_sp is None:
            self.__dict__["_eager_sp"] = self._new_sp()
        try:
            return getattr(self._eager_sp, method)(*args)
        except tf.errors.NotFoundError:
            self.__dict__["_eager_sp"] = self._new_sp()
            return getattr(self._eager_sp, method)(*args)

    def _tokenize(self, strings):
        return tf.cast(self._call_sp("tokenize", strings), tf.int32)

    def _detokenize(self, ids):
        if (self._byte_values >= 0).any():
            ids = complete_characters(ids, self._byte_values)
        return self._call_sp("detokenize", ids)


def complete_characters(ids, values):
    """Ragged int32 ids `[B, None]` -> the same without the byte pieces that do not belong to
    a complete UTF-8 character of their run of consecutive byte pieces (`values`: NumPy
    `byte_values` of the vocabulary). Core TensorFlow ops only.

    Each id becomes one byte: a byte piece its own byte, any other piece NUL (a complete
    character, so runs stay apart as SentencePiece reads them); `unicode_decode_with_offsets`
    with `errors="ignore"` returns the complete characters and where they start, and the
    bytes they cover are the ids kept.
    """
    table = tf.constant(values, tf.int32)
    ids = tf.cast(ids, tf.int32)
    flat = ids.flat_values
    byte = tf.where(
        (flat >= 0) & (flat < len(values)),
        tf.gather(table, tf.clip_by_value(flat, 0, len(values) - 1)),
        -1,
    )
    singles = tf.constant([bytes([b]) for b in range(256)])
    chars = tf.gather(singles, tf.maximum(byte, 0))  # not a byte piece: b"\x00"
    text = tf.strings.reduce_join(ids.with_flat_values(chars), axis=1)
    codes, starts = tf.strings.unicode_decode_with_offsets(text, "UTF-8", errors="ignore")
    code = codes.flat_values
    width = (
        1
        + tf.cast(code >= 0x80, tf.int64)
        + tf.cast(code >= 0x800, tf.int64)
        + tf.cast(code >= 0x10000, tf.int64)
    )
    first = (
        tf.gather(tf.cast(ids.row_starts(), tf.int64), starts.value_rowids()) + starts.flat_values
    )
    covered = tf.zeros_like(flat, tf.int32)
    for k in range(4):  # a character covers 1 to 4 bytes
        at = tf.boolean_mask(first + k, width > k)
        covered = tf.tensor_scatter_nd_update(covered, at[:, None], tf.ones_like(at, tf.int32))
    return tf.ragged.boolean_mask(ids, ids.with_flat_values(covered > 0))
