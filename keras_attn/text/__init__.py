"""Tokenizers that run inside a TensorFlow graph (exportable to TF Serving).

`CharTokenizer` (character vocabulary, core TF ops only) and `SentencePieceTokenizer`
(subwords via tensorflow-text) share one interface and the reserved ids pad 0, start 1, end 2,
unk 3 — see `keras_attn.text.base`.

Importing the package imports no TensorFlow: the reserved ids come from `keras_attn._ids`, and
`Tokenizer`, `CharTokenizer` and `SentencePieceTokenizer` are imported on first use, so
`keras_attn.text.placeholders` and `keras_attn.text.byte_pieces` (pure Python and NumPy) work
where TensorFlow is not installed. Reading a tokenizer there raises an ImportError naming the
pip command that installs what it needs.
"""

import importlib

from keras_attn import _pins
from keras_attn._ids import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID

# The names imported on first use -> (their module, the modules they need).
_LAZY = {
    "Tokenizer": ("base", ("tensorflow",)),
    "CharTokenizer": ("char", ("tensorflow",)),
    "SentencePieceTokenizer": ("sentencepiece_tokenizer", ("tensorflow", "tensorflow_text")),
}

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


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, needs = _LAZY[name]
    if _pins.is_missing("tensorflow"):
        _pins.require(f"keras_attn.text.{name}", needs)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


if not _pins.is_missing("tensorflow"):
    _pins.check_tensorflow_text()  # the matching TensorFlow Text, or the command installing it
