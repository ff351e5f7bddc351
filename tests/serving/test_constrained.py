"""The constrained signature (`beam_search_constrained`, its XLA twin) and `keep_placeholders`,
through exported toy translators answered the way TensorFlow Serving runs them (a fresh process,
the `serve` MetaGraph in a TF1 session) and through the TF2 SavedModel loader.

The guarantees hold whatever the model, so the models are the toy's fixed random weights:
every returned best hypothesis starts with the prefix, holds every phrase that fits and (with
`keep_placeholders`) every placeholder of its source as often as in the source.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import CharTokenizer, SentencePieceTokenizer
from keras_attn.text.placeholders import extract_placeholders
from tests.serving.toy_model import TRAINING_TEXT, ToyCopier, ToyTranslator

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

# Real format strings of software messages (printf, Python %-format, positional, brace,
# mustache, markup), one placeholder kind or more per row, some repeated.
FORMAT_STRINGS = [
    "Delete %s?",
    "%(count)d files in %(folder)s",
    "Copied %1$d of %2$d items",
    "100%% done",
    "Hello {name}, you have {0} new messages",
    "Value: {}",
    "Press <b>Ctrl</b> to continue",
    'See <a href="http://example.com">the manual</a>',
    "%s of %s",
    "{{ user }} logged in",
    "Could not open %s: %s",
    "<i>{0}</i> and <i>{1}</i>",
]
MAX_LENGTH = 48
BEAM = 2


def strings(items):
    return np.array([t.encode() if isinstance(t, str) else t for t in items], dtype=object)


def beam_params(beam_size=BEAM, max_length=MAX_LENGTH):
    return {
        "beam_size": np.int32(beam_size),
        "max_length": np.int32(max_length),
        "length_penalty": np.float32(0.0),
        "coverage_penalty": np.float32(0.0),
    }


def constrained(texts, prefix, constraints, **params):
    table = np.array([[c.encode() for c in row] for row in constraints], dtype=object).reshape(
        len(texts), -1
    )
    return ServingRequest(
        "beam_search_constrained",
        {"inputs": strings(texts), "prefix": strings(prefix), "constraints": table}
        | beam_params(**params),
    )


TEXTS = ["hello world", "the quick brown fox", "jumps"]
PREFIXES = ["the ", "", "a"]
PHRASES = [["lazy dog", "fox"], ["over", ""], ["", ""]]
REQUESTS = {
    "constrained": constrained(TEXTS, PREFIXES, PHRASES),
    # C = 0: no phrase at all, the plain beam's answer
    "no_columns": constrained(TEXTS, ["", "", ""], [[], [], []]),
    "plain": ServingRequest("beam_search", {"inputs": strings(TEXTS)} | beam_params()),
    # a phrase longer than max_length: answered, constraints_met False
    "too_long": constrained(["fox"], [""], [["the quick brown fox"]], max_length=6),
    # more phrases than fit together: answered, constraints_met False
    "too_many": constrained(["fox"], [""], [["lazy", "brown", "quick"]], max_length=8),
    "prefix_rank": ServingRequest(
        "beam_search_constrained",
        {
            "inputs": strings(["fox"]),
            "prefix": np.array([[b"a"]], object),
            "constraints": np.array([[b""]], object),
        }
        | beam_params(),
    ),
    "prefix_rows": constrained(["fox", "dog"], ["a"], [[""], [""]]),
    # keep_placeholders: the source's placeholders besides the request's phrases
    "constrained_placeholder": constrained(
        ["Delete %s from the folder?"], ["the "], [["lazy dog", "fox"]], max_length=40
    ),
    "placeholders_default": ServingRequest("serving_default", {"inputs": strings(FORMAT_STRINGS)}),
    "placeholders_beam": ServingRequest(
        "beam_search", {"inputs": strings(FORMAT_STRINGS)} | beam_params()
    ),
}
REQUESTS["constrained_xla"] = ServingRequest(
    "beam_search_constrained_xla", REQUESTS["constrained"].inputs
)


def char_toy(seed=3):
    keras_seed(seed)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + FORMAT_STRINGS)
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    return model, tokenizer


def keras_seed(seed):
    import keras

    keras.utils.set_random_seed(seed)


@pytest.fixture(scope="module")
def char_export(tmp_path_factory):
    model, tokenizer = char_toy()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("constrained") / "toy"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        max_input_length=64,
        keep_placeholders=True,
        xla=["beam_search_constrained"],
        xla_batch_sizes=(4,),
        xla_source_lengths=(),
    )
    result = run_server_way(path, list(REQUESTS.values()), replay_warmup=True)
    answers = dict(zip(REQUESTS, result.responses))
    return model, tokenizer, path, answers, result


def answer(char_export, name):
    response = char_export[3][name]
    assert response.ok, response.error_message
    return response.outputs


def char_ids(tokenizer, text):
    """The character tokenizer's ids, looked up in its vocabulary (an independent reference)."""
    return [tokenizer.vocabulary.index(c) for c in text]


