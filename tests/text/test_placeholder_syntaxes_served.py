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
from keras_attn.text.placeholders import PLACEHOLDER_CHARACTERS, extract_placeholders
from tests.serving.toy_model import TRAINING_TEXT, ToyTranslator

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
]
# The sources whose answers also read back as exactly their placeholders. The others hold them
# as text, but what follows may change how they read: a placeholder open at its end (`%1`,
# `$package`, an accelerator's marker) takes in the letters the model writes after it (`%1u`
# reads as printf's `%1u`, `$packagez` as another variable), and the ICU pieces are counted as
# met when they share a brace (`}}` and `} other {` in `}} other {`).
CLOSED = [source for source, _ in CASES if source.startswith(("Failed", "Terms", "Delete", "the"))]
MAX_LENGTH = 56


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import keras

    keras.utils.set_random_seed(5)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + [s for s, _ in CASES])
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("syntaxes") / "toy"),
        beam_size=2,
        max_length=MAX_LENGTH,
        max_input_length=64,
        keep_placeholders=True,
    )
    inputs = np.array([s.encode() for s, _ in CASES], dtype=object)
    knobs = {
        "beam_size": np.int32(2),
        "max_length": np.int32(MAX_LENGTH),
        "length_penalty": np.float32(0.0),
        "coverage_penalty": np.float32(0.0),
    }
    requests = [
        ServingRequest("serving_default", {"inputs": inputs}),
        ServingRequest("beam_search", {"inputs": inputs} | knobs),
    ]
    result = run_server_way(path, requests)
    for response in result.responses:
        assert response.ok, response.error_message
    return [r.outputs["outputs"] for r in result.responses]


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
