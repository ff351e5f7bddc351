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

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

INPUTS = np.array([b"hello", b"ab 12"], dtype=object)
MAX_LENGTH = 5


MODELS = {
    "rnn-luong-local-m": lambda vocab: RNNSeq2Seq(
        vocab, vocab, 8, 8, attention="luong", score="dot", alignment="local-m", window=2
    ),
    "transformer-learned": lambda vocab: Transformer(
        vocab, vocab, 1, 8, 2, 16, positions="learned", max_length=24
    ),
}


# The Transformer's cache path, and an RNN whose attention reads the step (local-m's p_t = step).
@pytest.mark.parametrize("name", ["transformer-learned", "rnn-luong-local-m"])
def test_model_exports_and_serves_like_in_process(name, tmp_path):
    tokenizer = CharTokenizer.build(["hello world", "abc 123"])
    model = MODELS[name](tokenizer.vocab_size)
    model.build()
    export_text_model(
        model,
        tokenizer,
        str(tmp_path),
        beam_size=2,
        max_length=MAX_LENGTH,
        max_input_length=12,
        max_length_limit=8,
        warmup_inputs=("hello",),
    )
    loaded = tf.saved_model.load(os.path.join(str(tmp_path), "1"))
    served = loaded.signatures["greedy"](inputs=tf.constant(INPUTS))

    ids = tokenizer.tokenize_padded(tf.constant(INPUTS))
    encoded = model.encode(ids)
    expected = greedy_search(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        tf.fill([2], 1),
        2,
        max_length=MAX_LENGTH,
        source_mask=encoded["source_mask"],
    )
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(), atol=1e-5)


def test_freshly_trained_model_serves_the_server_way(tmp_path):
    """A model trained here, exported, and run by a TF-only process the way the server does:
    its served answers are the trained model's (reversal learned), and equal the in-process search."""
    import keras

    from keras_attn.decoding import beam_search
    from keras_attn.models import MaskedSequenceAccuracy, MaskedSequenceLoss, teacher_forcing
    from keras_attn.serving.harness import run_server_way

    rng = np.random.default_rng(0)
    letters = np.array(list("abcdef"))
    words = ["".join(rng.choice(letters, 4)) for _ in range(768)]
    tokenizer = CharTokenizer.build(words)
    source = tokenizer.tokenize_padded(tf.constant(words), 4).numpy()
    reversed_ids = tokenizer.tokenize_padded(
        tf.constant([w[::-1] for w in words]), 6, add_start=True, add_end=True
    ).numpy()
    target_in, target_out = (np.asarray(a) for a in teacher_forcing(reversed_ids))
    model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, 8, 24, attention="bahdanau")
    model.compile(
        keras.optimizers.Adam(0.02), MaskedSequenceLoss(), metrics=[MaskedSequenceAccuracy()]
    )
    model.fit(
        {"source": source, "target_in": target_in}, target_out, batch_size=64, epochs=10, verbose=0
    )

    export_text_model(
        model, tokenizer, str(tmp_path), beam_size=3, max_length=6, max_input_length=8
    )
    held_out = ["".join(rng.choice(letters, 4)) for _ in range(16)]
    inputs = np.array([w.encode() for w in held_out], dtype=object)
    knobs = {
        "beam_size": np.int32(3),
        "max_length": np.int32(6),
        "length_penalty": np.float32(0.0),
        "coverage_penalty": np.float32(0.0),
    }
    result = run_server_way(
        os.path.join(str(tmp_path), "1"),
        [("greedy", {"inputs": inputs}), ("beam_search", {"inputs": inputs, **knobs})],
        replay_warmup=True,
    )
    assert "keras_attn" not in result.modules
    assert all(r.error_type is None for r in result.responses + result.warmup)
    greedy, beam = (r.outputs for r in result.responses)
    served = [s.decode() for s in greedy["outputs"]]
    # Trained, not initial, weights reached the server: most held-out words come back reversed.
    assert np.mean([s == w[::-1] for s, w in zip(served, held_out)]) >= 0.75, served

    ids = tokenizer.tokenize_padded(tf.constant(held_out), 8)
    encoded = model.encode(ids)
    expected = beam_search(
        model.decode_step,
        model.initial_decode_state(encoded, 6),
        tf.fill([len(held_out)], 1),
        2,
        beam_size=3,
        max_length=6,
        source_mask=encoded["source_mask"],
    )
    np.testing.assert_allclose(beam["scores"], expected["scores"].numpy(), atol=1e-4)
    assert [s.decode() for s in beam["outputs"][:, 0]] == [
        t.decode() for t in tokenizer.detokenize(expected["sequences"][:, 0]).numpy()
    ]
