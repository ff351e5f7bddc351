"""The XLA signatures (`<name>_xla`, docs/serving.md "XLA"): the same answers as the plain
signatures, compiled for real, warmed up for every bucket, and the same errors.

One export of the toy translator with one XLA signature and one (batch, source) bucket, so
that every request and the whole warm-up replay compile `beam_search_xla` once. It is loaded
in this process with the server's loader (`run_in_process`: a fresh graph and session, the
warm-up replayed, then every request); each test reads its part of that one run. That the
served graph needs no keras_attn in a fresh process is tested on the plain export
(tests/serving/test_export.py).
"""

import numpy as np
import pytest

from keras_attn.serving.export import WARMUP_RELPATH, export_text_model
from keras_attn.serving.harness import ServingRequest, read_warmup_requests, run_in_process
from keras_attn.serving.settings import ServingSettings

XLA = ("beam_search",)
# Batches of 1 and 3 are both padded to the one batch bucket, 4 (more buckets: one compile
# each; their warm-up texts are tested without compiling, test_warmup_texts_...).
BATCH_BUCKETS = (4,)
MAX_INPUT = 16
LENGTH_BUCKETS = (MAX_INPUT,)
LONG = "the quick brown fox jumps over the lazy dog"  # cut to MAX_INPUT ids


def strings(*items):
    return np.array([t.encode() if isinstance(t, str) else t for t in items], dtype=object)


def params(**changes):
    values = {
        "beam_size": np.int32(3),
        "max_length": np.int32(6),
        "length_penalty": np.float32(0.6),
        "coverage_penalty": np.float32(0.3),
    }
    values.update(changes)
    return values


# Batches of 1 (bucket 1) and 3 (padded to 4); sources of 5 and 11 ids (padded to 16), more
# than MAX_INPUT ids (cut to 16), and an empty one. Batches past the largest bucket:
# test_buckets_follow_their_formula.
BATCHES = {
    "one": strings("hello"),
    "three": strings("", "hello world", LONG),
}
BAD = {
    "beam_size": params(beam_size=np.int32(0)),
    "max_length": params(max_length=np.int32(10_000)),
    "length_penalty": params(length_penalty=np.float32(-1.0)),
    "coverage_penalty": params(coverage_penalty=np.float32(1e30)),
}


def requests():
    out = {}
    for key, texts in BATCHES.items():
        for suffix in ("", "_xla"):
            out[f"beam{suffix}/{key}"] = ServingRequest(
                "beam_search" + suffix, {"inputs": texts, **params()}
            )
    for name, values in BAD.items():
        for suffix in ("", "_xla"):
            out[f"bad{suffix}/{name}"] = ServingRequest(
                "beam_search" + suffix, {"inputs": strings("hello"), **values}
            )
    out["bad_xla/rank"] = ServingRequest(
        "beam_search_xla", {"inputs": np.array([[b"hello"]], object), **params()}
    )
    return out


@pytest.fixture(scope="module")
def served(toy, tmp_path_factory):
    model, tokenizer = toy
    path = export_text_model(
        model,
        tokenizer,
        str(tmp_path_factory.mktemp("xla") / "toy"),
        beam_size=3,
        max_length=6,
        max_input_length=MAX_INPUT,
        xla=XLA,
        xla_batch_sizes=BATCH_BUCKETS,
        xla_source_lengths=LENGTH_BUCKETS,
    )
    reqs = requests()
    result = run_in_process(path, list(reqs.values()), replay_warmup=True)
    return path, result, dict(zip(reqs, result.responses)), tokenizer


def ok(responses, key):
    response = responses[key]
    assert response.ok, f"{key}: {response.error_type}: {response.error_message}"
    return response.outputs


