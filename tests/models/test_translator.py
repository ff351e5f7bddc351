"""What the translation models share (`models.common.Translator`): the vocabulary sizes checked,
the teacher-forced inputs read, a build from the constructor."""

import re

import numpy as np
import pytest

from keras_attn.models import ConvS2S, RNNSeq2Seq, Transformer

SMALL = {
    RNNSeq2Seq: dict(embedding_dim=4, units=4),
    Transformer: dict(num_layers=1, d_model=8, num_heads=2, intermediate_dim=8),
    ConvS2S: dict(embedding_dim=4, hidden_dim=4, num_layers=1),
}


@pytest.mark.parametrize("cls", list(SMALL))
@pytest.mark.parametrize(
    "sizes, name", [((3, 12), "source_vocab_size"), ((12, 3), "target_vocab_size")]
)
def test_a_vocabulary_under_four_is_refused(cls, sizes, name):
    with pytest.raises(ValueError, match=f"`{name}` must be an integer >= 4. Received: {name}=3"):
        cls(*sizes, **SMALL[cls])


@pytest.mark.parametrize("cls", list(SMALL))
def test_inputs_are_a_dict_with_source_and_target_in_or_a_pair(cls):
    model = cls(12, 12, **SMALL[cls])
    source = np.array([[5, 6, 7, 2], [8, 2, 0, 0]], "int32")
    target_in = np.array([[1, 9, 10], [1, 11, 0]], "int32")
    as_dict = np.asarray(model({"source": source, "target_in": target_in}))
    as_pair = np.asarray(model((source, target_in)))
    assert as_dict.shape == (2, 3, 12)
    np.testing.assert_allclose(as_pair, as_dict, rtol=1e-6)
    with pytest.raises(
        ValueError, match=re.escape("'source' and 'target_in'. Received: keys=['source']")
    ):
        model({"source": source})
    with pytest.raises(ValueError, match=re.escape("(or a pair). Received: ")):
        model(source)
    assert model.get_build_config() == {"input_shape": None}
