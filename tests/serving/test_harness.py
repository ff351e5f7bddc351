"""The server-way harness on a hand-made SavedModel (no keras_attn model involved)."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from keras_attn.serving.harness import ServingRequest, run_server_way


class _Doubler(tf.Module):
    def __init__(self):
        super().__init__()
        self.factor = tf.Variable(2.0)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(["a", "b"]), tf.constant([10, 20], tf.int64)
            ),
            default_value=-1,
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32)])
    def scale(self, x, k):
        tf.debugging.assert_greater_equal(k, 1, message="k must be >= 1")
        return {"y": x * self.factor * tf.cast(k, tf.float32), "n": tf.shape(x)[0]}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def lookup(self, words):
        return {"ids": self.table.lookup(words), "upper": tf.strings.upper(words)}


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("harness") / "1")
    module = _Doubler()
    tf.saved_model.save(
        module,
        path,
        signatures={
            "serving_default": module.lookup.get_concrete_function(),
            "scale": module.scale.get_concrete_function(),
        },
    )
    os.makedirs(os.path.join(path, "assets.extra"))
    with tf.io.TFRecordWriter(
        os.path.join(path, "assets.extra", "tf_serving_warmup_requests")
    ) as w:
        for name, inputs in [
            ("scale", {"x": np.array([1.0, 2.0], np.float32), "k": np.int32(3)}),
            ("", {"words": np.array([b"b"], object)}),
        ]:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name="m", signature_name=name)
            )
            for alias, value in inputs.items():
                request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            w.write(log.SerializeToString())
    return path


@pytest.fixture(scope="module")
def result(export_dir):
    return run_server_way(
        export_dir,
        [
            ServingRequest("scale", {"x": np.array([1.0, -3.0], np.float32), "k": np.int32(2)}),
            ServingRequest("scale", {"x": np.array([1.0], np.float32), "k": np.int32(0)}),
            ("serving_default", {"words": np.array([b"a", b"zz", b"b"], object)}),
            ServingRequest(
                "serving_default", {"words": np.array([b"a"], object)}, output_filter=("upper",)
            ),
            ServingRequest("scale", {"x": np.array([1.0], np.float32)}),
            ServingRequest("scale", {"x": np.array([1.0], np.float64), "k": np.int32(1)}),
            ServingRequest("nope", {"x": np.array([1.0], np.float32)}),
        ],
        replay_warmup=True,
    )


def test_runs_signatures_by_tensor_names(result):
    first = result.responses[0]
    assert first.ok, first.error_message
    np.testing.assert_allclose(first.outputs["y"], np.array([1.0, -3.0]) * 2.0 * 2)
    assert int(first.outputs["n"]) == 2
    strings = result.responses[2]
    assert strings.ok, strings.error_message
    np.testing.assert_array_equal(strings.outputs["ids"], [10, -1, 20])
    assert list(strings.outputs["upper"]) == [b"A", b"ZZ", b"B"]


def test_graph_assertion_is_invalid_argument(result):
    failed = result.responses[1]
    assert failed.error_type == "InvalidArgumentError"
    assert "k must be >= 1" in failed.error_message


def test_output_filter_fetches_only_the_named_outputs(result):
    filtered = result.responses[3]
    assert filtered.ok, filtered.error_message
    assert set(filtered.outputs) == {"upper"}


def test_request_checks_like_the_server(result):
    missing, wrong_dtype, unknown = result.responses[4:7]
    assert (
        missing.error_type == "InvalidArgumentError"
        and "input size does not match" in missing.error_message
    )
    assert wrong_dtype.error_type == "InvalidArgumentError" and "float" in wrong_dtype.error_message
    assert unknown.error_type == "InvalidArgumentError" and "nope" in unknown.error_message


def test_signature_table(result):
    scale = result.signatures["scale"]
    assert scale["inputs"]["x"][1:] == ("float32", (None,))
    assert scale["inputs"]["k"][1:] == ("int32", ())
    assert result.signatures["serving_default"]["outputs"]["upper"][1] == "string"


def test_warmup_replayed(result):
    assert [r.signature_name for r in result.warmup_requests] == ["scale", "serving_default"]
    assert all(r.ok for r in result.warmup), [r.error_message for r in result.warmup]
    np.testing.assert_allclose(result.warmup[0].outputs["y"], [6.0, 12.0])
    np.testing.assert_array_equal(result.warmup[1].outputs["ids"], [20])
    np.testing.assert_array_equal(result.warmup_requests[0].inputs["x"], [1.0, 2.0])


def test_child_imports_no_keras_attn(result):
    assert "tensorflow" in result.modules and "tensorflow_text" in result.modules
    assert "keras_attn" not in result.modules


def test_missing_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="export_dir"):
        run_server_way(str(tmp_path / "missing"), [])
