"""Export with a SentencePiece source tokenizer (TF Text ops in the graph) and a separate
character target vocabulary, run the server's way."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from keras_attn.decoding import greedy_search
from keras_attn.serving import ops_check
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import SentencePieceTokenizer
from tests.serving.toy_model import TRAINING_TEXT, make_toy

MAX_LENGTH = 5
MAX_INPUT = 8
TEXTS = [b"hello world the lazy dog", b"\xff\xfe", b""]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    source = SentencePieceTokenizer.train(TRAINING_TEXT * 5, vocab_size=60)
    model, source, target = make_toy(source_tokenizer=source)
    path = export_text_model(
        model,
        source,
        str(tmp_path_factory.mktemp("sp") / "sp"),
        target_tokenizer=target,
        max_length=MAX_LENGTH,
        max_input_length=MAX_INPUT,
        source_add_end=True,
        coverage_penalty=0.3,
    )
    result = run_server_way(
        path, [ServingRequest("greedy", {"inputs": np.array(TEXTS, object)})], replay_warmup=True
    )
    return model, source, target, path, result


def test_assets_hold_both_tokenizers(setup):
    _, source, target, path, _ = setup
    with open(os.path.join(path, "assets", "source.model"), "rb") as f:
        assert f.read() == source.model_proto
    with open(os.path.join(path, "assets", "target_vocab.txt"), encoding="utf-8") as f:
        assert f.read().split("\n")[:-1] == target.vocabulary


def test_sentencepiece_ops_are_the_servable_ones(setup):
    path = setup[3]
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    meta_graph = saved.meta_graphs[0]
    assert ops_check.disallowed_ops(meta_graph) == []
    assert {"SentencepieceOp", "SentencepieceTokenizeOp"} <= ops_check.graph_ops(meta_graph)


def test_served_greedy_equals_in_process(setup):
    model, source, target, _, result = setup
    (response,) = result.responses
    assert response.ok, response.error_message
    ids = source.tokenize(tf.constant(TEXTS), add_end=True, max_length=MAX_INPUT).to_tensor(0)
    assert ids.shape[1] == MAX_INPUT  # the long input was cut, end id kept
    assert ids[0, -1] == source.end_id
    encoded = model.encode(ids)
    reference = greedy_search(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        tf.fill([len(TEXTS)], target.start_id),
        target.end_id,
        max_length=MAX_LENGTH,
        coverage_penalty=0.3,
        source_mask=encoded["source_mask"],
    )
    assert (
        response.outputs["outputs"].tolist()
        == target.detokenize(reference["sequences"]).numpy().tolist()
    )
    np.testing.assert_allclose(
        response.outputs["scores"], reference["scores"].numpy(), rtol=1e-5, atol=1e-5
    )
    t = int(reference["lengths"].numpy().max())
    np.testing.assert_allclose(
        response.outputs["alignments"], reference["alignments"].numpy()[:, :t], atol=1e-6
    )


def test_warmup_replayed(setup):
    result = setup[4]
    # One warm-up request per signature.
    assert len(result.warmup) == len(result.signatures) and all(r.ok for r in result.warmup), [
        r.error_message for r in result.warmup
    ]
