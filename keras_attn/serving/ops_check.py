"""Which ops of a graph would a stock TensorFlow Serving binary fail to load?

`tensorflow_model_server` links TensorFlow's own kernels and a fixed set of TF Text ops
(`TF_TEXT_SERVING_OPS`). An exported graph may use nothing else: no Python callbacks
(`tf.py_function`, `tf.numpy_function`), no ops from other extension libraries.

`disallowed_ops(graph_or_function, allowed_extra)` walks every node of the graph and of every
function in its library (the bodies of `while_loop`, `cond`, nested `tf.function`s) and returns
the op names that are neither TensorFlow core ops nor in `allowed_extra`.

"TensorFlow core ops" are the ops with a generated wrapper in `tf.raw_ops` (the op registry
itself cannot be used: importing `tensorflow_text` registers its ops there too), minus the
Python-callback ops in `PYTHON_CALLBACK_OPS`, which exist in TensorFlow but cannot run without
a Python interpreter.
"""

from __future__ import annotations

import functools

import tensorflow as tf

# The TF Text ops that stock tensorflow_model_server links. Where the list was read from:
# TensorFlow Serving's `tensorflow_serving/workspace.bzl` pins `org_tensorflow_text` to TF Text
# v2.12.1 (the TF Serving releases 2.12 to 2.19 build with it), and
# `tensorflow_serving/model_servers/BUILD` links its op libraries into the server
# (`SUPPORTED_TENSORFLOW_OPS`); the names are those the TF Text 2.12.1 kernels register
# (`REGISTER_OP` in `tensorflow_text/core/ops/`, `TFText>` for the TFLite-shim ops). The
# RoundRobin* ops are left out: reported missing from the server build. This set is the list
# the exporter checks against; update it with the server version the deployment kit runs.
TF_TEXT_SERVING_OPS = frozenset(
    {
        "CaseFoldUTF8",
        "ConstrainedSequence",
        "FastBertNormalize",
        "FastWordpieceTokenizeWithOffsets",
        "FindSourceOffsets",
        "MaxSpanningTree",
        "NormalizeUTF8",
        "NormalizeUTF8WithOffsetsMap",
        "PhraseTokenize",
        "RegexSplitWithOffsets",
        "RougeL",
        "SentenceFragments",
        "SentenceFragmentsV2",
        "SentencepieceDetokenizeOp",
        "SentencepieceIdToStringOp",
        "SentencepieceOp",
        "SentencepieceStringToIdOp",
        "SentencepieceTokenizeOp",
        "SentencepieceTokenizeWithOffsetsOp",
        "SentencepieceVocabSizeOp",
        "SplitMergeTokenizeWithOffsets",
        "TFText>BoiseTagsToOffsets",
        "TFText>ByteSplitByOffsets",
        "TFText>ByteSplitWithOffsets",
        "TFText>FastSentencepieceDetokenize",
        "TFText>FastSentencepieceTokenize",
        "TFText>FastWordpieceDetokenize",
        "TFText>NgramsStringJoin",
        "TFText>OffsetsToBoiseTags",
        "TFText>PhraseDetokenize",
        "TFText>WhitespaceTokenizeWithOffsetsV2",
        "TokenizerFromLogits",
        "UnicodeScriptTokenizeWithOffsets",
        "WhitespaceTokenizeWithOffsets",
        "WordpieceTokenizeWithOffsets",
    }
)

# Core TensorFlow ops that call back into Python: never loadable by a C++ server.
PYTHON_CALLBACK_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


@functools.lru_cache(maxsize=1)
def tf_core_ops():
    """The names of TensorFlow's own ops (those with a `tf.raw_ops` wrapper), minus Python callbacks."""
    names = {name for name in dir(tf.raw_ops) if not name.startswith("_")}
    return frozenset(names - PYTHON_CALLBACK_OPS)


def _as_graph_def(graph_or_function):
    """GraphDef of a GraphDef, MetaGraphDef, tf.Graph or concrete function."""
    obj = graph_or_function
    if isinstance(obj, tf.compat.v1.GraphDef):
        return obj
    if isinstance(obj, tf.compat.v1.MetaGraphDef):
        return obj.graph_def
    if isinstance(obj, tf.Graph):
        return obj.as_graph_def()
    graph = getattr(obj, "graph", None)
    if isinstance(graph, tf.Graph):  # ConcreteFunction
        return graph.as_graph_def()
    raise ValueError(
        "`graph_or_function` must be a GraphDef, MetaGraphDef, tf.Graph or a concrete function "
        "(for a tf.function, pass `fn.get_concrete_function(...)`). "
        f"Received: graph_or_function={obj!r} of type {type(obj).__name__}"
    )


def graph_ops(graph_or_function):
    """The set of op names used by a graph, its function library included."""
    graph_def = _as_graph_def(graph_or_function)
    library_names = {f.signature.name for f in graph_def.library.function}
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    # A node may call a library function directly by its name: that is not an op.
    return ops - library_names


def disallowed_ops(graph_or_function, allowed_extra=TF_TEXT_SERVING_OPS):
    """Op names in the graph that are neither TF core ops nor in `allowed_extra`, sorted.

    Args:
        graph_or_function: a `GraphDef`, `MetaGraphDef`, `tf.Graph` or a concrete function
            (`tf.function(...).get_concrete_function(...)`).
        allowed_extra: op names allowed beyond TensorFlow's core ops; by default the TF Text ops
            that stock TensorFlow Serving links. Python-callback ops are never allowed unless
            listed here explicitly.

    Returns:
        A sorted list of op names; empty when the graph would load in TF Serving.
    """
    if isinstance(allowed_extra, str):
        raise ValueError(
            "`allowed_extra` must be a collection of op names, not a single string. "
            f"Received: allowed_extra={allowed_extra!r}"
        )
    allowed = tf_core_ops() | frozenset(allowed_extra)
    return sorted(op for op in graph_ops(graph_or_function) if op not in allowed)
