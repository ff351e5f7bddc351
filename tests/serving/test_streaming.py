"""The streaming client: the engine's searches run in the client over `encode` / `decode_step`
answer what the in-graph `beam_search`, `greedy`, `sample`, `beam_search_controls` and
`beam_search_constrained` signatures answer for the same inputs (the SavedModel's `serve`
MetaGraph in a session, the server's way; gRPC and REST through the protocol doubles), also on
an export that keeps placeholders and applies the word rules, and the text streams out as
found."""

import io
import re

import keras
import numpy as np
import pytest

from keras_attn.serving.client import GrpcClient, RestClient, ServingUnavailableError
from keras_attn.serving.streaming import ServeSessionClient, StepClient, search, stream
from tests.serving.doubles import SavedModelRunner, grpc_double, rest_double
from tests.serving.test_steps import build_model, export_with_steps
from tests.serving.toy_model import make_toy

# Step clients over the exports, in process and over gRPC / REST: make test-processes, which CI
# runs after make test.
pytestmark = pytest.mark.processes

MAX_LENGTH = 7
TEXTS = ["hello world", "the lazy dog", ""]
EOS_PENALTY = 0.3


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The toy translator (GRU) and a Transformer with copy attention, exported with the search
    and the step signatures, each loaded in a session."""
    model, tokenizer = make_toy()
    toy = export_with_steps(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("toy") / "toy"),
        max_length=MAX_LENGTH,
        max_input_length=16,
        eos_penalty=EOS_PENALTY,
        length_penalty=0.4,
        coverage_penalty=0.2,
    )
    transformer = export_with_steps(
        build_model("transformer-copy", tokenizer.vocab_size, scale=0.6),
        tokenizer,
        str(tmp_path_factory.mktemp("transformer") / "t"),
        max_length=MAX_LENGTH,
        max_input_length=16,
    )
    clients = {"toy": ServeSessionClient(toy), "transformer": ServeSessionClient(transformer)}
    yield {"toy": toy, "transformer": transformer}, clients
    for client in clients.values():
        client.close()


def in_graph(client, signature, texts, **knobs):
    """A request to an in-graph search signature: every input it has, from `knobs` (dtypes as
    in its SignatureDef)."""
    import tensorflow as tf

    sig = client.meta_graph.signature_def[signature]
    inputs = {"inputs": np.array([t.encode() for t in texts], object)}
    for alias, info in sig.inputs.items():
        if alias != "inputs":
            inputs[alias] = np.asarray(knobs[alias], tf.dtypes.as_dtype(info.dtype).as_numpy_dtype)
    return client.predict(signature, inputs)


def texts_of(array):
    return [
        [t.decode() for t in row] if isinstance(row, np.ndarray) else row.decode() for row in array
    ]


BEAM = dict(beam_size=3, max_length=MAX_LENGTH, length_penalty=0.6, coverage_penalty=0.2)
CONTROLS = dict(min_length=3, no_repeat_ngram_size=2, repetition_penalty=1.3)
SAMPLING = dict(temperature=0.8, top_k=6, top_p=0.9, seed=5)


@pytest.mark.parametrize("name", ["toy", "transformer"])
def test_beam_equals_the_in_graph_beam_search(exports, name):
    _, clients = exports
    client = clients[name]
    want = in_graph(client, "beam_search", TEXTS, **BEAM)
    got = search(StepClient(client), TEXTS, "beam", **BEAM)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    np.testing.assert_allclose(got["log_probs"], want["log_probs"], atol=1e-4)
    np.testing.assert_array_equal(got["lengths"], want["lengths"])


@pytest.mark.parametrize("name", ["toy", "transformer"])
def test_greedy_and_sample_equal_the_in_graph_signatures(exports, name):
    _, clients = exports
    client = clients[name]
    steps = StepClient(client)
    # `greedy` runs with the export's max_length and penalties
    penalties = dict(length_penalty=0.4, coverage_penalty=0.2) if name == "toy" else {}
    want = in_graph(client, "greedy", TEXTS)
    got = search(steps, TEXTS, "greedy", max_length=MAX_LENGTH, **penalties)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    want = in_graph(client, "sample", TEXTS, max_length=5, **SAMPLING, **CONTROLS)
    got = search(steps, TEXTS, "sample", max_length=5, **SAMPLING, **CONTROLS, **penalties)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)


class OneStepAtATime(StepClient):
    """A step client without `decode_steps` (an export made before it): a request a step."""

    def __getattribute__(self, name):
        if name == "decode_steps":
            raise AttributeError(name)
        return super().__getattribute__(name)


class CountedChunks(StepClient):
    """A step client that counts its step requests: `decode_step` rows, `decode_steps` counts."""

    def __init__(self, predictor):
        super().__init__(predictor)
        self.steps, self.chunks = [], []

    def decode_step(self, request):
        self.steps.append(len(request["tokens"]))
        return super().decode_step(request)

    def decode_steps(self, request):
        self.chunks.append(int(request["count"]))
        return super().decode_steps(request)


@pytest.mark.parametrize("name", ["toy", "transformer"])
def test_greedy_reads_ahead_with_decode_steps(exports, name):
    # The steps of the search in fewer requests: chunks of growing size.
    _, clients = exports
    steps = CountedChunks(clients[name])
    got = search(steps, TEXTS, "greedy", max_length=MAX_LENGTH)
    alone = search(OneStepAtATime(clients[name]), TEXTS, "greedy", max_length=MAX_LENGTH)
    assert got["outputs"] == alone["outputs"]
    np.testing.assert_allclose(got["scores"], alone["scores"], atol=1e-5)
    assert steps.steps == [len(TEXTS)]  # the probe only
    assert steps.chunks[0] == 1  # the probe's
    ran = int(np.max(got["lengths"]))
    assert 1 < len(steps.chunks) - 1 < ran, (steps.chunks, ran)


def test_greedy_with_controls_reads_ahead_and_answers_as_one_step_at_a_time(exports):
    # The controls make the search choose what the chunk did not (no end before min_length, no
    # repeated bigram): it takes the state at that step again and reads ahead from there.
    _, clients = exports
    controls = dict(min_length=5, no_repeat_ngram_size=2, repetition_penalty=1.6)
    steps = CountedChunks(clients["toy"])
    got = search(steps, TEXTS, "greedy", max_length=MAX_LENGTH, **controls)
    alone = search(
        OneStepAtATime(clients["toy"]), TEXTS, "greedy", max_length=MAX_LENGTH, **controls
    )
    plain = search(OneStepAtATime(clients["toy"]), TEXTS, "greedy", max_length=MAX_LENGTH)
    assert alone["outputs"] != plain["outputs"]  # the controls changed the choices
    assert got["outputs"] == alone["outputs"]
    np.testing.assert_allclose(got["scores"], alone["scores"], atol=1e-5)
    assert steps.steps == [len(TEXTS)]


def test_decode_steps_refuses_a_count_below_one_and_stops_at_the_slots(exports):
    import tensorflow as tf

    _, clients = exports
    client = clients["transformer"]  # its self-attention cache has MAX_LENGTH slots
    encoded = StepClient(client).encode(TEXTS[:1], MAX_LENGTH)
    request = {"tokens": encoded["start_tokens"], "step": np.int32(2), "count": np.int32(0)}
    request.update({k: v for k, v in encoded.items() if k.startswith("state_")})
    with pytest.raises(tf.errors.InvalidArgumentError, match="`count` must be at least 1"):
        client.predict("decode_steps", request)
    request["count"] = np.int32(1000)  # past the slots: the steps the state has room for
    answer = client.predict("decode_steps", request)
    assert 1 <= answer["chosen"].shape[1] <= MAX_LENGTH - 2
    assert answer["logits"].shape[:2] == answer["chosen"].shape


def test_controls_equal_the_in_graph_controls(exports):
    _, clients = exports
    client = clients["toy"]
    want = in_graph(client, "beam_search_controls", TEXTS, **BEAM, **CONTROLS)
    got = search(StepClient(client), TEXTS, "beam", **BEAM, **CONTROLS)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    # the controls are applied: without them the answers differ
    plain = search(StepClient(client), TEXTS, "beam", **BEAM)
    assert plain["outputs"] != got["outputs"]


def test_export_eos_penalty_is_read_from_encode(exports):
    _, clients = exports
    steps = StepClient(clients["toy"])
    with_export = search(steps, TEXTS, "beam", **BEAM)
    without = search(steps, TEXTS, "beam", **BEAM, eos_penalty=0.0)
    assert not np.allclose(with_export["scores"], without["scores"])


@pytest.mark.parametrize("mode", ["greedy", "beam"])
def test_pieces_stream_the_best_answer(exports, mode):
    _, clients = exports
    steps = StepClient(clients["transformer"])
    knobs = dict(beam_size=3) if mode == "beam" else {}
    events = list(stream(steps, TEXTS, mode, max_length=MAX_LENGTH, **knobs))
    final = events[-1]
    assert final.done and all(not e.done for e in events[:-1])
    best = final.result["outputs"]
    best = [row[0] for row in best] if mode == "beam" else best
    joined = ["".join(e.pieces[i] for e in events) for i in range(len(TEXTS))]
    assert joined == best
    steps_seen = [e.step for e in events]
    assert steps_seen == sorted(steps_seen)
    if mode == "greedy":  # one token per step: text arrives before the search ends
        longest = int(np.argmax([len(t) for t in best]))
        assert any(e.pieces[longest] for e in events[:-1])
        # without a beam the best hypothesis so far is the text sent so far
        sent = [""] * len(TEXTS)
        for event in events:
            sent = [s + p for s, p in zip(sent, event.pieces)]
            assert event.best == sent
    assert final.best == best


@pytest.mark.parametrize("packed", [None, False])
def test_grpc_and_rest_answers_equal_the_in_graph_search(exports, packed):
    # A network client asks the packed twins unless told not to; both answer the same.
    paths, clients = exports
    runner = SavedModelRunner(paths["toy"])
    want_beam = in_graph(clients["toy"], "beam_search", TEXTS[:2], **BEAM)
    want_greedy = in_graph(clients["toy"], "greedy", TEXTS[:2])
    penalties = dict(length_penalty=0.4, coverage_penalty=0.2)
    twins = {"decode_step", "decode_steps"}
    if packed is None:
        twins = {"decode_step_packed", "decode_steps_packed"}
    with grpc_double(runner, "toy") as (target, servicer):
        steps = StepClient(GrpcClient(target, "toy"), packed=packed, search_steps=False)
        beam = search(steps, TEXTS[:2], "beam", **BEAM)
        greedy = search(steps, TEXTS[:2], "greedy", max_length=MAX_LENGTH, **penalties)
        asked = {r.model_spec.signature_name for r in servicer.requests}
    assert {"encode", "detokenize"} | twins == asked
    assert beam["outputs"] == texts_of(want_beam["outputs"])
    assert greedy["outputs"] == texts_of(want_greedy["outputs"])
    with rest_double(runner, "toy") as (url, bodies):
        steps = StepClient(RestClient(url, "toy"), packed=packed, search_steps=False)
        beam = search(steps, TEXTS[:2], "beam", **BEAM)
        greedy = search(steps, TEXTS[:2], "greedy", max_length=MAX_LENGTH, **penalties)
    assert {"encode", "detokenize"} | twins == {b["signature_name"] for b in bodies}
    assert beam["outputs"] == texts_of(want_beam["outputs"])
    np.testing.assert_allclose(beam["scores"], want_beam["scores"], atol=1e-4)
    assert greedy["outputs"] == texts_of(want_greedy["outputs"])


def test_an_export_without_decode_steps_streams_a_step_a_request(exports):
    # An export made before `decode_steps`: every client names the missing signature the same
    # way, and the greedy search falls back to one step a request with the same answer.
    paths, clients = exports
    want = in_graph(clients["toy"], "greedy", TEXTS[:2])
    runner = SavedModelRunner(paths["toy"])
    for name in ("decode_steps", "decode_step_packed", "decode_steps_packed"):
        del runner.signatures[name]

    def greedy(client):
        steps = StepClient(client, packed=False, search_steps=False)
        return search(steps, TEXTS[:2], "greedy", max_length=MAX_LENGTH)

    with grpc_double(runner, "toy") as (target, servicer):
        got = greedy(GrpcClient(target, "toy"))
        asked = [r.model_spec.signature_name for r in servicer.requests]
    assert got["outputs"] == texts_of(want["outputs"])
    assert asked.count("decode_steps") == 1 and asked.count("decode_step") > 1
    with rest_double(runner, "toy") as (url, _):
        got = greedy(RestClient(url, "toy"))
    assert got["outputs"] == texts_of(want["outputs"])


# ---- beam_search_steps ---------------------------------------------------------------------


def settled_prefix(rows):
    """The longest text every hypothesis of `rows` starts with."""
    prefix = rows[0]
    for row in rows[1:]:
        while not row.startswith(prefix):
            prefix = prefix[:-1]
    return prefix


@pytest.mark.parametrize("name", ["toy", "transformer"])
def test_beam_search_steps_runs_the_beam_search_to_a_step_limit(exports, name):
    import tensorflow as tf

    _, clients = exports
    client = clients[name]
    want = in_graph(client, "beam_search", TEXTS, **BEAM)
    final_best = [row[0] for row in texts_of(want["outputs"])]
    ran = []
    for limit in range(1, MAX_LENGTH + 2):
        part = in_graph(client, "beam_search_steps", TEXTS, steps=limit, **BEAM)
        ran.append(int(part["steps"]))
        assert int(part["steps"]) <= limit
        settled = [t.decode() for t in part["settled"]]
        outputs = texts_of(part["outputs"])
        for i, text in enumerate(settled):
            # what every hypothesis shares is the start of the final answer
            assert final_best[i].startswith(text), (limit, i, text, final_best[i])
            assert all(row.startswith(text) for row in outputs[i]), (limit, outputs[i])
        if part["done"]:
            assert outputs == texts_of(want["outputs"])
            for key in ("scores", "log_probs", "lengths", "token_log_probs", "alignments"):
                np.testing.assert_allclose(part[key], want[key], atol=1e-5, err_msg=key)
        else:
            assert int(part["steps"]) == limit
            assert (part["lengths"] <= limit + 1).all()
    assert ran == sorted(ran) and ran[-1] == ran[-2]  # it stops where the search ends
    with pytest.raises(tf.errors.InvalidArgumentError, match="`steps` must be an integer >= 1"):
        in_graph(client, "beam_search_steps", TEXTS, steps=0, **BEAM)


def test_a_network_beam_streams_through_beam_search_steps(exports):
    # Over gRPC and REST a beam asks only `beam_search_steps`, twice the steps each time (no
    # encode, no state), and answers what the in-graph beam and the step-a-request client do.
    paths, clients = exports
    want = in_graph(clients["transformer"], "beam_search", TEXTS[:2], **BEAM)
    per_step = search(StepClient(clients["transformer"]), TEXTS[:2], "beam", **BEAM)
    runner = SavedModelRunner(paths["transformer"])
    with grpc_double(runner, "t") as (target, servicer):
        events = list(stream(StepClient(GrpcClient(target, "t")), TEXTS[:2], "beam", **BEAM))
        asked = [r.model_spec.signature_name for r in servicer.requests]
        limits = [int(tf_value(r.inputs["steps"])) for r in servicer.requests]
    assert set(asked) == {"beam_search_steps"}
    assert limits == [min(2 ** (i + 1), MAX_LENGTH) for i in range(len(limits))]
    final = events[-1]
    assert final.done and final.result["outputs"] == texts_of(want["outputs"])
    assert final.result["outputs"] == per_step["outputs"]
    np.testing.assert_allclose(final.result["scores"], per_step["scores"], atol=1e-4)
    np.testing.assert_array_equal(final.result["lengths"], per_step["lengths"])
    np.testing.assert_array_equal(final.result["sequences"], per_step["sequences"])
    joined = ["".join(e.pieces[i] for e in events) for i in range(2)]
    assert joined == [row[0] for row in final.result["outputs"]]
    with rest_double(runner, "t") as (url, bodies):
        got = search(StepClient(RestClient(url, "t")), TEXTS[:2], "beam", **BEAM)
    assert {b["signature_name"] for b in bodies} == {"beam_search_steps"}
    assert got["outputs"] == per_step["outputs"]


def test_a_network_greedy_streams_through_greedy_steps(exports):
    paths, clients = exports
    knobs = dict(max_length=MAX_LENGTH, length_penalty=0.4, coverage_penalty=0.2)
    want = in_graph(clients["toy"], "greedy", TEXTS)  # the export's max_length and penalties
    per_step = search(StepClient(clients["toy"]), TEXTS, "greedy", **knobs)
    with grpc_double(SavedModelRunner(paths["toy"]), "toy") as (target, servicer):
        events = list(stream(StepClient(GrpcClient(target, "toy")), TEXTS, "greedy", **knobs))
        asked = {r.model_spec.signature_name for r in servicer.requests}
    assert asked == {"greedy_steps"}
    final = events[-1].result
    assert final["outputs"] == per_step["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(final["scores"], per_step["scores"], atol=1e-5)
    np.testing.assert_allclose(final["scores"], want["scores"], atol=1e-5)
    np.testing.assert_array_equal(final["lengths"], per_step["lengths"])
    np.testing.assert_array_equal(final["sequences"], per_step["sequences"])
    # each answer's text comes as the search finds it, and the pieces make it
    joined = ["".join(e.pieces[i] for e in events) for i in range(len(TEXTS))]
    assert joined == final["outputs"]
    longest = int(np.argmax([len(t) for t in final["outputs"]]))
    assert any(e.pieces[longest] for e in events[:-1])


def tf_value(proto):
    import tensorflow as tf

    return tf.make_ndarray(proto)


def test_a_beam_with_controls_or_an_old_export_goes_a_step_a_request(exports):
    paths, clients = exports
    want = in_graph(clients["toy"], "beam_search", TEXTS[:2], **BEAM)
    runner = SavedModelRunner(paths["toy"])
    with grpc_double(runner, "toy") as (target, servicer):
        steps = StepClient(GrpcClient(target, "toy"))
        search(steps, TEXTS[:2], "beam", **BEAM, **CONTROLS)  # beam_search takes no controls
        asked = {r.model_spec.signature_name for r in servicer.requests}
    assert "beam_search_steps" not in asked and "decode_step_packed" in asked
    del runner.signatures["beam_search_steps"]  # an export made before it
    with grpc_double(runner, "toy") as (target, servicer):
        steps = StepClient(GrpcClient(target, "toy"))
        got = search(steps, TEXTS[:2], "beam", **BEAM)
        again = search(steps, TEXTS[:2], "beam", **BEAM)
        asked = [r.model_spec.signature_name for r in servicer.requests]
    assert got["outputs"] == again["outputs"] == texts_of(want["outputs"])
    assert asked.count("beam_search_steps") == 1  # asked once, then not again
    assert not steps.search_steps and "decode_step_packed" in asked


class NeverDone(StepClient):
    """A double of a server whose `done` never turns True (a fault no export makes); it stops
    answering after 20 requests, so a client that kept asking fails instead of hanging."""

    requests = 0

    def search_to(self, mode, inputs, values, steps):
        self.requests += 1
        assert self.requests <= 20, "the client kept asking"
        return {**super().search_to(mode, inputs, values, steps), "done": np.bool_(False)}


def test_a_search_asked_to_max_length_ends_there(exports):
    _, clients = exports
    want = in_graph(clients["toy"], "beam_search", TEXTS[:2], **BEAM)
    steps = NeverDone(clients["toy"], search_steps=True)
    got = search(steps, TEXTS[:2], "beam", **BEAM)
    assert got["outputs"] == texts_of(want["outputs"])
    assert steps.requests == 3  # 2, 4, then max_length (7) steps


class BrokenChunks(StepClient):
    """A double of a server that fails on `decode_steps` for another reason than a missing
    signature (here: it stops answering)."""

    def decode_steps(self, request):
        raise ServingUnavailableError("Could not reach TensorFlow Serving (a double)")


def test_a_failing_decode_steps_is_reported_not_taken_for_an_old_export(exports):
    _, clients = exports
    with pytest.raises(ServingUnavailableError, match="Could not reach"):
        search(BrokenChunks(clients["toy"]), TEXTS[:2], "greedy", max_length=MAX_LENGTH)


def test_bad_calls(exports):
    _, clients = exports
    steps = StepClient(clients["toy"])
    with pytest.raises(ValueError, match="`mode` must be one of"):
        search(steps, TEXTS, "topk")
    with pytest.raises(ValueError, match="not a single string"):
        search(steps, "hello", "greedy")
    # the server's own check of max_length reaches the caller from the client's thread
    with pytest.raises(Exception, match="`max_length` must be an integer in"):
        search(steps, TEXTS, "greedy", max_length=10_000)
    # a knob out of range: the decoding package's message
    with pytest.raises(ValueError, match="beam_size"):
        search(steps, TEXTS, "beam", beam_size=0, max_length=5)
    empty = search(steps, [], "beam", max_length=5)
    assert empty["outputs"] == []


def test_a_search_request_streams_as_its_keywords(exports):
    from keras_attn.serving.request import SearchRequest

    _, clients = exports
    client = clients["toy"]
    steps = StepClient(client)
    request = SearchRequest.build("beam", BEAM)
    want = in_graph(client, "beam_search", TEXTS, **BEAM)
    got = search(steps, TEXTS, request)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    # the request's knobs are read: another beam size answers another n-best
    narrow = search(steps, TEXTS, SearchRequest.build("beam", dict(BEAM, beam_size=2)))
    assert [len(row) for row in narrow["outputs"]] == [2] * len(TEXTS)
    with pytest.raises(ValueError, match=r"not both.*beam_size"):
        search(steps, TEXTS, request, beam_size=2)
    with pytest.raises(ValueError, match=r"not both.*max_length"):
        search(steps, TEXTS, request, max_length=5)
    # a keyword the mode's search does not read is refused by name before any request
    with pytest.raises(ValueError, match=r"Received: temperature=0\.5"):
        search(steps, TEXTS, "beam", temperature=0.5)


def test_print_stream_writes_each_answer_as_found(exports):
    from keras_attn.serving.streaming import print_stream

    _, clients = exports
    steps = StepClient(clients["toy"])
    out = io.StringIO()
    results = print_stream(steps, TEXTS[:2], "greedy", file=out, max_length=MAX_LENGTH)
    assert out.getvalue() == "".join(r["outputs"][0] + "\n" for r in results)
    assert [r["outputs"][0] for r in results] == search(
        steps, TEXTS[:2], "greedy", max_length=MAX_LENGTH
    )["outputs"]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def screen(written):
    """What a terminal shows after `written`: each line's text after its last rewrite."""
    from keras_attn.cli.stream_view import CLEAR_LINE

    return [line.split(CLEAR_LINE)[-1] for line in written.split("\n")]


