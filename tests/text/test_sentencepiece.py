import io

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_attn.serving.ops_check import disallowed_ops
from keras_attn.text import END_ID, PAD_ID, START_ID, UNK_ID, SentencePieceTokenizer

CORPUS = [
    "¿Dónde está la estación de tren?",
    "Me gustaría un café con leche, por favor.",
    "El niño come manzanas en el jardín.",
    "Mañana vamos a la playa.",
    "我喜欢学习中文。",
    "今天天气很好，我们去公园吧。",
    "你好，世界！",
    "这本书是我的。",
]
SAMPLES = [
    "El niño está en la estación.",
    "我们喜欢学习中文，你好！",
    "Me gusta la playa",
    "",
    "café con leche",
]


@pytest.fixture(scope="module")
def tok():
    return SentencePieceTokenizer.train(CORPUS * 5, vocab_size=120)


def to_str(t):
    return [s.decode("utf-8") for s in t.numpy().tolist()]


def processor(model_proto):
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model_proto)
    return sp


def test_reserved_ids_match_convention(tok):
    assert (
        (tok.pad_id, tok.start_id, tok.end_id, tok.unk_id)
        == (PAD_ID, START_ID, END_ID, UNK_ID)
        == (0, 1, 2, 3)
    )
    assert tok.vocabulary[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    sp = processor(tok.model_proto)
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    assert tok.vocab_size == sp.get_piece_size() <= 120


def test_ids_match_the_sentencepiece_library(tok):
    sp = processor(tok.model_proto)
    ids = tok.tokenize(tf.constant(SAMPLES))
    assert ids.dtype == tf.int32
    assert ids.to_list() == [sp.encode(s) for s in SAMPLES]
    padded = tok.tokenize_padded(tf.constant(SAMPLES), add_start=True, add_end=True)
    width = max(len(sp.encode(s)) for s in SAMPLES) + 2
    assert padded.shape == (len(SAMPLES), width)
    for row, s in zip(padded.numpy().tolist(), SAMPLES):
        body = sp.encode(s)
        assert row == [START_ID] + body + [END_ID] + [PAD_ID] * (width - len(body) - 2)


def test_round_trip_spanish_chinese_empty(tok):
    out = tok.detokenize(tok.tokenize_padded(tf.constant(SAMPLES), add_start=True, add_end=True))
    assert to_str(out) == SAMPLES
    # Chinese has no spaces and must not get any.
    assert "我们喜欢学习中文，你好！" in to_str(tok.detokenize(tok.tokenize(tf.constant(SAMPLES))))


def test_whitespace_is_collapsed(tok):
    out = to_str(tok.detokenize(tok.tokenize(tf.constant(["  café   con leche  "]))))
    assert out == ["café con leche"]


def test_broken_utf8_and_unknown_characters_do_not_fail(tok):
    out = to_str(
        tok.detokenize(tok.tokenize(tf.constant([b"caf\xc3 con \xff leche", "Ωmega café"])))
    )
    # Broken bytes read as U+FFFD, unknown to the model; the library renders <unk> as " \u2047 ".
    sp = processor(tok.model_proto)
    assert out == [
        sp.decode(sp.encode("caf\ufffd con \ufffd leche")),
        sp.decode(sp.encode("Ωmega café")),
    ]
    assert out[0].count("\u2047") == 2 and out[0].startswith("caf") and out[0].endswith("leche")
    assert "\u2047" in out[1] and out[1].endswith("café")
    ids = tok.tokenize(tf.constant([b"\xff"])).to_list()
    assert UNK_ID in ids[0]


def test_detokenize_stops_at_end_or_pad_and_clips(tok):
    sp = processor(tok.model_proto)
    body = sp.encode("café con leche")
    ids = tf.constant([[START_ID] + body + [END_ID] + body, body + [PAD_ID] + body + [5]])
    assert to_str(tok.detokenize(ids)) == ["café con leche", "café con leche"]
    out = to_str(tok.detokenize(tf.constant([body + [10_000, -1]])))
    assert out == [sp.decode(body + [UNK_ID, UNK_ID])]  # out-of-range ids read as <unk>


def test_training_is_deterministic():
    a = SentencePieceTokenizer.train(CORPUS * 3, vocab_size=80)
    b = SentencePieceTokenizer.train(CORPUS * 3, vocab_size=80)
    assert a.model_proto == b.model_proto


def test_save_load(tok, tmp_path):
    path = tok.save(tmp_path / "sp.model")
    assert tok.model_file == str(path)
    loaded = SentencePieceTokenizer.load(path)
    assert loaded.model_proto == tok.model_proto and loaded.model_file == str(path)
    np.testing.assert_array_equal(
        loaded.tokenize_padded(SAMPLES).numpy(), tok.tokenize_padded(SAMPLES).numpy()
    )


def test_rejects_models_with_other_ids_and_bad_options():
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 3),
        model_writer=buf,
        vocab_size=100,
        minloglevel=2,
        hard_vocab_limit=False,
    )  # sentencepiece defaults: unk=0, bos=1, eos=2, no pad
    with pytest.raises(ValueError, match="pad=0"):
        SentencePieceTokenizer(buf.getvalue())
    with pytest.raises(ValueError, match="model_proto"):
        SentencePieceTokenizer(b"not a model")
    with pytest.raises(ValueError, match="reserved"):
        SentencePieceTokenizer.train(CORPUS, vocab_size=50, unk_id=7)
    with pytest.raises(ValueError, match="vocab_size"):
        SentencePieceTokenizer.train(CORPUS, vocab_size=3)


def test_graph_uses_only_serving_ops(tok):
    run = tf.function(
        lambda x: tok.detokenize(tok.tokenize_padded(x, add_start=True, add_end=True)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    concrete = run.get_concrete_function()
    assert disallowed_ops(concrete) == []
    assert to_str(concrete(tf.constant(SAMPLES))) == SAMPLES
    # Exported and run the server's way: tests/text/test_server_way.py.


def test_survives_keras_clear_session(tok):
    # clear_session empties TensorFlow's eager kernel cache, which owns TF Text's model resource.
    import keras

    before = tok.tokenize(tf.constant(SAMPLES)).to_list()
    keras.utils.clear_session()
    assert tok.tokenize(tf.constant(SAMPLES)).to_list() == before
    assert to_str(tok.detokenize(tok.tokenize(tf.constant(SAMPLES)))) == SAMPLES
