"""The step signatures (`encode`, `decode_step`, `detokenize`): the state's layout, the values
against the model's own `encode` / `initial_decode_state` / `decode_step`, the op check, the
warm-up records, and bad requests, run the server's way."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from keras_attn import models
from keras_attn.serving import ops_check
from keras_attn.serving.harness import ServingRequest, run_server_way
from keras_attn.serving.steps import (
    PARENTS,
    STATE_BYTES,
    STATE_PREFIX,
    STEP_SIGNATURES,
    StepSignatures,
    packed_names,
    state_paths,
)
from keras_attn.serving.streaming import ServeSessionClient
from keras_attn.text import CharTokenizer

MAX_LENGTH = 5
MAX_INPUT = 12
TEXTS = ["hello world", "abc", ""]
MODELS = {
    "rnn": dict(kind="rnn", attention="bahdanau"),
    "rnn-copy": dict(kind="rnn", attention="bahdanau", copy_attention=True),
    "transformer-copy": dict(kind="transformer", copy_attention=True),
}


def build_model(name, vocab_size, seed=3, scale=0.5):
    """A small model of `MODELS` with weights drawn in NumPy."""
    kwargs = dict(MODELS[name])
    kind = kwargs.pop("kind")
    if kind == "rnn":
        model = models.RNNSeq2Seq(vocab_size, vocab_size, 8, 8, **kwargs)
    else:
        model = models.Transformer(vocab_size, vocab_size, 2, 8, 2, 8, dropout=0.0, **kwargs)
    model(
        {
            "source": keras.KerasTensor((2, 5), "int32"),
            "target_in": keras.KerasTensor((2, 4), "int32"),
        }
    )
    rng = np.random.RandomState(seed)
    model.set_weights([(rng.randn(*w.shape) * scale).astype(w.dtype) for w in model.get_weights()])
    return model


def export_with_steps(model, tokenizer, export_dir, **settings):
    """`export_text_model` with the step signatures beside the search signatures."""
    from keras_attn.serving.export import export_text_model

    return export_text_model(
        model, tokenizer, export_dir, extra_signatures=[STEP_SIGNATURES], **settings
    )


def export_steps_only(model, tokenizer, export_dir, **settings):
    """Only the step signatures, through the exports' one writer (op check, warm-up records):
    what this file tests, without tracing every search signature."""
    import tempfile

    from keras_attn.serving.export import _tokenizer_asset
    from keras_attn.serving.settings import ServingSettings
    from keras_attn.serving.writer import tf_variables, write_savedmodel

    steps = StepSignatures(
        model,
        ServingSettings(**settings),
        tf.TensorSpec([None], tf.string, name="inputs"),
        tokenizer,
        tokenizer,
    )
    with tempfile.TemporaryDirectory() as tmp:
        return write_savedmodel(
            steps.functions(),
            export_dir,
            track=tf_variables(model) + [tokenizer],
            assets=[_tokenizer_asset(tokenizer, tmp, "tokenizer")],
            warmup=steps.warmup_requests(["hello world"]),
        )


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer.build(["hello world", "abc 123"])


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request, tokenizer, tmp_path_factory):
    model = build_model(request.param, tokenizer.vocab_size)
    base = tmp_path_factory.mktemp(request.param) / "m"
    path = export_steps_only(
        model, tokenizer, str(base), max_length=MAX_LENGTH, max_input_length=MAX_INPUT
    )
    client = ServeSessionClient(path)
    yield request.param, model, path, client
    client.close()


def encode(client, texts=TEXTS, max_length=MAX_LENGTH):
    return client.predict(
        "encode",
        {
            "inputs": np.array([t.encode() for t in texts], object),
            "max_length": np.int32(max_length),
        },
    )


def model_state(model, tokenizer, texts=TEXTS, max_length=MAX_LENGTH):
    """The model's own encoder state, as `{name: numpy}`, from ids tokenized in Python."""
    ids = tokenizer.tokenize_padded(texts, length=None).numpy()
    if ids.shape[1] == 0:
        ids = np.zeros([len(texts), 1], np.int32)
    encoder_outputs = model.encode(ids)
    state = model.initial_decode_state(encoder_outputs, max_length)
    return {name: np.asarray(v) for name, v in state_paths(state)}, state