def test_terminal_view_rewrites_the_best_hypothesis():
    from keras_attn.cli.stream_view import CLEAR_LINE, LiveLine
    from keras_attn.serving.streaming import StreamEvent

    out = Terminal()
    view = LiveLine(out, width=6)
    for best in (["ab"], ["ab"], ["ac"], ["acdefghij"]):  # the beam changes its mind at "ac"
        view.event(StreamEvent([""], 1, best=best))
    view.end("acdefghijk")
    # each change rewritten in place (an unchanged best is not written again), a long one
    # cut to the terminal's width from its end; then the whole answer and a newline
    assert out.getvalue() == (
        CLEAR_LINE + "ab" + CLEAR_LINE + "ac" + CLEAR_LINE + "…ghij" + CLEAR_LINE + "acdefghijk\n"
    )
    assert screen(out.getvalue()) == ["acdefghijk", ""]


@pytest.mark.parametrize("mode", ["greedy", "beam"])
def test_print_stream_in_a_terminal_and_in_a_pipe(exports, mode):
    from keras_attn.cli.stream_view import CLEAR_LINE
    from keras_attn.serving.streaming import print_stream

    _, clients = exports
    steps = StepClient(clients["transformer"])
    knobs = dict(beam_size=3) if mode == "beam" else {}
    terminal, pipe = Terminal(), io.StringIO()
    results = print_stream(steps, TEXTS, mode, file=terminal, max_length=MAX_LENGTH, **knobs)
    best = [r["outputs"][0][0] if mode == "beam" else r["outputs"][0] for r in results]
    assert CLEAR_LINE in terminal.getvalue()
    assert screen(terminal.getvalue()) == best + [""]
    print_stream(steps, TEXTS, mode, file=pipe, max_length=MAX_LENGTH, **knobs)
    assert pipe.getvalue() == "".join(text + "\n" for text in best)  # plain lines


