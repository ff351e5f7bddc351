"""Rules about the code base itself: private imports in one place, docstrings where help() looks,
attributes named as their config keys."""

import pathlib
import pydoc
import re

import keras
import pytest

import keras_attn

PACKAGE = pathlib.Path(keras_attn.__file__).parent


def _sources():
    return sorted(PACKAGE.rglob("*.py"))


def test_private_keras_imports_only_in_the_compat_module():
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in _sources()
        if path.name != "_keras_compat.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bkeras\.src\b|from keras import src\b", line)
    ]
    assert offenders == []


def test_hard_attention_model_docstring_is_found_by_help():
    from keras_attn.models import HardAttentionModel

    assert HardAttentionModel.__doc__.startswith("A `keras.Model` that trains")
    assert "reinforce_weight" in pydoc.render_doc(HardAttentionModel)


def _rnn_seq2seq():
    from keras_attn.models import RNNSeq2Seq

    return RNNSeq2Seq(8, 8, embedding_dim=4, units=4, cell="gru", attention="luong",
                      score="dot", alignment="local-m", window=2)


def _captioner():
    from keras_attn.models import ShowAttendTell

    return ShowAttendTell(8, embedding_dim=4, units=4, attention="hard")


@pytest.mark.parametrize("make", [_rnn_seq2seq, _captioner])
def test_model_attributes_are_named_as_their_config_keys(make):
    model = make()
    config = model.get_config()
    base = set(keras.Model().get_config()) | {"name", "trainable", "dtype"}
    keys = [key for key in config if key not in base]
    assert {"attention", "units"} <= set(keys)
    for key in keys:
        value = getattr(model, key)
        assert (list(value) if isinstance(value, tuple) else value) == config[key], key
