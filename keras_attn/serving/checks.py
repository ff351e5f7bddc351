"""Run-time checks of a served request's inputs (TensorFlow only): TensorFlow Serving feeds any
shape and value it is sent, so each signature checks its inputs in the graph, and the error
(`INVALID_ARGUMENT`) names the input and what it received."""

from __future__ import annotations

import tensorflow as tf


def assert_rank(name, value, rank, what):
    """`value` once its rank is checked to be `rank` (`what`: the shape in words, for the
    error); the signature's static shape is not checked by the server."""
    # The graph knows the signature's static rank, so Grappler folds Shape(value) to it; a
    # round trip through SerializeTensor/ParseTensor (core ops, a copy of the request) hides it.
    unknown = tf.raw_ops.ParseTensor(
        serialized=tf.raw_ops.SerializeTensor(tensor=value), out_type=value.dtype
    )
    shape = tf.shape(unknown)
    check = tf.debugging.Assert(
        tf.equal(tf.size(shape), rank),
        [f"`{name}` must be {what}. Received: {name} of shape", shape],
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def assert_within_limit(name, value, low, high):
    """An integer request parameter once it is checked to be at most the export's limit
    `high` (the message states its whole range, `[low, high]`; the decoding package checks
    `low`, once, with the rest of the request: `ServingSignatures.request_config`)."""
    check = tf.debugging.Assert(
        value <= high, [f"`{name}` must be an integer in [{low}, {high}]. Received: {name}=", value]
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)
