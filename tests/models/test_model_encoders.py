"""The example models' bidirectional GRU encoders: every position's forward and backward states
side by side, `[B, T, 2 units]`, the forward half the forward GRU's own output."""

import numpy as np
import pytest

from keras_attn.models import AttentionOverAttentionReader, HierarchicalAttentionNetwork


@pytest.mark.parametrize(
    "model, encoders, units",
    [
        (
            HierarchicalAttentionNetwork(20, 3, 8, 4, 6, 8),
            ("word_encoder", "sentence_encoder"),
            (4, 6),
        ),
        (AttentionOverAttentionReader(20, 8, 5), ("document_encoder", "query_encoder"), (5, 5)),
    ],
    ids=["han", "aoa-reader"],
)
def test_encoders_concatenate_both_directions(model, encoders, units):
    x = np.random.default_rng(0).normal(size=(2, 7, 3)).astype("float32")
    for name, u in zip(encoders, units):
        encoder = getattr(model, name)
        assert encoder.name == name
        out = np.asarray(encoder(x))
        assert out.shape == (2, 7, 2 * u)
        forward = np.asarray(encoder.forward_layer(x))
        np.testing.assert_allclose(out[..., :u], forward, atol=1e-6)
        backward = np.asarray(encoder.backward_layer(x))[:, ::-1]
        np.testing.assert_allclose(out[..., u:], backward, atol=1e-6)
