"""Served requests that used to give a raw error or a silent wrong answer.

One tiny Transformer with a learned position table of 24 rows, exported with the default
settings, answers every request in one process that loads it the way TensorFlow Serving does.
"""

import os

import numpy as np
import pytest

from keras_attn.models import Transformer
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import CharTokenizer

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

TABLE = 24
LONG = "hello world abc 123 hello worl"  # 30 characters: more than the table holds


def strings(*items):
    return np.array([t.encode() if isinstance(t, str) else t for t in items], dtype=object)


def beam(inputs, **params):
    values = {
        "beam_size": np.int32(2),
        "max_length": np.int32(5),
        "length_penalty": np.float32(0.0),
        "coverage_penalty": np.float32(0.0),
    }
    values.update(params)
    return ServingRequest("beam_search", {"inputs": inputs, **values})


REQUESTS = {
    "long": ServingRequest("greedy", {"inputs": strings(LONG)}),
    "cut": ServingRequest("greedy", {"inputs": strings(LONG[:TABLE])}),
    "long_beam": beam(strings(LONG, "abc"), max_length=np.int32(TABLE)),
    "long_default": ServingRequest("serving_default", {"inputs": strings(LONG)}),
    "max_length_past_table": beam(strings("abc"), max_length=np.int32(TABLE + 1)),
    "rank2": ServingRequest("greedy", {"inputs": np.array([[b"abc"]], dtype=object)}),
    "rank0": ServingRequest("serving_default", {"inputs": np.array(b"abc", dtype=object)}),
    "rank2_beam": beam(np.array([[b"abc", b"a"]], dtype=object)),
    "beam_size_vector": beam(strings("abc"), beam_size=np.array([2, 2], np.int32)),
}


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    tokenizer = CharTokenizer.build(["hello world", "abc 123"])
    model = Transformer(
        tokenizer.vocab_size,
        tokenizer.vocab_size,
        1,
        8,
        2,
        16,
        positions="learned",
        max_length=TABLE,
    )
    model.build()
    return model, tokenizer


@pytest.fixture(scope="module")
def served(transformer, tmp_path_factory):
    model, tokenizer = transformer
    path = export_text_model(
        model, tokenizer, str(tmp_path_factory.mktemp("learned") / "t"), warmup_inputs=[LONG]
    )
    result = run_server_way(path, list(REQUESTS.values()), replay_warmup=True)
    return path, result, dict(zip(REQUESTS, result.responses))


def ok(responses, key):
    response = responses[key]
    assert response.ok, f"{key}: {response.error_type}: {response.error_message}"
    return response.outputs


def test_defaults_cut_sources_to_the_position_table(served):
    _, result, responses = served
    long, cut = ok(responses, "long"), ok(responses, "cut")
    assert long["alignments"].shape[-1] == TABLE
    assert long["outputs"].tolist() == cut["outputs"].tolist()
    np.testing.assert_allclose(long["scores"], cut["scores"], rtol=1e-6)
    assert ok(responses, "long_beam")["outputs"].shape == (2, 2)
    assert ok(responses, "long_default")["outputs"].shape == (1,)
    assert all(r.ok for r in result.warmup), [r.error_message for r in result.warmup]
    # The defaults were lowered to the table: the warm-up's max_length, the request limit.
    (beam_warmup,) = [r for r in result.warmup_requests if r.signature_name == "beam_search"]
    assert int(beam_warmup.inputs["max_length"]) == TABLE


def test_max_length_past_the_table_is_refused_by_name(served):
    response = served[2]["max_length_past_table"]
    assert response.error_type == "InvalidArgumentError"
    assert "max_length" in response.error_message and f"[1, {TABLE}]" in response.error_message


@pytest.mark.parametrize(
    "key, name, shape",
    [
        ("rank2", "inputs", "[1 1]"),
        ("rank0", "inputs", "[]"),
        ("rank2_beam", "inputs", "[1 2]"),
        ("beam_size_vector", "beam_size", "[2]"),
    ],
)
def test_inputs_of_the_wrong_rank_are_refused_by_name(served, key, name, shape):
    response = served[2][key]
    assert response.error_type == "InvalidArgumentError"
    assert f"`{name}` must be" in response.error_message and shape in response.error_message


def test_loaded_signature_refuses_the_wrong_rank_too(served):
    import tensorflow as tf

    loaded = tf.saved_model.load(served[0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="`inputs` must be a vector"):
        loaded.signatures["greedy"](inputs=tf.constant([["abc"]]))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_length_limit": 64}, "max_length_limit"),
        ({"max_input_length": 30}, "max_input_length"),
        ({"max_length": 25}, "max_length"),
    ],
)
def test_settings_past_the_table_are_refused_at_export(transformer, tmp_path, kwargs, name):
    model, tokenizer = transformer
    with pytest.raises(ValueError, match=f"`{name}` must be an integer in .*{TABLE} rows"):
        export_text_model(model, tokenizer, str(tmp_path), **kwargs)
    assert not os.path.exists(tmp_path / "1")
