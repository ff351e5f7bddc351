import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import PositionalEncoding
from tests.layers.checklist import run_layer_checklist

B, T, D = 2, 5, 7  # odd D: the last column is a sine


def _np(x):
    return ops.convert_to_numpy(x)


def _x(seed=0, length=T, depth=D):
    return np.random.RandomState(seed).normal(size=(B, length, depth)).astype("float32")


def _np_sinusoid(positions, depth, base=10000.0):
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)), loop by loop."""
    pe = np.zeros((len(positions), depth))
    for row, p in enumerate(positions):
        for col in range(depth):
            i = col // 2
            angle = p / base ** (2 * i / depth)
            pe[row, col] = np.sin(angle) if col % 2 == 0 else np.cos(angle)
    return pe


@pytest.mark.parametrize("init, trainable", [({}, 0), ({"mode": "learned", "max_length": 9}, 1)])
def test_checklist(init, trainable):
    run_layer_checklist(
        PositionalEncoding,
        init,
        {"inputs": _x()},
        expected_output_shapes=[(B, T, D)],
        expected_num_trainable_weights=trainable,
    )


@pytest.mark.parametrize("depth, base", [(7, 10000.0), (8, 100.0)])
def test_sinusoidal_against_numpy(depth, base):
    x = _x(1, length=40, depth=depth)
    layer = PositionalEncoding(base=base)
    out = _np(layer(x))
    pe = _np_sinusoid(range(40), depth, base)
    np.testing.assert_allclose(out - x, np.broadcast_to(pe, x.shape), atol=2e-5)
    assert layer.weights == []


def test_sinusoidal_any_length_and_start_index():
    layer = PositionalEncoding()
    x = _x(2, length=3)
    out = _np(layer(x, start_index=1000))
    ref = np.broadcast_to(_np_sinusoid(range(1000, 1003), D), x.shape)
    np.testing.assert_allclose(out - x, ref, atol=1e-4)
    # A tensor start_index gives the same as the int.
    tensor_out = _np(layer(x, start_index=ops.convert_to_tensor(1000, "int32")))
    np.testing.assert_allclose(tensor_out, out, atol=1e-6)


def test_learned_table_and_start_index():
    layer = PositionalEncoding("learned", max_length=9)
    x = _x(3)
    layer.build(x.shape)
    assert [tuple(w.shape) for w in layer.trainable_weights] == [(9, D)]
    table = np.random.RandomState(4).normal(size=(9, D)).astype("float32")
    layer.set_weights([table])
    np.testing.assert_allclose(_np(layer(x)), x + table[:T], atol=1e-6)
    np.testing.assert_allclose(_np(layer(x, start_index=4)), x + table[4:9], atol=1e-6)
    step = x[:, :1]
    for start in (0, 6, 8):
        got = _np(layer(step, start_index=ops.convert_to_tensor(start, "int32")))
        np.testing.assert_allclose(got, step + table[start : start + 1], atol=1e-6)


def _compiled(fn):
    """`fn` compiled with XLA on the current backend."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    return tf.function(fn, jit_compile=True)


def test_start_index_as_a_tensor_in_a_while_loop():
    # One position per step inside an XLA-compiled while_loop == the whole
    # sequence at once.
    for layer in (PositionalEncoding(), PositionalEncoding("learned", max_length=T)):
        x = ops.convert_to_tensor(_x(5))
        full = _np(layer(x))

        def body(t, acc):
            row = layer(ops.slice(x, [0, t, 0], [B, 1, D]), start_index=t)
            return t + 1, ops.slice_update(acc, [0, t, 0], row)

        def decode():
            start = (ops.convert_to_tensor(0, "int32"), ops.zeros((B, T, D)))
            return ops.while_loop(lambda t, acc: t < T, body, start)[1]

        np.testing.assert_allclose(_np(_compiled(decode)()), full, atol=1e-5)


def test_learned_overflow_is_a_value_error():
    layer = PositionalEncoding("learned", max_length=4)
    with pytest.raises(ValueError, match="max_length"):
        layer(_x(6))  # 5 positions > 4
    layer = PositionalEncoding("learned", max_length=6)
    layer(_x(6))
    with pytest.raises(ValueError, match="max_length"):
        layer(_x(6), start_index=2)  # positions 2..6
    with pytest.raises(ValueError, match="max_length"):
        layer(_x(6, length=7), start_index=ops.convert_to_tensor(0, "int32"))
    with pytest.raises(ValueError, match="start_index"):
        layer(_x(6), start_index=-1)


class _MaskOut(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        return ops.cast(mask, "float32")


@pytest.mark.parametrize("init", [{}, {"mode": "learned", "max_length": T}])
def test_embedding_mask_passes_through(init):
    ids = np.array([[4, 2, 0, 0, 0], [1, 2, 3, 4, 5]], "int32")
    model = keras.Sequential(
        [
            keras.Input((T,), dtype="int32"),
            keras.layers.Embedding(8, D, mask_zero=True),
            PositionalEncoding(**init),
            _MaskOut(),
        ]
    )
    np.testing.assert_array_equal(_np(model(ids)), (ids != 0).astype("float32"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        PositionalEncoding("rotary")
    with pytest.raises(ValueError, match="max_length"):
        PositionalEncoding("learned")
    with pytest.raises(ValueError, match="max_length"):
        PositionalEncoding(max_length=0)
    with pytest.raises(ValueError, match="base"):
        PositionalEncoding(base=0.0)
    with pytest.raises(ValueError, match="base"):
        PositionalEncoding(base="e")
    with pytest.raises(ValueError, match="inputs"):
        PositionalEncoding()(np.zeros((3,), "float32"))


def test_start_index_past_the_table_errors_eagerly_and_clamps_when_traced():
    """a known tensor start_index past the table is a ValueError naming it; inside a
    compiled function (value unknown at trace time) the slice clamps to the table's last rows,
    as documented, on every backend (TensorFlow without the clamp raises a raw slice error)."""
    layer = PositionalEncoding("learned", max_length=6)
    x = _x(7, length=2)
    layer(x)
    table = _np(layer.embeddings)
    with pytest.raises(
        ValueError, match=r"start_index.*positions 5 to 6|positions 5 to 6.*start_index"
    ):
        layer(x, start_index=ops.convert_to_tensor(5, "int32"))
    with pytest.raises(ValueError, match="start_index"):
        layer(x, start_index=ops.convert_to_tensor(-1, "int32"))
    got = _np(
        _compiled(lambda s: layer(ops.convert_to_tensor(x), start_index=s))(
            ops.convert_to_tensor(5, "int32")
        )
    )
    np.testing.assert_allclose(got, x + table[4:6], atol=1e-6)
    got = _np(
        _compiled(lambda s: layer(ops.convert_to_tensor(x), start_index=s))(
            ops.convert_to_tensor(1, "int32")
        )
    )
    np.testing.assert_allclose(got, x + table[1:3], atol=1e-6)


def test_start_index_must_be_an_integer():
    with pytest.raises(ValueError, match=r"start_index.*2\.5"):
        PositionalEncoding()(_x(1), start_index=2.5)
    with pytest.raises(ValueError, match=r"start_index.*float32"):
        PositionalEncoding()(_x(1), start_index=ops.convert_to_tensor(2.0))
