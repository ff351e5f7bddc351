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
# Where the code and its docs live.
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


# What the product's pages, scripts and code may not say: how, where and in which rounds it was
# built. They describe the product as it is; its history is the CHANGELOG's and git's.
PRODUCT_TEXTS = [
    "README.md",
    "docs",
    "benchmarks/README.md",
    "benchmarks/RESULTS.md",
    "Makefile",
    "examples",
    "keras_attn",
]
HISTORY = re.compile(
    r"\b(?:this|that|our|one|other|another|each|every|earlier|previous|same|a|helper)"
    r"\s+sessions?\b(?!\s*(?:\.run|object|config))"
    r"|\bsessions'"
    r"|\bhelper (?:sessions?|engineers?|agents?)\b"
    r"|\bthis (?:\d+-core |development |dev |shared |build )?machine\b"
    r"|\b\d+-core machine\b"
    r"|\b(?:the )?(?:first|second|third|last|previous|next) round\b"
    r"|\b(?:other|another) (?:sessions|helpers)\b",
    flags=re.I,
)
# "issue 7", "issue #7", "issues 7, 18": a tracker a user cannot see, unless a public repository
# is named just before it ("keras-team/keras issue 20329", "keras #20585").
ISSUE = re.compile(r"\bissues?\s*#?\d+|(?<![^\s(])#\d+\b", flags=re.I)
PUBLIC_REPO = re.compile(
    r"(?:\b[\w.-]+/[\w.-]+|\b(?:keras|tensorflow|jax|keras-hub))\s*(?:issues?\s*)?$"
)


def _product_files():
    for top in PRODUCT_TEXTS:
        path = ROOT / top
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from sorted(
                p for p in path.rglob("*") if p.suffix in (".py", ".md", ".txt") and p.is_file()
            )


def history_words(line):
    """The words of `line` that speak of the project's history or its machine ("" if none)."""
    found = [m.group(0) for m in HISTORY.finditer(line)]
    for match in ISSUE.finditer(line):
        before = line[max(0, match.start() - 40) : match.start()]
        if not PUBLIC_REPO.search(before):
            found.append(match.group(0))
    return ", ".join(found)


def test_history_words_are_caught():
    for line in [
        "measured on this 2-core machine",
        "shared with other sessions' jobs",
        "one session's CPU time did not stretch",
        "The first round trained on the extra's catalogues",
        "Speed figures of issue 7",
        "## Quality to reach (issue #5)",
        "(issues 7, 18)",
        "see #12 for the plan",
        "the helper session that wrote it",
    ]:
        assert history_words(line), line
    for line in [
        "a fresh graph and session",
        "loads the `serve` MetaGraph into a TF1 session",
        "keras-team/keras issue 20329",
        "(tensorflow/tensorflow issue 72388)",
        "keras #20585 made it public",
        "mask helpers shared by the layers",
        "interleaved round by round",
        "`x[#]` is not an issue",
        "flags `-+#0`",
    ]:
        assert not history_words(line), line


def test_the_product_speaks_of_the_product():
    offenders = [
        f"{file.relative_to(ROOT)}:{number}: {words}"
        for file in _product_files()
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
        for words in [history_words(line)]
        if words
    ]
    assert offenders == []
