"""The control signatures (`beam_search_controls`, `greedy_controls`, `sample`) and the ranges of
the request parameters, through the exported toy model answered the way TensorFlow Serving runs it.

The references are the in-process `keras_attn.decoding` searches over the live model with the
same arguments (the exporter must add nothing but tokenizing, checks and detokenizing).
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search, greedy_search, sample_search
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from tests.serving.toy_model import ToyTranslator, make_toy

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

TEXTS = ["hello world", "fox"]
MAX_INPUT = 16  # the toy export's (tests/serving/conftest.py)
BEAM = dict(beam_size=3, max_length=6, length_penalty=0.6, coverage_penalty=0.2)
CONTROLS = dict(min_length=3, no_repeat_ngram_size=2, repetition_penalty=1.5)
SAMPLE = dict(temperature=0.7, top_k=5, top_p=0.9, seed=7, max_length=6)
DTYPES = {
    "beam_size": np.int32,
    "max_length": np.int32,
    "min_length": np.int32,
    "no_repeat_ngram_size": np.int32,
    "top_k": np.int32,
    "seed": np.int32,
}


def strings(*items):
    return np.array([t.encode() for t in items], dtype=object)


def request(signature, texts=TEXTS, **params):
    inputs = {k: DTYPES.get(k, np.float32)(v) for k, v in params.items()}
    return ServingRequest(signature, {"inputs": strings(*texts), **inputs})


BEAM_PARAMS = dict(beam_size=2, max_length=4, length_penalty=0.0, coverage_penalty=0.0)
SAMPLE_PARAMS = dict(SAMPLE, min_length=0, no_repeat_ngram_size=0, repetition_penalty=1.0)
REQUESTS = {
    "beam": request("beam_search_controls", **BEAM, **CONTROLS),
    "greedy": request(
        "greedy_controls",
        max_length=6,
        min_length=4,
        no_repeat_ngram_size=1,
        repetition_penalty=2.0,
    ),
    "sample": request("sample", **SAMPLE, **CONTROLS),
    "sample_again": request("sample", **SAMPLE, **CONTROLS),
    # Request parameters outside their documented ranges (docs/decoding.md), refused by name.
    "length_penalty_-1000": request("beam_search", **dict(BEAM_PARAMS, length_penalty=-1000.0)),
    "length_penalty_1e6": request("beam_search", **dict(BEAM_PARAMS, length_penalty=1e6)),
    "coverage_penalty_1e30": request("beam_search", **dict(BEAM_PARAMS, coverage_penalty=1e30)),
    "repetition_penalty_0": request(
        "greedy_controls",
        max_length=4,
        min_length=0,
        no_repeat_ngram_size=0,
        repetition_penalty=0.0,
    ),
    "min_length_past_max": request(
        "greedy_controls",
        max_length=4,
        min_length=5,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
    ),
    "temperature_0": request("sample", **dict(SAMPLE_PARAMS, temperature=0.0)),
    "top_p_1.5": request("sample", **dict(SAMPLE_PARAMS, top_p=1.5)),
    "top_k_-1": request("sample", **dict(SAMPLE_PARAMS, top_k=-1)),
    "sample_max_length_over_limit": request("sample", **dict(SAMPLE_PARAMS, max_length=25)),
}
REFUSED = [
    ("length_penalty_-1000", "length_penalty"),
    ("length_penalty_1e6", "length_penalty"),
    ("coverage_penalty_1e30", "coverage_penalty"),
    ("repetition_penalty_0", "repetition_penalty"),
    ("min_length_past_max", "min_length"),
    ("temperature_0", "temperature"),
    ("top_p_1.5", "top_p"),
    ("top_k_-1", "top_k"),
    ("sample_max_length_over_limit", "max_length"),
]


@pytest.fixture(scope="module")
def served(toy_export):
    result = run_server_way(toy_export, list(REQUESTS.values()))
    return dict(zip(REQUESTS, result.responses))


def ok(served, key):
    response = served[key]
    assert response.ok, f"{key}: {response.error_type}: {response.error_message}"
    return response.outputs


def in_process(toy, search, max_length, **kwargs):
    model, tokenizer = toy
    ids = tokenizer.tokenize(tf.constant(TEXTS), max_length=MAX_INPUT).to_tensor(tokenizer.pad_id)
    encoded = model.encode(ids)
    result = search(
        model.decode_step,
        model.initial_decode_state(encoded, max_length),
        tf.fill([len(TEXTS)], tokenizer.start_id),
        tokenizer.end_id,
        max_length=max_length,
        source_mask=encoded["source_mask"],
        **kwargs,
    )
    return {k: v.numpy() for k, v in result.items()}, tokenizer


def test_beam_search_controls_equal_in_process(served, toy):
    out = ok(served, "beam")
    ref, tokenizer = in_process(toy, beam_search, **BEAM, **CONTROLS)
    np.testing.assert_array_equal(out["lengths"], ref["lengths"])
    np.testing.assert_allclose(out["scores"], ref["scores"], rtol=1e-5, atol=1e-5)
    assert (
        out["outputs"].tolist()
        == tokenizer.detokenize(tf.constant(ref["sequences"])).numpy().tolist()
    )
    # The controls hold in what is served: no hypothesis ends before min_length tokens
    # (the end token counted), no character bigram repeats.
    assert np.all(out["lengths"] >= CONTROLS["min_length"])
    for row in out["outputs"]:
        for text in row:
            bigrams = [text[i : i + 2] for i in range(len(text) - 1)]
            assert len(bigrams) == len(set(bigrams)), text


def test_greedy_controls_equal_in_process(served, toy):
    out = ok(served, "greedy")
    ref, tokenizer = in_process(
        toy, greedy_search, 6, min_length=4, no_repeat_ngram_size=1, repetition_penalty=2.0
    )
    np.testing.assert_allclose(out["scores"], ref["scores"], rtol=1e-5, atol=1e-5)
    assert (
        out["outputs"].tolist()
        == tokenizer.detokenize(tf.constant(ref["sequences"])).numpy().tolist()
    )
    for text in out["outputs"]:
        assert len(set(text)) == len(text), text  # no_repeat_ngram_size=1: no character twice


def test_sample_equals_in_process_with_the_same_seed(served, toy):
    out, again = ok(served, "sample"), ok(served, "sample_again")
    params = dict(SAMPLE, seed=tf.constant(SAMPLE["seed"], tf.int32))
    ref, tokenizer = in_process(toy, sample_search, params.pop("max_length"), **params, **CONTROLS)
    assert (
        out["outputs"].tolist()
        == tokenizer.detokenize(tf.constant(ref["sequences"])).numpy().tolist()
    )
    np.testing.assert_allclose(out["scores"], ref["scores"], rtol=1e-5, atol=1e-5)
    assert again["outputs"].tolist() == out["outputs"].tolist()


@pytest.mark.parametrize("key, name", REFUSED, ids=[k for k, _ in REFUSED])
def test_params_outside_their_ranges_are_refused_by_name(served, key, name):
    response = served[key]
    assert response.error_type == "InvalidArgumentError", (response.error_type, response.outputs)
    assert f"`{name}`" in response.error_message, response.error_message


class NaNTranslator(ToyTranslator):
    """The toy translator whose logits are NaN for every source that holds a '!'."""

    def encode(self, source_ids):
        out = super().encode(source_ids)
        out["poisoned"] = tf.reduce_any(tf.equal(source_ids, self.poison_id), axis=1)
        return out

    def initial_decode_state(self, encoder_outputs, max_length):
        state = super().initial_decode_state(encoder_outputs, max_length)
        state["poisoned"] = encoder_outputs["poisoned"]
        return state

    def decode_step(self, tokens, state, step):
        logits, new_state, weights = super().decode_step(tokens, state, step)
        logits = tf.where(state["poisoned"][:, None], np.float32("nan"), logits)
        return logits, dict(new_state, poisoned=state["poisoned"]), weights


def test_nan_logits_are_an_error_never_an_empty_answer(tmp_path):
    model, tokenizer = make_toy()
    nan_model = NaNTranslator(tokenizer.vocab_size)
    nan_model.poison_id = tokenizer.vocabulary.index("!")
    nan_model.build_all()
    nan_model.set_weights(model.get_weights())
    path = export_text_model(
        nan_model, tokenizer, str(tmp_path / "nan"), beam_size=2, max_length=2, max_input_length=8
    )
    sample = dict(SAMPLE_PARAMS, max_length=2)
    requests = [
        request(name, ["fox", "fox!"], **params)
        for name, params in (
            ("serving_default", {}),
            ("greedy", {}),
            ("beam_search", dict(BEAM_PARAMS, max_length=2)),
            ("sample", sample),
        )
    ]
    requests.append(request("greedy", ["fox"]))
    *poisoned, clean = run_server_way(path, requests).responses
    for response in poisoned:
        assert response.error_type == "InvalidArgumentError", (
            response.signature_name,
            response.outputs,
        )
        assert "NaN" in response.error_message and "step_fn" in response.error_message
    assert clean.ok and clean.outputs["outputs"].shape == (1,)
