"""One request from the edge to the served signature: `SearchRequest` is built once where a
call enters (a client's keywords, the command line's flags), each value checked there once,
and handed down as that object: routing and the values sent read it as it is."""

import numpy as np
import pytest

from keras_attn.decoding import config as decoding_config
from keras_attn.serving import specs
from keras_attn.serving.client import _TextClient
from keras_attn.serving.request import SearchRequest


class Recorder(_TextClient):
    """A client whose server is a list: it records each request and answers zeros."""

    def __init__(self):
        self.sent = []

    def predict(self, signature_name, inputs, output_filter=None, timeout=None):
        self.sent.append((signature_name, inputs))
        batch = len(inputs[specs.TEXT_INPUT])
        k = int(inputs["beam_size"]) if "beam_size" in inputs else None
        shape = (batch, k) if k else (batch,)
        out = {"outputs": np.full(shape, b"x", object), "scores": np.zeros(shape, np.float32)}
        if k:
            out.update(
                log_probs=np.zeros(shape, np.float32),
                lengths=np.ones(shape, np.int32),
                token_log_probs=np.zeros(shape + (1,), np.float32),
            )
        return out


@pytest.fixture
def checks(monkeypatch):
    """`{knob name: times its range was checked}` while the test runs."""
    counted = {}
    real = decoding_config.Knob.check

    def check(knob, value):
        counted[knob.name] = counted.get(knob.name, 0) + 1
        return real(knob, value)

    monkeypatch.setattr(decoding_config.Knob, "check", check)
    return counted


def test_a_clients_request_is_checked_once_and_sent_as_built(checks):
    client = Recorder()
    client.beam_search(["a", "b"], beam_size=3, min_length=2, max_length=7)
    assert checks["beam_size"] == 1 and checks["min_length"] == 1 and checks["max_length"] == 1
    ((signature, inputs),) = client.sent
    assert signature == "beam_search_controls"
    assert {k: v.item() for k, v in inputs.items() if k != specs.TEXT_INPUT} == {
        "beam_size": 3,
        "max_length": 7,
        "length_penalty": 0.0,
        "coverage_penalty": 0.0,
        "min_length": 2,
        "no_repeat_ngram_size": 0,
        "repetition_penalty": 1.0,
    }
    assert inputs["beam_size"].dtype == np.int32 and inputs["length_penalty"].dtype == np.float32


def test_the_request_object_routes_and_fills_its_values():
    request = SearchRequest.build("sample", {"temperature": 0.5, "top_p": 1})
    assert request.given == ("temperature", "top_p")
    assert request.signature == "sample"
    values = request.values()
    assert values["top_p"] == 1.0 and values["seed"] == 0 and values["max_length"] == 50
    greedy = SearchRequest.build("greedy", {})
    assert greedy.signature == "greedy" and greedy.values() == {}
    assert SearchRequest.build("greedy", {"max_length": 9}).signature == "greedy_controls"
    constrained = SearchRequest.build("beam", {"beam_size": 2}, prefix="the", constraints=["x"])
    assert constrained.signature == "beam_search_constrained"
    assert constrained.replace({"max_length": 4}).values()["max_length"] == 4


@pytest.mark.parametrize(
    "mode, params, message",
    [
        ("beam", {"beam_size": 0}, "`beam_size` must be an integer >= 1. Received: beam_size=0"),
        ("sample", {"top_p": 1.5}, r"`top_p` must be a number in \(0, 1\]. Received: top_p=1.5"),
        ("sample", {"seed": 2**31}, "`seed` must fit in int32"),
        (
            "greedy",
            {"beam_size": 2},
            r"A greedy request takes only \[.*\]. Received: \['beam_size'\]",
        ),
        ("beam", {"min_length": 9, "max_length": 3}, "`min_length` must be <= `max_length`"),
        ("nucleus", {}, "`mode` must be one of"),
    ],
)
def test_a_bad_request_is_refused_where_it_is_built(mode, params, message):
    with pytest.raises(ValueError, match=message):
        SearchRequest.build(mode, params)


def test_the_client_refuses_what_is_not_a_request():
    with pytest.raises(ValueError, match="`request` must be a SearchRequest"):
        Recorder().search({"beam_size": 3}, ["a"])
