import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.serving.ops_check import disallowed_ops
from keras_attn.text import END_ID, PAD_ID, START_ID, UNK_ID, CharTokenizer

TRAIN = [
    "21 de noviembre de 2026",
    "2026年11月21日",
    "Nov 21, 2026",
    "21.11.26",
    "sábado, 1 de março",
]
SAMPLES = ["Nov 21, 2026", "2026年11月21日", "sábado", "", "21 de noviembre"]


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer.build(TRAIN)


def to_str(t):
    return [s.decode("utf-8") for s in t.numpy().tolist()]


def reference_ids(tok, text):
    vocab = tok.vocabulary
    return [vocab.index(c) if c in vocab[4:] else UNK_ID for c in text]


def test_reserved_ids_and_vocabulary_order(tok):
    assert (
        (tok.pad_id, tok.start_id, tok.end_id, tok.unk_id)
        == (0, 1, 2, 3)
        == (PAD_ID, START_ID, END_ID, UNK_ID)
    )
    counts = collections.Counter("".join(TRAIN))
    expected = sorted(counts, key=lambda c: (-counts[c], ord(c)))
    assert tok.vocabulary == ["<pad>", "<s>", "</s>", "<unk>"] + expected
    assert tok.vocab_size == 4 + len(counts)


def test_build_min_count_and_max_size():
    tok = CharTokenizer.build(["aab", "ac\n"], min_count=2)
    assert tok.characters == ("a",)
    tok = CharTokenizer.build(["aaabbc\r\n"], max_size=2)
    assert tok.characters == ("a", "b")
    with pytest.raises(ValueError, match="min_count"):
        CharTokenizer.build(["a"], min_count=0)
    with pytest.raises(ValueError, match=r"`max_size` must be an integer >= 0 or None"):
        CharTokenizer.build(["a"], max_size=-1)
    with pytest.raises(
        ValueError, match=r"`min_count` must be an integer >= 1\. Received: min_count=1\.5"
    ):
        CharTokenizer.build(["a"], min_count=1.5)


def test_tokenize_matches_reference(tok):
    ids = tok.tokenize(tf.constant(SAMPLES + ["xyz€"]))
    assert ids.dtype == tf.int32
    for row, text in zip(ids.to_list(), SAMPLES + ["xyz€"]):
        assert row == reference_ids(tok, text)


def test_start_end_and_padding(tok):
    ids = tok.tokenize_padded(tf.constant(SAMPLES), add_start=True, add_end=True)
    longest = max(len(s) for s in SAMPLES) + 2
    assert ids.shape == (len(SAMPLES), longest)
    for row, text in zip(ids.numpy().tolist(), SAMPLES):
        body = reference_ids(tok, text)
        assert row == [START_ID] + body + [END_ID] + [PAD_ID] * (longest - len(body) - 2)


def test_fixed_length_truncates_content_keeps_markers(tok):
    ids = tok.tokenize_padded(
        tf.constant(["2026年11月21日", "21"]), length=5, add_start=True, add_end=True
    )
    assert ids.shape == (2, 5)
    np.testing.assert_array_equal(
        ids.numpy(),
        [
            [START_ID] + reference_ids(tok, "202") + [END_ID],
            [START_ID] + reference_ids(tok, "21") + [END_ID, PAD_ID],
        ],
    )
    with pytest.raises(ValueError, match="max_length"):
        tok.tokenize(tf.constant(["a"]), add_start=True, add_end=True, max_length=1)


def test_round_trip_ascii_accented_chinese_empty(tok):
    out = tok.detokenize(tok.tokenize_padded(tf.constant(SAMPLES), add_start=True, add_end=True))
    assert to_str(out) == SAMPLES
    out = tok.detokenize(tok.tokenize(tf.constant(SAMPLES)))
    assert to_str(out) == SAMPLES


def test_unknown_and_broken_utf8_give_replacement_char(tok):
    out = tok.detokenize(tok.tokenize(tf.constant([b"21 \xff\xfe 11", "2026 \u00e9\u4e2d"])))
    assert to_str(out) == ["21 \ufffd\ufffd 11", "2026 \ufffd\ufffd"]


def test_detokenize_stops_at_end_or_pad_skips_start_and_clips(tok):
    a, b = tok.vocabulary.index("2"), tok.vocabulary.index("1")
    ids = tf.constant([[START_ID, a, b, END_ID, a], [a, PAD_ID, b, b, b], [a, 999, -5, b, b]])
    assert to_str(tok.detokenize(ids)) == ["21", "2", "2\ufffd\ufffd11"]
    # Beam-shaped ids [B, K, T] -> [B, K].
    out = tok.detokenize(tf.reshape(tf.concat([ids, ids], 0), [2, 3, 5]))
    assert out.shape == (2, 3)
    assert [x.decode() for x in out.numpy()[1]] == ["21", "2", "2\ufffd\ufffd11"]
    ragged = tf.ragged.constant([[a, a, END_ID, b], [b]], dtype=tf.int32)
    assert to_str(tok.detokenize(ragged)) == ["22", "1"]
    with pytest.raises(ValueError, match="rank"):
        tok.detokenize(tf.constant([a, b]))


def test_save_load_round_trip(tok, tmp_path):
    path = tok.save(tmp_path / "vocab.txt")
    assert tok.vocab_file == str(path)
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert lines[:4] == ["<pad>", "<s>", "</s>", "<unk>"] and lines[-1] == ""
    assert lines[:-1] == tok.vocabulary
    loaded = CharTokenizer.load(path)
    assert loaded.vocabulary == tok.vocabulary
    assert loaded.vocab_file == str(path)
    np.testing.assert_array_equal(
        loaded.tokenize_padded(SAMPLES).numpy(), tok.tokenize_padded(SAMPLES).numpy()
    )
    (tmp_path / "bad.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match="vocabulary file"):
        CharTokenizer.load(tmp_path / "bad.txt")


def test_bad_characters_rejected():
    with pytest.raises(ValueError, match="distinct"):
        CharTokenizer(["a", "a"])
    with pytest.raises(ValueError, match="single characters"):
        CharTokenizer(["ab"])
    with pytest.raises(ValueError, match="line breaks"):
        CharTokenizer(["\n"])


def test_graph_uses_only_serving_ops(tok):
    run = tf.function(
        lambda x: tok.detokenize(tok.tokenize_padded(x, add_start=True, add_end=True)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    concrete = run.get_concrete_function()
    assert disallowed_ops(concrete) == []
    assert to_str(concrete(tf.constant(SAMPLES))) == SAMPLES
    # Exported and run the server's way: tests/text/test_server_way.py.
