"""ConvS2S: the model checklist (incremental decoding == teacher-forced pass, save/load, fit,
greedy and beam search) and export through the translators' exporter, run the server's way."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.models import ConvS2S
from tests.models.helpers import run_model_checklist


def _data(vocab=12, batch=3, s=7, t=5, seed=0):
    r = np.random.RandomState(seed)
    source = r.randint(4, vocab, size=(batch, s)).astype("int32")
    source[1, 4:] = 0
    target = r.randint(4, vocab, size=(batch, t + 1)).astype("int32")
    target[:, 0] = 1
    target[2, 3:] = 0
    target_in, y = target[:, :-1].copy(), target[:, 1:].copy()
    return {"source": source, "target_in": target_in}, y


@pytest.mark.parametrize("kernel_size", [3, 5])
def test_model_checklist(kernel_size):
    x, y = _data()
    model = ConvS2S(
        12,
        12,
        embedding_dim=8,
        hidden_dim=8,
        num_layers=2,
        kernel_size=kernel_size,
        dropout=0.0,
        max_length=16,
    )
    run_model_checklist(model, x, y, max_length=6, beam_size=3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="kernel_size"):
        ConvS2S(12, 12, kernel_size=4)
    with pytest.raises(ValueError, match="num_layers"):
        ConvS2S(12, 12, num_layers=0)


def test_exports_and_serves_the_server_way(tmp_path):
    from keras_attn.decoding import beam_search
    from keras_attn.serving.export import export_text_model
    from keras_attn.serving.harness import run_server_way
    from keras_attn.text import CharTokenizer

    tokenizer = CharTokenizer.build(["hello world", "abc 123"])
    model = ConvS2S(tokenizer.vocab_size, tokenizer.vocab_size, 8, 8, 2, dropout=0.0, max_length=32)
    model.build()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path),
        beam_size=2,
        max_length=5,
        max_input_length=12,
        max_length_limit=8,
        warmup_inputs=("hello",),
    )
    inputs = np.array([b"hello", b"ab 12"], dtype=object)
    result = run_server_way(
        path,
        [
            (
                "beam_search",
                {
                    "inputs": inputs,
                    "beam_size": np.int32(3),
                    "max_length": np.int32(5),
                    "length_penalty": np.float32(0.0),
                    "coverage_penalty": np.float32(0.0),
                },
            )
        ],
        replay_warmup=True,
    )
    assert all(r.ok for r in result.warmup)
    served = result.responses[0]
    assert served.ok, served.error_message
    ids = tokenizer.tokenize_padded(tf.constant(inputs))
    encoded = model.encode(ids)
    expected = beam_search(
        model.decode_step,
        model.initial_decode_state(encoded, 5),
        tf.fill([2], 1),
        2,
        beam_size=3,
        max_length=5,
        source_mask=encoded["source_mask"],
    )
    np.testing.assert_allclose(served.outputs["scores"], expected["scores"].numpy(), atol=1e-4)
