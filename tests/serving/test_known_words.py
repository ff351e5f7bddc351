"""The `known_words` setting: a source word the model was never trained on is copied whole
once the served answer begins it (`keras_attn.serving.known_words`, the word rules' `fixed`
words), in the graph signatures, their XLA twin and the streaming client, run the way
TensorFlow Serving runs them; with the name among the known words, the same signatures (in
this process) leave it to the model.

The model is a lookup table over SentencePiece ids (`TableTranslator`): after the start it
writes the first two pieces of the source's name "Lotus" ("▁Lot" "u"), then prefers a letter
piece of its own to the name's last one, and ends."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding.words import sentencepiece_word_starts
from keras_attn.serving import specs
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.serving.known_words import KnownWords
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.signatures import ServingSignatures
from keras_attn.serving.steps import STEP_SIGNATURES
from keras_attn.serving.streaming import ServeSessionClient, StepClient
from keras_attn.serving.streaming import search as stream_search
from keras_attn.text import SentencePieceTokenizer
from keras_attn.text.placeholders import glue_pieces
from tests.serving.test_word_rules_served import NAME, TableTranslator, ids
from tests.serving.toy_model import TRAINING_TEXT

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

MAX_LENGTH = 10
BEAM = 2
EXTRA = ["the lazy dog jumps over the quick brown fox", "Lotus and Loti, Lotion", "the Lota dog"]


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer.train((TRAINING_TEXT + EXTRA * 3) * 5, vocab_size=60)


def written_out_unknown(tokenizer, source, known_texts):
    """Per piece of `source`: whether its word (pieces from a `▁` to the next, the unknown
    piece left out: it cannot be copied) holds a run of letters and digits, case-folded, that
    no text of `known_texts` holds."""
    known = {k for t in known_texts for k in re.findall(r"\w+", t.casefold())}
    unk = tokenizer.unk_id
    pieces = [tokenizer.vocabulary[i] if i != unk else "" for i in ids(tokenizer, source)]
    words, out = [], []
    for piece in pieces:
        if piece.startswith("\u2581") or not words:
            words.append([])
        words[-1].append(piece)
    for word in words:
        keys = re.findall(r"\w+", "".join(word).replace("\u2581", " ").casefold())
        out += [any(k not in known for k in keys) and piece != "" for piece in word]
    return out


def test_unknown_pieces_are_the_written_out_rule(tokenizer):
    known_texts = ["The quick brown fox.", "a LAZY dog-house", "Über 42 files"]
    word_start = sentencepiece_word_starts(tokenizer.vocabulary)
    known = KnownWords(known_texts, tokenizer.vocabulary, word_start)
    # the, quick, brown, fox, a, lazy, dog, house, über, 42, files
    assert len(known) == 11
    sources = [  # the tokenizer knows no capitals but "L", nor "ü" or "-": unknown pieces
        "the Lotus fox",
        "the quick dog, house. Lotion",
        "THE über 42 cats!",
        "fox, dog42; dog-house",
        "",
    ]
    got = known.unknown_pieces(tokenizer.tokenize_padded(sources)).numpy()
    seen = set()
    for row, source in enumerate(sources):
        want = written_out_unknown(tokenizer, source, known_texts)
        n = len(want)
        assert got[row, :n].tolist() == want, source
        assert not got[row, n:].any()  # the padding is no word
        seen.update(want)
    assert seen == {True, False}


def name_table(tokenizer):
    """The table model: "▁Lot" "u", then a letter piece `x` of its own before the name's "s"."""
    name = ids(tokenizer, NAME)
    starts = sentencepiece_word_starts(tokenizer.vocabulary)
    glue = glue_pieces(tokenizer.vocabulary)
    assert len(name) == 3 and starts[name[0]] and not starts[name[1]]
    x = next(i for i in range(4, tokenizer.vocab_size) if glue[i] and i not in name)
    v, end = tokenizer.vocab_size, tokenizer.end_id
    table = np.full([v, v], -6.0, np.float32)
    table[tokenizer.start_id, name[0]] = 5.0
    table[name[0], name[1]] = 5.0
    table[name[1], x], table[name[1], name[2]] = 4.0, 3.0  # its own letter first
    table[x, end], table[name[2], end] = 5.0, 5.0
    table[name[2], x] = 5.5  # and, whole, a letter glued to it before the end
    return TableTranslator(table, np.zeros([v, v], np.float32), 0), name, x


