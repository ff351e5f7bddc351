"""ICU `plural` / `select` messages and Fluent select expressions keep their structure in
`serving_default` and its XLA twin by construction (keras_attn.serving.kept_answers: the
skeleton copied, only the texts between its pieces translated), answered the way TensorFlow
Serving runs them. The model is the serving tests' toy translator with fixed random weights:
its plain greedy answers break the structure, the served ones keep it whatever the model
writes."""

import numpy as np
import pytest

from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.text import CharTokenizer
from keras_attn.text.placeholders import icu_split, icu_structure_kept
from tests.serving.toy_model import TRAINING_TEXT, ToyTranslator

# Exports answered the way TensorFlow Serving runs them: make test-processes.
pytestmark = pytest.mark.processes

SOURCES = [
    "{n, plural, one {# file} other {# files}}",
    "{count, plural, =0 {no message} one {# message} other {# messages}} left",
    "{gender, select, male {he said} female {she said} other {they said}}",
    "Delete {name}?",
    # Fluent select expressions: the opening, the variant keys and the closing copied
    "{ $count -> [one] { $count } file *[other] { $count } files }",
    "Open { PLATFORM() ->\n    [macos] Options\n   *[other] Preferences\n}",
]
FLUENT = SOURCES[4:]
MAX_LENGTH = 40
BARE = "{n, plural, one {#} other {# #}}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import keras

    keras.utils.set_random_seed(5)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + SOURCES + ["%d"])
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("icu") / "toy"),
        beam_size=2,
        max_length=MAX_LENGTH,
        max_input_length=72,
        keep_placeholders=True,
        xla=("serving_default",),
    )
    inputs = {"inputs": np.array([s.encode() for s in SOURCES], dtype=object)}
    names = ("serving_default", "serving_default_xla", "greedy")
    requests = [ServingRequest(name, inputs) for name in names]
    # a message with no text to translate: nothing is searched
    bare = {"inputs": np.array([BARE.encode()], dtype=object)}
    requests += [ServingRequest(name, bare) for name in names[:2]]
    result = run_server_way(path, requests)
    for response in result.responses:
        assert response.ok, response.error_message
    answers = [[o.decode("utf-8") for o in r.outputs["outputs"]] for r in result.responses]
    return dict(zip(names, answers)) | {"bare": answers[3:]}


@pytest.mark.parametrize("name", ["serving_default", "serving_default_xla"])
def test_the_structure_is_kept_and_the_texts_translated(served, name):
    for source, answer in zip(SOURCES, served[name]):
        assert icu_structure_kept(source, answer), (source, answer)
        skeleton, texts = icu_split(source)
        got = icu_split(answer)[1]
        for text, written in zip(texts, got):
            if any(c.isalpha() for c in text):  # a text with words: the model's own answer
                assert written.strip() != text.strip(), (source, answer)
            else:  # spaces, marks, `#` alone: copied
                assert written == text, (source, answer)


def test_a_plain_search_breaks_the_structure(served):
    """The export's plain greedy decode: the same model, no structure kept."""
    structured = SOURCES[:3] + FLUENT
    greedy = served["greedy"][:3] + served["greedy"][4:]
    broken = [not icu_structure_kept(s, a) for s, a in zip(structured, greedy)]
    assert all(broken), served["greedy"]


def test_a_message_with_no_text_is_its_skeleton_and_signs(served):
    assert served["bare"] == [[BARE], [BARE]]
