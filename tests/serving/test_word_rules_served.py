"""The `word_rules` setting in the served exports: the beam and sampling signatures wrap the
model's step with `keras_attn.decoding.words.word_rules_step` (greedy stays plain), run the way TensorFlow Serving runs
them (a fresh process, the `serve` MetaGraph in a TF1 session).

The model is a lookup table over SentencePiece ids built from the tokenizer at hand: after the
start it writes the first piece of a source name, then prefers the end to the name's second
piece (a name cut short), and after the name it alternates two pieces (a loop); a marker word
in the source takes away the early end, so the unruled answer loops to `max_length`.
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
from keras_attn.serving.settings import ServingSettings, add_setting_flags
from keras_attn.serving.steps import STEP_SIGNATURES
from keras_attn.serving.streaming import ServeSessionClient, StepClient
from keras_attn.serving.streaming import search as stream_search
from keras_attn.text import SentencePieceTokenizer
from keras_attn.text.placeholders import extract_placeholders, glue_pieces
from tests.serving.toy_model import TRAINING_TEXT

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

MAX_LENGTH = 12
BEAM = 2
NAME, MARKER = "Lotus", "dog"  # "▁Lot u s" and "▁dog" in the vocabulary below


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class TableTranslator(keras.Model):
    """`logits = table[token] + marked * delta[token]`: `marked` says whether the source holds
    the marker piece."""

    def __init__(self, table, delta, marker, **kwargs):
        super().__init__(**kwargs)
        self.marker = int(marker)
        self.table = self.add_weight(
            shape=table.shape, initializer=keras.initializers.Constant(table), trainable=False
        )
        self.delta = self.add_weight(
            shape=delta.shape, initializer=keras.initializers.Constant(delta), trainable=False
        )

    def encode(self, source_ids):
        source_ids = ops.convert_to_tensor(source_ids, "int32")
        return {"source": source_ids, "source_mask": ops.not_equal(source_ids, 0)}

    def initial_decode_state(self, encoded, max_length):
        marked = ops.any(ops.equal(encoded["source"], self.marker), axis=1)
        return {"marked": ops.cast(marked, "float32"), "mask": encoded["source_mask"]}

    def decode_step(self, tokens, state, step):
        tokens = ops.convert_to_tensor(tokens, "int32")
        logits = ops.take(self.table, tokens, axis=0)
        logits = logits + state["marked"][:, None] * ops.take(self.delta, tokens, axis=0)
        mask = ops.cast(state["mask"], "float32")
        weights = mask / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)
        return logits, state, weights


def ids(tokenizer, text):
    return tokenizer.tokenize([text]).to_list()[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    extra = [
        "the lazy dog jumps over the quick brown fox",
        "Lotus and Loti, Lotion",
        "the Lota dog",
    ]
    text = TRAINING_TEXT + extra * 3
    tokenizer = SentencePieceTokenizer.train(text * 5, vocab_size=60)
    starts = sentencepiece_word_starts(tokenizer.vocabulary)
    name = ids(tokenizer, NAME)
    assert len(name) == 3 and starts[name[0]] and not starts[name[1]]
    (marker,) = ids(tokenizer, MARKER)
    inside = [i for i in range(4, tokenizer.vocab_size) if not starts[i] and i not in name]
    a, b = inside[:2]  # two pieces inside a word
    v, end = tokenizer.vocab_size, tokenizer.end_id
    table = np.full([v, v], -6.0, np.float32)
    table[tokenizer.start_id, name[0]] = 5.0
    table[name[0], end], table[name[0], name[1]] = 4.0, 3.0  # the end first: the name cut
    for first, then in zip(name[1:-1], name[2:]):
        table[first, then] = 5.0
    table[name[-1], a] = 5.0
    table[a, b], table[b, a], table[a, end] = 5.0, 5.0, 0.0  # "a b a b ...", the end second
    delta = np.zeros([v, v], np.float32)
    delta[name[0], end] = -8.0  # with the marker: no early end
    model = TableTranslator(table, delta, marker)
    sources = [NAME, f"{NAME} {MARKER}", "the quick fox"]
    requests = [
        ServingRequest(
            "beam_search",
            {
                "inputs": np.array([s.encode() for s in sources], object),
                "beam_size": np.int32(BEAM),
                "max_length": np.int32(MAX_LENGTH),
                "length_penalty": np.float32(0.0),
                "coverage_penalty": np.float32(0.0),
            },
        ),
        ServingRequest("serving_default", {"inputs": np.array([s.encode() for s in sources])}),
    ]
    requests.append(ServingRequest("beam_search_xla", requests[0].inputs))
    answers = {}
    for rules in (True, False):
        path = export_text_model(
            model,
            tokenizer,
            str(tmp_path_factory.mktemp("word_rules") / f"rules-{rules}"),
            beam_size=BEAM,
            max_length=MAX_LENGTH,
            word_rules=rules,
            xla=["beam_search"] if rules else False,
            xla_batch_sizes=(4,),
            xla_source_lengths=(),
        )
        result = run_server_way(path, requests if rules else requests[:2])
        for request, response in zip(("beam", "default", "xla"), result.responses):
            assert response.ok, response.error_message
            answers[rules, request] = response.outputs
    return model, tokenizer, sources, (name, marker, a, b), answers


def test_served_answers_the_search_wrapped_with_word_rules_step(served):
    model, tokenizer, sources, _, answers = served
    source = tokenizer.tokenize_padded(sources)
    encoded = model.encode(source)
    state = model.initial_decode_state(encoded, MAX_LENGTH)
    word_start = sentencepiece_word_starts(tokenizer.vocabulary)
    glue = glue_pieces(tokenizer.vocabulary)  # the pieces that go on with a word
    step, state = word_rules_step(
        model.decode_step,
        state,
        source,
        word_start,
        tokenizer.end_id,
        MAX_LENGTH,
        glue=glue,
        word_text=word_text_tables(list(tokenizer.vocabulary)),  # SentencePiece: words' texts
    )
    ref = beam_search(
        step,
        state,
        tf.fill([len(sources)], tokenizer.start_id),
        tokenizer.end_id,
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        source_mask=encoded["source_mask"],
    )
    out = answers[True, "beam"]
    np.testing.assert_array_equal(out["outputs"], tokenizer.detokenize(ref["sequences"]).numpy())
    np.testing.assert_allclose(out["scores"], ref["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(answers[True, "default"]["outputs"], out["outputs"][:, 0])
    xla = answers[True, "xla"]  # the compiled twin: the rules' tensors padded to its buckets
    np.testing.assert_array_equal(xla["outputs"], out["outputs"])
    np.testing.assert_allclose(xla["scores"], out["scores"], rtol=1e-4, atol=1e-4)


def test_without_the_setting_the_answers_are_the_plain_search(served):
    """word_rules=False is the search as it was: the plain step's answers."""
    model, tokenizer, sources, _, answers = served
    source = tokenizer.tokenize_padded(sources)
    encoded = model.encode(source)
    ref = beam_search(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        tf.fill([len(sources)], tokenizer.start_id),
        tokenizer.end_id,
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        source_mask=encoded["source_mask"],
    )
    out = answers[False, "beam"]
    np.testing.assert_array_equal(out["outputs"], tokenizer.detokenize(ref["sequences"]).numpy())
    np.testing.assert_array_equal(answers[False, "default"]["outputs"], out["outputs"][:, 0])


