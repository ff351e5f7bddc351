"""gRPC and REST clients against test stand-ins that answer from the exported toy model."""

import socket

import numpy as np
import pytest

from keras_attn.serving.client import (
    GrpcClient,
    RestClient,
    ServingError,
    ServingTimeoutError,
    ServingUnavailableError,
)
from tests.serving.doubles import SavedModelRunner, grpc_double, rest_double

TEXTS = ["hello world", "fox"]
BROKEN = [b"\xff\xfe", b"ab"]


@pytest.fixture(scope="module")
def runner(toy_export):
    return SavedModelRunner(toy_export)


@pytest.fixture(scope="module")
def grpc_server(runner):
    with grpc_double(runner, "toy") as (target, servicer):
        yield target, servicer


@pytest.fixture(scope="module")
def rest_server(runner):
    with rest_double(runner, "toy") as (url, bodies):
        yield url, bodies


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def direct(runner, name, texts, **knobs):
    inputs = {"inputs": np.array([t.encode() if isinstance(t, str) else t for t in texts], object)}
    inputs.update(knobs)
    return runner.run(name, inputs)


def beam_knobs(beam_size=2, max_length=5, alpha=0.6, beta=0.0):
    return dict(
        beam_size=np.int32(beam_size),
        max_length=np.int32(max_length),
        length_penalty=np.float32(alpha),
        coverage_penalty=np.float32(beta),
    )


# ---- gRPC -------------------------------------------------------------------------------


def test_grpc_translate(runner, grpc_server):
    target, servicer = grpc_server
    with GrpcClient(target, "toy", timeout=20) as client:
        got = client.translate(TEXTS)
    ref = direct(runner, "serving_default", TEXTS)
    assert [t for t, _ in got] == [t.decode() for t in ref["outputs"]]
    np.testing.assert_allclose([s for _, s in got], ref["scores"], rtol=1e-6)
    request = servicer.requests[-1]
    assert (
        request.model_spec.name == "toy" and request.model_spec.signature_name == "serving_default"
    )


def test_grpc_beam_search_fetches_alignments_only_on_request(runner, grpc_server):
    target, servicer = grpc_server
    ref = direct(runner, "beam_search", TEXTS, **beam_knobs())
    with GrpcClient(target, "toy", timeout=20) as client:
        plain = client.beam_search(TEXTS, beam_size=2, max_length=5, length_penalty=0.6)
        assert list(servicer.requests[-1].output_filter) == [
            "outputs",
            "scores",
            "log_probs",
            "lengths",
            "token_log_probs",
        ]
        full = client.beam_search(
            TEXTS, beam_size=2, max_length=5, length_penalty=0.6, alignments=True
        )
        assert "alignments" in servicer.requests[-1].output_filter
    assert "alignments" not in plain
    np.testing.assert_allclose(plain["token_log_probs"].sum(-1), plain["log_probs"], atol=1e-4)
    assert plain["outputs"] == [[t.decode() for t in row] for row in ref["outputs"]]
    np.testing.assert_allclose(plain["scores"], ref["scores"], rtol=1e-6)
    np.testing.assert_array_equal(plain["lengths"], ref["lengths"])
    np.testing.assert_allclose(full["alignments"], ref["alignments"], atol=1e-7)
    assert full["alignments"].shape[:2] == (2, 2)


def test_grpc_greedy_and_version_pin(runner, grpc_server):
    target, servicer = grpc_server
    ref = direct(runner, "greedy", TEXTS)
    with GrpcClient(target, "toy", version=1, timeout=20) as client:
        got = client.greedy(TEXTS, alignments=True)
    assert servicer.requests[-1].model_spec.version.value == 1
    assert got["outputs"] == [t.decode() for t in ref["outputs"]]
    np.testing.assert_allclose(got["alignments"], ref["alignments"], atol=1e-7)


def test_grpc_errors(grpc_server):
    target, servicer = grpc_server
    with GrpcClient(target, "toy", timeout=20) as client:
        # Out of the table's range: the Python API's message, and nothing is sent.
        sent = len(servicer.requests)
        with pytest.raises(ValueError, match=r"^`beam_size` must be an integer >= 1\. "):
            client.beam_search(["hello"], beam_size=0)
        assert len(servicer.requests) == sent
        # The served signature checks it too (a request written by hand).
        with pytest.raises(ServingError, match="beam_size") as info:
            client.predict("beam_search", {"inputs": np.array([b"hello"], object), **beam_knobs(0)})
        assert info.value.code == "INVALID_ARGUMENT"
    with GrpcClient(target, "other", timeout=20) as client:
        with pytest.raises(ServingError) as info:
            client.translate(["hello"])
        assert info.value.code == "NOT_FOUND"


def test_grpc_unreachable():
    with GrpcClient(f"127.0.0.1:{closed_port()}", "toy", timeout=5) as client:
        with pytest.raises(ServingUnavailableError, match="Could not reach"):
            client.translate(["hello"])


