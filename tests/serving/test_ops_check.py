import pytest
import tensorflow as tf

from keras_attn.serving.ops_check import TF_TEXT_SERVING_OPS, disallowed_ops, graph_ops


def spec():
    return [tf.TensorSpec([None], tf.string)]


def test_core_ops_pass_and_are_seen():
    @tf.function(input_signature=spec())
    def f(x):
        return tf.strings.length(x) + 1

    concrete = f.get_concrete_function()
    assert {"StringLength", "AddV2", "Placeholder"} <= graph_ops(concrete)
    assert disallowed_ops(concrete) == []
    # Every accepted input kind gives the same answer.
    graph_def = concrete.graph.as_graph_def()
    assert disallowed_ops(graph_def) == disallowed_ops(concrete.graph) == []


def test_py_function_is_flagged_even_inside_a_loop_body():
    @tf.function(input_signature=spec())
    def f(x):
        return tf.py_function(lambda a: a, [x], tf.string)

    assert disallowed_ops(f.get_concrete_function()) == ["EagerPyFunc"]

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def g(n):
        def body(i, acc):
            value = tf.numpy_function(lambda v: v, [i], tf.int32)
            return i + 1, acc + tf.ensure_shape(value, [])

        return tf.while_loop(lambda i, acc: i < n, body, (0, 0))[1]

    assert disallowed_ops(g.get_concrete_function()) == ["PyFunc"]
    # Allowed when the caller says so: the check really depends on the list.
    assert disallowed_ops(g.get_concrete_function(), allowed_extra={"PyFunc"}) == []


def test_tf_text_ops_only_when_listed():
    import tensorflow_text as tf_text

    @tf.function(input_signature=spec())
    def f(x):
        return tf_text.normalize_utf8(x, "NFKC")

    concrete = f.get_concrete_function()
    assert "NormalizeUTF8" in TF_TEXT_SERVING_OPS
    assert disallowed_ops(concrete) == []
    assert disallowed_ops(concrete, allowed_extra=()) == ["NormalizeUTF8"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="graph_or_function"):
        disallowed_ops(lambda x: x)
    with pytest.raises(ValueError, match="allowed_extra"):
        disallowed_ops(tf.Graph(), allowed_extra="PyFunc")