def spelled(tokenizer, pieces):
    return tokenizer.detokenize(tf.constant([pieces], tf.int32)).numpy()[0]


def test_names_whole_and_no_loops_with_the_setting_only(served):
    _, tokenizer, sources, (name, marker, a, b), answers = served
    cut = spelled(tokenizer, name[:1])
    plain = answers[False, "default"]["outputs"]
    ruled = answers[True, "default"]["outputs"]
    # without the rules: the name cut short, and (marker) a loop to max_length
    assert plain[0] == cut
    loop = spelled(tokenizer, (name + [a, b] * MAX_LENGTH)[:MAX_LENGTH])
    assert plain[1] == loop
    # with them: the name whole, then two copies of "a b" and the end before a third
    whole = spelled(tokenizer, name + [a, b, a, b, a])
    assert ruled[0] == whole
    assert ruled[1] == whole
    # the source without the name: the rules leave the answer that cuts no source word
    assert ruled[2] == plain[2] == cut
    for row in answers[True, "beam"]["outputs"]:
        for answer in row:
            assert spelled(tokenizer, [a, b] * 3) not in answer


def test_the_setting_is_a_flag_and_refused_where_it_cannot_apply():
    import argparse

    parser = argparse.ArgumentParser()
    add_setting_flags(parser)
    assert "--word-rules" in parser.format_help()
    assert parser.parse_args(["--word-rules"]).word_rules is True
    assert ServingSettings().word_rules is False
    with pytest.raises(ValueError, match="word_rules"):
        ServingSettings(word_rules=True, text_input=False)
    with pytest.raises(ValueError, match="word_rules"):
        ServingSettings(word_rules=1)


