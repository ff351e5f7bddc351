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