def test_needs_the_tensorflow_backend(monkeypatch):
    import keras

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ValueError, match="KERAS_BACKEND=tensorflow"):
        search(object(), ["3 May 1999"], "greedy")


def test_translate_stream_prints_the_in_graph_answers(exports):
    from keras_attn import cli

    paths, clients = exports
    out = io.StringIO()
    status = cli.main(["translate", paths["toy"], *TEXTS[:2], "--greedy", "--stream"], out=out)
    assert status == 0
    want = texts_of(in_graph(clients["toy"], "greedy", TEXTS[:2])["outputs"])
    assert out.getvalue() == "".join(text + "\n" for text in want)
    # a beam with --prefix and --constraint: the constrained signature's best answer, with the
    # export's settings (beam_size given)
    exported = dict(BEAM, length_penalty=0.4)
    out = io.StringIO()
    flags = ["--beam-size", "3", "--max-length", "12", "--prefix", "the ", "--constraint", "fox"]
    assert cli.main(["translate", paths["toy"], TEXTS[0], "--stream", *flags], out=out) == 0
    want = in_graph(
        clients["toy"],
        "beam_search_constrained",
        TEXTS[:1],
        prefix=np.array([b"the "], object),
        constraints=np.array([[b"fox"]], object),
        **dict(exported, max_length=12),
    )
    assert out.getvalue() == texts_of(want["outputs"])[0][0] + "\n"


