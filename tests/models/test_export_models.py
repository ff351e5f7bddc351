"""The example models go through the SavedModel exporter (keras_attn.serving): only servable ops,
and the exported greedy signature, loaded back with TensorFlow alone, gives the in-process scores."""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import greedy_search
from keras_attn.models import RNNSeq2Seq, Transformer
from keras_attn.serving.export import export_text_model
from keras_attn.text import CharTokenizer

INPUTS = np.array([b"hello", b"ab 12"], dtype=object)
MAX_LENGTH = 5


def _models(vocab):
    return {
        "rnn-luong-local-m": RNNSeq2Seq(vocab, vocab, 8, 8, attention="luong", score="dot", alignment="local-m", window=2),
        "transformer-learned": Transformer(vocab, vocab, 1, 8, 2, 16, positions="learned", max_length=24),
    }


@pytest.mark.parametrize("name", ["transformer-learned"])  # the cache path; RNNs export through the same code
def test_model_exports_and_serves_like_in_process(name, tmp_path):
    tokenizer = CharTokenizer.build(["hello world", "abc 123"])
    model = _models(tokenizer.vocab_size)[name]
    model.build()
    export_text_model(
        model, tokenizer, str(tmp_path), beam_size=2, max_length=MAX_LENGTH,
        max_input_length=12, max_length_limit=8, warmup_inputs=("hello",),
    )
    loaded = tf.saved_model.load(os.path.join(str(tmp_path), "1"))
    served = loaded.signatures["greedy"](inputs=tf.constant(INPUTS))

    ids = tokenizer.tokenize_padded(tf.constant(INPUTS))
    encoded = model.encode(ids)
    expected = greedy_search(
        model.decode_step, model.initial_decode_state(encoded, MAX_LENGTH), tf.fill([2], 1), 2,
        max_length=MAX_LENGTH, source_mask=encoded["source_mask"],
    )
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(), atol=1e-5)
