"""What a streamed step sends over gRPC: the request's arrays as `TensorProto`s that the server
reads back as the very arrays (the bytes form for NumPy numbers and booleans, TensorFlow's own
conversion for the rest)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.serving.client import _tensor_proto

ARRAYS = [
    np.int32(7),
    np.float32(-1.25),
    np.bool_(True),
    np.arange(6, dtype=np.int32).reshape(2, 3),
    np.random.RandomState(0).randn(2, 5, 4, 3).astype(np.float32),
    np.array([[True, False, True]]),
    np.zeros([0, 4], np.int32),
    np.arange(12, dtype=np.int64).reshape(3, 4).T,  # not C-contiguous
    np.array([1, 2, 70000], ">i4"),  # not the machine's byte order
    np.array([1.5, -2.0], np.float64),
    np.array([3, 200], np.uint8),
    np.array([1.0, 2.5], np.float16),
]


@pytest.mark.parametrize("value", ARRAYS, ids=lambda v: f"{v.dtype}{list(np.shape(v))}")
def test_numpy_arrays_read_back_as_themselves(value):
    proto = _tensor_proto(value)
    back = tf.make_ndarray(proto)
    assert proto.dtype == tf.as_dtype(value.dtype).as_datatype_enum
    assert back.dtype == value.dtype.newbyteorder("=") and back.shape == np.shape(value)
    np.testing.assert_array_equal(back, value)


@pytest.mark.parametrize(
    "value, dtype",
    [
        ([1, 2], tf.int32),  # a Python list keeps TensorFlow's inference (not NumPy's int64)
        (3, tf.int32),
        (np.array([b"a", b"bc"], object), tf.string),
    ],
)
def test_other_values_go_through_tensorflow(value, dtype):
    proto = _tensor_proto(value)
    assert proto.dtype == dtype.as_datatype_enum
    np.testing.assert_array_equal(tf.make_ndarray(proto), np.asarray(value))