def test_grpc_timeout(runner):
    with grpc_double(runner, "toy", delay=1.0) as (target, _):
        with GrpcClient(target, "toy", timeout=0.2) as client:
            with pytest.raises(ServingTimeoutError):
                client.translate(["hello"])


def test_grpc_empty_batch_goes_through_the_server(grpc_server):
    target, _ = grpc_server
    with GrpcClient(target, "toy", timeout=20) as client:
        out = client.predict("greedy", {"inputs": np.array([], object)})
    assert out["outputs"].shape == (0,)


# ---- REST -------------------------------------------------------------------------------


def test_rest_row_form_for_batched_signatures(runner, rest_server):
    url, bodies = rest_server
    client = RestClient(url, "toy", timeout=20)
    got = client.translate(TEXTS)
    assert bodies[-1] == {"signature_name": "serving_default", "instances": TEXTS}
    ref = direct(runner, "serving_default", TEXTS)
    assert [t for t, _ in got] == [t.decode() for t in ref["outputs"]]
    np.testing.assert_allclose([s for _, s in got], ref["scores"], rtol=1e-5)
    greedy = client.greedy(TEXTS)
    assert "instances" in bodies[-1] and "alignments" not in greedy


def test_rest_columnar_form_for_scalar_knobs(runner, rest_server):
    url, bodies = rest_server
    client = RestClient(url, "toy", timeout=20)
    got = client.beam_search(TEXTS, beam_size=2, max_length=5, length_penalty=0.6, alignments=True)
    assert bodies[-1]["inputs"]["beam_size"] == 2 and bodies[-1]["inputs"]["inputs"] == TEXTS
    assert "instances" not in bodies[-1]
    ref = direct(runner, "beam_search", TEXTS, **beam_knobs())
    assert got["outputs"] == [[t.decode() for t in row] for row in ref["outputs"]]
    np.testing.assert_allclose(got["scores"], ref["scores"], rtol=1e-5)
    np.testing.assert_allclose(got["alignments"], ref["alignments"], atol=1e-6)
    with pytest.raises(ValueError, match="columnar"):
        RestClient(url, "toy", form="instances").beam_search(TEXTS)


def test_rest_broken_utf8_travels_as_base64(runner, rest_server):
    url, bodies = rest_server
    got = RestClient(url, "toy", timeout=20).translate(BROKEN)
    assert bodies[-1]["instances"][0] == {"b64": "//4="} and bodies[-1]["instances"][1] == "ab"
    ref = direct(runner, "serving_default", BROKEN)
    assert [t for t, _ in got] == [t.decode() for t in ref["outputs"]]


def test_rest_errors(rest_server):
    url, _ = rest_server
    with pytest.raises(ServingError, match="beam_size") as info:
        inputs = {"inputs": np.array([b"hello"], object), **beam_knobs(0)}
        RestClient(url, "toy", timeout=20).predict("beam_search", inputs)
    assert info.value.code == 400
    with pytest.raises(ServingError, match="not found"):
        RestClient(url, "other", timeout=20).translate(["hello"])
    with pytest.raises(ServingUnavailableError, match="Could not reach"):
        RestClient(f"http://127.0.0.1:{closed_port()}", "toy", timeout=5).translate(["hello"])


def test_rest_urls_and_empty_batch():
    assert RestClient("http://h:8501/", "m").url == "http://h:8501/v1/models/m:predict"
    assert (
        RestClient("http://h:8501", "m", version=3).url
        == "http://h:8501/v1/models/m/versions/3:predict"
    )
    assert RestClient("http://h:8501", "m", version_label="stable").url.endswith(
        "/labels/stable:predict"
    )
    # Nothing is sent for an empty batch (the address is unreachable on purpose).
    client = RestClient(f"http://127.0.0.1:{closed_port()}", "m", timeout=5)
    assert client.translate([]) == []
    assert client.beam_search([], beam_size=2)["scores"].shape == (0, 2)


def test_bad_client_arguments():
    with pytest.raises(ValueError, match="model_name"):
        RestClient("http://h", "")
    with pytest.raises(ValueError, match="timeout"):
        GrpcClient("127.0.0.1:1", "m", timeout=0)
    with pytest.raises(ValueError, match="form"):
        RestClient("http://h", "m", form="rows")
    with pytest.raises(ValueError, match="texts"):
        RestClient("http://h", "m").translate("hello")


@pytest.mark.parametrize(
    "method, knobs, message",
    [
        ("sample", {"top_p": 1.5}, "`top_p` must be a number in (0, 1]. Received: top_p=1.5"),
        ("sample", {"temperature": 0}, "`temperature` must be a number in [0.01, 100]"),
        ("beam_search", {"length_penalty": -1}, "`length_penalty` must be a number in [0, 10]"),
        ("greedy", {"min_length": -1}, "`min_length` must be an integer >= 0"),
        ("greedy", {"max_length": 2.5}, "`max_length` must be an integer >= 1"),
        ("beam_search", {"top_k": 3}, "takes only"),
        ("greedy", {"beam_size": 3}, "takes only"),
    ],
)
def test_knobs_are_checked_before_anything_is_sent(method, knobs, message):
    from keras_attn.decoding import KNOBS, DecodingConfig

    # Unreachable on purpose: a request would be ServingUnavailableError.
    client = RestClient(f"http://127.0.0.1:{closed_port()}", "m", timeout=5)
    with pytest.raises(ValueError) as info:
        getattr(client, method)(["hello"], **knobs)
    assert message in str(info.value)
    if "takes only" not in message:  # the same words as the Python API
        ((name, value),) = knobs.items()
        with pytest.raises(ValueError) as api:
            DecodingConfig(**{name: value})
        assert str(info.value) == str(api.value) and name in KNOBS