SPECIAL = "%{}<>"  # the characters that open and close placeholders and tags


def char_budget(tokenizer, allowed_texts):
    """The budget `keep_placeholders` gives the search, written out for the character
    tokenizer: each special character is one id costing one of its own resource; a row may
    spend as many as `allowed_texts[row]` holds."""
    ids = [tokenizer.vocabulary.index(c) for c in SPECIAL]
    return {
        "budget_ids": np.array(ids, np.int32),
        "budget_costs": np.eye(len(SPECIAL), dtype=np.int32),
        "budgets": np.array([[t.count(c) for c in SPECIAL] for t in allowed_texts], np.int32),
    }


def padded(rows, width=None):
    width = max([len(r) for r in rows] + [1]) if width is None else width
    return np.array([r + [-1] * (width - len(r)) for r in rows], np.int32)


def test_constrained_answers_the_python_search(char_export):
    model, tokenizer = char_export[:2]
    out = answer(char_export, "constrained")
    source = tokenizer.tokenize_padded(TEXTS)
    encoded = model.encode(source)
    prefix = padded([char_ids(tokenizer, p) for p in PREFIXES])
    phrases = [[char_ids(tokenizer, c) for c in row] for row in PHRASES]
    width = max(len(c) for row in phrases for c in row)
    phrases = np.stack([padded(row, width) for row in phrases])
    ref = beam_search(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        tf.fill([len(TEXTS)], tokenizer.start_id),
        tokenizer.end_id,
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        source_mask=encoded["source_mask"],
        prefix_ids=prefix,
        constraint_ids=phrases,
        **char_budget(tokenizer, [t + p + "".join(c) for t, p, c in zip(TEXTS, PREFIXES, PHRASES)]),
    )
    texts = tokenizer.detokenize(ref["sequences"]).numpy()
    np.testing.assert_array_equal(out["outputs"], texts)
    np.testing.assert_allclose(out["scores"], ref["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["constraints_met"], ref["constraints_met"])
    # the guarantees, read on the served strings
    for row, (p, cs) in enumerate(zip(PREFIXES, PHRASES)):
        best = out["outputs"][row, 0].decode()
        assert best.startswith(p)
        assert all(c in best for c in cs)
    assert out["constraints_met"][:, 0].all()
    np.testing.assert_allclose(out["token_log_probs"].sum(-1), out["log_probs"], atol=1e-4)


def test_constrained_xla_twin_answers_the_same(char_export):
    out, xla = answer(char_export, "constrained"), answer(char_export, "constrained_xla")
    np.testing.assert_array_equal(xla["outputs"], out["outputs"])
    np.testing.assert_array_equal(xla["constraints_met"], out["constraints_met"])
    np.testing.assert_allclose(xla["scores"], out["scores"], rtol=1e-4, atol=1e-4)


def test_no_constraints_is_the_plain_beam(char_export):
    plain, none = answer(char_export, "plain"), answer(char_export, "no_columns")
    # beam_search keeps the placeholders of its sources: these sources hold none
    assert not any(extract_placeholders(t) for t in TEXTS)
    np.testing.assert_array_equal(none["outputs"], plain["outputs"])
    np.testing.assert_allclose(none["scores"], plain["scores"], rtol=1e-5)
    assert none["constraints_met"].all()
    np.testing.assert_allclose(plain["token_log_probs"].sum(-1), plain["log_probs"], atol=1e-4)


@pytest.mark.parametrize("name", ["too_long", "too_many"])
def test_phrases_that_cannot_fit_are_answered_unmet(char_export, name):
    out = answer(char_export, name)
    assert not out["constraints_met"][:, 0].any()
    assert np.isfinite(out["scores"]).all() and np.isfinite(out["token_log_probs"]).all()


@pytest.mark.parametrize(
    "name, needle", [("prefix_rank", "`prefix` must be a vector"), ("prefix_rows", "`prefix`")]
)
def test_bad_string_inputs_are_refused_by_name(char_export, name, needle):
    response = char_export[3][name]
    assert not response.ok
    assert response.error_type == "InvalidArgumentError"
    assert needle in response.error_message


def test_warmup_covers_the_constrained_signatures(char_export):
    result = char_export[4]
    names = [r.signature_name for r in result.warmup_requests]
    assert "beam_search_constrained" in names and "beam_search_constrained_xla" in names
    for request in result.warmup_requests:
        if request.signature_name.startswith("beam_search_constrained"):
            batch = len(request.inputs["inputs"])
            assert request.inputs["prefix"].shape == (batch,)
            assert request.inputs["constraints"].shape[0] == batch
    assert all(w.ok for w in result.warmup)


def kept(source, output):
    """Every placeholder of `source` in `output` at least as often as in the source (a
    placeholder twice in the source is two phrases: docs/serving.md, "Placeholders")."""
    wanted = collections.Counter(extract_placeholders(source))
    got = collections.Counter(extract_placeholders(output))
    return all(got[p] >= n for p, n in wanted.items())


def exact(source, output):
    """Exactly the placeholders of `source`: each as often, none besides, and no placeholder
    character more often than the source holds it (written out, not the library's check)."""
    wanted = collections.Counter(extract_placeholders(source))
    got = collections.Counter(extract_placeholders(output))
    return got == wanted and all(output.count(c) <= source.count(c) for c in SPECIAL)


def test_serving_default_picks_the_best_answer_with_exactly_the_placeholders():
    from keras_attn.serving.constraints import first_true
    from keras_attn.text.placeholders import graph_placeholders_kept

    inputs = tf.constant(["Delete %s", "plain", "%s and %s", "{n} files"])
    outputs = tf.constant(
        [
            ["Borrar %s %s", "Borrar %s", "Borrar"],  # the second: the first invents one
            ["llano", "llano %d", "x"],  # the first already exact
            ["%s y", "%s y %s", "%s y %s %s"],  # twice, as in the source
            ["{m} archivos", "archivos", "{n}{n}"],  # none exact: the best one
        ]
    )
    pick, found = first_true(graph_placeholders_kept(inputs, outputs))  # as kept_texts picks
    assert pick.numpy().tolist() == [1, 0, 1, 0]
    assert found.numpy().tolist() == [True, True, True, False]


def test_the_required_search_budgets_only_the_placeholders_characters():
    """The search with the placeholders required (`serving_default`'s second search) may spend
    only the characters of the source's placeholders: a `<qt>` or `<PID>` (no tag of the
    list), a `->` or a `100%` is text, whose characters would pay for a tag or placeholder the
    source lacks once the required ones are written. The first search's budget is the whole
    source's (the model may copy that text)."""
    from keras_attn.serving.constraints import PhraseConstraints
    from keras_attn.text.placeholders import PLACEHOLDER_CHARACTERS

    sources = [
        "<qt>Press <b>Ctrl</b> (%1)</qt>",
        "failed to link %s -> %s",
        "100% of {0}",
        "-p <PID>  process id",
        "plain",
    ]
    tokenizer = CharTokenizer.build(TRAINING_TEXT + FORMAT_STRINGS + sources)
    phrases = PhraseConstraints(tokenizer)

    def counts(texts):
        return np.array([[t.count(c) for c in PLACEHOLDER_CHARACTERS] for t in texts], np.int32)

    inside = ["<b></b>%1", "%s%s", "{0}", "", ""]  # the placeholders of each, written out
    assert ["".join(extract_placeholders(s)) for s in sources] == inside
    whole = phrases.placeholder_budget(tf.constant(sources))["budgets"].numpy()
    np.testing.assert_array_equal(whole, counts(sources))
    required = phrases.placeholder_constraints(tf.constant(sources), within_placeholders=True)
    np.testing.assert_array_equal(required["budgets"].numpy(), counts(inside))
    # `<qt>` / `</qt>` paid for one more tag in the whole source's budget
    lt = PLACEHOLDER_CHARACTERS.index("<")
    assert required["budgets"].numpy()[0, lt] == 2 < whole[0, lt]


def test_serving_default_keeps_the_answer_of_a_model_that_keeps_the_placeholders(
    tmp_path, monkeypatch
):
    """A model that copies its source keeps every placeholder by itself: `serving_default`
    answers its copy (the beam under the budget alone), where requiring the placeholders of
    every row would share the beam among the requirements' progress and mangle the text
    around them. The copier never writes `<` (`skip`): those rows have no exact hypothesis
    and are searched again with their placeholders required, within the same batch, under the
    budget of the placeholders' characters alone (the export's trace is watched for it)."""
    from keras_attn.serving.constraints import PhraseConstraints

    required_budgets = []
    traced = PhraseConstraints.placeholder_constraints

    def watched(self, inputs, within_placeholders=False, **kwargs):
        required_budgets.append(within_placeholders)
        return traced(self, inputs, within_placeholders=within_placeholders, **kwargs)

    monkeypatch.setattr(PhraseConstraints, "placeholder_constraints", watched)
    keras_seed(0)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + FORMAT_STRINGS)
    model = ToyCopier(
        tokenizer.vocab_size, tokenizer.end_id, skip=[tokenizer.vocabulary.index("<")]
    )
    model.build_all()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path / "copier"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        max_input_length=64,
        keep_placeholders=True,
        xla=["serving_default"],
        xla_batch_sizes=(4,),
        xla_source_lengths=(),
    )
    # the second search of serving_default and of its XLA twin (beam_search requires the
    # placeholders of every hypothesis under the whole source's budget)
    assert sorted(required_budgets) == [False, True, True], required_budgets
    loaded = tf.saved_model.load(path)
    for name in ("serving_default", "serving_default_xla"):
        out = loaded.signatures[name](inputs=tf.constant(FORMAT_STRINGS))
        answers = [o.decode() for o in out["outputs"].numpy()]
        tagged = ["<" in s for s in FORMAT_STRINGS]
        assert any(tagged) and not all(tagged)
        for source, output, tag in zip(FORMAT_STRINGS, answers, tagged):
            if tag:  # required: exactly the placeholders, the text around them the model's
                assert exact(source, output) and output != source, (name, source, output)
            else:
                assert output == source, (name, source, output)
        assert np.isfinite(out["scores"].numpy()).all()


