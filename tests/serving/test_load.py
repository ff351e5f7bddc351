"""Serving under load: 8 concurrent gRPC clients x 100 requests against the PredictionService
double answering from the exported toy model, mixing the three signatures, beam parameters and
inputs (normal, empty strings, broken UTF-8, long); zero errors and every response equal to the
answer the same request got when sent alone, one at a time. Then the faults a client meets:
nothing listening, a peer that accepts but never speaks gRPC, a server slower than the deadline.

Loopback only, ephemeral ports, every wait bounded.
"""

import socket
import threading
import time
from concurrent import futures

import numpy as np
import pytest

from keras_attn.serving.client import GrpcClient, ServingTimeoutError, ServingUnavailableError
from tests.serving.doubles import SavedModelRunner, grpc_double

CLIENTS = 8
REQUESTS_PER_CLIENT = 100
TIMEOUT = 30.0  # per request: generous, only there so that a stuck request fails instead of hanging
LONG = "the quick brown fox " * 100  # 2000 characters (the export keeps the first 16 ids)

# (method, texts, params): every kind of request the load mixes.
CATALOGUE = [
    ("translate", ["hello world", "fox"], {}),
    ("translate", [""], {}),
    ("translate", [b"\xff\xfe", b"ab"], {}),
    ("translate", ["jumps", "", b"\xc3\x28 over", LONG], {}),
    ("greedy", ["the quick brown fox"], {}),
    ("greedy", ["", "lazy dog"], {"alignments": True}),
    ("greedy", [b"\xe2\x82", "0123"], {}),
    ("beam_search", ["hello"], {"beam_size": 1, "max_length": 3}),
    (
        "beam_search",
        ["jumps over", "", b"\xff"],
        {"beam_size": 3, "max_length": 6, "length_penalty": 0.6},
    ),
    (
        "beam_search",
        ["lazy dog"],
        {"beam_size": 4, "max_length": 5, "coverage_penalty": 0.2, "alignments": True},
    ),
    (
        "beam_search",
        ["0123 ,.;", LONG],
        {"beam_size": 2, "max_length": 6, "length_penalty": 1.0, "coverage_penalty": 0.5},
    ),
    ("beam_search", [""], {"beam_size": 2, "max_length": 1}),
]


@pytest.fixture(scope="module")
def runner(toy_export):
    return SavedModelRunner(toy_export)


@pytest.fixture(scope="module")
def server(runner):
    # As many handler threads as clients, so requests really run concurrently in the model.
    with grpc_double(runner, "toy", max_workers=CLIENTS) as (target, servicer):
        yield target, servicer


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(client, index):
    method, texts, params = CATALOGUE[index]
    return getattr(client, method)(texts, timeout=TIMEOUT, **params)


def assert_same(got, expected, what):
    """Strings and lengths exactly equal; floats equal (to float32 rounding)."""
    if isinstance(expected, list):  # translate: [(text, score)]
        assert [t for t, _ in got] == [t for t, _ in expected], what
        np.testing.assert_allclose(
            [s for _, s in got], [s for _, s in expected], rtol=1e-6, atol=1e-7, err_msg=what
        )
        return
    assert sorted(got) == sorted(expected), what
    for key, value in expected.items():
        if key == "outputs":
            assert got[key] == value, what
        elif key == "lengths":
            np.testing.assert_array_equal(got[key], value, err_msg=what)
        else:
            assert got[key].shape == value.shape, what
            np.testing.assert_allclose(
                got[key], value, rtol=1e-6, atol=1e-7, err_msg=f"{what}: {key}"
            )


def test_concurrent_clients_match_sequential_answers(server):
    target, servicer = server
    # The expected answers: every request of the catalogue sent alone, one after another.
    with GrpcClient(target, "toy", timeout=TIMEOUT) as client:
        expected = [call(client, i) for i in range(len(CATALOGUE))]
    # The expectations themselves are not degenerate: real text, several shapes.
    assert expected[0][0][0] and len(expected[3]) == 4
    assert np.asarray(expected[9]["alignments"]).shape[:2] == (1, 4)
    assert len(expected[8]["outputs"]) == 3 and all(len(row) == 3 for row in expected[8]["outputs"])

    start_barrier = threading.Barrier(CLIENTS)
    served_before = len(servicer.requests)

    def client_loop(c):
        """One client: its own channel, 100 requests walking the catalogue from its own offset
        (so that at any moment the 8 clients ask different signatures). Returns
        `[(request index, response or exception)]`."""
        results = []
        with GrpcClient(target, "toy", timeout=TIMEOUT) as client:
            start_barrier.wait(timeout=60)
            for r in range(REQUESTS_PER_CLIENT):
                index = (c * 5 + r * (1 + c % 3)) % len(CATALOGUE)
                try:
                    results.append((index, call(client, index)))
                except Exception as err:
                    results.append((index, err))
        return results

    started = time.time()
    with futures.ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        jobs = [pool.submit(client_loop, c) for c in range(CLIENTS)]
        per_client = [job.result(timeout=300) for job in jobs]
    elapsed = time.time() - started

    answers = [item for results in per_client for item in results]
    errors = [(i, repr(a)) for i, a in answers if isinstance(a, Exception)]
    assert errors == [], f"{len(errors)} errors, first: {errors[:3]}"
    assert len(answers) == CLIENTS * REQUESTS_PER_CLIENT
    served = len(servicer.requests) - served_before
    assert served == CLIENTS * REQUESTS_PER_CLIENT  # every request reached the server once
    asked = {i for i, _ in answers}
    assert asked == set(range(len(CATALOGUE)))  # every kind of request was part of the load
    signatures = {r.model_spec.signature_name for r in servicer.requests[served_before:]}
    assert signatures == {"serving_default", "greedy", "beam_search"}
    for n, (index, answer) in enumerate(answers):
        assert_same(
            answer, expected[index], f"answer {n} (request kind {index}: {CATALOGUE[index][:2]!r})"
        )
    print(
        f"\nserved {served} requests from {CLIENTS} concurrent clients in {elapsed:.1f} s, 0 errors, 0 mismatches"
    )