def test_glue_phrases_are_the_open_ended_placeholders_of_the_source():
    """What the signatures give `glue_ban`: each placeholder of the source spelled with the
    target vocabulary, open-ended (`$name`, `%1`) or not (`%s`), padded to a fixed width."""
    from keras_attn.serving.signatures import ServingSignatures
    from keras_attn.serving.word_rules import GLUE_PHRASE_TOKENS
    from keras_attn.text import CharTokenizer

    sources = ["Set $name and %1 to %s", "no placeholder"]
    tokenizer = CharTokenizer.build(sources)
    spec = tf.TensorSpec([None], tf.string, name="inputs")
    signatures = ServingSignatures(
        None, ServingSettings(word_rules=True), spec, tokenizer, tokenizer
    )
    assert signatures.word_start is None  # characters: the loop ban, no word starts
    glue = [tokenizer.vocabulary[i] for i in np.flatnonzero(signatures.glue)]
    assert "a" in glue and "1" in glue and "$" in glue
    assert " " not in glue and "%" not in glue
    rules = {k: v.numpy() for k, v in signatures.rule_phrases(tf.constant(sources)).items()}
    assert rules["phrase_ids"].shape == (2, 3, GLUE_PHRASE_TOKENS)
    for i, placeholder in enumerate(["$name", "%1", "%s"]):
        row = [int(t) for t in rules["phrase_ids"][0, i] if t >= 0]
        assert row == [tokenizer.vocabulary.index(c) for c in placeholder]
    np.testing.assert_array_equal(rules["open_end"][0], [True, True, False])
    assert not rules["open_end"][1].any() and (rules["phrase_ids"][1] == -1).all()
    # what the source itself glues to a placeholder an answer may glue too: no glue ban there
    glued = ["Size %8U of $a$b, %1 and $c", "%2Q%3", "$d_"]
    want = [[False, False, True, True, True], [False, True], [True]]
    rules = signatures.rule_phrases(tf.constant(glued))
    found = [extract_placeholders(text) for text in glued]
    assert found == [["%8", "$a", "$b", "%1", "$c"], ["%2", "%3"], ["$d_"]], found
    for row, expected in zip(rules["open_end"].numpy(), want):
        np.testing.assert_array_equal(row[: len(expected)], expected)
    # source and target vocabularies that differ: the rules cannot read the source
    other = CharTokenizer.build(["something else entirely"])
    with pytest.raises(ValueError, match="word_rules"):
        ServingSignatures(None, ServingSettings(word_rules=True), spec, tokenizer, other)


def test_served_answer_glues_nothing_to_an_open_ended_placeholder(tmp_path):
    """A character model that writes `$x` and glues `y` to it (`$xy`, another variable): the
    export with word_rules writes the space it likes next; the plain step glues, and so does
    the ruled one where the source glues text to its `$x` itself (`$x$`)."""
    from keras_attn.decoding import greedy_search
    from keras_attn.text import CharTokenizer

    tokenizer = CharTokenizer.build(["Set $x now", "y"])
    index = tokenizer.vocabulary.index
    v, end = tokenizer.vocab_size, tokenizer.end_id
    table = np.full([v, v], -6.0, np.float32)
    table[tokenizer.start_id, index("$")], table[index("$"), index("x")] = 5.0, 5.0
    table[index("x"), index("y")], table[index("x"), index(" ")] = 5.0, 4.0
    table[index("y"), end], table[index(" "), end] = 5.0, 5.0
    model = TableTranslator(table, np.zeros([v, v], np.float32), -1)
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path / "glue"),
        beam_size=BEAM,
        max_length=8,
        word_rules=True,
        extra_signatures=[STEP_SIGNATURES],
    )
    sources = ["Set $x now", "y x", "Set $x$"]  # the last source glues `$` to `$x` itself
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](inputs=tf.constant(sources))["outputs"].numpy()
    greedy = loaded.signatures["greedy"](inputs=tf.constant(sources))["outputs"].numpy()
    # sampling with top_k 1 draws the argmax: ruled as the beam is
    knobs = {
        name: tf.constant(specs.request_param(name).default, specs.request_param(name).dtype)
        for name in specs.SPEC["sample"].params
    }
    knobs.update(top_k=tf.constant(1), max_length=tf.constant(8))
    sampled = loaded.signatures["sample"](inputs=tf.constant(sources), **knobs)["outputs"]
    source = tokenizer.tokenize_padded(sources)
    plain = greedy_search(
        model.decode_step,
        model.initial_decode_state(model.encode(source), 8),
        tf.fill([3], tokenizer.start_id),
        end,
        max_length=8,
    )
    plain = tokenizer.detokenize(plain["sequences"]).numpy()
    assert plain.tolist() == [b"$xy", b"$xy", b"$xy"]
    # only the source with `$x` keeps it whole; where the source glues text to it, the answer
    # may glue too
    assert served.tolist() == [b"$x ", b"$xy", b"$xy"]
    # the greedy search stays the model's own decode, in the graph and in the streaming client;
    # the streaming beam is ruled as the graph's
    assert greedy.tolist() == plain.tolist()
    assert sampled.numpy().tolist() == served.tolist()
    with ServeSessionClient(path) as client:
        steps = StepClient(client)
        streamed = stream_search(steps, sources, "greedy", max_length=8)["outputs"]
        beam = stream_search(steps, sources, "beam", beam_size=BEAM, max_length=8)["outputs"]
    assert [t.encode() for t in streamed] == plain.tolist()
    assert [row[0].encode() for row in beam] == served.tolist()
