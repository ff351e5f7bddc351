"""Export of a text model, checked the way TensorFlow Serving runs it (docs/serving.md).

The toy model is exported once for the module and every request is answered by one fresh
process that imports only tensorflow and tensorflow_text (keras_attn.serving.harness).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import beam_search
from keras_attn.serving import ops_check
from keras_attn.serving.export import export_text_model
from keras_attn.serving.harness import ServingRequest, run_server_way

BEAM = 3
MAX_LENGTH = 6
MAX_INPUT = 16
ALPHA, BETA, GAMMA = 0.6, 0.2, 0.1
LONG = ("the quick brown fox " * 5000).encode()  # 100k characters


def strings(*items):
    return np.array(list(items), dtype=object)


def beam_request(inputs, beam_size=BEAM, max_length=MAX_LENGTH, alpha=ALPHA, beta=BETA, **kw):
    return ServingRequest(
        "beam_search",
        {
            "inputs": inputs,
            "beam_size": np.int32(beam_size),
            "max_length": np.int32(max_length),
            "length_penalty": np.float32(alpha),
            "coverage_penalty": np.float32(beta),
        },
        **kw,
    )


REQUESTS = {
    "default": ServingRequest("serving_default", {"inputs": strings(b"hello world", b"fox")}),
    "beam": beam_request(strings(b"hello world", b"fox")),
    "beam_k2": beam_request(
        strings(b"lazy dog", b"the"), beam_size=2, max_length=4, alpha=1.0, beta=0.5
    ),
    "beam_k1": beam_request(
        strings(b"hello world", b"fox"), beam_size=1, max_length=MAX_LENGTH, alpha=ALPHA, beta=BETA
    ),
    "greedy": ServingRequest("greedy", {"inputs": strings(b"hello world", b"fox")}),
    "empty_strings": beam_request(strings(b"", b"hello", b"")),
    "hello_alone": beam_request(strings(b"hello")),
    "broken": ServingRequest("greedy", {"inputs": strings(b"\xff\xfe", b"ab\xc3")}),
    "replacement": ServingRequest(
        "greedy", {"inputs": strings("\ufffd\ufffd".encode(), "ab\ufffd".encode())}
    ),
    "broken_default": ServingRequest("serving_default", {"inputs": strings(b"\xff\xfe", b"")}),
    "long": beam_request(strings(LONG)),
    "long_cut": beam_request(strings(LONG[:MAX_INPUT])),
    "long_greedy": ServingRequest("greedy", {"inputs": strings(LONG)}),
    "empty_default": ServingRequest("serving_default", {"inputs": strings()}),
    "empty_beam": beam_request(strings()),
    "empty_greedy": ServingRequest("greedy", {"inputs": strings()}),
    "beam_size_0": beam_request(strings(b"hello"), beam_size=0),
    "beam_size_big": beam_request(strings(b"hello"), beam_size=10_000),
    "max_length_0": beam_request(strings(b"hello"), max_length=0),
    "alpha_nan": beam_request(strings(b"hello"), alpha=float("nan")),
    "filtered": beam_request(strings(b"fox"), output_filter=("outputs", "scores")),
}


@pytest.fixture(scope="module")
def export_dir(toy, tmp_path_factory):
    model, tokenizer = toy
    base = tmp_path_factory.mktemp("export") / "toy"
    return export_text_model(
        model,
        tokenizer,
        str(base),
        version=3,
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        max_input_length=MAX_INPUT,
        length_penalty=ALPHA,
        coverage_penalty=BETA,
        eos_penalty=GAMMA,
        beam_size_limit=8,
        warmup_inputs=["hello", "fox"],
    )


@pytest.fixture(scope="module")
def served(export_dir):
    result = run_server_way(export_dir, list(REQUESTS.values()), replay_warmup=True)
    responses = dict(zip(REQUESTS, result.responses))
    return result, responses


def ok(responses, key):
    response = responses[key]
    assert response.ok, f"{key}: {response.error_type}: {response.error_message}"
    return response.outputs


def gnmt_scores(log_probs, lengths, alignments, source_mask, alpha, beta, gamma):
    """The GNMT score of docs/decoding.md, written out in NumPy. alignments [B, K, T, S], source_mask [B, S]."""
    lp = ((5.0 + lengths) / 6.0) ** alpha
    coverage = alignments.sum(axis=2)  # [B, K, S]
    logs = np.log(np.clip(coverage, 1e-10, 1.0)) * source_mask[:, None, :]
    cp = beta * logs.sum(axis=-1)
    ep = gamma * source_mask.sum(axis=-1)[:, None] / lengths
    return log_probs / lp + cp + ep


# ---- the SavedModel on disk ---------------------------------------------------------------


def test_layout_and_assets(export_dir, toy):
    _, tokenizer = toy
    assert os.path.basename(export_dir) == "3"
    assert sorted(os.listdir(os.path.dirname(export_dir))) == ["3"]  # no staging leftovers
    for name in ("saved_model.pb", "variables", "assets", "assets.extra"):
        assert os.path.exists(os.path.join(export_dir, name)), name
    with open(os.path.join(export_dir, "assets", "tokenizer_vocab.txt"), encoding="utf-8") as f:
        assert f.read().split("\n")[:-1] == tokenizer.vocabulary


def test_every_op_is_servable(export_dir):
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    assert len(saved.meta_graphs) == 1
    meta_graph = saved.meta_graphs[0]
    assert "serve" in meta_graph.meta_info_def.tags
    assert ops_check.disallowed_ops(meta_graph) == []
    ops = ops_check.graph_ops(meta_graph)
    # The walk reaches the function library: the searches' loops and the tokenizer's lookup.
    assert {"While", "StatelessWhile"} & ops
    assert "LookupTableFindV2" in ops


def test_signatures(served):
    result, _ = served
    sigs = result.signatures
    assert set(sigs) == {
        "serving_default",
        "beam_search",
        "greedy",
        "beam_search_controls",
        "greedy_controls",
        "sample",
        "beam_search_constrained",
    }

    def io(name, kind):
        return {alias: spec[1:] for alias, spec in sigs[name][kind].items()}

    assert io("serving_default", "inputs") == {"inputs": ("string", (None,))}
    assert io("serving_default", "outputs") == {
        "outputs": ("string", (None,)),
        "scores": ("float32", (None,)),
    }
    assert io("beam_search", "inputs") == {
        "inputs": ("string", (None,)),
        "beam_size": ("int32", ()),
        "max_length": ("int32", ()),
        "length_penalty": ("float32", ()),
        "coverage_penalty": ("float32", ()),
    }
    assert io("beam_search", "outputs") == {
        "outputs": ("string", (None, None)),
        "scores": ("float32", (None, None)),
        "log_probs": ("float32", (None, None)),
        "lengths": ("int32", (None, None)),
        "alignments": ("float32", (None, None, None, None)),
        "token_log_probs": ("float32", (None, None, None)),
    }
    assert io("beam_search_constrained", "inputs") == {
        **io("beam_search", "inputs"),
        "prefix": ("string", (None,)),
        "constraints": ("string", (None, None)),
    }
    assert io("beam_search_constrained", "outputs") == {
        **io("beam_search", "outputs"),
        "constraints_met": ("bool", (None, None)),
    }
    assert io("greedy", "inputs") == {"inputs": ("string", (None,))}
    assert io("greedy", "outputs") == {
        "outputs": ("string", (None,)),
        "scores": ("float32", (None,)),
        "alignments": ("float32", (None, None, None)),
    }


def test_loaded_without_keras_attn(served):
    result, _ = served
    assert "keras_attn" not in result.modules
    assert "tensorflow_text" in result.modules


# ---- normal text ---------------------------------------------------------------------------


def test_beam_search_equals_in_process_search(served, toy):
    model, tokenizer = toy
    out = ok(served[1], "beam")
    texts = ["hello world", "fox"]
    ids = tokenizer.tokenize(tf.constant(texts), max_length=MAX_INPUT).to_tensor(0)
    encoded = model.encode(ids)
    reference = beam_search(
        model.decode_step,
        model.initial_decode_state(encoded, MAX_LENGTH),
        tf.fill([2], tokenizer.start_id),
        tokenizer.end_id,
        beam_size=BEAM,
        max_length=MAX_LENGTH,
        length_penalty=ALPHA,
        coverage_penalty=BETA,
        eos_penalty=GAMMA,
        source_mask=encoded["source_mask"],
    )
    lengths = reference["lengths"].numpy()
    t = lengths.max()
    assert out["outputs"].shape == (2, BEAM)
    np.testing.assert_array_equal(out["lengths"], lengths)
    np.testing.assert_allclose(out["scores"], reference["scores"].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        out["log_probs"], reference["log_probs"].numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        out["alignments"], reference["alignments"].numpy()[:, :, :t], atol=1e-5
    )
    expected = tokenizer.detokenize(reference["sequences"]).numpy()
    assert out["outputs"].tolist() == expected.tolist()


def test_served_scores_follow_the_documented_formula(served):
    for key, alpha, beta in (("beam", ALPHA, BETA), ("beam_k2", 1.0, 0.5)):
        out = ok(served[1], key)
        batch, _, _, width = out["alignments"].shape
        source_mask = np.zeros((batch, width), np.float32)
        for b, text in enumerate(REQUESTS[key].inputs["inputs"]):
            source_mask[b, : len(text.decode())] = 1.0
        expected = gnmt_scores(
            out["log_probs"], out["lengths"], out["alignments"], source_mask, alpha, beta, GAMMA
        )
        np.testing.assert_allclose(out["scores"], expected, rtol=1e-4, atol=1e-4)
        assert np.all(np.diff(out["scores"], axis=1) <= 0), "scores must be sorted, best first"
    assert ok(served[1], "beam_k2")["outputs"].shape == (2, 2)


def test_serving_default_is_the_best_beam(served):
    default, beam = ok(served[1], "default"), ok(served[1], "beam")
    assert default["outputs"].tolist() == beam["outputs"][:, 0].tolist()
    np.testing.assert_allclose(default["scores"], beam["scores"][:, 0], rtol=1e-6)


def test_greedy_equals_beam_of_one(served):
    greedy, beam1 = ok(served[1], "greedy"), ok(served[1], "beam_k1")
    assert greedy["outputs"].tolist() == beam1["outputs"][:, 0].tolist()
    np.testing.assert_allclose(greedy["scores"], beam1["scores"][:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(greedy["alignments"], beam1["alignments"][:, 0], atol=1e-6)


def test_alignments_are_distributions_over_the_source(served):
    out = ok(served[1], "beam")
    for b, text in enumerate([b"hello world", b"fox"]):
        s = len(text)
        for k in range(BEAM):
            n = out["lengths"][b, k]
            rows = out["alignments"][b, k]
            np.testing.assert_allclose(rows[:n, :s].sum(-1), np.ones(n), atol=1e-5)
            assert np.all(rows[:, s:] == 0.0) and np.all(rows[n:] == 0.0)


# ---- bad and odd input ---------------------------------------------------------------------


def test_empty_strings(served):
    out, alone = ok(served[1], "empty_strings"), ok(served[1], "hello_alone")
    assert out["outputs"].shape == (3, BEAM)
    assert np.all(np.isfinite(out["scores"][:, 0]))
    # A fully masked source: no attention anywhere.
    assert np.all(out["alignments"][0] == 0.0) and np.all(out["alignments"][2] == 0.0)
    # Rows are independent: "hello" answers the same next to empty strings as alone.
    assert out["outputs"][1].tolist() == alone["outputs"][0].tolist()
    np.testing.assert_allclose(out["scores"][1], alone["scores"][0], rtol=1e-5, atol=1e-5)


def test_broken_utf8_reads_as_replacement_characters(served):
    broken, replaced = ok(served[1], "broken"), ok(served[1], "replacement")
    assert broken["outputs"].tolist() == replaced["outputs"].tolist()
    np.testing.assert_allclose(broken["scores"], replaced["scores"], rtol=1e-6)
    for text in broken["outputs"]:
        text.decode("utf-8")  # outputs are valid UTF-8
    default = ok(served[1], "broken_default")
    assert default["outputs"].shape == (2,) and np.all(np.isfinite(default["scores"]))


def test_long_input_is_truncated(served):
    long, cut = ok(served[1], "long"), ok(served[1], "long_cut")
    assert long["alignments"].shape[-1] == MAX_INPUT
    assert long["outputs"].tolist() == cut["outputs"].tolist()
    np.testing.assert_allclose(long["scores"], cut["scores"], rtol=1e-6)
    greedy = ok(served[1], "long_greedy")
    assert greedy["outputs"].shape == (1,) and greedy["alignments"].shape[-1] == MAX_INPUT


def test_empty_batch(served):
    default = ok(served[1], "empty_default")
    assert default["outputs"].shape == (0,) and default["scores"].shape == (0,)
    beam = ok(served[1], "empty_beam")
    for name in ("outputs", "scores", "log_probs", "lengths"):
        assert beam[name].shape == (0, BEAM), name
    assert beam["alignments"].shape[:2] == (0, BEAM)
    greedy = ok(served[1], "empty_greedy")
    assert greedy["outputs"].shape == (0,) and greedy["alignments"].shape[0] == 0


@pytest.mark.parametrize(
    "key, name",
    [
        ("beam_size_0", "beam_size"),
        ("beam_size_big", "beam_size"),
        ("max_length_0", "max_length"),
        ("alpha_nan", "length_penalty"),
    ],
)
def test_invalid_params_raise_invalid_argument(served, key, name):
    response = served[1][key]
    assert response.error_type == "InvalidArgumentError"
    assert name in response.error_message


def test_output_filter(served):
    assert set(ok(served[1], "filtered")) == {"outputs", "scores"}


# ---- warm-up -------------------------------------------------------------------------------


def test_warmup_file_replayed(served):
    result, _ = served
    names = [r.signature_name for r in result.warmup_requests]
    assert sorted(names) == sorted(
        {
            "serving_default",
            "beam_search",
            "greedy",
            "beam_search_controls",
            "greedy_controls",
            "sample",
            "beam_search_constrained",
        }
    )
    for request, response in zip(result.warmup_requests, result.warmup):
        assert response.ok, f"{request.signature_name}: {response.error_message}"
        assert set(request.inputs) == set(result.signatures[request.signature_name]["inputs"])
        assert request.inputs["inputs"].tolist() == [b"hello", b"fox"]
        assert response.outputs["outputs"].shape[0] == 2


# ---- export-time checks --------------------------------------------------------------------


def test_existing_version_is_not_overwritten(toy, export_dir):
    model, tokenizer = toy
    with pytest.raises(ValueError, match="version"):
        export_text_model(model, tokenizer, os.path.dirname(export_dir), version=3)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"beam_size": 0}, "beam_size"),
        ({"version": 0}, "version"),
        ({"max_input_length": 0}, "max_input_length"),
        ({"length_penalty": float("inf")}, "length_penalty"),
        ({"warmup_inputs": "hello"}, "warmup_inputs"),
    ],
)
def test_bad_export_arguments(toy, tmp_path, kwargs, name):
    model, tokenizer = toy
    with pytest.raises(ValueError, match=name):
        export_text_model(model, tokenizer, str(tmp_path), **kwargs)


def test_model_without_the_interface(toy, tmp_path):
    _, tokenizer = toy
    with pytest.raises(ValueError, match="decode_step"):
        export_text_model(object(), tokenizer, str(tmp_path))


def test_python_callbacks_are_refused_at_export(tmp_path):
    from tests.serving.toy_model import ToyTranslator, make_toy

    class CallbackTranslator(ToyTranslator):
        def encode(self, source_ids):
            out = super().encode(source_ids)
            memory = tf.numpy_function(lambda m: m, [out["memory"]], tf.float32)
            out["memory"] = tf.ensure_shape(memory, out["memory"].shape)
            return out

    model, tokenizer = make_toy()
    bad = CallbackTranslator(tokenizer.vocab_size)
    bad.build_all()
    with pytest.raises(ValueError, match="PyFunc"):
        export_text_model(bad, tokenizer, str(tmp_path), max_length=2)
    assert not os.path.exists(tmp_path / "1")


def test_python_branches_on_tensors_get_a_clear_error_at_export(tmp_path):
    """The signatures are traced as written (no AutoGraph): a Python `if` on a tensor value in
    a model's step is refused at export with what to write instead, and nothing is written."""
    from tests.serving.toy_model import ToyTranslator, make_toy

    class BranchingTranslator(ToyTranslator):
        def decode_step(self, tokens, state, step):
            logits, state, weights = super().decode_step(tokens, state, step)
            if tf.reduce_sum(logits) > 0:  # a Python branch on a tensor
                logits = -logits
            return logits, state, weights

    model, tokenizer = make_toy()
    bad = BranchingTranslator(tokenizer.vocab_size)
    bad.build_all()
    with pytest.raises(TypeError, match=r"keras\.ops\.cond"):
        export_text_model(bad, tokenizer, str(tmp_path), max_length=2)
    assert not os.path.exists(tmp_path / "1")