# ---- faults: the client reports them clearly and within its deadline ----------------------


@pytest.mark.parametrize("method", ["translate", "greedy", "beam_search"])
def test_unreachable_server_every_signature(method):
    target = f"127.0.0.1:{closed_port()}"
    with GrpcClient(target, "toy", timeout=5) as client:
        started = time.time()
        with pytest.raises(
            ServingUnavailableError, match="Could not reach TensorFlow Serving"
        ) as info:
            getattr(client, method)(["hello"])
        assert time.time() - started < 5  # refused at once, not after the deadline
    assert target in str(info.value) and "gRPC port" in str(info.value)
    assert info.value.code == "UNAVAILABLE"
    assert isinstance(info.value, ConnectionError)


def test_unreachable_server_concurrent_clients():
    """8 clients at once against a closed port: each gets the same clear error, none hangs."""
    target = f"127.0.0.1:{closed_port()}"

    def attempt(_):
        with GrpcClient(target, "toy", timeout=5) as client:
            try:
                client.translate(["hello"])
            except ServingUnavailableError as err:
                return err
        return None

    with futures.ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        outcomes = list(pool.map(attempt, range(CLIENTS), timeout=60))
    assert all(isinstance(o, ServingUnavailableError) and target in str(o) for o in outcomes), (
        outcomes
    )


def test_peer_that_never_answers_times_out():
    """A port that accepts TCP connections but never speaks HTTP/2: the deadline ends the call."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # connections complete in the backlog; nobody accepts or reads
        target = f"127.0.0.1:{listener.getsockname()[1]}"
        with GrpcClient(target, "toy", timeout=0.5) as client:
            started = time.time()
            with pytest.raises(ServingTimeoutError) as info:
                client.translate(["hello"])
            elapsed = time.time() - started
    assert 0.4 < elapsed < 5  # waited for the deadline, then gave up
    assert f"TensorFlow Serving at {target!r} did not answer within 0.5 s" in str(info.value)
    assert info.value.code == "DEADLINE_EXCEEDED"


def test_slow_server_times_out_for_every_concurrent_client(runner):
    """A double that sleeps 2 s before answering; clients with a 0.3 s deadline (per call,
    overriding the client's default) each get a timeout error naming the address and the deadline,
    after about 0.3 s, not after the server's answer."""
    with grpc_double(runner, "toy", delay=2.0, max_workers=CLIENTS) as (target, servicer):

        def attempt(c):
            with GrpcClient(target, "toy", timeout=30) as client:
                started = time.time()
                try:
                    getattr(client, ("translate", "greedy", "beam_search")[c % 3])(
                        ["hello"], timeout=0.3
                    )
                except ServingTimeoutError as err:
                    return err, time.time() - started
            return None, time.time() - started

        with futures.ThreadPoolExecutor(max_workers=CLIENTS) as pool:
            outcomes = list(pool.map(attempt, range(CLIENTS), timeout=60))
        for err, elapsed in outcomes:
            assert isinstance(err, ServingTimeoutError), (err, elapsed)
            assert err.code == "DEADLINE_EXCEEDED" and isinstance(err, TimeoutError)
            assert f"TensorFlow Serving at {target!r} did not answer within 0.3 s" in str(err)
            assert elapsed < 1.9  # the deadline ended the call, not the server's late answer
        assert len(servicer.requests) == CLIENTS  # the requests did reach the (slow) server


def test_client_recovers_after_timeout(runner, server):
    """A timeout does not poison the client: the next call on the same channel succeeds."""
    target, _ = server
    with grpc_double(runner, "toy", delay=1.0) as (slow_target, _):
        with GrpcClient(slow_target, "toy", timeout=30) as client:
            with pytest.raises(ServingTimeoutError):
                client.translate(["hello"], timeout=0.2)
            # Same client, a deadline longer than the delay: answered, as the fast server answers.
            late = client.translate(["hello"], timeout=120)  # generous: a loaded machine is slow
    with GrpcClient(target, "toy", timeout=20) as fast:
        assert late == fast.translate(["hello"])
