"""Every placeholder syntax kept by an exported translator with `keep_placeholders=True`,
answered the way TensorFlow Serving runs it (a fresh process, the `serve` MetaGraph in a TF1
session). The guarantee holds whatever the model, so the model is the serving tests' toy
translator with fixed random weights; the placeholders each answer must hold are written out
here by hand, not read off `extract_placeholders`."""

import numpy as np
import pytest

from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import CharTokenizer
from keras_attn.text.placeholders import (
    PLACEHOLDER_CHARACTERS,
    extract_placeholders,
    placeholders_kept,
)
from tests.serving.toy_model import TRAINING_TEXT, ToyTranslator

# Exports answered the way TensorFlow Serving runs them (a fresh process loading the SavedModel):
# make test-processes, which CI runs after make test.
pytestmark = pytest.mark.processes

# (source, the placeholders its answers hold, each as often as listed)
CASES = [
    ("Failed to add %{smart_count} file", ["%{smart_count}"]),
    ("Page %1 of %2", ["%1", "%2"]),
    ("Install $package into ${prefix}", ["$package", "${prefix}"]),
    (
        "{n, plural, one {# file} other {# files}}",
        ["{n, plural, one {", "} other {", "}}", "#", "#"],
    ),
    ("Terms &amp; Don&#39;t", ["&amp;", "&#39;"]),
    ("_File", ["_"]),
    ("&Open", ["&"]),
    ("Delete %s from {folder}?", ["%s", "{folder}"]),
    ("the quick fox", []),
    ("Page $1 of $2", ["$1", "$2"]),
    ("Hello { $user }", ["{ $user }"]),
    ("Hi {{- name}}, {{count}}", ["{{- name}}", "{{count}}"]),
    ("<0>Open</0> %n files", ["<0>", "</0>", "%n"]),
    ('<b>Bold</b> <a href="x">link</a>', ["<b>", "</b>", '<a href="x">', "</a>"]),
    ("{name} joined", ["{name}"]),
]
# The sources whose answers also read back as exactly their placeholders. The others hold them
# as text, but what follows may change how they read: a placeholder open at its end (`%1`,
# `$package`, an accelerator's marker) takes in the letters the model writes after it (`%1u`
# reads as printf's `%1u`, `$packagez` as another variable), and the ICU pieces are counted as
# met when they share a brace (`}}` and `} other {` in `}} other {`).
CLOSED = [
    source
    for source, _ in CASES
    if source.startswith(("Failed", "Terms", "Delete", "the", "Hello", "Hi", "<", "{name}"))
]
MAX_LENGTH = 56
INPUTS = np.array([s.encode() for s, _ in CASES], dtype=object)
# placeholders of more characters than an answer of MAX_LENGTH can hold: no hypothesis keeps them
LONG = '<a href="https://example.org/docs">docs</a>, <span weight="bold">%s</span>'
KNOBS = {
    "beam_size": np.int32(2),
    "max_length": np.int32(MAX_LENGTH),
    "length_penalty": np.float32(0.0),
    "coverage_penalty": np.float32(0.0),
}


