"""LiteRT export of the step signatures: the `.tflite` file's signatures, tokenizing on the
device with the `sentencepiece` package, and the client loop over the interpreter answering the
n-best of the SavedModel's step signatures and of the library's search on the live model
(float32; tests/serving/test_streaming.py shows the step loop answers what the in-graph search
signatures answer); the int8 variant loads, is smaller and answers."""

import json
import os

import numpy as np
import pytest

from keras_attn.serving.litert import LiteRTModel, export_litert
from keras_attn.serving.streaming import ServeSessionClient, StepClient, search
from keras_attn.text import SentencePieceTokenizer
from tests.serving.test_steps import bad_states, build_model, export_steps_only
from tests.serving.toy_model import TRAINING_TEXT

MAX_LENGTH = 6
TEXTS = ["hello world", "the lazy fox jumps", "", "zebra \u00e9t\u00e9 42"]
BEAM = dict(beam_size=3, max_length=MAX_LENGTH, length_penalty=0.6, coverage_penalty=0.0)


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer.train(TRAINING_TEXT * 5, vocab_size=60)


@pytest.fixture(scope="module", params=["transformer-copy", "rnn"])
def exported(request, tokenizer, tmp_path_factory):
    model = build_model(request.param, tokenizer.vocab_size, scale=0.6)
    base = tmp_path_factory.mktemp(request.param)
    settings = dict(max_length=MAX_LENGTH, max_input_length=10, source_add_end=True)
    saved = export_steps_only(model, tokenizer, str(base / "saved"), **settings)
    lite = export_litert(model, str(base / "m.tflite"), tokenizer=tokenizer, **settings)
    client = ServeSessionClient(saved)
    yield request.param, model, saved, lite, client
    client.close()


