"""The Transformer with MultiHeadAttention's options (grouped-query heads, rotary embeddings,
a sliding window, gates): cached decoding equals the full forward pass, `.keras` round trip, and
the exported greedy signature equals the in-process search."""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_attn.decoding import greedy_search
from keras_attn.models import Transformer
from keras_attn.serving.export import export_text_model
from keras_attn.text import CharTokenizer

OPTIONS = dict(num_key_value_heads=1, rotary_max_wavelength=100.0, sliding_window=3, use_gate=True)


def _model(vocab=12):
    model = Transformer(
        vocab,
        vocab,
        num_layers=2,
        d_model=8,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
        **OPTIONS,
    )
    model.build()
    return model


def test_cached_decode_steps_equal_the_full_forward_pass(tmp_path):
    model = _model()
    assert model.decoder_layers[0].self_attention_layer.num_key_value_heads == 1
    assert model.decoder_layers[0].cross_attention_layer.rotary_max_wavelength is None
    source = np.array([[3, 4, 5, 6, 0], [7, 8, 2, 0, 0]], "int32")
    target = np.array([[1, 5, 6, 7, 8, 9], [1, 4, 3, 9, 10, 11]], "int32")
    full = keras.ops.convert_to_numpy(model({"source": source, "target_in": target}))
    state = model.initial_decode_state(model.encode(source), target.shape[1])
    # One key/value head; a ring of the window's 3 rows for 6 > 2 x 3 steps (docs/multi_head.md).
    assert tuple(state["self_cache"][0][0].shape) == (2, OPTIONS["sliding_window"], 1, 4)
    for t in range(target.shape[1]):
        logits, state, _ = model.decode_step(target[:, t], state, t)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), full[:, t], atol=1e-4)
    # Config and .keras round trip keep the options.
    path = os.path.join(str(tmp_path), "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert {k: loaded.get_config()[k] for k in OPTIONS} == OPTIONS
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded({"source": source, "target_in": target})), full, atol=1e-5
    )


def test_exported_model_serves_like_in_process(tmp_path):
    tokenizer = CharTokenizer.build(["hello world", "abc 123"])
    model = _model(tokenizer.vocab_size)
    inputs = np.array([b"hello", b"ab 12"], dtype=object)
    export_text_model(
        model,
        tokenizer,
        str(tmp_path),
        beam_size=2,
        max_length=5,
        max_input_length=12,
        max_length_limit=8,
        warmup_inputs=("hello",),
    )
    loaded = tf.saved_model.load(os.path.join(str(tmp_path), "1"))
    served = loaded.signatures["greedy"](inputs=tf.constant(inputs))
    ids = tokenizer.tokenize_padded(tf.constant(inputs))
    encoded = model.encode(ids)
    expected = greedy_search(
        model.decode_step,
        model.initial_decode_state(encoded, 5),
        tf.fill([2], 1),
        2,
        max_length=5,
        source_mask=encoded["source_mask"],
    )
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(), atol=1e-5)
