"""The model protocol (docs/decoding.md): any object with the three methods decodes through
`generate`, which equals calling the search by hand; anything else is a clear error."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import DecodingModel, beam_search, check_model, generate
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