# ---- text constraints, placeholders, word rules ----------------------------------------------

PREFIXES = ["the ", "", "h"]
# ragged per input; "QQ" holds pieces the vocabulary lacks (left out, `constraints_met` False)
PHRASES = [["lazy dog", "fox"], ["over", "QQ"], []]
CONSTRAINED = dict(BEAM, max_length=16)


def phrase_table(rows):
    """The constrained signature's `[B, C]` strings, '' padded."""
    count = max(len(row) for row in rows)
    return [row + [""] * (count - len(row)) for row in rows]


def test_text_constraints_equal_the_in_graph_constrained_search(exports):
    _, clients = exports
    client = clients["toy"]
    want = in_graph(
        client,
        "beam_search_constrained",
        TEXTS,
        prefix=np.array([p.encode() for p in PREFIXES], object),
        constraints=np.array([[c.encode() for c in r] for r in phrase_table(PHRASES)], object),
        **CONSTRAINED,
    )
    steps = StepClient(client)
    got = search(steps, TEXTS, "beam", prefix=PREFIXES, constraints=PHRASES, **CONSTRAINED)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    np.testing.assert_array_equal(got["constraints_met"], want["constraints_met"])
    assert not got["constraints_met"][1].any() and got["constraints_met"][0].any()
    assert all(o.startswith("the ") for o in got["outputs"][0])
    # one prefix and one list of phrases for every input
    shared = search(steps, TEXTS[:2], "beam", prefix="the ", constraints=["fox"], **CONSTRAINED)
    want = in_graph(
        client,
        "beam_search_constrained",
        TEXTS[:2],
        prefix=np.array([b"the "] * 2, object),
        constraints=np.array([[b"fox"]] * 2, object),
        **CONSTRAINED,
    )
    assert shared["outputs"] == texts_of(want["outputs"])