def test_encode_answers_the_models_state(exported, tokenizer):
    name, model, _, client = exported
    out = encode(client)
    want, _ = model_state(model, tokenizer)
    got = {k: v for k, v in out.items() if k.startswith(STATE_PREFIX)}
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5, err_msg=key)
    assert out["start_tokens"].tolist() == [tokenizer.start_id] * len(TEXTS)
    assert int(out["end_token"]) == tokenizer.end_id
    # per-input leaves keep one row per input; the self-attention cache has max_length slots
    for key, value in got.items():
        assert value.shape[0] == len(TEXTS), key
        if key.startswith("state_self_cache_"):
            assert value.shape[1] == MAX_LENGTH, key
    if name == "transformer-copy":
        assert encode(client, max_length=3)["state_self_cache_1_0"].shape[1] == 3
        assert any(k.startswith("state_per_example") for k in got)


def test_decode_step_is_the_models_step(exported, tokenizer):
    """Three steps of a beam of 2 through the signature against the model's `decode_step` on
    the same (tiled, reordered) state."""
    _, model, _, client = exported
    k = 2
    served = {n: v for n, v in encode(client).items() if n.startswith(STATE_PREFIX)}
    _, nest = model_state(model, tokenizer)
    names = [n for n, _ in state_paths(nest)]
    per_example = [n.startswith("state_per_example") for n in names]
    leaves = [np.asarray(v) for _, v in state_paths(nest)]
    leaves = [v if p else np.repeat(v, k, axis=0) for v, p in zip(leaves, per_example)]
    served = {
        n: (served[n] if p else np.repeat(served[n], k, axis=0)) for n, p in zip(names, per_example)
    }
    tokens = np.full([len(TEXTS) * k], tokenizer.start_id, np.int32)
    rng = np.random.RandomState(0)
    for step in range(3):
        state = tf.nest.pack_sequence_as(nest, [tf.constant(v) for v in leaves])
        logits, new_state, _ = model.decode_step(tf.constant(tokens), state, step)
        want = np.asarray(logits, np.float32)
        out = client.predict("decode_step", {"tokens": tokens, "step": np.int32(step), **served})
        np.testing.assert_allclose(out["logits"], want, atol=1e-4)
        new_leaves = [np.asarray(v) for _, v in state_paths(new_state)]
        for n, v in zip(names, new_leaves):
            if n in out:
                np.testing.assert_allclose(out[n], v, atol=1e-5, err_msg=n)
                served[n] = out[n]
            else:  # the signature answers only what the step changed
                np.testing.assert_allclose(served[n], v, atol=1e-5, err_msg=n)
        # a beam's reorder: the client gathers the per-hypothesis rows along parents
        parents = np.concatenate([b * k + rng.randint(0, k, size=k) for b in range(len(TEXTS))])
        leaves = [v if p else v[parents] for v, p in zip(new_leaves, per_example)]
        served = {n: (served[n] if p else served[n][parents]) for n, p in zip(names, per_example)}
        tokens = out["logits"].argmax(-1).astype(np.int32)[parents]


def test_detokenize(exported, tokenizer):
    _, _, _, client = exported
    ids = tokenizer.tokenize_padded(["abc", "hello"]).numpy()
    ids = np.concatenate([ids, np.full([2, 1], tokenizer.end_id), ids], axis=1).astype(np.int32)
    out = client.predict("detokenize", {"ids": ids})
    assert [t.decode() for t in out["outputs"]] == ["abc", "hello"]


def test_step_signatures_use_stock_ops_and_warm_up(exported, server_way):
    _, _, path, _ = exported
    meta = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        meta.ParseFromString(f.read())
    (graph,) = meta.meta_graphs
    assert {"encode", "decode_step", "detokenize"} <= set(graph.signature_def)
    assert ops_check.disallowed_ops(graph) == []
    result, _ = server_way
    replayed = [r.signature_name for r in result.warmup]
    assert {"encode", "decode_step", "detokenize"} <= set(replayed)
    bad = [(r.signature_name, r.error_message) for r in result.warmup if not r.ok]
    assert not bad


def test_ops_check_covers_the_step_signatures(tokenizer):
    """The functions the export checks include the step signatures: an op TF Serving lacks in
    the model's step is refused, naming the signature."""
    from keras_attn.serving.writer import check_ops

    model = build_model("rnn", tokenizer.vocab_size)
    original = model.decode_step

    def with_callback(tokens, state, step):
        logits, state, attention = original(tokens, state, step)
        called = tf.numpy_function(lambda x: x, [logits], tf.float32)
        called.set_shape(logits.shape)  # the searches run to a step limit read it
        return called, state, attention

    model.decode_step = with_callback
    from keras_attn.serving.settings import ServingSettings

    steps = StepSignatures(
        model,
        ServingSettings(max_length=MAX_LENGTH, max_input_length=MAX_INPUT),
        tf.TensorSpec([None], tf.string, name="inputs"),
        tokenizer,
        tokenizer,
    )
    with pytest.raises(ValueError, match=r"`decode_step` signature uses ops .*PyFunc"):
        check_ops(steps.functions())