# ---- the control signatures -------------------------------------------------------------

CONTROL_KNOBS = dict(
    min_length=np.int32(3), no_repeat_ngram_size=np.int32(2), repetition_penalty=np.float32(1.5)
)


def test_grpc_controls_and_sample(runner, grpc_server):
    target, servicer = grpc_server
    sample_knobs = dict(
        temperature=np.float32(0.8),
        top_k=np.int32(4),
        top_p=np.float32(0.9),
        seed=np.int32(3),
        max_length=np.int32(5),
        **CONTROL_KNOBS,
    )
    with GrpcClient(target, "toy", timeout=20) as client:
        sampled = client.sample(
            TEXTS,
            temperature=0.8,
            top_k=4,
            top_p=0.9,
            seed=3,
            max_length=5,
            min_length=3,
            no_repeat_ngram_size=2,
            repetition_penalty=1.5,
        )
        assert servicer.requests[-1].model_spec.signature_name == "sample"
        greedy = client.greedy(TEXTS, max_length=4, min_length=3)
        assert servicer.requests[-1].model_spec.signature_name == "greedy_controls"
        client.greedy(TEXTS)
        assert (
            servicer.requests[-1].model_spec.signature_name == "greedy"
        )  # old exports keep working
    ref = direct(runner, "sample", TEXTS, **sample_knobs)
    assert sampled["outputs"] == [t.decode() for t in ref["outputs"]]
    np.testing.assert_allclose(sampled["scores"], ref["scores"], rtol=1e-6)
    ref = direct(
        runner,
        "greedy_controls",
        TEXTS,
        max_length=np.int32(4),
        min_length=np.int32(3),
        no_repeat_ngram_size=np.int32(0),
        repetition_penalty=np.float32(1.0),
    )
    assert greedy["outputs"] == [t.decode() for t in ref["outputs"]]


def test_rest_beam_search_with_controls(runner, rest_server):
    url, bodies = rest_server
    client = RestClient(url, "toy", timeout=20)
    got = client.beam_search(
        TEXTS,
        beam_size=2,
        max_length=5,
        length_penalty=0.6,
        min_length=3,
        no_repeat_ngram_size=2,
        repetition_penalty=1.5,
    )
    body = bodies[-1]
    assert body["signature_name"] == "beam_search_controls" and body["inputs"]["min_length"] == 3
    ref = direct(runner, "beam_search_controls", TEXTS, **beam_knobs(), **CONTROL_KNOBS)
    assert got["outputs"] == [[t.decode() for t in row] for row in ref["outputs"]]
    np.testing.assert_array_equal(got["lengths"], ref["lengths"])
    assert (
        client.sample([], seed=1)["outputs"] == []
    )  # an empty batch is answered without a request


def test_clients_send_a_prefix_and_constraints(runner, grpc_server, rest_server):
    target, servicer = grpc_server
    url, bodies = rest_server
    phrases = [["dog", "ox"], ["ox"]]
    ref = direct(
        runner,
        "beam_search_constrained",
        TEXTS,
        prefix=np.array([b"the"] * len(TEXTS), object),
        constraints=np.array([[b"dog", b"ox"], [b"ox", b""]], object)[: len(TEXTS)],
        **beam_knobs(max_length=10),
    )
    with GrpcClient(target, "toy", timeout=20) as client:
        got = client.beam_search(
            TEXTS, beam_size=2, max_length=10, length_penalty=0.6, prefix="the", constraints=phrases
        )
        assert servicer.requests[-1].model_spec.signature_name == "beam_search_constrained"
    rest = RestClient(url, "toy", timeout=20).beam_search(
        TEXTS, beam_size=2, max_length=10, length_penalty=0.6, prefix="the", constraints=phrases
    )
    assert bodies[-1]["inputs"]["constraints"] == [["dog", "ox"], ["ox", ""]]
    for result in (got, rest):
        assert result["outputs"] == [[t.decode() for t in row] for row in ref["outputs"]]
        np.testing.assert_array_equal(result["constraints_met"], ref["constraints_met"])
        for row, best in zip(phrases, result["outputs"]):
            assert best[0].startswith("the") and all(p in best[0] for p in row)
    with pytest.raises(ValueError, match="beam_search_constrained"):
        RestClient(url, "toy").beam_search(TEXTS, constraints=["ox"], min_length=2)