@pytest.fixture(scope="module")
def served(tokenizer, tmp_path_factory):
    model, name, x = name_table(tokenizer)
    sources = [NAME, f"the {NAME} fox"]
    inputs = np.array([s.encode() for s in sources], object)
    beam = {
        "inputs": inputs,
        "beam_size": np.int32(BEAM),
        "max_length": np.int32(MAX_LENGTH),
        "length_penalty": np.float32(0.0),
        "coverage_penalty": np.float32(0.0),
    }
    requests = [
        ServingRequest("serving_default", {"inputs": inputs}),
        ServingRequest("beam_search", beam),
        ServingRequest("beam_search_xla", beam),
    ]
    answers = {}
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("known") / "unknown"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        word_rules=True,
        known_words=["the quick fox"],
        xla=["beam_search"],
        xla_batch_sizes=(4,),
        xla_source_lengths=(),
        extra_signatures=(STEP_SIGNATURES,),
    )
    result = run_server_way(path, requests)
    for request, response in zip(("default", "beam", "xla"), result.responses):
        assert response.ok, response.error_message
        answers["unknown", request] = response.outputs
    # the name known: the same signatures, in this process
    settings = ServingSettings(
        beam_size=BEAM, max_length=MAX_LENGTH, word_rules=True, known_words=["the lotus fox"]
    )
    signatures = ServingSignatures(
        model, settings, tf.TensorSpec([None], tf.string, name="inputs"), tokenizer, tokenizer
    )
    serve = signatures.function(specs.SPEC["serving_default"])
    answers["known", "default"] = {"outputs": serve(tf.constant(sources))["outputs"].numpy()}
    return tokenizer, sources, name, x, answers, path


def spelled(tokenizer, pieces):
    return tokenizer.detokenize(tf.constant([pieces], tf.int32)).numpy()[0]


def test_a_name_the_model_never_saw_is_served_whole(served):
    tokenizer, sources, name, x, answers, _ = served
    whole = spelled(tokenizer, name)
    rewritten = spelled(tokenizer, name[:2] + [x])
    assert answers["unknown", "default"]["outputs"].tolist() == [whole, whole]
    assert answers["known", "default"]["outputs"].tolist() == [rewritten, rewritten]
    # the compiled twin answers as the graph does
    np.testing.assert_array_equal(
        answers["unknown", "xla"]["outputs"], answers["unknown", "beam"]["outputs"]
    )
    # no hypothesis of the beam holds the name begun and rewritten, or glued to
    for row in answers["unknown", "beam"]["outputs"]:
        for answer in row:
            assert rewritten not in answer and spelled(tokenizer, name + [x]) not in answer


def test_the_streaming_client_copies_the_name_as_the_graph_does(served):
    tokenizer, sources, name, _, answers, path = served
    with ServeSessionClient(path) as client:
        steps = StepClient(client)
        encoded = steps.encode(sources, MAX_LENGTH)
        fixed = np.asarray(encoded["word_rules_fixed"])
        beam = stream_search(steps, sources, "beam", beam_size=BEAM, max_length=MAX_LENGTH)
    at = len(ids(tokenizer, "the"))  # the name's pieces in "the Lotus fox"
    assert fixed[0].tolist() == [True] * 3 + [False] * (fixed.shape[1] - 3)
    assert fixed[1].tolist() == [i in range(at, at + 3) for i in range(fixed.shape[1])]
    assert [row[0].encode() for row in beam["outputs"]] == [spelled(tokenizer, name)] * 2


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="word_rules"):
        ServingSettings(known_words=["a text"])
    with pytest.raises(ValueError, match="known_words"):
        ServingSettings(word_rules=True, known_words="one string")
    with pytest.raises(ValueError, match="known_words"):
        ServingSettings(word_rules=True, known_words=["a", 3])
    settings = ServingSettings(word_rules=True, known_words=["a"] * 1000)
    assert re.search(r"\bknown_words=", repr(settings)) is None