@pytest.mark.parametrize("name", ["placeholders_default", "placeholders_beam"])
def test_placeholders_kept_the_server_way(char_export, name):
    out = answer(char_export, name)["outputs"]
    best = out if out.ndim == 1 else out[:, 0]
    for source, output in zip(FORMAT_STRINGS, best):
        assert exact(source, output.decode()), (source, output)


def test_placeholders_kept_through_the_savedmodel_loader(char_export):
    loaded = tf.saved_model.load(char_export[2])
    out = loaded.signatures["serving_default"](inputs=tf.constant(FORMAT_STRINGS))
    for source, output in zip(FORMAT_STRINGS, out["outputs"].numpy()):
        assert exact(source, output.decode()), (source, output)
    # every hypothesis of beam_search, not only the best, holds no placeholder character
    # beyond its source's (the budget; the phrases are met by the best ones)
    out = loaded.signatures["beam_search"](
        inputs=tf.constant(FORMAT_STRINGS), **{k: tf.constant(v) for k, v in beam_params().items()}
    )
    for source, row in zip(FORMAT_STRINGS, out["outputs"].numpy()):
        for output in row:
            assert all(output.decode().count(c) <= source.count(c) for c in SPECIAL), (
                source,
                output,
            )


def test_without_keep_placeholders_they_are_lost(char_export, tmp_path):
    """The mechanism removed: the same model exported without it loses placeholders."""
    model, tokenizer = char_export[:2]
    path = export_text_model(
        model, tokenizer, str(tmp_path / "plain"), beam_size=BEAM, max_length=MAX_LENGTH
    )
    loaded = tf.saved_model.load(path)
    out = loaded.signatures["serving_default"](inputs=tf.constant(FORMAT_STRINGS))
    lost = [s for s, o in zip(FORMAT_STRINGS, out["outputs"].numpy()) if not kept(s, o.decode())]
    assert len(lost) >= len(FORMAT_STRINGS) // 2