def _one_longer(value, axis):
    """`value` with one more row of zeros along `axis`."""
    widths = [(0, 0)] * value.ndim
    widths[axis] = (0, 1)
    return np.pad(value, widths)


def bad_states(encoded, past):
    """`decode_step` requests with a wrong state, step or tokens, from `encoded` (what `encode`
    answered for 3 inputs; `past`: the first step past the state's slots): `(good, {key:
    (request, the error's start)})`."""
    state = {n: v for n, v in encoded.items() if n.startswith(STATE_PREFIX)}
    tokens = encoded["start_tokens"]
    good = {"tokens": tokens, "step": np.int32(0), **state}
    tiled = sorted(n for n in state if not n.startswith("state_per_example"))[0]
    past = np.int32(past)
    step_error = "`step` must be an integer in [0, max_length)"
    requests = {
        "tokens_rank2": ({**good, "tokens": tokens[:, None]}, "`tokens` must be a vector"),
        "step_past_max_length": ({**good, "step": past}, step_error),
        "step_negative": ({**good, "step": np.int32(-1)}, step_error),
        "inner_size": (
            {**good, tiled: np.concatenate([state[tiled]] * 2, axis=-1)},
            f"`{tiled}` must have shape",
        ),
        "rows": ({**good, tiled: state[tiled][:2]}, f"`{tiled}` must have shape"),
    }
    per_example = sorted(n for n in state if n.startswith("state_per_example"))
    if per_example:  # 3 tokens rows cannot hold the hypotheses of 2 inputs
        p = per_example[0]
        requests["per_example_rows"] = ({**good, p: state[p][:2]}, f"`{p}` must have shape")
    if len(per_example) > 1:  # 1 row divides 3, but the other per-input leaves have 3
        p = per_example[-1]
        requests["per_example_rows_differ"] = (
            {**good, p: state[p][:1]},
            f"`{p}` must have shape",
        )
    # the source positions of the memory / cross-attention cache against the source mask's
    (mask,) = [n for n in state if n.endswith("source_mask")]
    memory = sorted(n for n in state if "cross_cache" in n or n.endswith("memory"))[0]
    requests["source_positions"] = (
        {**good, memory: _one_longer(state[memory], 1)},
        f"`{memory}` must have as many source positions (axis 1) as `{mask}`",
    )
    if "state_self_cache_0_1" in state:  # layer 0's values one slot longer than its keys
        requests["values_slots"] = (
            {**good, "state_self_cache_0_1": _one_longer(state["state_self_cache_0_1"], 1)},
            "`state_self_cache_0_1` must have as many self-attention cache slots (axis 1) "
            "as `state_self_cache_0_0`",
        )
        requests["layer_slots"] = (  # a whole layer with more slots than layer 0
            {
                **good,
                "state_self_cache_1_0": _one_longer(state["state_self_cache_1_0"], 1),
                "state_self_cache_1_1": _one_longer(state["state_self_cache_1_1"], 1),
            },
            "`state_self_cache_1_0` must have as many self-attention cache slots",
        )
    return good, requests


def _bad_requests(name, client):
    """`bad_states` of the export's `encode` answer, and bad `encode` requests: `(good,
    {key: (request, the error's start)}, {key: (encode request, the error's start)})`."""
    past = MAX_LENGTH if "transformer" in name else 4 * MAX_LENGTH
    good, requests = bad_states(encode(client), past)
    encode_bad = {
        "max_length_zero": (
            {"inputs": np.array([b"abc"], object), "max_length": np.int32(0)},
            "`max_length` must be an integer in [1, 20]",
        ),
        "inputs_rank2": (
            {"inputs": np.array([[b"abc"]], object), "max_length": np.int32(3)},
            "`inputs` must be a vector",
        ),
    }
    return good, requests, encode_bad


@pytest.fixture(scope="module")
def server_way(exported):
    """The good request, the bad ones and the warm-up records, run the server's way."""
    name, _, path, client = exported
    good, requests, encode_bad = _bad_requests(name, client)
    sent = [ServingRequest("decode_step", good)]
    sent += [ServingRequest("decode_step", r) for r, _ in requests.values()]
    sent += [ServingRequest("encode", r) for r, _ in encode_bad.values()]
    # a state tensor of another dtype: the server refuses it before the graph runs
    cache = sorted(n for n in good if n.startswith(STATE_PREFIX) and good[n].dtype == np.float32)[0]
    sent += [ServingRequest("decode_step", {**good, cache: good[cache].astype(np.float64)})]
    result = run_server_way(path, sent, replay_warmup=True)
    return result, (good, {**requests, **encode_bad}, cache)


