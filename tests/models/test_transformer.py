import numpy as np
import pytest

from keras_attn.models import Transformer
from tests.models.helpers import run_model_checklist
from tests.models.test_seq2seq import SV, TV, _data

VARIANTS = {
    "sinusoidal": dict(positions="sinusoidal", target_vocab_size=TV),
    "learned": dict(positions="learned", max_length=16, target_vocab_size=TV),
    "shared-pre-norm": dict(
        share_embeddings=True, norm_first=True, activation_dropout=0.2, target_vocab_size=SV
    ),
}


def _model(**kwargs):
    args = dict(num_layers=2, d_model=8, num_heads=2, intermediate_dim=16, dropout=0.1)
    args.update(kwargs)
    return Transformer(SV, **args)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_transformer_checklist(name):
    model = _model(**VARIANTS[name])
    x, y = _data()
    run_model_checklist(model, x, y)


def test_shared_embeddings_tie_the_output_projection():
    model = _model(share_embeddings=True, target_vocab_size=SV)
    x, _ = _data()
    model(x)
    assert model.source_embedding is model.target_embedding
    # logits = x E^T + b: the table is the only [V, d] weight, and it is used for the output.
    tables = [w for w in model.weights if tuple(w.shape) == (SV, 8)]
    assert len(tables) == 1
    state = model.initial_decode_state(model.encode(x["source"]), 3)
    before, _, _ = model.decode_step(np.array([1, 1, 1], "int32"), state, 0)
    table = tables[0]
    table.assign(np.asarray(table) * 2.0)
    after, _, _ = model.decode_step(np.array([1, 1, 1], "int32"), state, 0)
    assert not np.allclose(np.asarray(before), np.asarray(after))


def test_cross_attention_is_last_layer_mean_over_heads():
    model = _model(target_vocab_size=TV)
    x, _ = _data()
    model(x)
    encoded = model.encode(x["source"])
    state = model.initial_decode_state(encoded, 4)
    _, _, attention = model.decode_step(np.array([1, 1, 1], "int32"), state, 0)
    # The same weights from the full decoder stack, teacher-forced on the start token.
    h = model._embed(model.target_embedding, model.target_positions, np.ones((3, 1), "int32"))
    for layer in model.decoder_layers[:-1]:
        h = layer(h, encoded["memory"], encoder_padding_mask=encoded["source_mask"])
    _, scores = model.decoder_layers[-1](
        h,
        encoded["memory"],
        encoder_padding_mask=encoded["source_mask"],
        return_attention_scores=True,
    )
    np.testing.assert_allclose(
        np.asarray(attention), np.asarray(scores)[:, :, 0, :].mean(1), atol=1e-6
    )


def test_source_padding_is_masked():
    model = _model(target_vocab_size=TV, dropout=0.0)
    x, _ = _data()
    padded = dict(x, source=np.pad(x["source"], ((0, 0), (0, 3))))
    np.testing.assert_allclose(np.asarray(model(padded)), np.asarray(model(x)), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(share_embeddings=True, target_vocab_size=TV),
        dict(positions="rotary", target_vocab_size=TV),
        dict(num_heads=3, target_vocab_size=TV),
        dict(dropout=1.0, target_vocab_size=TV),
        dict(activation_dropout=-0.1, target_vocab_size=TV),
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="Received"):
        _model(**kwargs)


def test_activation_dropout_reaches_every_feed_forward_block_only():
    model = _model(target_vocab_size=TV, dropout=0.1, activation_dropout=0.3)
    model.build()
    for layer in model.encoder_layers + model.decoder_layers:
        assert layer.dropout == 0.1
        assert layer.feed_forward.dropout == 0.3
    config = model.get_config()
    assert config["activation_dropout"] == 0.3
    # A config saved before the argument existed: the paper's placement (none in the FFN).
    del config["activation_dropout"]
    old = Transformer.from_config(config)
    old.build()
    assert old.activation_dropout == 0.0
    assert all(layer.feed_forward.dropout == 0.0 for layer in old.decoder_layers)