def export_toy(folder, **settings):
    """The serving tests' toy translator (fixed random weights, a character vocabulary that
    spells every case) exported with `keep_placeholders` and `settings`."""
    import keras

    keras.utils.set_random_seed(5)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + [s for s, _ in CASES] + [LONG])
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    return export_text_model(
        model,
        tokenizer,
        str(folder / "toy"),
        beam_size=2,
        max_length=MAX_LENGTH,
        max_input_length=64,
        keep_placeholders=True,
        **settings,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = export_toy(tmp_path_factory.mktemp("syntaxes"))
    inputs, knobs = INPUTS, KNOBS
    requests = [
        ServingRequest("serving_default", {"inputs": inputs}),
        ServingRequest("beam_search", {"inputs": inputs} | knobs),
        ServingRequest("serving_default", {"inputs": np.array([LONG.encode()], dtype=object)}),
    ]
    result = run_server_way(path, requests)
    for response in result.responses:
        assert response.ok, response.error_message
    return [r.outputs["outputs"] for r in result.responses]


def test_every_served_answer_holds_exactly_its_placeholders(served):
    """`serving_default`'s answer holds exactly its source's placeholders, each as often and
    none besides, whatever the model writes: where no hypothesis of either search does (the
    placeholders of LONG do not fit in an answer of MAX_LENGTH), the answer is the source."""
    for (source, _), output in zip(CASES, served[0]):
        assert placeholders_kept(source, output.decode("utf-8")), (source, output)
    assert len(LONG) > MAX_LENGTH
    assert [o.decode("utf-8") for o in served[2]] == [LONG]


def holds(source, wanted, output):
    """Every wanted placeholder in `output` as often as listed (as text), and no placeholder
    character more often than the source holds it."""
    counts = {p: wanted.count(p) for p in wanted}
    return all(output.count(p) >= n for p, n in counts.items()) and all(
        output.count(c) <= source.count(c) for c in PLACEHOLDER_CHARACTERS
    )


@pytest.mark.parametrize("which", [0, 1], ids=["serving_default", "beam_search"])
def test_every_syntax_is_kept_the_server_way(served, which):
    out = served[which]
    best = out if out.ndim == 1 else out[:, 0]
    for (source, wanted), output in zip(CASES, best):
        output = output.decode("utf-8")
        assert holds(source, wanted, output), (source, output)
        if source in CLOSED:
            assert sorted(extract_placeholders(output)) == sorted(wanted), (source, output)


def test_no_answer_invents_a_placeholder_character(served):
    """Every hypothesis of `beam_search`, not only the best: the budget."""
    for (source, _), row in zip(CASES, served[1]):
        for output in row:
            output = output.decode("utf-8")
            assert all(output.count(c) <= source.count(c) for c in PLACEHOLDER_CHARACTERS), (
                source,
                output,
            )


def test_a_byte_fallback_sentencepiece_export_answers_valid_text_with_the_placeholders(
    tmp_path,
):
    """The same through a SentencePiece model with byte pieces (most of its vocabulary): the
    toy's random weights write byte pieces that complete no character, and the served answers
    hold none of them, no U+FFFD, and the closed syntaxes' placeholders."""
    import keras
    import sentencepiece as spm

    from keras_attn.text import SentencePieceTokenizer

    keras.utils.set_random_seed(7)
    texts = TRAINING_TEXT + [s for s, _ in CASES]
    tokenizer = SentencePieceTokenizer.train(texts * 4, vocab_size=340, byte_fallback=True)
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(tokenizer.model_proto)
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path / "sp"),
        beam_size=2,
        max_length=40,
        max_input_length=48,
        keep_placeholders=True,
    )
    sources = [s for s, _ in CASES if s in CLOSED] + ["hello world", "the lazy dog"]
    inputs = np.array([s.encode() for s in sources], dtype=object)
    result = run_server_way(
        path,
        [
            ServingRequest("serving_default", {"inputs": inputs}),
            ServingRequest("greedy", {"inputs": inputs}),
        ],
    )
    for response in result.responses:
        assert response.ok, response.error_message
    best = [t.decode("utf-8") for t in result.responses[0].outputs["outputs"]]
    wanted = dict(CASES)
    for source, output in zip(sources, best):
        assert "\ufffd" not in output, (source, output)
        assert sorted(extract_placeholders(output)) == sorted(wanted.get(source, [])), output
    greedy = result.responses[1].outputs["outputs"]
    greedy = greedy if greedy.ndim == 1 else greedy[:, 0]
    assert not any("\ufffd" in t.decode("utf-8") for t in greedy)
    # the model does write byte pieces that SentencePiece alone reads as U+FFFD: its greedy
    # answers here, in Python, read by the `sentencepiece` library
    from keras_attn.decoding import greedy_search

    source = tokenizer.tokenize_padded(sources, add_end=True)
    encoded = model.encode(source)
    local = greedy_search(
        model.decode_step,
        model.initial_decode_state(encoded, 40),
        np.full([len(sources)], tokenizer.start_id, np.int32),
        tokenizer.end_id,
        max_length=40,
        source_mask=encoded["source_mask"],
    )["sequences"]
    raw = [processor.decode([i for i in row if i > 3]) for row in np.asarray(local)]
    assert any("\ufffd" in t for t in raw)


@pytest.fixture(scope="module")
def ruled(tmp_path_factory):
    """The toy exported with `keep_placeholders` and `word_rules`, the XLA twin of
    `serving_default` and the step signatures: its answers through `serving_default`,
    `serving_default_xla`, `beam_search_constrained` (no prefix, no phrase of the request's)
    answered the server's way, and the client-side beam over the step signatures."""
    from keras_attn.serving.steps import STEP_SIGNATURES
    from keras_attn.serving.streaming import ServeSessionClient, StepClient, search

    path = export_toy(
        tmp_path_factory.mktemp("ruled"),
        word_rules=True,
        xla=("serving_default",),
        xla_batch_sizes=(16,),
        extra_signatures=[STEP_SIGNATURES],
    )
    inputs, knobs = INPUTS, KNOBS
    constrained = {
        "inputs": inputs,
        "prefix": np.array([b""] * len(CASES), dtype=object),
        "constraints": np.zeros([len(CASES), 0], dtype=object),
    } | knobs
    names = ["serving_default", "serving_default_xla", "beam_search_constrained"]
    requests = [ServingRequest(n, {"inputs": inputs}) for n in names[:2]]
    requests.append(ServingRequest(names[2], constrained))
    result = run_server_way(path, requests, timeout=900)  # XLA compiles on a CPU
    answers = {}
    for name, response in zip(names, result.responses):
        assert response.ok, (name, response.error_message)
        out = response.outputs["outputs"]
        answers[name] = [t.decode("utf-8") for t in (out if out.ndim == 1 else out[:, 0])]
    with ServeSessionClient(path) as client:
        steps = search(StepClient(client), [s for s, _ in CASES], "beam", **knobs)
    answers["steps"] = [
        t.decode("utf-8") if isinstance(t, bytes) else t for t in np.asarray(steps["outputs"])[:, 0]
    ]
    return answers


# The ICU structure's pieces share braces when the model writes them side by side (`}}` and
# `} other {` are both met by `}} other {`): the required phrases are met as text, the answer
# holds the pieces once each, and what it reads back as is not the source's structure.
SHARED_BRACES = ["{n, plural, one {# file} other {# files}}"]


@pytest.mark.parametrize(
    "path", ["serving_default", "serving_default_xla", "beam_search_constrained", "steps"]
)
def test_with_word_rules_every_answer_holds_exactly_its_placeholders(ruled, path):
    """Every syntax, open-ended ones included: the word rules ban the text that would glue to
    `%1`, `$package` or a marker."""
    wrong = [
        (source, output)
        for (source, wanted), output in zip(CASES, ruled[path])
        if (sorted(extract_placeholders(output)) != sorted(wanted) and source not in SHARED_BRACES)
        or not holds(source, wanted, output)
    ]
    assert wrong == [], path
