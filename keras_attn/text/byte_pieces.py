"""Valid text from byte pieces: SentencePiece's byte fallback without broken characters.

A SentencePiece model trained with `byte_fallback=True` spells a character it has no piece for
as the pieces of its UTF-8 bytes (`<0xE3>`, `<0x81>`, `<0x82>` for "あ"). A decoder can stop,
or wander, in the middle of such a spelling; SentencePiece then writes U+FFFD (the replacement
character) for every byte that does not complete a character, so the answer holds text that
is neither the source's nor a translation.

The detokenizers of `keras_attn.text` drop those bytes instead: in each run of consecutive byte
pieces, a byte is kept only when it belongs to a complete, well-formed UTF-8 character of that
run (what `bytes.decode("utf-8", errors="ignore")` keeps); every other piece is kept as it is.
A U+FFFD the model writes whole (a piece of its own, or the bytes `EF BF BD`) is a character
like any other and is kept: that is how a source that holds one gets it back.

This module needs only NumPy (and the `sentencepiece` package for `decode`):

    from keras_attn.text.byte_pieces import byte_values, decode

    processor = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    decode(processor, ids)            # str, never an incomplete character

`SentencePieceTokenizer.detokenize` does the same in a TensorFlow graph (core ops only).
"""

from __future__ import annotations

import re

import numpy as np

from keras_attn._ids import END_ID as _END_ID
from keras_attn._ids import PAD_ID as _PAD_ID
from keras_attn._ids import START_ID as _START_ID
from keras_attn._ids import UNK_ID as _UNK_ID

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def byte_values(vocabulary=None, processor=None):
    """`[V]` int32 (NumPy): the byte a byte piece stands for, -1 for every other piece.

    Args:
        vocabulary: the piece strings, index = id; a piece spelled `<0xNN>` is a byte piece.
        processor: a `sentencepiece.SentencePieceProcessor` instead: its own byte pieces
            (`is_byte`), so a user-defined piece that happens to be spelled `<0xNN>` is not one.
    """
    if (vocabulary is None) == (processor is None):
        raise ValueError(
            "Pass exactly one of `vocabulary` and `processor`. "
            f"Received: vocabulary={'None' if vocabulary is None else '...'}, "
            f"processor={processor!r}"
        )
    if processor is not None:
        size = processor.get_piece_size()
        values = np.full([size], -1, np.int32)
        for i in range(size):
            if processor.is_byte(i):
                values[i] = int(_BYTE_PIECE.fullmatch(processor.id_to_piece(i)).group(1), 16)
        return values
    values = np.full([len(vocabulary)], -1, np.int32)
    for i, piece in enumerate(vocabulary):
        match = _BYTE_PIECE.fullmatch(piece)
        if match:
            values[i] = int(match.group(1), 16)
    return values


def _sequence_length(data, i):
    """The length of the well-formed UTF-8 character starting at `data[i]`, 0 if none does
    (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF)."""
    lead = data[i]
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        n, low, high = 2, 0x80, 0xBF
    elif 0xE0 <= lead <= 0xEF:
        n = 3
        low, high = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F)}.get(lead, (0x80, 0xBF))
    elif 0xF0 <= lead <= 0xF4:
        n = 4
        low, high = {0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))
    else:
        return 0
    if i + n > len(data) or not low <= data[i + 1] <= high:
        return 0
    if any(not 0x80 <= b <= 0xBF for b in data[i + 2 : i + n]):
        return 0
    return n


def complete_bytes(data):
    """Per byte of `data` (`bytes`), whether it belongs to a complete, well-formed UTF-8
    character: the bytes `data.decode("utf-8", errors="ignore")` keeps. A list of bool."""
    data = bytes(data)
    keep = [False] * len(data)
    i = 0
    while i < len(data):
        n = _sequence_length(data, i)
        if n:
            keep[i : i + n] = [True] * n
            i += n
        else:  # a byte no complete character starts with: dropped, read on from the next one
            i += 1
    return keep


def keep_mask(ids, values):
    """`[T]` bool (NumPy): the ids of one sequence a detokenizer keeps. Every piece that is not
    a byte piece; a byte piece when its byte belongs to a complete character of its run of
    consecutive byte pieces (`values`: `byte_values` of the vocabulary; ids outside it are
    not byte pieces)."""
    ids = np.asarray(ids, np.int64).reshape(-1)
    values = np.asarray(values)
    inside = (ids >= 0) & (ids < len(values))
    byte = np.where(inside, values[np.clip(ids, 0, max(len(values) - 1, 0))], -1)
    keep = np.ones([len(ids)], bool)
    start = 0
    while start < len(ids):
        if byte[start] < 0:
            start += 1
            continue
        end = start
        while end < len(ids) and byte[end] >= 0:
            end += 1
        keep[start:end] = complete_bytes(bytes(byte[start:end].astype(np.uint8)))
        start = end
    return keep


def content_ids(ids, vocab_size):
    """One sequence's ids as `Tokenizer.detokenize` reads them (a list of int): up to the
    first end or pad id, start ids skipped, ids outside `[0, vocab_size)` read as unk."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if i in (_END_ID, _PAD_ID):
            break
        if i == _START_ID:
            continue
        out.append(i if 0 <= i < vocab_size else _UNK_ID)
    return out


def decode(processor, ids, values=None):
    """`str` of one sequence of ids through a `sentencepiece.SentencePieceProcessor`, read as
    `SentencePieceTokenizer.detokenize` reads it (`content_ids`), with the byte pieces that
    do not complete a character dropped (`keep_mask`). `values`: the processor's
    `byte_values` when already computed."""
    if values is None:
        values = byte_values(processor=processor)
    ids = content_ids(ids, processor.get_piece_size())
    kept = [i for i, k in zip(ids, keep_mask(ids, values)) if k]
    return processor.decode(kept)
