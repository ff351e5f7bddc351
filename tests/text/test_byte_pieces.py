"""Answers are valid text: the byte pieces of a `byte_fallback` SentencePiece model that do not
complete a UTF-8 character are dropped by the graph detokenizer and by the Python one alike,
checked against a decoder written out here (pieces joined as bytes, read with Python's
`errors="ignore"`), on id sequences biased to lone continuation bytes and on a search whose
step prefers byte pieces."""

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_attn.text import SentencePieceTokenizer
from keras_attn.text.byte_pieces import (
    byte_values,
    complete_bytes,
    content_ids,
    decode,
    keep_mask,
)

CORPUS = [
    "the cat sat on the mat",
    "el gato se sentó en la alfombra",
    "a dog and a cat",
    "el perro y el gato",
] * 10


@pytest.fixture(scope="module")
def tok():
    return SentencePieceTokenizer.train(CORPUS, vocab_size=320, byte_fallback=True)


@pytest.fixture(scope="module")
def sp(tok):
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(tok.model_proto)
    return processor


def reference(processor, ids):
    """What a detokenizer that keeps only complete characters returns, written out: every
    piece as its bytes (a byte piece its byte, `▁` a space), read with `errors="ignore"`, the
    word-start space of the first word removed."""
    data = b""
    for i in ids:
        piece = processor.id_to_piece(i)
        if processor.is_byte(i):
            data += bytes([int(piece[3:5], 16)])
        else:
            data += piece.replace("\u2581", " ").encode("utf-8")
    text = data.decode("utf-8", errors="ignore")
    return text[1:] if text.startswith(" ") else text


def graph(tok, rows):
    return [t.decode("utf-8") for t in tok.detokenize(tf.ragged.constant(rows, tf.int32)).numpy()]


def test_complete_bytes_keeps_what_python_decoding_keeps():
    rng = np.random.default_rng(0)
    # bytes that start and continue characters of every length, some ASCII, some never valid
    pool = np.array(
        [0x41, 0x20, 0x80, 0x81, 0x9F, 0xA0, 0xBF, 0xC0, 0xC3, 0xDF, 0xE0, 0xE3, 0xED, 0xEF]
        + [0xF0, 0xF4, 0xF5, 0xFF, 0x8F, 0x90, 0xBD],
        np.uint8,
    )
    for _ in range(400):
        data = bytes(rng.choice(pool, size=rng.integers(0, 9)))
        keep = complete_bytes(data)
        kept = bytes(b for b, k in zip(data, keep) if k)
        assert kept == data.decode("utf-8", errors="ignore").encode("utf-8"), data
    for text in ["añ€😀", "\ufffd", ""]:  # valid text is kept whole, U+FFFD included
        assert all(complete_bytes(text.encode()))


def test_byte_values_of_a_byte_fallback_model(tok, sp):
    values = byte_values(processor=sp)
    assert sorted(values[values >= 0].tolist()) == list(range(256))
    assert values[sp.piece_to_id("<0xE3>")] == 0xE3
    np.testing.assert_array_equal(byte_values(vocabulary=tok.vocabulary), values)
    with pytest.raises(ValueError, match="exactly one"):
        byte_values()


def test_lone_bytes_are_dropped_and_whole_characters_kept(tok, sp):
    b = {f"<0x{v:02X}>": sp.piece_to_id(f"<0x{v:02X}>") for v in range(256)}
    word = tok.tokenize(["the cat"]).to_list()[0]
    a = [b["<0xE3>"], b["<0x81>"], b["<0x82>"]]  # あ
    rows = [
        [b["<0x81>"], b["<0xBF>"]],  # continuation bytes alone
        a[:2] + word,  # a character cut short, then words
        word + [b["<0x81>"]] + word + a,
        [b["<0xEF>"], b["<0xBF>"], b["<0xBD>"]],  # U+FFFD spelled whole: a character
        a[:2] + a,
    ]
    expected = ["", "the cat", "the cat the catあ", "\ufffd", "あ"]
    assert graph(tok, rows) == expected
    assert [decode(sp, r) for r in rows] == expected
    # SentencePiece itself writes a replacement character per byte left over
    assert sp.decode(rows[0]) == "\ufffd\ufffd"
    # a source's own U+FFFD (spelled with bytes: the corpus has none) comes back
    source = "the \ufffd cat"
    assert graph(tok, tok.tokenize([source]).to_list()) == [source]