def test_bad_text_constraints_are_refused_by_name(exports):
    _, clients = exports
    steps = StepClient(clients["toy"])
    bad = {
        "`constraints` must hold non-empty phrases": dict(constraints=["fox", ""]),
        "`constraints` must hold phrases of at most max_length=5": dict(constraints=["lazy dog"]),
        "`prefix` must fit in at most max_length=5": dict(prefix="the lazy"),
        "`prefix` must be a string": dict(prefix=["a"]),
        "`constraints` must be a list": dict(constraints="fox"),
    }
    for message, given in bad.items():
        with pytest.raises(ValueError, match=message):
            search(steps, TEXTS, "beam", beam_size=2, max_length=5, **given)


PLACEHOLDER_TEXTS = ["Delete %s for {name}?", "%{count} foxes"]
KEPT_LENGTH = 20


def export_searches(model, tokenizer, export_dir, names, **settings):
    """Only the search signatures `names` beside the step signatures, through the exports' one
    writer (what these tests compare, without tracing every search signature)."""
    import tempfile

    import tensorflow as tf

    from keras_attn.serving.export import _tokenizer_asset
    from keras_attn.serving.settings import ServingSettings
    from keras_attn.serving.signatures import ServingSignatures
    from keras_attn.serving.specs import SPEC
    from keras_attn.serving.steps import step_functions
    from keras_attn.serving.writer import tf_variables, write_savedmodel

    signatures = ServingSignatures(
        model,
        ServingSettings(**settings),
        tf.TensorSpec([None], tf.string, name="inputs"),
        tokenizer,
        tokenizer,
    )
    functions = {name: signatures.function(SPEC[name]) for name in names}
    functions.update(step_functions(signatures))
    with tempfile.TemporaryDirectory() as tmp:
        return write_savedmodel(
            functions,
            export_dir,
            track=tf_variables(model) + [tokenizer],
            assets=[_tokenizer_asset(tokenizer, tmp, "tokenizer")],
        )


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """The toy translator over a vocabulary that spells placeholders, exported with
    `keep_placeholders` and `word_rules` (`beam_search`, `beam_search_constrained`, `greedy`
    and the step signatures), loaded in a session."""
    from keras_attn.text import CharTokenizer
    from tests.serving.toy_model import TRAINING_TEXT, ToyTranslator

    keras.utils.set_random_seed(3)
    tokenizer = CharTokenizer.build(TRAINING_TEXT + PLACEHOLDER_TEXTS)
    model = ToyTranslator(tokenizer.vocab_size)
    model.build_all()
    path = export_searches(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("kept") / "kept"),
        ["beam_search", "beam_search_constrained", "greedy"],
        max_length=KEPT_LENGTH,
        max_input_length=32,
        keep_placeholders=True,
        word_rules=True,
    )
    with ServeSessionClient(path) as client:
        yield client


