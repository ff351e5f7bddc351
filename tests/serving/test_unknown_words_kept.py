"""The `keep_unknown_words` setting: `serving_default` answers hold each source word the model
was never trained on (`known_words`); a source whose answer lacks one is searched again with
it required (docs/serving.md, "Unknown words kept").

The model is a lookup table over SentencePiece ids (`TableTranslator`): it writes "dog" and
ends whatever the source, and writes the name "Lotus" ("▁Lot" "u" "s") only when made to."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding.words import MAX_WORD
from keras_attn.serving import kept_answers, specs
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.serving.known_words import KnownWords, holds_words
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.signatures import ServingSignatures
from keras_attn.text import SentencePieceTokenizer
from tests.serving.test_word_rules_served import NAME, TableTranslator, ids
from tests.serving.toy_model import TRAINING_TEXT

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

MAX_LENGTH = 10
BEAM = 2
EXTRA = ["the lazy dog jumps over the quick brown fox", "Lotus and Loti, Lotion", "the Lota dog"]
KNOWN = ["the dog", "a fox"]
SOURCES = [NAME, "the dog", f"{NAME} dog", f"the {NAME}, {NAME}"]


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer.train((TRAINING_TEXT + EXTRA * 3) * 5, vocab_size=60)


def written_out_words(text, known_texts, limit):
    """The runs of letters, digits and `_` of `text` whose case-folded form no known text
    holds, each once (case-folded), in order, the first `limit`."""
    known = {k for t in known_texts for k in re.findall(r"\w+", t.casefold())}
    out = []
    for run in re.findall(r"\w+", text):
        key = run.casefold()
        if key not in known and key not in [w.casefold() for w in out]:
            out.append(run)
    return out[:limit]


def test_unknown_words_are_the_written_out_rule():
    known_texts = ["The quick brown fox.", "a LAZY dog-house", "Über 42 files", "snake_case"]
    known = KnownWords(known_texts, ["<pad>", "<s>", "</s>", "<unk>"], [False] * 4)
    texts = [
        "the Lotus fox",
        "Lotus, lotus and LOTUS: über 43 files",
        "snake_case snake-case dog_house (Kābul) Kābul",
        "",
        "!!! ...",
        "a b c d e f g h i j k",
    ]
    for limit in (8, 2):
        got = known.unknown_words(tf.constant(texts), limit=limit).numpy()
        assert got.shape[1] <= limit
        seen = 0
        for row, text in enumerate(texts):
            want = written_out_words(text, known_texts, limit)
            row_words = [w.decode() for w in got[row] if w]
            assert row_words == want, text
            assert all(not w for w in got[row, len(want) :])
            seen += len(want)
        assert seen > limit
    assert known.unknown_words(tf.constant([], tf.string)).shape == (0, 0)


def test_holds_words_is_the_written_out_rule():
    rng = np.random.default_rng(0)
    vocab = ["Lotus", "lotus", "Lotion", "dog", "Kābul", "a_b", "x1", "Lot"]
    words = [[rng.choice(vocab + [""]) for _ in range(3)] for _ in range(40)]
    outputs = [
        [" ".join(rng.choice(vocab + ["Lotuses", "dog-house", ","], size=rng.integers(0, 4)))]
        + ["(" + " ".join(rng.choice(vocab, size=2)) + ")"]
        for _ in range(40)
    ]
    got = holds_words(tf.constant(words), tf.constant(outputs)).numpy()
    results = set()
    for row in range(40):
        for k in range(2):
            keys = {m.casefold() for m in re.findall(r"\w+", outputs[row][k])}
            want = all(w.casefold() in keys for w in words[row] if w)
            assert got[row, k] == want, (words[row], outputs[row][k])
            results.add(want)
    assert results == {True, False}
    # a word held only as the beginning of another is not held
    assert not holds_words(tf.constant([["Ainu"]]), tf.constant([["Ainués"]])).numpy()[0, 0]


def name_table(tokenizer):
    """`dog` then the end, whatever the source; `Lotus` only as a poorer start."""
    name = ids(tokenizer, NAME)
    (dog,) = ids(tokenizer, "dog")
    assert len(name) == 3
    v, end = tokenizer.vocab_size, tokenizer.end_id
    table = np.full([v, v], -6.0, np.float32)
    table[tokenizer.start_id, dog], table[tokenizer.start_id, name[0]] = 5.0, 1.0
    table[dog, end], table[dog, name[0]] = 5.0, 0.0
    table[name[0], name[1]], table[name[1], name[2]], table[name[2], end] = 5.0, 5.0, 5.0
    return TableTranslator(table, np.zeros([v, v], np.float32), 0)


def signatures(model, tokenizer, **settings):
    settings = ServingSettings(
        **{"beam_size": BEAM, "max_length": MAX_LENGTH, "word_rules": True, **settings}
    )
    spec = tf.TensorSpec([None], tf.string, name="inputs")
    return ServingSignatures(model, settings, spec, tokenizer, tokenizer)


def serve(signatures, sources, name="serving_default"):
    function = signatures.function(specs.SPEC[name])
    return [a.decode() for a in function(tf.constant(sources))["outputs"].numpy()]


@pytest.fixture(scope="module")
def exported(tokenizer, tmp_path_factory):
    model = name_table(tokenizer)
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("unknown") / "kept"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        word_rules=True,
        known_words=KNOWN,
        keep_unknown_words=True,
        xla=["serving_default"],
        xla_batch_sizes=(4,),
        xla_source_lengths=(),
    )
    inputs = {"inputs": np.array([s.encode() for s in SOURCES], object)}
    requests = [
        ServingRequest("serving_default", inputs),
        ServingRequest("serving_default_xla", inputs),
    ]
    result = run_server_way(path, requests)
    answers = []
    for response in result.responses:
        assert response.ok, response.error_message
        answers.append([a.decode() for a in response.outputs["outputs"]])
    return model, answers


def test_served_answers_hold_the_words_the_model_never_saw(tokenizer, exported):
    model, (default, xla) = exported
    # without the setting, or with the name known, the model's answer lacks the name
    plain = serve(signatures(model, tokenizer, known_words=KNOWN), SOURCES)
    assert plain == ["dog"] * len(SOURCES)
    known = KNOWN + [NAME]
    assert (
        serve(signatures(model, tokenizer, known_words=known, keep_unknown_words=True), SOURCES)
        == plain
    )
    # with it, every answer holds the source's unknown words, whole
    words = [written_out_words(s, KNOWN, 8) for s in SOURCES]
    assert words == [[NAME], [], [NAME], [NAME]]
    for answer, want in zip(default, words):
        keys = {k.casefold() for k in re.findall(r"\w+", answer)}
        assert all(w.casefold() in keys for w in want), answer
    assert default[1] == "dog"  # a source without an unknown word keeps the first answer
    assert NAME in default[0] and NAME in default[2]
    assert xla == default  # the compiled twin answers as the graph does
    # beside `keep_placeholders` (sources without placeholders: the same answers)
    both = signatures(
        model, tokenizer, known_words=KNOWN, keep_unknown_words=True, keep_placeholders=True
    )
    assert serve(both, SOURCES) == default


def test_the_first_answer_stays_where_no_hypothesis_can_hold_the_word(tokenizer):
    model = name_table(tokenizer)
    # "Lotus" takes 3 tokens: in at most 2, no hypothesis holds it
    short = signatures(model, tokenizer, max_length=2, known_words=KNOWN, keep_unknown_words=True)
    assert serve(short, SOURCES) == ["dog"] * len(SOURCES)


def test_the_words_asked_for(tokenizer):
    model = name_table(tokenizer)
    signs = signatures(model, tokenizer, known_words=KNOWN, keep_unknown_words=True)
    long_word = "Lotuslotuslotuslotus"  # more than MAX_WORD pieces
    assert len(ids(tokenizer, long_word)) > MAX_WORD
    sources = [f"{long_word} {NAME}", f"Lotuś {NAME}", "the dog", ""]
    ids_, alts, words = (x.numpy() for x in kept_answers.unknown_words(signs, tf.constant(sources)))
    # too long and unspellable ("ś" is not in the vocabulary): not asked for
    assert [[w.decode() for w in row if w] for row in words] == [[NAME], [NAME], [], []]
    name = ids(tokenizer, NAME)
    for row in (0, 1):
        (c,) = np.flatnonzero(words[row] != b"")
        assert ids_[row, c, : len(name)].tolist() == name
        assert (ids_[row, c, len(name) :] == -1).all()
    assert (ids_[[0, 1]] >= 0).sum() == 2 * len(name) and (ids_[2:] == -1).all()
    # the source as the model reads it: a word past `max_input_length` is not asked for
    cut = signatures(
        model, tokenizer, known_words=KNOWN, keep_unknown_words=True, max_input_length=4
    )
    assert len(ids(tokenizer, "the dog")) == 4
    _, _, words = kept_answers.unknown_words(cut, tf.constant([f"the dog {NAME}"]))
    assert not words.numpy().any()


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="known_words"):
        ServingSettings(word_rules=True, keep_unknown_words=True)
    with pytest.raises(ValueError, match="keep_unknown_words"):
        ServingSettings(word_rules=True, known_words=["a"], keep_unknown_words=1)
