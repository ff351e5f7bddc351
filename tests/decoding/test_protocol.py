"""The model protocol (docs/decoding.md): any object with the three methods decodes through
`generate`, which equals calling the search by hand; anything else is a clear error."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import (
    Beam,
    Constraints,
    DecodingConfig,
    DecodingModel,
    beam_search,
    check_model,
    encode_for_search,
    generate,
    greedy_search,
)
from tests.decoding.toy import HashModel

END = 0


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): these tests build no Keras objects."""
    yield


class HashSeq2Seq:
    """Not a Keras model, no base class: the hash toy behind the three protocol methods."""

    def __init__(self):
        self.toy = HashModel(6, 4, 6, seed=31)

    def encode(self, source_ids):
        ids = tf.convert_to_tensor(source_ids)
        return {"h": tf.reduce_sum(ids, axis=1) % 211, "source_mask": ids != 0}

    def initial_decode_state(self, encoder_outputs, max_length):
        return encoder_outputs["h"]

    def decode_step(self, tokens, state, step):
        return self.toy.step_hash(tokens, state, step)


def test_any_object_with_the_three_methods_decodes():
    model = HashSeq2Seq()
    assert isinstance(model, DecodingModel)
    source = np.array([[3, 4, 0, 0], [5, 1, 2, 7]], np.int32)
    got = generate(
        model, source, 1, END, search="beam", beam_size=3, max_length=6, coverage_penalty=0.3
    )
    encoded = model.encode(source)
    want = beam_search(
        model.decode_step,
        encoded["h"],
        [1, 1],
        END,
        beam_size=3,
        max_length=6,
        coverage_penalty=0.3,
        source_mask=encoded["source_mask"],
    )
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-6)


def test_a_model_without_the_protocol_is_a_clear_error():
    class NoStep:
        def encode(self, source_ids):
            return {}

        def initial_decode_state(self, encoder_outputs, max_length):
            return {}

    assert not isinstance(NoStep(), DecodingModel)
    with pytest.raises(ValueError, match="without `decode_step`"):
        check_model(NoStep())
    with pytest.raises(ValueError, match="search"):
        generate(HashSeq2Seq(), np.ones((1, 2), np.int32), 1, END, search="nucleus")


def test_generate_takes_config_constraints_and_a_strategy():
    model = HashSeq2Seq()
    source = np.array([[3, 4, 0, 0], [5, 1, 2, 7]], np.int32)
    encoded = model.encode(source)
    prefix = np.array([[2, -1], [3, 4]], np.int32)
    config = DecodingConfig(max_length=5, beam_size=3, length_penalty=0.6)
    want = beam_search(
        model.decode_step,
        encoded["h"],
        [1, 1],
        END,
        config=config,
        prefix_ids=prefix,
        source_mask=encoded["source_mask"],
    )
    by_search = generate(
        model, source, 1, END, "beam", config=config, constraints=Constraints(prefix_ids=prefix)
    )
    by_strategy = generate(model, source, 1, END, Beam(3), config=config, prefix_ids=prefix)
    assert want["sequences"].shape == (2, 3, 5)  # max_length from the config
    for got in (by_search, by_strategy):
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-6)
    # max_length given positionally wins over the config's
    assert generate(model, source, 1, END, "greedy", 3, config=config)["sequences"].shape == (
        2,
        3,
    )
    with pytest.raises(ValueError, match="`generate` does not read `beam_size`"):
        generate(model, source, 1, END, "greedy", beam_size=2)


def test_generate_in_a_tf_function_with_an_unknown_batch():
    model = HashSeq2Seq()
    source = np.array([[3, 4, 0, 0], [5, 1, 2, 7], [6, 0, 0, 0]], np.int32)

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    )
    def run(ids, max_length):
        return generate(model, ids, 1, END, "greedy", max_length, min_length=2)

    got = run(source, tf.constant(4))
    inputs = encode_for_search(model, source, 1, 4)
    np.testing.assert_array_equal(inputs.start_tokens.numpy(), [1, 1, 1])
    want = greedy_search(
        model.decode_step,
        inputs.state,
        inputs.start_tokens,
        END,
        max_length=4,
        min_length=2,
        source_mask=inputs.source_mask,
    )
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-6)


def test_generate_runs_the_searches_of_the_mode_table(monkeypatch):
    """`generate` names a search by the one table `modes.MODES`: a mode added to the table is a
    search `generate` runs, with the strategy and answer shape the row gives."""
    from keras_attn.decoding import modes

    model = HashSeq2Seq()
    source = np.array([[3, 4, 0, 0], [5, 1, 2, 7]], np.int32)
    config = DecodingConfig(beam_size=2, max_length=4)
    want = generate(model, source, 1, END, "beam", config=config)
    table = dict(modes.MODES)
    table["widest"] = modes.Mode("widest", "beam_search", True, "Beam", "a beam by another name")
    monkeypatch.setattr(modes, "MODES", table)
    got = generate(model, source, 1, END, "widest", config=config)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
    with pytest.raises(ValueError, match=r"`search` must be one of .* or a Strategy"):
        generate(model, source, 1, END, "nucleus")