def test_placeholders_and_word_rules_equal_the_in_graph_searches(kept):
    from keras_attn.text.placeholders import placeholders_kept

    steps = StepClient(kept)
    params = dict(BEAM, max_length=KEPT_LENGTH)
    want = in_graph(kept, "beam_search", PLACEHOLDER_TEXTS, **params)
    got = search(steps, PLACEHOLDER_TEXTS, "beam", **params)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
    for source, row in zip(PLACEHOLDER_TEXTS, got["outputs"]):
        assert any(placeholders_kept(source, output) for output in row), (source, row)
    # the server's search run to growing step limits answers the same
    stepped = search(StepClient(kept, search_steps=True), PLACEHOLDER_TEXTS, "beam", **params)
    assert stepped["outputs"] == got["outputs"]
    np.testing.assert_allclose(stepped["scores"], got["scores"], atol=1e-4)
    # text constraints beside the placeholders (their characters join the budget)
    want = in_graph(
        kept,
        "beam_search_constrained",
        PLACEHOLDER_TEXTS,
        prefix=np.array([b"the "] * 2, object),
        constraints=np.array([[b"{fox}"]] * 2, object),
        **params,
    )
    got = search(steps, PLACEHOLDER_TEXTS, "beam", prefix="the ", constraints=["{fox}"], **params)
    assert got["outputs"] == texts_of(want["outputs"])
    np.testing.assert_array_equal(got["constraints_met"], want["constraints_met"])


# ---- ICU messages ------------------------------------------------------------------------------

# an ICU plural, a plain text and an ICU select, streamed side by side
ICU_TEXTS = [
    "{count, plural, one {# fox} other {# foxes}}",
    "the lazy dog",
    "Delete {n, select, a {this dog} other { these }}?",
]


