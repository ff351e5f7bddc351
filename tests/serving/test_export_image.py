"""Export of a captioner (`images` float32 input), run the server's way."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from keras_attn.decoding import beam_search
from keras_attn.serving import ops_check
from keras_attn.serving.export import export_image_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from tests.serving.toy_model import make_toy_captioner

SHAPE = (4, 4, 3)
MAX_LENGTH = 5
IMAGES = np.random.default_rng(0).uniform(size=(2,) + SHAPE).astype(np.float32)


def params(beam_size):
    return {
        "beam_size": np.int32(beam_size),
        "max_length": np.int32(MAX_LENGTH),
        "length_penalty": np.float32(0.5),
        "coverage_penalty": np.float32(0.1),
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model, tokenizer = make_toy_captioner(image_shape=SHAPE)
    path = export_image_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("cap") / "captioner"),
        image_shape=SHAPE,
        beam_size=2,
        max_length=MAX_LENGTH,
        length_penalty=0.5,
        coverage_penalty=0.1,
    )
    requests = [
        ServingRequest("beam_search", {"images": IMAGES, **params(2)}),
        ServingRequest("serving_default", {"images": IMAGES}),
        ServingRequest("greedy", {"images": IMAGES}),
        ServingRequest("greedy", {"images": np.zeros((0,) + SHAPE, np.float32)}),
        ServingRequest("beam_search", {"images": IMAGES, **params(0)}),
    ]
    return model, tokenizer, path, run_server_way(path, requests, replay_warmup=True)


def test_signatures_take_images(setup):
    result = setup[3]
    for name in ("serving_default", "beam_search", "greedy"):
        assert result.signatures[name]["inputs"]["images"][1:] == ("float32", (None,) + SHAPE)
    assert set(result.signatures["beam_search"]["outputs"]) == {
        "outputs",
        "scores",
        "log_probs",
        "lengths",
        "alignments",
        "token_log_probs",
    }
    path = setup[2]
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    assert ops_check.disallowed_ops(saved.meta_graphs[0]) == []


def test_served_beam_search_equals_in_process(setup):
    model, tokenizer, _, result = setup
    beam, default, greedy, empty, bad = result.responses
    assert beam.ok, beam.error_message
    encoded = model.encode(IMAGES)
    reference = beam_search(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        tf.fill([2], tokenizer.start_id),
        tokenizer.end_id,
        beam_size=2,
        max_length=MAX_LENGTH,
        length_penalty=0.5,
        coverage_penalty=0.1,
        source_mask=encoded["source_mask"],
    )
    assert (
        beam.outputs["outputs"].tolist()
        == tokenizer.detokenize(reference["sequences"]).numpy().tolist()
    )
    np.testing.assert_allclose(
        beam.outputs["scores"], reference["scores"].numpy(), rtol=1e-5, atol=1e-5
    )
    assert beam.outputs["alignments"].shape[-1] == SHAPE[0] * SHAPE[1]
    assert (
        default.ok and default.outputs["outputs"].tolist() == beam.outputs["outputs"][:, 0].tolist()
    )
    assert greedy.ok and greedy.outputs["alignments"].shape[0] == 2
    assert empty.ok and empty.outputs["outputs"].shape == (0,)
    assert bad.error_type == "InvalidArgumentError" and "beam_size" in bad.error_message


def test_warmup_replayed(setup):
    result = setup[3]
    assert len(result.warmup) == 6 and all(r.ok for r in result.warmup), [
        r.error_message for r in result.warmup
    ]
    assert result.warmup_requests[0].inputs["images"].shape == (1,) + SHAPE


@pytest.mark.parametrize("shape", [(4, 4), (4, 0, 3), "4x4x3"])
def test_bad_image_shape(tmp_path, shape):
    model, tokenizer = make_toy_captioner(image_shape=SHAPE)
    with pytest.raises(ValueError, match="image_shape"):
        export_image_model(model, tokenizer, str(tmp_path), image_shape=shape)