def test_files_beside_the_model(exported, tokenizer):
    _, _, _, lite, _ = exported
    directory = os.path.dirname(lite)
    with open(os.path.join(directory, "m.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["max_length"] == MAX_LENGTH
    assert manifest["end_id"] == tokenizer.end_id and manifest["start_id"] == tokenizer.start_id
    with open(os.path.join(directory, manifest["source_tokenizer"]["file"]), "rb") as f:
        assert f.read() == tokenizer.model_proto


def test_signatures_match_the_savedmodel_steps(exported):
    _, _, _, lite, client = exported
    device = LiteRTModel(lite)
    listed = device.interpreter.get_signature_list()
    assert set(listed) == {"encode", "decode_step"}
    served = client.meta_graph.signature_def["decode_step"]
    assert sorted(listed["decode_step"]["inputs"]) == sorted(served.inputs)
    assert sorted(listed["decode_step"]["outputs"]) == sorted(served.outputs)
    assert listed["encode"]["inputs"] == ["source_ids"]


def test_device_tokenizer_equals_the_graph_tokenizer(exported, tokenizer):
    _, _, _, lite, _ = exported
    device = LiteRTModel(lite)
    graph = tokenizer.tokenize(TEXTS, add_end=True, max_length=10).to_list()
    assert [device.source_ids(t) for t in TEXTS[:2] + TEXTS[3:]] == graph[:2] + graph[3:]
    assert device.source_ids("") == [tokenizer.end_id]
    ids = np.array(graph[0] + [0, 0], np.int32)[None]
    assert device.detokenize(ids) == [t.decode() for t in tokenizer.detokenize(ids).numpy()]


def test_text_constraints_on_the_device_equal_the_savedmodels(exported):
    """The prefix and phrases spelled by the `sentencepiece` package beside the `.tflite` file
    are those of the SavedModel's `tokenize` signature, and the constrained n-best the same."""
    _, _, _, lite, client = exported
    device, saved = LiteRTModel(lite), StepClient(client)
    table = [["the ", "lazy fox", "zebra \u00e9t\u00e9"], ["", "hello", "42"]]
    got, want = device.tokenize(table), saved.tokenize(table)
    np.testing.assert_array_equal(got["ids"], want["ids"])
    np.testing.assert_array_equal(got["spelled"], want["spelled"])
    knobs = dict(BEAM, beam_size=2, prefix="the ", constraints=["fox"])
    got = search(device, TEXTS[:2], "beam", **knobs)
    want = search(saved, TEXTS[:2], "beam", **knobs)
    assert got["outputs"] == want["outputs"]
    np.testing.assert_array_equal(got["constraints_met"], want["constraints_met"])


def live_search(model, tokenizer, mode, **knobs):
    """The library's search on the live model over ids tokenized by the graph tokenizer."""
    from keras_attn.decoding import generate

    ids = tokenizer.tokenize(TEXTS, add_end=True, max_length=10).to_tensor(0).numpy()
    result = generate(model, ids, tokenizer.start_id, tokenizer.end_id, mode, **knobs)
    sequences = np.asarray(result["sequences"])
    t = max(1, int(np.asarray(result["lengths"]).max()))
    texts = [x.decode() for x in tokenizer.detokenize(sequences[..., :t]).numpy().reshape(-1)]
    if mode == "beam":
        k = sequences.shape[1]
        texts = [texts[i * k : (i + 1) * k] for i in range(len(TEXTS))]
    return texts, np.asarray(result["scores"])


def test_nbest_equals_the_savedmodel_and_the_live_search(exported, tokenizer):
    _, model, _, lite, client = exported
    got = search(LiteRTModel(lite), TEXTS, "beam", **BEAM)
    saved = search(StepClient(client), TEXTS, "beam", **BEAM)
    assert got["outputs"] == saved["outputs"]
    np.testing.assert_allclose(got["scores"], saved["scores"], atol=1e-4)
    want, scores = live_search(model, tokenizer, "beam", **BEAM)
    assert got["outputs"] == want
    np.testing.assert_allclose(got["scores"], scores, atol=1e-4)


def test_greedy_equals_the_live_greedy(exported, tokenizer):
    _, model, _, lite, _ = exported
    got = search(LiteRTModel(lite), TEXTS, "greedy", max_length=MAX_LENGTH)
    want, _ = live_search(model, tokenizer, "greedy", max_length=MAX_LENGTH)
    assert got["outputs"] == want


def test_int8_is_smaller_and_answers(tokenizer, tmp_path):
    from keras_attn import models

    # a width at which the weight matrices hold enough values to be quantized
    model = models.Transformer(
        tokenizer.vocab_size, tokenizer.vocab_size, 1, 64, 2, 64, dropout=0.0
    )
    model.build()
    plain = export_litert(model, str(tmp_path / "f.tflite"), tokenizer=tokenizer, max_length=4)
    small = export_litert(
        model, str(tmp_path / "q.tflite"), "dynamic_int8", tokenizer=tokenizer, max_length=4
    )
    assert os.path.getsize(small) < 0.6 * os.path.getsize(plain)
    out = search(LiteRTModel(small), TEXTS[:2], "beam", beam_size=2, max_length=4)
    assert len(out["outputs"]) == 2 and all(len(row) == 2 for row in out["outputs"])
    assert np.all(np.isfinite(out["scores"]))


def test_bad_arguments(exported, tokenizer, tmp_path):
    _, model, _, lite, _ = exported
    with pytest.raises(ValueError, match="`quantize` must be one of"):
        export_litert(model, str(tmp_path / "x.tflite"), "int4", tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"`path` must name a \.tflite file"):
        export_litert(model, str(tmp_path / "x.bin"), tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"`max_length` must be an integer in \[1, 6\]"):
        search(LiteRTModel(lite), TEXTS, "greedy", max_length=7)


def test_bad_states_refused_by_name_on_the_device(exported):
    """The `.tflite` interpreter checks nothing: `LiteRTModel.decode_step` refuses a wrong
    state first, naming the input with the SavedModel's words (dtype too); the good one
    answers."""
    name, _, _, lite, _ = exported
    device = LiteRTModel(lite)
    encoded = device.encode(TEXTS[:3], MAX_LENGTH)
    good, requests = bad_states(encoded, MAX_LENGTH)
    assert device.decode_step(good)["logits"].shape[0] == 3
    cache = sorted(n for n in good if n.startswith("state_") and good[n].dtype == np.float32)[0]
    requests["dtype"] = (
        {**good, cache: good[cache].astype(np.float64)},
        f"`{cache}` must be float32. Received: {cache} of dtype float64",
    )
    # the file's caches have max_length slots, fixed: a longer one is refused by its shape
    for key, leaf in (
        ("values_slots", "state_self_cache_0_1"),
        ("layer_slots", "state_self_cache_1_0"),
    ):
        if key in requests:
            requests[key] = (requests[key][0], f"`{leaf}` must have shape [?, {MAX_LENGTH}, ")
    for key, (request, named) in requests.items():
        with pytest.raises(ValueError) as caught:
            device.decode_step(request)
        assert str(caught.value).startswith(named), (key, str(caught.value))
