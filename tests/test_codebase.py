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

    return RNNSeq2Seq(
        8,
        8,
        embedding_dim=4,
        units=4,
        cell="gru",
        attention="luong",
        score="dot",
        alignment="local-m",
        window=2,
    )


def _captioner():
    from keras_attn.models import ShowAttendTell

    return ShowAttendTell(8, embedding_dim=4, units=4, attention="hard")


def _luong():
    from keras_attn.layers import LuongAttention

    return LuongAttention("concat", "local-p", window=3, sigma=1.5, scale=True, units=5)


def _hard():
    from keras_attn.layers import HardAttention

    return HardAttention("general", baseline_decay=0.5, seed=3)


@pytest.mark.parametrize("make", [_rnn_seq2seq, _captioner, _luong, _hard])
def test_model_attributes_are_named_as_their_config_keys(make):
    model = make()
    config = model.get_config()
    base = set(keras.Model().get_config()) | {"name", "trainable", "dtype"}
    keys = [key for key in config if key not in base]
    assert {"score", "units"} <= set(keys) or {"attention", "units"} <= set(keys), keys
    for key in keys:
        value = getattr(model, key)
        assert (list(value) if isinstance(value, tuple) else value) == config[key], key


ROOT = PACKAGE.parent
# Where the code and its docs live (docs/HELPERS.md is the working notes of the sessions that
# built the project, not part of its documentation).
CITED_FROM = ["keras_attn", "tests", "examples", "benchmarks", "docs", "export", "README.md"]


def _texts():
    for top in CITED_FROM:
        path = ROOT / top
        files = (
            [path]
            if path.is_file()
            else sorted(p for p in path.rglob("*") if p.suffix in (".py", ".md") and p.is_file())
        )
        for file in files:
            if file.name != "HELPERS.md":
                yield file, file.read_text(encoding="utf-8")


def test_docs_cite_only_pages_of_the_repo():
    pattern = re.compile(r"\bAPI\.md\b|\bDESIGN\.md\b|\.\./shared|/work/shared")
    offenders = [
        f"{file.relative_to(ROOT)}:{number}"
        for file, text in _texts()
        for number, line in enumerate(text.splitlines(), 1)
        if pattern.search(line) and file.name != "test_codebase.py"
    ]
    assert offenders == []


# The wording of keras_attn._checks' messages: any other module raising one of these has its
# own copy of a shared check.
CHECK_WORDING = re.compile(
    r"must be a bool\b|must be True or False|must be a number in \[|must be a positive number"
    r"|must be a finite number\. Received|must be an integer >= \d|must be a positive integer\b"
    r"|must be a number >= 0"
)


def test_argument_checks_are_not_copied():
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in _sources()
        if path.name != "_checks.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CHECK_WORDING.search(line)
    ]
    assert offenders == []
