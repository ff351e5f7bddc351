import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import PositionwiseFeedForward
from tests.layers.checklist import run_layer_checklist

B, T, D, H = 3, 5, 6, 10


def _x(seed=0, shape=(B, T, D)):
    return np.random.RandomState(seed).normal(size=shape).astype("float32")


def _randomize(layer, seed=7):
    r = np.random.RandomState(seed)
    layer.set_weights([r.normal(size=w.shape).astype("float32") for w in layer.get_weights()])


def test_checklist():
    run_layer_checklist(
        PositionwiseFeedForward,
        {"intermediate_dim": H, "output_dim": 4, "dropout": 0.1},
        {"inputs": _x()},
        build_shapes={"input_shape": (B, T, D)},
        expected_output_shapes=[(B, T, 4)],
        expected_num_trainable_weights=4,
    )


@pytest.mark.parametrize(
    "activation, np_act",
    [
        ("relu", lambda h: np.maximum(h, 0.0)),
        ("tanh", np.tanh),
    ],
)
def test_formula_against_numpy(activation, np_act):
    x = _x(1)
    layer = PositionwiseFeedForward(H, output_dim=4, activation=activation)
    layer.build(x.shape)
    _randomize(layer)
    w1, b1, w2, b2 = layer.get_weights()
    assert [w.shape for w in (w1, b1, w2, b2)] == [(D, H), (H,), (H, 4), (4,)]
    expected = np_act(x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)
    # Dropout is off at inference.
    layer_d = PositionwiseFeedForward(H, output_dim=4, activation=activation, dropout=0.5)
    layer_d.build(x.shape)
    layer_d.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer_d(x, training=False)), expected, rtol=1e-5, atol=1e-5
    )


def test_dropout_acts_on_hidden_units_in_training():
    x = _x(2)
    layer = PositionwiseFeedForward(H, output_dim=H, dropout=0.5)
    layer.build(x.shape)
    _randomize(layer)
    w1, b1, _, _ = layer.get_weights()
    # Identity output projection: the output shows the dropped hidden units.
    layer.set_weights([w1, b1, np.eye(H, dtype="float32"), np.zeros(H, "float32")])
    hidden = np.maximum(x @ w1 + b1, 0.0)
    out = ops.convert_to_numpy(layer(x, training=True))
    active = hidden > 1e-3
    kept = np.isclose(out, 2.0 * hidden, rtol=1e-4, atol=1e-5)
    dropped = out == 0.0
    assert np.all(kept | dropped)
    assert 0.2 < kept[active].mean() < 0.8  # about half of the active units survive
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x, training=False)), hidden, rtol=1e-5, atol=1e-5
    )


def test_no_bias_and_higher_rank():
    x = _x(3, shape=(2, 3, 4, D))
    layer = PositionwiseFeedForward(H, use_bias=False)
    out = layer(x)
    assert tuple(out.shape) == (2, 3, 4, D)
    w1, w2 = layer.get_weights()
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), np.maximum(x @ w1, 0.0) @ w2, rtol=1e-5, atol=1e-5
    )
    assert layer.compute_output_shape((None, 3, 4, D)) == (None, 3, 4, D)


def test_in_sequential_with_mask():
    model = keras.Sequential(
        [
            keras.Input((T, D)),
            keras.layers.Masking(0.0),
            PositionwiseFeedForward(H, output_dim=3),
            keras.layers.GlobalAveragePooling1D(),
        ]
    )
    x = _x(4)
    x[0, 2:] = 0.0
    pooled = ops.convert_to_numpy(model(x))
    ffn = model.layers[1]
    per_step = ops.convert_to_numpy(ffn(x))
    # GlobalAveragePooling1D averages only unmasked steps when the mask arrives.
    np.testing.assert_allclose(pooled[0], per_step[0, :2].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled[1], per_step[1].mean(0), rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="intermediate_dim"):
        PositionwiseFeedForward(0)
    with pytest.raises(ValueError, match="output_dim"):
        PositionwiseFeedForward(4, output_dim=-1)
    with pytest.raises(ValueError, match="dropout"):
        PositionwiseFeedForward(4, dropout=1.5)
    with pytest.raises(ValueError, match="use_bias"):
        PositionwiseFeedForward(4, use_bias="yes")
    with pytest.raises(ValueError, match="activation"):
        PositionwiseFeedForward(4, activation="no_such_activation")
    with pytest.raises(ValueError, match="inputs"):
        PositionwiseFeedForward(4).build((None, None))
