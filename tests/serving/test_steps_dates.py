"""The dates model's exports behind the ISO-date grammar (`ValidDates`) carry the step
signatures: the grammar acts inside `decode_step`, so the n-best streamed over the SavedModel's
step signatures and over the `.tflite` file are the SavedModel's `beam_search` n-best, every
answer a date that exists or "". Then a dates training run exported from its directory by
`keras-attn export RUN_DIR EXPORT_DIR --litert`: no locale data needed, the `.tflite` n-best
is the SavedModel's, an existing version is refused before the model loads."""

import numpy as np
import pytest

from keras_attn import models
from keras_attn.data.date_grammar import ValidDates, is_iso_date, source_year
from keras_attn.serving.litert import LiteRTModel, export_litert
from keras_attn.serving.steps import STEP_SIGNATURES
from keras_attn.serving.streaming import ServeSessionClient, StepClient, search
from keras_attn.text import CharTokenizer

# Step clients over the exports, in process and over gRPC / REST: make test-processes, which CI
# runs after make test.
pytestmark = pytest.mark.processes

MAX_LENGTH = 12  # room for "YYYY-MM-DD" and the end token
TEXTS = ["3 May 1999", "le 14 juillet 1789", "21.11.26", "March 3rd, 2001"]
BEAM = 3


@pytest.fixture(scope="module")
def dates(tmp_path_factory):
    """An untrained dates model (weights drawn in NumPy, so its answers vary) behind the
    grammar, exported as the demo exports it (step signatures included) and as a `.tflite`
    file."""
    import keras

    from keras_attn.serving.export import export_text_model

    tokenizer = CharTokenizer.build(TEXTS + ["0123456789-", "juin de le"])
    vocab = tokenizer.vocab_size
    model = models.RNNSeq2Seq(vocab, vocab, 8, 8, attention="bahdanau")
    model(
        {
            "source": keras.KerasTensor((2, 5), "int32"),
            "target_in": keras.KerasTensor((2, 4), "int32"),
        }
    )
    rng = np.random.RandomState(5)
    model.set_weights([(rng.randn(*w.shape) * 0.8).astype(w.dtype) for w in model.get_weights()])
    base = tmp_path_factory.mktemp("dates")
    settings = dict(max_length=MAX_LENGTH, max_input_length=24)
    saved = export_text_model(
        ValidDates(model, tokenizer),
        tokenizer,
        str(base / "dates"),
        beam_size=BEAM,
        extra_signatures=[STEP_SIGNATURES],
        **settings,
    )
    lite = export_litert(
        ValidDates(model, tokenizer), str(base / "dates.tflite"), tokenizer=tokenizer, **settings
    )
    client = ServeSessionClient(saved)
    yield saved, lite, client
    client.close()


def savedmodel_nbest(client, texts):
    """The `beam_search` signature's n-best, run as TF Serving runs it."""
    out = client.predict(
        "beam_search",
        {
            "inputs": np.array([t.encode() for t in texts], object),
            "beam_size": np.int32(BEAM),
            "max_length": np.int32(MAX_LENGTH),
            "length_penalty": np.float32(0.0),
            "coverage_penalty": np.float32(0.0),
        },
    )
    return [[x.decode() for x in row] for row in out["outputs"]], out["scores"]


def test_streamed_and_device_nbest_are_the_savedmodels_dates(dates):
    _, lite, client = dates
    want, scores = savedmodel_nbest(client, TEXTS)
    knobs = dict(beam_size=BEAM, max_length=MAX_LENGTH)
    streamed = search(StepClient(client), TEXTS, "beam", **knobs)
    device = search(LiteRTModel(lite), TEXTS, "beam", **knobs)
    for got in (streamed, device):
        assert got["outputs"] == want
        np.testing.assert_allclose(got["scores"], scores, atol=1e-4)
    for text, row in zip(TEXTS, want):
        year = source_year(text)
        for answer in row:
            if year is not None and not 1950 <= year <= 2049:
                assert answer == "", (text, row)
            elif answer:  # "" only for a lower rank with no date left
                assert is_iso_date(answer), (text, row)
                assert year is None or int(answer[:4]) == year, (text, row)
        assert row[0] or (year is not None and not 1950 <= year <= 2049), (text, row)


def test_device_refuses_a_state_the_grammar_cannot_read(dates):
    """The grammar's own state leaves are checked on the device like the model's: a digits
    leaf with fewer rows than the hypotheses is refused by name."""
    _, lite, _ = dates
    device = LiteRTModel(lite)
    encoded = device.encode(TEXTS[:2], MAX_LENGTH)
    state = {n: v for n, v in encoded.items() if n.startswith("state_")}
    request = {"tokens": encoded["start_tokens"], "step": np.int32(0), **state}
    assert device.decode_step(request)["logits"].shape[0] == 2
    request["state_grammar_digits"] = state["state_grammar_digits"][:1]
    with pytest.raises(ValueError, match=r"^`state_grammar_digits` must have shape \[\?\] with N"):
        device.decode_step(request)