class CountedSteps(StepClient):
    """A step client that records each call: `("encode", texts)`, `("decode_step", rows)`."""

    def __init__(self, predictor):
        super().__init__(predictor)
        self.calls = []

    def encode(self, inputs, max_length):
        self.calls.append(("encode", [t if isinstance(t, str) else t.decode() for t in inputs]))
        return super().encode(inputs, max_length)

    def decode_step(self, request):
        self.calls.append(("decode_step", len(request["tokens"])))
        return super().decode_step(request)


def served_icu_answer(client, source):
    """What `serving_default` makes of `source` with the greedy search, written out: the ICU
    message split at its skeleton (the pure-Python `icu_split`), each text with a letter
    translated by the in-graph `greedy` signature without its spaces around and with `#` as
    `%d` (and back), the others copied, the skeleton copied; `(answer, score)`."""
    from keras_attn.text.placeholders import icu_join, icu_split

    skeleton, texts = icu_split(source)
    if not skeleton:
        out = in_graph(client, "greedy", [source])
        return texts_of(out["outputs"])[0], float(out["scores"][0])
    asked = [t for t in texts if any(c.isalpha() for c in t)]
    out = in_graph(client, "greedy", [t.strip(" ").replace("#", "%d") for t in asked])
    said = iter(texts_of(out["outputs"]))
    joined = []
    for t in texts:
        if t in asked:
            lead, trail = t[: len(t) - len(t.lstrip(" "))], t[len(t.rstrip(" ")) :]
            t = lead + next(said).replace("%d", "#") + trail
        joined.append(t)
    return icu_join(skeleton, joined), float(np.sum(out["scores"]))


def test_an_icu_message_streams_its_skeleton_and_the_served_answer(kept):
    from keras_attn.text.placeholders import icu_split

    steps = CountedSteps(kept)
    events = list(stream(steps, ICU_TEXTS, "greedy", max_length=KEPT_LENGTH))
    final = events[-1]
    got = final.result["outputs"]
    # the skeleton exactly, as the source has it, in order, with the texts between (which
    # an untrained model may fill with braces of its own)
    for source, output in zip(ICU_TEXTS, got):
        skeleton = icu_split(source)[0]
        pattern = "(?s)(.*)" + "(.*)".join(re.escape(piece) for piece in skeleton) + "(.*)"
        assert re.fullmatch(pattern, output), (skeleton, output)
    assert got[0].startswith("{count, plural, one {") and got[0].endswith("}}")
    assert got[2].endswith(" }}?")  # the spaces around " these " kept, "?" copied
    # the answer serving_default's rule gives with the in-graph greedy search
    want = [served_icu_answer(kept, source) for source in ICU_TEXTS]
    assert got == [answer for answer, _ in want]
    np.testing.assert_allclose(final.result["scores"], [score for _, score in want], atol=1e-4)
    # each row split on its own: the plain row is asked whole, the messages' texts one by one
    # (the first texts' `encode` tells that the export keeps placeholders: no encode of the
    # whole sources)
    encoded = [texts for name, texts in steps.calls if name == "encode"]
    assert encoded == [
        ["%d fox", "the lazy dog", "Delete"],
        ["%d foxes", "this dog"],
        ["these"],
    ]
    # the streamed text is the message so far: the pieces make the answer, in order, every
    # event's text the start of the answer, the skeleton's opening shown first
    assert ["".join(e.pieces[b] for e in events) for b in range(len(ICU_TEXTS))] == got
    sent = [""] * len(ICU_TEXTS)
    for event in events:
        sent = [s + p for s, p in zip(sent, event.pieces)]
        assert all(answer.startswith(s) for s, answer in zip(sent, got))
    assert not events[0].done and events[0].pieces[0].startswith("{count, plural, one {")
    assert [e.step for e in events] == sorted(e.step for e in events)
    # `translate --stream`'s view: a terminal's live line and a pipe's line end on the answer
    from keras_attn.serving.streaming import print_stream

    terminal, pipe = Terminal(), io.StringIO()
    for file in (terminal, pipe):
        print_stream(steps, ICU_TEXTS[:1], "greedy", file=file, max_length=KEPT_LENGTH)
    assert screen(terminal.getvalue()) == [got[0], ""]
    assert pipe.getvalue() == got[0] + "\n"


def test_a_plain_text_streams_with_no_extra_calls(kept):
    steps = CountedSteps(kept)
    got = search(steps, ICU_TEXTS[1:2], "greedy", max_length=KEPT_LENGTH)
    assert [c for c in steps.calls if c[0] == "encode"] == [("encode", ICU_TEXTS[1:2])]
    # one decode_step per step of the one search, and the probe
    assert {c for c in steps.calls if c[0] == "decode_step"} == {("decode_step", 1)}
    assert got["outputs"] == texts_of(in_graph(kept, "greedy", ICU_TEXTS[1:2])["outputs"])


def test_an_icu_message_on_an_export_without_placeholders_is_searched_whole(exports):
    # The first texts' encode answers no placeholders: the sources are searched whole, as the
    # export's own greedy signature searches them.
    _, clients = exports
    steps = CountedSteps(clients["toy"])
    got = search(steps, ICU_TEXTS, "greedy", max_length=MAX_LENGTH)
    encoded = [texts for name, texts in steps.calls if name == "encode"]
    assert encoded == [["%d fox", "the lazy dog", "Delete"], ICU_TEXTS]
    assert got["outputs"] == texts_of(in_graph(clients["toy"], "greedy", ICU_TEXTS)["outputs"])


