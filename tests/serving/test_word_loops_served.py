"""The word rules' ban on a word's text three times in a row (`keras_attn.decoding.words.
word_loop_ban`) in the served beam and sampling signatures of a SentencePiece export, answered
the way TensorFlow Serving runs them.

The model is a scripted lookup over SentencePiece ids (`▁la`, `▁l`, `a`, `o` of the tokenizer
below): it writes `▁la ▁la`, then prefers a third `▁la`, and once the loop ban on tokens takes
that away, spells it `▁l a`: `la la la`, a word's third copy that no token loop shows. A marker
word in the source makes it write `la la lo` of its own accord: no loop, nothing to ban.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_attn.decoding import beam_search
from keras_attn.decoding.words import (
    sentencepiece_word_starts,
    word_rules_step,
    word_text_tables,
)
from keras_attn.serving import specs
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import SentencePieceTokenizer
from keras_attn.text.placeholders import glue_pieces
from tests.serving.toy_model import TRAINING_TEXT

# Exports answered the way TensorFlow Serving runs them: make test-processes.
pytestmark = pytest.mark.processes

MAX_LENGTH = 10
BEAM = 2
MARKER = "dog"
# looped: no word in it; marked: the marker; written: the source writes the loop itself
SOURCES = ["the fox", f"the {MARKER}", "la la la"]


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class ScriptedTranslator(keras.Model):
    """`logits = tables[marked][min(step, 2), token]`: `marked` says whether the source holds
    the marker piece; the first two steps have rows of their own."""

    def __init__(self, tables, marker, **kwargs):
        super().__init__(**kwargs)
        self.marker = int(marker)
        self.tables = self.add_weight(
            shape=tables.shape, initializer=keras.initializers.Constant(tables), trainable=False
        )

    def encode(self, source_ids):
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        return {"source": source_ids, "source_mask": ops.not_equal(source_ids, 0)}

    def initial_decode_state(self, encoded, max_length):
        marked = ops.any(ops.equal(encoded["source"], self.marker), axis=1)
        return {"marked": ops.cast(marked, "int32"), "mask": encoded["source_mask"]}

    def decode_step(self, tokens, state, step):
        tokens = ops.convert_to_tensor(tokens, "int32")
        row = ops.minimum(ops.cast(step, "int32"), 2)
        table = ops.take(self.tables, row, axis=1)  # [2, V, V]
        flat = ops.reshape(table, (-1, table.shape[-1]))
        logits = ops.take(flat, state["marked"] * table.shape[1] + tokens, axis=0)
        mask = ops.cast(state["mask"], "float32")
        weights = mask / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)
        return logits, state, weights


def piece(vocabulary, text):
    assert text in vocabulary, (text, vocabulary)
    return vocabulary.index(text)


def scripted_tables(tokenizer):
    """`[2 (marked), 3 (step), V, V]` logits: unmarked `▁la ▁la ▁la ...` (then `▁l a`), marked
    `▁la ▁la ▁l o`; every other token far below."""
    vocabulary = list(tokenizer.vocabulary)
    w, p, c, q = (piece(vocabulary, t) for t in ("\u2581la", "\u2581l", "a", "o"))
    v, start, end = tokenizer.vocab_size, tokenizer.start_id, tokenizer.end_id
    tables = np.full([2, 3, v, v], -6.0, np.float32)
    tables[:, 0, start, w] = 5.0
    tables[:, 1, w, w] = 5.0  # the second copy: no other way on
    tables[0, 2, w, w], tables[0, 2, w, p] = 5.0, 0.0  # unmarked: a third copy first
    tables[1, 2, w, p], tables[1, 2, w, w] = 5.0, 0.0  # marked: `▁l` first
    tables[0, :, p, c], tables[0, :, p, q] = 5.0, 0.0  # `▁l a` (la) before `▁l o` (lo)
    tables[1, :, p, q], tables[1, :, p, c] = 5.0, 0.0
    tables[:, :, c, end] = tables[:, :, q, end] = 5.0
    return tables


def reference(model, tokenizer, word_text):
    """The beam over the model's step wrapped with the word rules, in Python: `word_text`
    the vocabulary's `word_text_tables` (the ban on a word's text), or None."""
    source = tokenizer.tokenize_padded(SOURCES)
    encoded = model.encode(source)
    step, state = word_rules_step(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        source,
        sentencepiece_word_starts(tokenizer.vocabulary),
        tokenizer.end_id,
        MAX_LENGTH,
        glue=glue_pieces(tokenizer.vocabulary),
        word_text=word_text,
    )
    result = beam_search(
        step,
        state,
        tf.fill([len(SOURCES)], tokenizer.start_id),
        tokenizer.end_id,
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        length_penalty=0.0,
        source_mask=encoded["source_mask"],
    )
    answers = tokenizer.detokenize(result["sequences"]).numpy()
    return [[a.decode("utf-8") for a in row] for row in answers]


def scripted_translator():
    """`(tokenizer, model)`: a small SentencePiece vocabulary that holds "la", "l", "a" and the
    marker, and the scripted translator that loops on "la" over it."""
    extra = ["la la la", "la lo le", "ball lamp", "lap lot", f"the lazy {MARKER} jumps"]
    tokenizer = SentencePieceTokenizer.train((TRAINING_TEXT + extra * 3) * 5, vocab_size=60)
    (marker,) = tokenizer.tokenize([MARKER]).to_list()[0]
    return tokenizer, ScriptedTranslator(scripted_tables(tokenizer), marker)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tokenizer, model = scripted_translator()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("word_loops") / "scripted"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        length_penalty=0.0,
        word_rules=True,
        xla=("serving_default",),
        xla_batch_sizes=(4,),
        xla_source_lengths=(),
    )
    inputs = np.array([s.encode() for s in SOURCES], object)
    knobs = {
        name: np.asarray(specs.request_param(name).default, specs.request_param(name).dtype)
        for name in specs.SPEC["sample"].params
    }
    knobs.update(top_k=np.int32(1), max_length=np.int32(MAX_LENGTH))  # top 1: the argmax
    requests = {
        "serving_default": {"inputs": inputs},
        "serving_default_xla": {"inputs": inputs},
        "beam_search": {
            "inputs": inputs,
            "beam_size": np.int32(BEAM),
            "max_length": np.int32(MAX_LENGTH),
            "length_penalty": np.float32(0.0),
            "coverage_penalty": np.float32(0.0),
        },
        "sample": dict(knobs, inputs=inputs),
        "greedy": {"inputs": inputs},
    }
    result = run_server_way(path, [ServingRequest(n, r) for n, r in requests.items()])
    answers = {}
    for name, response in zip(requests, result.responses):
        assert response.ok, response.error_message
        answers[name] = np.vectorize(lambda b: b.decode("utf-8"))(response.outputs["outputs"])
    return model, tokenizer, answers


def loops(answer, source):
    """The words `answer` writes three times in a row that `source` does not."""
    words, held = answer.split(), source.split()
    triples = {tuple(ws[i : i + 3]) for ws in (held,) for i in range(len(ws) - 2)}
    return {
        words[i]
        for i in range(len(words) - 2)
        if len(set(words[i : i + 3])) == 1 and tuple(words[i : i + 3]) not in triples
    }


def test_the_served_beam_is_the_search_with_the_word_loop_ban(served):
    model, tokenizer, answers = served
    word_text = word_text_tables(list(tokenizer.vocabulary))
    ref = reference(model, tokenizer, word_text)
    assert answers["beam_search"].tolist() == ref
    best = [row[0] for row in ref]
    for name in ("serving_default", "serving_default_xla", "sample"):
        assert answers[name].tolist() == best, name


def test_a_word_looped_in_another_spelling_is_cut(served):
    model, tokenizer, answers = served
    # the model loops; the loop ban on tokens alone lets its third copy through as `▁l a`
    assert answers["greedy"][0] == " ".join(["la"] * MAX_LENGTH)
    by_tokens = reference(model, tokenizer, None)
    assert by_tokens[0][0] == "la la la"
    assert answers["serving_default"][0] == "la la lo"
    for name in ("serving_default", "serving_default_xla", "sample"):
        for source, answer in zip(SOURCES, answers[name]):
            assert not loops(answer, source), (name, source, answer)


def test_the_ban_changes_nothing_without_a_loop(served):
    """The marked source's answer, and that of a source that writes the loop itself: as the
    word rules without the ban on words answer them (the best; the n-best below it may
    differ, where a loop was among it)."""
    model, tokenizer, answers = served
    by_tokens = reference(model, tokenizer, None)
    for name in ("serving_default", "serving_default_xla", "sample"):
        assert answers[name][1:].tolist() == [row[0] for row in by_tokens[1:]], name
    assert answers["serving_default"][1] == "la la lo"
    assert answers["serving_default"][2].startswith("la la la")  # the source's own loop