@pytest.mark.parametrize("batch", list(BATCHES))
def test_xla_beam_search_answers_as_the_plain_signature(served, batch):
    responses = served[2]
    plain, xla = ok(responses, f"beam/{batch}"), ok(responses, f"beam_xla/{batch}")
    assert xla["outputs"].tolist() == plain["outputs"].tolist()
    assert xla["outputs"].shape == (len(BATCHES[batch]), 3)
    np.testing.assert_array_equal(xla["lengths"], plain["lengths"])
    np.testing.assert_allclose(xla["scores"], plain["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xla["log_probs"], plain["log_probs"], rtol=1e-5, atol=1e-5)
    # [B, K, T, S]: the padding to the buckets is cut away again
    assert xla["alignments"].shape == plain["alignments"].shape
    np.testing.assert_allclose(xla["alignments"], plain["alignments"], atol=1e-5)


def test_bucket_padding_never_reaches_the_answer(served):
    """The longest source of "three" is cut to MAX_INPUT ids: S of the answer is that, not the
    padded bucket, and the empty input gets an (empty-source) answer, not an error."""
    out = ok(served[2], "beam_xla/three")
    assert out["alignments"].shape[-1] == MAX_INPUT
    one = ok(served[2], "beam_xla/one")
    assert one["alignments"].shape[-1] == len("hello")  # one id per character, bucket 16


@pytest.mark.parametrize("name", list(BAD))
def test_bad_params_get_the_plain_signatures_error(served, name):
    responses = served[2]
    plain, xla = responses[f"bad/{name}"], responses[f"bad_xla/{name}"]
    assert plain.error_type == xla.error_type == "InvalidArgumentError"
    assert f"`{name}` must be" in xla.error_message
    first_line = plain.error_message.splitlines()[0]
    assert first_line.split("Received")[0] in xla.error_message


def test_wrong_rank_is_refused_by_name(served):
    response = served[2]["bad_xla/rank"]
    assert response.error_type == "InvalidArgumentError"
    assert "`inputs` must be a vector" in response.error_message


def test_warmup_compiles_every_bucket_of_the_xla_signatures(served):
    import tensorflow as tf

    path, result, _, tokenizer = served
    assert all(r.ok for r in result.warmup), [r.error_message for r in result.warmup]
    assert [r.signature_name for r in result.warmup_requests] == [
        r.signature_name for r in read_warmup_requests(path)
    ]
    shapes = {}
    for request in result.warmup_requests:
        name = request.signature_name
        if name.endswith("_xla"):
            texts = request.inputs["inputs"]
            ids = tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy()
            # the source bucket the longest text falls in (ids cut to MAX_INPUT)
            longest = min(int(max(ids)), MAX_INPUT)
            bucket = min(b for b in LENGTH_BUCKETS if b >= longest)
            shapes.setdefault(name, set()).add((len(texts), bucket))
    grid = {(b, s) for b in BATCH_BUCKETS for s in LENGTH_BUCKETS}
    assert shapes == {name + "_xla": grid for name in XLA}
    plain = [
        r.signature_name for r in result.warmup_requests if not r.signature_name.endswith("_xla")
    ]
    assert len(plain) == len(set(plain)) == 7
    import os

    assert os.path.getsize(os.path.join(path, WARMUP_RELPATH)) > 0


def test_warmup_texts_fall_in_every_source_bucket(toy):
    """The warm-up batches of the XLA signatures: every (batch, source-length) bucket once."""
    import tensorflow as tf

    from keras_attn.serving.export import _xla_warmup_batches
    from keras_attn.serving.signatures import ServingSignatures

    model, tokenizer = toy
    lengths = (4, 8, 32)
    settings = ServingSettings(
        max_input_length=40,
        source_add_end=True,
        xla=("beam_search",),
        xla_batch_sizes=(1, 3),
        xla_source_lengths=lengths,
    )
    signatures = ServingSignatures(
        model, settings, tf.TensorSpec([None], tf.string, name="inputs"), tokenizer, tokenizer
    )
    found = []
    for batch in _xla_warmup_batches(np.array([b"hello world"], object), signatures):
        # the ids the signature makes: characters + the end marker, cut to 40
        ids = [min(len(t) + 1, 40) for t in batch]
        assert len(set(ids)) == 1
        found.append((len(batch), min(b for b in lengths + (40,) if b >= ids[0])))
    assert sorted(found) == sorted((b, s) for b in (1, 3) for s in lengths + (40,))


def _functions_by_name(path):
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(f"{path}/saved_model.pb", "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0]
    return graph, {f.signature.name: f for f in graph.graph_def.library.function}


def _reachable(functions, root):
    """Names of the library functions `root` calls, transitively, with the attrs of each call."""
    seen, stack, calls = set(), [root], []
    while stack:
        name = stack.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in functions[name].node_def:
            for attr in node.attr.values():
                if attr.HasField("func"):
                    calls.append((attr.func.name, node))
                    stack.append(attr.func.name)
    return seen, calls


def test_the_xla_signature_calls_a_compiled_function_and_the_plain_one_does_not(served):
    graph, functions = _functions_by_name(served[0])
    signature_fn = {}
    for node in graph.graph_def.node:
        for attr in node.attr.values():
            if attr.HasField("func") and node.name.startswith("StatefulPartitionedCall"):
                signature_fn.setdefault(node.name, attr.func.name)

    def compiled(root):
        names, _ = _reachable(functions, root)
        return [
            n
            for n in names
            if functions[n].attr.get("_XlaMustCompile") is not None
            and functions[n].attr["_XlaMustCompile"].b
        ]

    roots = {
        sig: signature_fn[graph.signature_def[sig].outputs["outputs"].name.split(":")[0]]
        for sig in ("beam_search", "beam_search_xla")
    }
    assert compiled(roots["beam_search"]) == []
    (core,) = compiled(roots["beam_search_xla"])
    # the search loop and the encoder are inside the compiled function; the tokenizer is not
    inside, _ = _reachable(functions, core)
    ops = {node.op for name in inside for node in functions[name].node_def}
    assert "While" in ops or "StatelessWhile" in ops
    assert not any("Sentencepiece" in op or "Wordpiece" in op or "Unicode" in op for op in ops)


def test_settings_check_the_xla_arguments():
    assert ServingSettings(xla=True).xla == (
        "serving_default",
        "beam_search",
        "greedy",
        "beam_search_controls",
        "greedy_controls",
        "beam_search_constrained",
    )
    # image exports have no constrained signature: xla=True leaves it out, naming it is refused
    assert "beam_search_constrained" not in ServingSettings(xla=True, text_input=False).xla
    with pytest.raises(ValueError, match="`xla` must name signatures"):
        ServingSettings(xla=("beam_search_constrained",), text_input=False)
    assert ServingSettings(max_input_length=40).xla_source_lengths == (16, 32, 40)
    with pytest.raises(ValueError, match="`xla` must name signatures"):
        ServingSettings(xla=("sample",))
    with pytest.raises(ValueError, match="`xla_batch_sizes` must be a list of positive"):
        ServingSettings(xla=True, xla_batch_sizes=(0, 8))


def test_buckets_follow_their_formula():
    import tensorflow as tf

    from keras_attn.serving.buckets import bucket

    buckets = (1, 8, 32)
    for size in (0, 1, 2, 8, 9, 32, 33, 64, 65):
        expected = next((b for b in buckets if b >= size), -(-size // 32) * 32)
        assert int(bucket(tf.constant(size), buckets)) == expected


def test_nan_logits_are_an_error_under_xla_too(toy):
    """XLA drops `tf.debugging.Assert`: the engine returns its NaN check as a flag and the
    signature asserts on it outside the compiled function."""
    import tensorflow as tf

    from keras_attn.serving import specs
    from keras_attn.serving.signatures import ServingSignatures

    model, tokenizer = toy

    class Broken:
        def encode(self, ids):
            return model.encode(ids)

        def initial_decode_state(self, encoded, max_length):
            return model.initial_decode_state(encoded, max_length)

        def decode_step(self, tokens, state, step):
            logits, state, attention = model.decode_step(tokens, state, step)
            return logits + tf.cast(step, tf.float32) * np.float32("nan"), state, attention

    settings = ServingSettings(beam_size=2, max_length=3, max_input_length=8, xla=("greedy",))
    signatures = ServingSignatures(
        Broken(), settings, tf.TensorSpec([None], tf.string, name="inputs"), tokenizer, tokenizer
    )
    greedy = tf.function(signatures.body(specs.SPEC["greedy"], xla=True))
    with pytest.raises(tf.errors.InvalidArgumentError, match="`step_fn` returned NaN"):
        greedy(tf.constant(["hello"]))