# ---- SentencePiece: the subword rule ---------------------------------------------------------
SP_TEXT = TRAINING_TEXT + ["the lazy dog jumps over the quick brown fox"] * 3


@pytest.fixture(scope="module")
def sp_export(tmp_path_factory):
    keras_seed(5)
    tokenizer = SentencePieceTokenizer.train(SP_TEXT * 5, vocab_size=60)
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    path = export_text_model(
        model, tokenizer, str(tmp_path_factory.mktemp("sp") / "sp"), beam_size=BEAM, max_length=16
    )
    requests = [
        constrained(
            ["hello world", "the fox"],
            ["the", ""],
            [["lazy dog", "world"], ["quick", ""]],
            max_length=16,
        )
    ]
    (response,) = run_server_way(path, requests).responses
    return tokenizer, response


def test_subword_rule_a_phrase_is_tokenized_alone_as_a_word_start(sp_export):
    tokenizer = sp_export[0]

    def ids(text):
        return tokenizer.tokenize([text]).to_list()[0]

    pieces = [tokenizer.vocabulary[i] for i in ids("lazy dog")]
    assert pieces[0].startswith("\u2581")  # alone, the phrase starts a word
    # ... so it is spelled as after a space inside a sentence
    sentence = ids("the lazy dog")
    assert sentence[-len(ids("lazy dog")) :] == ids("lazy dog")


