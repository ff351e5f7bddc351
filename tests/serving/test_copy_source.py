"""The `copy_source` setting: `serving_default` answers the source text itself where the model
gives it, tokenized as a target, at least the log-probability per token (end token included)
of the search's own answer, and the search's answer elsewhere; a source longer than
`max_length - 1` tokens is never the answer. Checked against the rule written out over the
model's table, in this process (with and without `keep_placeholders`, and the compiled twin)
and the way TensorFlow Serving runs an export.

The model is a bigram table over SentencePiece ids (`TableTranslator`, the same answer for
every source) that makes a few natural texts likely as they are, not with their words
shuffled."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.serving import specs
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.signatures import ServingSignatures
from keras_attn.text import SentencePieceTokenizer
from tests.serving.test_word_rules_served import TableTranslator, ids
from tests.serving.toy_model import TRAINING_TEXT

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

MAX_LENGTH = 16
BEAM = 3
NATURAL = ["the lazy dog", "hello world", "the quick brown fox"]
SOURCES = NATURAL + ["dog lazy the", "world hello", "fox brown the quick", ""]


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer.train((TRAINING_TEXT + NATURAL * 3) * 5, vocab_size=60)


@pytest.fixture(scope="module")
def table(tokenizer):
    """Uniform, but the natural texts' transitions, and a short answer of its own ("0") that
    the search prefers (the highest sum) with a lower log-probability per token than theirs."""
    v = tokenizer.vocab_size
    table = np.zeros([v, v], np.float32)
    for text in NATURAL:
        row = [tokenizer.start_id] + ids(tokenizer, text) + [tokenizer.end_id]
        for a, b in zip(row, row[1:]):
            table[a, b] = 6.0
    zero = tokenizer.vocabulary.index("0")
    table[tokenizer.start_id, zero], table[zero, tokenizer.end_id] = 6.5, 4.0
    return table


def log_prob(tokenizer, table, text):
    """`(sum, tokens)`: the table's log-probability of `text` as a target, end token included."""
    x = table.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    logs = x - np.log(np.exp(x).sum(-1, keepdims=True))
    row = [tokenizer.start_id] + ids(tokenizer, text) + [tokenizer.end_id]
    return sum(logs[a, b] for a, b in zip(row, row[1:])), len(row) - 1


def written_out(tokenizer, table, sources, plain):
    """The rule of the module docstring over the answers `plain` of `copy_source=False`:
    `(answers, which)` with `which[i]` one of "copied", "too long", "less likely"."""
    answers, which = [], []
    for source, answer in zip(sources, plain):
        copy_sum, copy_n = log_prob(tokenizer, table, source)
        answer_sum, answer_n = log_prob(tokenizer, table, answer)
        assert answer_n <= MAX_LENGTH  # the search's answer ended
        margin = copy_sum / copy_n - answer_sum / answer_n
        assert abs(margin) > 1e-3 or source == answer  # no case decided by rounding
        if margin >= 0 and copy_n <= MAX_LENGTH:
            answers.append(source), which.append("copied")
        else:
            answers.append(answer), which.append("less likely" if margin < 0 else "too long")
    return answers, which


def functions(tokenizer, table, **settings):
    model = TableTranslator(table, np.zeros_like(table), 0)
    settings = ServingSettings(beam_size=BEAM, max_length=MAX_LENGTH, **settings)
    signatures = ServingSignatures(
        model, settings, tf.TensorSpec([None], tf.string, name="inputs"), tokenizer, tokenizer
    )
    spec = specs.SPEC["serving_default"]
    return signatures.function(spec), signatures.function(spec, xla=True)


def answers(function, sources):
    out = function(tf.constant(sources))
    return [a.decode() for a in out["outputs"].numpy()], out["scores"].numpy()


@pytest.mark.parametrize("keep_placeholders", [False, True])
def test_the_source_is_served_where_the_model_finds_it_as_likely(
    tokenizer, table, keep_placeholders
):
    plain, _ = functions(tokenizer, table, keep_placeholders=keep_placeholders)
    graph, xla = functions(tokenizer, table, keep_placeholders=keep_placeholders, copy_source=True)
    plain_answers, plain_scores = answers(plain, SOURCES)
    want, which = written_out(tokenizer, table, SOURCES, plain_answers)
    assert {"copied", "too long", "less likely"} <= set(which)  # every case is met
    got, scores = answers(graph, SOURCES)
    assert got == want
    for i, case in enumerate(which):
        if case == "copied":  # the source's score: the search's formula (here its log-prob)
            np.testing.assert_allclose(
                scores[i], log_prob(tokenizer, table, SOURCES[i])[0], atol=1e-4
            )
        else:
            assert scores[i] == plain_scores[i]
    got_xla, scores_xla = answers(xla, SOURCES)
    assert got_xla == got
    np.testing.assert_allclose(scores_xla, scores, atol=1e-4)


def test_an_export_serves_the_source_the_way_tensorflow_serving_runs_it(tokenizer, table, tmp_path):
    plain, _ = functions(tokenizer, table)
    want, _ = written_out(tokenizer, table, SOURCES, answers(plain, SOURCES)[0])
    path = export_text_model(
        TableTranslator(table, np.zeros_like(table), 0),
        tokenizer,
        str(tmp_path / "copy"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        copy_source=True,
        xla=["serving_default"],
        xla_batch_sizes=(16,),
        xla_source_lengths=(),
    )
    inputs = np.array([s.encode() for s in SOURCES], object)
    result = run_server_way(
        path,
        [
            ServingRequest("serving_default", {"inputs": inputs}),
            ServingRequest("serving_default_xla", {"inputs": inputs}),
        ],
    )
    for response in result.responses:
        assert response.ok, response.error_message
        assert [a.decode() for a in response.outputs["outputs"]] == want


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="copy_source"):
        ServingSettings(copy_source="yes")
    with pytest.raises(ValueError, match="copy_source"):
        ServingSettings(copy_source=True, text_input=False)
    assert ServingSettings().copy_source is False
