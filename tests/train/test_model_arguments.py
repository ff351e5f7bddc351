"""The translator recipe builds each model family from its settings: the constructor keywords
`build_model` passes, written out here per model name."""

import pytest

from keras_attn.train import translator
from keras_attn.train.config import MODELS, resolve_config

# Settings with values no default has, so a keyword read from the wrong setting shows.
FLAGS = dict(
    embedding_dim=24,
    units=40,
    layers=3,
    heads=5,
    kv_heads=1,
    sliding_window=7,
    gate=True,
    rotary=500.0,
    window=6,
    dropout=0.25,
    coverage_weight=0.5,
    cell="gru",
    seed=11,
    data="train.tsv",  # a text run: copy attention on where the model has it
)


def expected(model, config):
    copy = dict(copy_attention=config.copy, coverage_weight=0.5)
    if model == "convs2s":
        return "convs2s", dict(embedding_dim=24, hidden_dim=40, num_layers=3, dropout=0.25)
    if model == "transformer":
        return "transformer", dict(
            num_layers=3,
            d_model=40,
            num_heads=5,
            intermediate_dim=80,
            dropout=0.25,
            activation_dropout=0.25,
            share_embeddings=True,
            num_key_value_heads=1,
            sliding_window=7,
            use_gate=True,
            rotary_max_wavelength=500.0,
            **copy,
        )
    rnn = dict(embedding_dim=24, units=40, cell="gru", dropout=0.25, seed=11, **copy)
    if model in ("bahdanau", "hard"):
        return "rnn", dict(rnn, attention=model)
    _, score, alignment = model.split("-", 2)
    return "rnn", dict(rnn, attention="luong", score=score, alignment=alignment, window=6)


@pytest.mark.parametrize("model", MODELS)
def test_keywords_of_each_model(model):
    config = resolve_config(dict(FLAGS, model=model))
    assert translator._model_arguments(config) == expected(model, config)


@pytest.mark.parametrize("model", ["transformer", "bahdanau", "luong-general-local-p", "convs2s"])
def test_built_model_has_the_settings(model):
    config = resolve_config(dict(FLAGS, model=model))
    built = translator.build_model(config, 40).get_config()
    _, keywords = expected(model, config)
    assert {k: built[k] for k in keywords} == keywords
