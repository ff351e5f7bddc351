"""Tokenizers that run inside a TensorFlow graph (exportable to TF Serving).

`CharTokenizer` (character vocabulary, core TF ops only) and `SentencePieceTokenizer`
(subwords via tensorflow-text) share one interface and the reserved ids pad 0, start 1, end 2,
unk 3 — see `keras_attn.text.base`.
"""

from keras_attn import _pins
from keras_attn.text.base import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID, Tokenizer
from keras_attn.text.char import CharTokenizer
from keras_attn.text.sentencepiece_tokenizer import SentencePieceTokenizer

__all__ = [
    "END_ID",
    "PAD_ID",
    "RESERVED_TOKENS",
    "START_ID",
    "UNK_ID",
    "CharTokenizer",
    "SentencePieceTokenizer",
    "Tokenizer",
]

_pins.check_tensorflow_text()  # the matching TensorFlow Text, or the command installing it