def test_bad_requests_get_errors_naming_the_input(server_way):
    result, (good, bad, cache) = server_way
    assert result.responses[0].ok, result.responses[0].error_message
    assert len(result.responses) == 2 + len(bad)
    for (key, (_, named)), response in zip(bad.items(), result.responses[1:]):
        assert not response.ok, key
        assert response.error_type == "InvalidArgumentError", key
        assert named in response.error_message, (key, response.error_message)
    dtype = result.responses[-1]
    assert not dtype.ok and f"arg[{cache}] to be float" in dtype.error_message


def test_bad_states_refused_through_the_tf2_loader(exported):
    """The same bad states through `tf.saved_model.load`'s `decode_step` (one error naming
    the input each); the good one answers."""
    name, _, path, client = exported
    good, requests, _ = _bad_requests(name, client)
    decode_step = tf.saved_model.load(path).signatures["decode_step"]
    assert "logits" in decode_step(**{k: tf.constant(v) for k, v in good.items()})
    for key, (request, named) in requests.items():
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            decode_step(**{k: tf.constant(v) for k, v in request.items()})
        assert named in str(caught.value), (key, str(caught.value)[:600])


def _unpack(state_bytes, like):
    """`packed_state_bytes` -> `{name: numpy}` (the leaves in sorted-name order)."""
    names = packed_names(like)
    assert len(state_bytes) == len(names)
    return {
        n: tf.io.parse_tensor(b, tf.as_dtype(like[n].dtype)).numpy()
        for n, b in zip(names, state_bytes)
    }


def test_packed_steps_answer_the_leaf_steps_on_the_rows_of_parents(exported):
    # The packed twin gathers the hypotheses' rows along `parents` (here 2 hypotheses per
    # input, in another order) and answers the state after the step packed: the leaf step on
    # the same rows, gathered by hand, answers the same.
    _, _, _, client = exported
    out = encode(client, TEXTS[:2])
    leaves = {k: v for k, v in out.items() if k.startswith(STATE_PREFIX)}
    assert _unpack(out[STATE_BYTES], leaves).keys() == leaves.keys()
    parents = np.array([1, 0, 0, 1], np.int32)
    tokens = np.array([3, 4, 5, 6], np.int32)
    gathered = {
        k: v if k.startswith("state_per_example") else v[parents] for k, v in leaves.items()
    }
    want = client.predict("decode_step", {"tokens": tokens, "step": np.int32(0), **gathered})
    got = client.predict(
        "decode_step_packed",
        {
            "tokens": tokens,
            "step": np.int32(0),
            PARENTS: parents,
            STATE_BYTES: out[STATE_BYTES],
        },
    )
    np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-5)
    np.testing.assert_allclose(got["attention"], want["attention"], atol=1e-5)
    after = _unpack(got[STATE_BYTES], leaves)
    for name, value in after.items():
        np.testing.assert_allclose(value, want.get(name, gathered[name]), atol=1e-5, err_msg=name)
    chunk = client.predict(
        "decode_steps_packed",
        {
            "tokens": tokens,
            "step": np.int32(0),
            "count": np.int32(3),
            PARENTS: parents,
            STATE_BYTES: out[STATE_BYTES],
        },
    )
    plain = client.predict(
        "decode_steps", {"tokens": tokens, "step": np.int32(0), "count": np.int32(3), **gathered}
    )
    np.testing.assert_array_equal(chunk["chosen"], plain["chosen"])
    after = _unpack(chunk[STATE_BYTES], leaves)
    for name, value in after.items():
        np.testing.assert_allclose(value, plain.get(name, gathered[name]), atol=1e-5, err_msg=name)


def test_bad_packed_requests_are_refused_by_name(exported):
    _, _, _, client = exported
    out = encode(client, TEXTS[:2])
    good = {
        "tokens": np.array([3, 4], np.int32),
        "step": np.int32(0),
        PARENTS: np.array([0, 1], np.int32),
        STATE_BYTES: out[STATE_BYTES],
    }
    assert "logits" in client.predict("decode_step_packed", good)
    bad = {
        PARENTS: {**good, PARENTS: np.array([0, 2], np.int32)},
        STATE_BYTES: {**good, STATE_BYTES: out[STATE_BYTES][1:]},
        "tokens": {**good, "tokens": np.array([3, 4, 5], np.int32)},
    }
    for named, request in bad.items():
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"`{named}`"):
            client.predict("decode_step_packed", request)