def test_graph_and_python_agree_with_the_reference_on_byte_heavy_sequences(tok, sp):
    rng = np.random.default_rng(1)
    values = byte_values(processor=sp)
    high_bytes = np.flatnonzero(values >= 0x80)  # leads and continuation bytes
    continuation = np.flatnonzero((values >= 0x80) & (values <= 0xBF))
    words = np.array([i for i in range(4, sp.get_piece_size()) if values[i] < 0])
    rows = []
    for _ in range(300):
        n = int(rng.integers(0, 10))
        kind = rng.random(n)
        row = np.where(
            kind < 0.45,
            rng.choice(continuation, n),
            np.where(kind < 0.8, rng.choice(high_bytes, n), rng.choice(words, n)),
        )
        rows.append(row.astype(int).tolist())
    got = graph(tok, rows)
    for row, text in zip(rows, got):
        assert text == reference(sp, row), row
        assert text == decode(sp, row, values), row
        kept = [i for i, k in zip(row, keep_mask(row, values)) if k]
        assert "\ufffd" not in sp.decode(kept) or "\ufffd" in reference(sp, row)
    assert sum("\ufffd" in sp.decode(r) for r in rows) > 100  # the rows do hold broken bytes
    assert not any("\ufffd" in t for t in got)


def test_dense_ids_read_as_the_tokenizer_reads_them(tok, sp):
    b = sp.piece_to_id
    ids = np.array(
        [
            [1, b("<0xC3>"), b("<0xB1>"), 2, b("<0x81>")],  # ñ, then the end id
            [b("<0xC3>"), 0, 0, 0, 0],  # a lead byte, then padding
            [b("<0xC3>"), 99999, b("<0xB1>"), 2, 0],  # out of the vocabulary: unk
        ]
    )
    got = [t.decode() for t in tok.detokenize(ids).numpy()]
    assert got == [decode(sp, row) for row in ids]
    assert got[:2] == ["ñ", ""]
    assert content_ids(ids[2], sp.get_piece_size()) == [b("<0xC3>"), 3, b("<0xB1>")]


def test_a_search_that_prefers_byte_pieces_answers_valid_text(tok, sp):
    """Greedy search over a step whose logits favour byte pieces (continuation bytes most):
    the answers detokenized in the graph and in Python hold no replacement character."""
    from keras_attn.decoding import greedy_search

    values = byte_values(processor=sp)
    vocab = len(values)
    rng = np.random.default_rng(2)
    bonus = np.where(values >= 0x80, 3.0, 0.0) + np.where(
        (values >= 0x80) & (values <= 0xBF), 2.0, 0.0
    )
    table = (rng.normal(size=[vocab, vocab]) * 2.0 + bonus[None, :]).astype("float32")
    table[:, 2] = -1e9  # never end: the answers run to max_length
    table = tf.constant(table)

    def step(tokens, state, step):
        return tf.gather(table, tokens), state, None

    out = greedy_search(
        step, {"unused": tf.zeros([4])}, tf.constant([1, 5, 9, 13], tf.int32), 2, max_length=12
    )
    sequences = out["sequences"].numpy()
    assert sum(int(values[i] >= 0) for i in sequences.ravel()) > sequences.size // 2
    raw = [sp.decode(content_ids(row, vocab)) for row in sequences]
    assert any("\ufffd" in t for t in raw)  # SentencePiece alone would answer broken text
    got = [t.decode("utf-8") for t in tok.detokenize(tf.constant(sequences)).numpy()]
    assert got == [decode(sp, row, values) for row in sequences]
    assert got == [reference(sp, content_ids(row, vocab)) for row in sequences]
    assert not any("\ufffd" in t for t in got)


def test_a_model_without_byte_pieces_detokenizes_as_before(sp):
    plain = SentencePieceTokenizer.train(CORPUS, vocab_size=60)
    assert not (plain._byte_values >= 0).any()
    ids = plain.tokenize(["the cat", "el gato"])
    assert graph(plain, ids.to_list()) == ["the cat", "el gato"]