def test_sentencepiece_constraints_the_server_way(sp_export):
    response = sp_export[1]
    assert response.ok, response.error_message
    out = response.outputs
    best = [o.decode() for o in out["outputs"][:, 0]]
    assert best[0].startswith("the")
    assert "lazy dog" in best[0] and "world" in best[0]
    assert "quick" in best[1]
    assert out["constraints_met"][:, 0].all()


def test_constrained_adds_the_placeholders_to_the_phrases(char_export):
    out = answer(char_export, "constrained_placeholder")
    best = out["outputs"][0, 0].decode()
    assert best.startswith("the ") and "lazy dog" in best and "fox" in best
    assert extract_placeholders(best) == ["%s"]
    assert out["constraints_met"][0, 0]


def test_a_model_that_invents_placeholders_is_held_to_its_sources(tmp_path):
    """A model biased towards `%`, `<` and `{` (it writes them everywhere): exported with
    `keep_placeholders`, every hypothesis of `beam_search` holds no more placeholder characters
    than its source and the best holds exactly its placeholders; exported without, most best
    answers invent some."""
    model, tokenizer = char_toy(seed=4)
    dense = model.output_layer
    bias = np.array(dense.bias.numpy())
    for c, boost in (("%", 6.0), ("<", 5.0), ("{", 4.0)):
        bias[tokenizer.vocabulary.index(c)] += boost
    dense.bias.assign(bias)
    sources = FORMAT_STRINGS + ["plain words only", "hello world"]
    outputs = {}
    for keep in (True, False):
        path = export_text_model(
            model,
            tokenizer,
            str(tmp_path / f"keep-{keep}"),
            beam_size=BEAM,
            max_length=MAX_LENGTH,
            max_input_length=64,
            keep_placeholders=keep,
        )
        loaded = tf.saved_model.load(path)
        params = {k: tf.constant(v) for k, v in beam_params().items()}
        out = loaded.signatures["beam_search"](inputs=tf.constant(sources), **params)
        outputs[keep] = [[o.decode() for o in row] for row in out["outputs"].numpy()]
    for source, row in zip(sources, outputs[True]):
        assert exact(source, row[0]), (source, row)
        for output in row:
            assert all(output.count(c) <= source.count(c) for c in SPECIAL), (source, output)
    invented = [s for s, row in zip(sources, outputs[False]) if not exact(s, row[0])]
    assert len(invented) >= len(sources) // 2, outputs[False]


def test_placeholder_phrases_accept_their_spelling_inside_a_word():
    """With SentencePiece a placeholder tokenized alone starts with the word-start mark; glued
    to the text before it (`=%s`) it is spelled without: the first piece's alternative is the
    same piece without the mark, and a bare mark piece in front is dropped."""
    from keras_attn.serving.constraints import PhraseConstraints

    text = ["Set context=%s now", "Delete %s?", "Press <b>Ctrl</b>", "%(name)s and {0}"] * 40
    tokenizer = SentencePieceTokenizer.train(text, vocab_size=60)
    vocabulary = tokenizer.vocabulary
    sources = ["context=%s", "Press <b>Ctrl</b> %(name)s", "no placeholder"]
    ids, alts = (
        x.numpy() for x in PhraseConstraints(tokenizer).placeholder_ids(tf.constant(sources))
    )
    mark = "\u2581"
    checked = 0
    for b, source in enumerate(sources):
        wanted = extract_placeholders(source)
        rows = [[int(t) for t in row if t >= 0] for row in ids[b]]
        assert len([r for r in rows if r]) == len(wanted)
        for placeholder, row, alt in zip(wanted, rows, alts[b]):
            pieces = [vocabulary[t] for t in row]
            assert "".join(pieces).replace(mark, "") == placeholder  # spells it
            assert pieces[0] != mark  # no bare mark in front
            assert (alt[1:] == -1).all()  # an alternative for the first piece only
            if pieces[0].startswith(mark) and pieces[0][1:] in vocabulary:
                assert vocabulary[alt[0]] == pieces[0][1:]
                checked += 1
            else:
                assert alt[0] == -1
    assert checked >= 1
