"""Both tokenizers inside one exported SavedModel, run the way tensorflow_model_server runs it
(fresh process, only tensorflow + tensorflow_text, TF1 Session on the `serve` MetaGraph)."""

import numpy as np
import tensorflow as tf

from keras_attn.serving.harness import run_server_way
from keras_attn.serving.ops_check import disallowed_ops
from keras_attn.text import CharTokenizer, SentencePieceTokenizer

TEXTS = ["21 de noviembre de 2026", "2026年11月21日", "", "今天天气很好，谢谢。"]


def test_tokenizers_round_trip_in_the_server_way(tmp_path):
    char = CharTokenizer.build(TEXTS)
    sp = SentencePieceTokenizer.train(TEXTS * 5 + ["noviembre de 2026"], vocab_size=60)

    module = tf.Module()
    module.char, module.sp = char, sp

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve(inputs):
        char_ids = char.tokenize_padded(inputs, add_start=True, add_end=True)
        sp_ids = sp.tokenize_padded(inputs, add_start=True, add_end=True)
        return {
            "char_ids": char_ids,
            "char_text": char.detokenize(char_ids),
            "sp_text": sp.detokenize(sp_ids),
        }

    assert disallowed_ops(serve.get_concrete_function()) == []
    export_dir = tmp_path / "1"
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": serve})

    inputs = np.array([t.encode() for t in TEXTS] + [b"\xff 2026"], dtype=object)
    result = run_server_way(export_dir, [("serving_default", {"inputs": inputs})])
    response = result.responses[0]
    assert response.ok, response
    out = response.outputs
    expected = TEXTS + ["\ufffd 2026"]
    assert [s.decode() for s in out["char_text"]] == expected
    assert [s.decode() for s in out["sp_text"][:4]] == TEXTS
    np.testing.assert_array_equal(
        out["char_ids"], char.tokenize_padded(tf.constant(inputs), add_start=True, add_end=True)
    )


def test_byte_pieces_left_over_are_dropped_in_the_server_way(tmp_path):
    """A `byte_fallback` model's detokenizer in a SavedModel run as the server runs it: the
    bytes that do not complete a character are gone, whole characters (U+FFFD too) kept."""
    import sentencepiece as spm

    from keras_attn.text.byte_pieces import decode

    sp = SentencePieceTokenizer.train(
        TEXTS[:1] * 10 + ["the cat sat"] * 10, vocab_size=300, byte_fallback=True
    )
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(sp.model_proto)
    b = processor.piece_to_id
    module = tf.Module()
    module.sp = sp

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")])
    def serve(ids):
        return {"text": sp.detokenize(ids)}

    assert disallowed_ops(serve.get_concrete_function()) == []
    export_dir = tmp_path / "1"
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": serve})
    cat = sp.tokenize(["the cat"]).to_list()[0]
    rows = [
        [b("<0xE3>"), b("<0x81>")] + cat + [0, 0, 0, 0, 0, 0],
        cat + [b("<0x81>"), b("<0xE3>"), b("<0x81>"), b("<0x82>"), 2, 0, 0, 0],
        [b("<0xEF>"), b("<0xBF>"), b("<0xBD>"), b("<0xBF>")] + [0] * (len(cat) + 4),
    ]
    width = max(len(r) for r in rows)
    ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    result = run_server_way(export_dir, [("serving_default", {"ids": ids})])
    response = result.responses[0]
    assert response.ok, response
    got = [t.decode("utf-8") for t in response.outputs["text"]]
    assert got == ["the cat", "the catあ", "\ufffd"]
    assert got == [decode(processor, row) for row in ids]
    assert "\ufffd" in processor.decode(rows[0][:2])  # what SentencePiece alone answers


def test_word_rules_in_the_server_way(tmp_path):
    """A search with `word_rules_step` in a SavedModel run as the server runs it: the step ends
    inside the source's name and loops, the served answers do neither."""
    from keras import ops

    from keras_attn.decoding import greedy_search
    from keras_attn.decoding.words import word_rules_step

    vocab, lo, ti, a, b = 12, 5, 9, 4, 7
    word_start = np.array([False] * 4 + [True] * 3 + [False] * 5)
    table = np.full([vocab, vocab], -6.0, "float32")
    table[1, lo], table[lo, 2], table[lo, ti], table[ti, a] = 5.0, 4.0, 3.0, 5.0
    table[a, b], table[b, a], table[a, 2] = 5.0, 5.0, 0.0  # then "a b a b ...", the end second
    table = tf.constant(table)

    def step(tokens, state, index):
        return tf.gather(table, tokens), state, None

    def run(source, rules):
        state = {"h": ops.zeros_like(ops.cast(source[:, :2], "float32"))}
        start = ops.ones_like(source[:, 0])
        if rules:
            ruled, state = word_rules_step(step, state, source, word_start, 2, 9)
            return greedy_search(ruled, state, start, 2, max_length=9)["sequences"]
        return greedy_search(step, state, start, 2, max_length=9)["sequences"]

    module = tf.Module()
    spec = [tf.TensorSpec([None, None], tf.int32, name="source_ids")]
    signatures = {
        "plain": tf.function(lambda s: {"sequences": run(s, False)}, input_signature=spec),
        "ruled": tf.function(lambda s: {"sequences": run(s, True)}, input_signature=spec),
    }
    assert disallowed_ops(signatures["ruled"].get_concrete_function()) == []
    export_dir = tmp_path / "1"
    tf.saved_model.save(module, str(export_dir), signatures=signatures)
    source = np.array([[6, 8, lo, ti, 2]], np.int32)  # "▁x y ▁Lo ti"
    result = run_server_way(
        export_dir, [("plain", {"source_ids": source}), ("ruled", {"source_ids": source})]
    )
    plain, ruled = (r.outputs["sequences"][0].tolist() for r in result.responses)
    assert plain[:2] == [lo, 2]  # the name cut short
    assert plain[2:] == [2] * 7
    # the name whole, then the loop, stopped before a third "a b"
    assert ruled[:8] == [lo, ti, a, b, a, b, a, 2]