def test_an_icu_message_beam_joins_each_texts_hypotheses(kept):
    """With a beam, hypothesis k of a message joins the k-th hypothesis of each of its texts,
    as the in-graph `beam_search` answers them; the same through a remote (gRPC) client."""
    params = dict(BEAM, max_length=KEPT_LENGTH)
    source = ICU_TEXTS[:1]
    got = search(StepClient(kept), source, "beam", **params)
    want = in_graph(kept, "beam_search", ["%d fox", "%d foxes"], **params)
    one, other = ([t.replace("%d", "#") for t in row] for row in texts_of(want["outputs"]))
    k = params["beam_size"]
    assert got["outputs"] == [
        ["{count, plural, one {" + one[i] + "} other {" + other[i] + "}}" for i in range(k)]
    ]
    for name in ("scores", "log_probs"):
        np.testing.assert_allclose(got[name], want[name].sum(0, keepdims=True), atol=1e-4)
    np.testing.assert_array_equal(got["lengths"], want["lengths"].sum(0, keepdims=True))
    # each text's placeholder (`#` as `%d`) required: met where both texts' hypotheses hold it
    raw = texts_of(want["outputs"])
    met = [["%d" in raw[0][i] and "%d" in raw[1][i] for i in range(k)]]
    np.testing.assert_array_equal(got["constraints_met"], met)
    # the tokens of the texts' answers, one after another
    lengths = want["lengths"]
    for i in range(k):
        tokens = got["sequences"][0, i]
        first, second = (
            tokens[: lengths[0, i]],
            tokens[lengths[0, i] : lengths[0, i] + lengths[1, i]],
        )
        assert (
            kept.predict("detokenize", {"ids": first[None]})["outputs"][0].decode()
            == (texts_of(want["outputs"])[0][i])
        )
        assert (
            kept.predict("detokenize", {"ids": second[None]})["outputs"][0].decode()
            == (texts_of(want["outputs"])[1][i])
        )
    # the remote client streams the same answer (one code path: StepClient over any client)
    with grpc_double(SavedModelRunner(kept.path), "kept") as (target, servicer):
        events = list(stream(StepClient(GrpcClient(target, "kept")), source, "beam", **params))
        asked = [r.model_spec.signature_name for r in servicer.requests]
    assert events[-1].result["outputs"] == got["outputs"]
    assert "".join(e.pieces[0] for e in events) == got["outputs"][0][0]
    assert asked.count("encode") == 2  # its two texts


def test_a_split_answer_joins_its_texts_and_sends_nothing_it_takes_back():
    """The joining rules on texts' answers given here (no export): a beam's hypothesis k joins
    the texts' k-th, its scores and lengths their sums, `constraints_met` where every text's
    is met; a streamed `%` that may start the stand-in is held back until the next character."""
    from keras_attn.serving.request import SearchRequest
    from keras_attn.serving.streaming import _IcuStream
    from keras_attn.text.placeholders import icu_split

    source = "{n, plural, one { # fox} other {# foxes}}"
    icu = _IcuStream([source], [icu_split(source)])
    one = icu.asks[0][0]
    assert one.query == "%d fox"
    assert one.sure("un %") == " un " and one.sure("un %d") == " un #"
    assert one.sure("un %x") == " un %x" and one.so_far("un %") == " un %"
    parts = [
        {
            "outputs": ["%d a", "b"],
            "scores": np.float32([-1, -2]),
            "log_probs": np.float32([-3, -4]),
            "lengths": np.int32([2, 1]),
            "sequences": np.int32([[4, 5, 0], [6, 0, 0]]),
            "constraints_met": np.array([True, False]),
        },
        {
            "outputs": ["c %d", "%d d"],
            "scores": np.float32([-0.5, -0.25]),
            "log_probs": np.float32([-1, -2]),
            "lengths": np.int32([3, 2]),
            "sequences": np.int32([[7, 8, 9], [10, 11, 0]]),
            "constraints_met": np.array([True, True]),
        },
    ]
    request = SearchRequest.build("beam", dict(beam_size=2, max_length=5))
    got = icu._joined(True, request, [parts])
    assert got["outputs"] == [
        ["{n, plural, one { # a} other {c #}}", "{n, plural, one { b} other {# d}}"]
    ]
    np.testing.assert_allclose(got["scores"], [[-1.5, -2.25]])
    np.testing.assert_allclose(got["log_probs"], [[-4, -6]])
    np.testing.assert_array_equal(got["lengths"], [[5, 3]])
    np.testing.assert_array_equal(got["sequences"], [[[4, 5, 7, 8, 9], [6, 10, 11, 0, 0]]])
    np.testing.assert_array_equal(got["constraints_met"], [[True, False]])


def test_an_icu_message_with_phrases_of_the_request_is_searched_whole(kept):
    """A prefix or phrases of the request speak of the whole answer: the message is searched
    whole, as `beam_search_constrained` searches it."""
    steps = CountedSteps(kept)
    params = dict(BEAM, max_length=KEPT_LENGTH)
    got = search(steps, ICU_TEXTS[:1], "beam", prefix="", constraints=["fox"], **params)
    want = in_graph(
        kept,
        "beam_search_constrained",
        ICU_TEXTS[:1],
        prefix=np.array([b""], object),
        constraints=np.array([[b"fox"]], object),
        **params,
    )
    assert got["outputs"] == texts_of(want["outputs"])
    assert [c for c in steps.calls if c[0] == "encode"] == [("encode", ICU_TEXTS[:1])]
