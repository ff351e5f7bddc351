"""The word rules' loop ban in `serving_default` and its XLA twin, answered the way TensorFlow
Serving runs them: a toy translator made to loop (its output bias favours one character) writes
no group of 1 to 8 tokens three times in a row that its source does not hold, where its plain
greedy decode loops."""

import numpy as np
import pytest

from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import CharTokenizer
from tests.serving.toy_model import TRAINING_TEXT, ToyTranslator

# Exports answered the way TensorFlow Serving runs them: make test-processes.
pytestmark = pytest.mark.processes

SOURCES = ["hello world", "the lazy dog", "aaa bbb"]


def contains(seq, part):
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def loops(answer, source, max_period=8):
    """The groups of 1 to `max_period` characters `answer` writes three times in a row that
    `source` does not hold so."""
    found = set()
    for p in range(1, max_period + 1):
        for i in range(len(answer) - 3 * p + 1):
            run = answer[i : i + 3 * p]
            if run == run[:p] * 3 and not contains(source, run):
                found.add(run[:p])
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import keras

    keras.utils.set_random_seed(3)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + SOURCES)
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    bias = np.zeros(tokenizer.vocab_size, "float32")
    bias[list(tokenizer.vocabulary).index("a")] = 30.0  # "aaaa..." whatever the source
    bias[tokenizer.end_id] = -30.0
    model.output_layer.bias.assign(bias)
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("loops") / "toy"),
        beam_size=2,
        max_length=16,
        max_input_length=32,
        word_rules=True,
        xla=("serving_default",),
    )
    inputs = {"inputs": np.array([s.encode() for s in SOURCES], dtype=object)}
    names = ("serving_default", "serving_default_xla", "greedy")
    result = run_server_way(path, [ServingRequest(name, inputs) for name in names])
    for response in result.responses:
        assert response.ok, response.error_message
    return {
        name: [o.decode("utf-8") for o in r.outputs["outputs"]]
        for name, r in zip(names, result.responses)
    }


def test_the_plain_decode_loops(served):
    assert all("aaa" in answer for answer in served["greedy"]), served["greedy"]


@pytest.mark.parametrize("name", ["serving_default", "serving_default_xla"])
def test_no_served_answer_loops(served, name):
    for source, answer in zip(SOURCES, served[name]):
        assert len(answer) >= 8, (source, answer)  # the bias keeps it writing
        assert not loops(answer, source), (source, answer)
        assert answer.count("a") >= 2, (source, answer)  # the model's own choice, up to the ban
