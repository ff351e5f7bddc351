"""The streaming client's word rules with the word loop ban: `encode` answers the loop ban's
tables (`word_text_tables`) beside the other word rules' arrays, and the client's ruled step
reads them, so a streamed answer of a model that loops equals the in-graph ruled search's.

The model is `tests.serving.test_word_loops_served`'s scripted translator: it writes
`▁la ▁la`, then spells a third copy `▁l a` once the token loop ban takes `▁la` away."""

import keras
import pytest

from keras_attn.decoding.words import word_text_tables
from keras_attn.serving.streaming import ServeSessionClient, StepClient, search
from tests.serving.test_steps import export_with_steps
from tests.serving.test_word_loops_served import (
    BEAM,
    MAX_LENGTH,
    SOURCES,
    reference,
    scripted_translator,
)

# An export answered the way TensorFlow Serving runs it: make test-processes.
pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    keras.utils.set_random_seed(5)
    tokenizer, model = scripted_translator()
    path = export_with_steps(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("stream_loops") / "scripted"),
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        length_penalty=0.0,
        word_rules=True,
    )
    with ServeSessionClient(path) as client:
        yield model, tokenizer, StepClient(client)


def test_a_streamed_loop_is_cut_as_the_in_graph_ruled_search_cuts_it(streamed):
    model, tokenizer, steps = streamed
    got = search(
        steps,
        SOURCES,
        "beam",
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        length_penalty=0.0,
        coverage_penalty=0.0,
    )
    want = reference(model, tokenizer, word_text_tables(list(tokenizer.vocabulary)))
    assert [list(row) for row in got["outputs"]] == want
    # without the loop ban's tables the third copy gets through as `▁l a`
    assert reference(model, tokenizer, None)[0][0] == "la la la"
    assert got["outputs"][0][0] == "la la lo"
