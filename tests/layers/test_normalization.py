"""keras_attn.layers.normalization.layer_norm: values and its hand-written gradient, against
the formula in NumPy (float64) and central finite differences of it."""

import keras
import numpy as np
from keras import ops

from keras_attn.layers.normalization import layer_norm
from tests.test_losses import _grads

EPS = 1e-5


def _np_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def _norm(gamma, beta, dtype="float32"):
    norm = keras.layers.LayerNormalization(epsilon=EPS, dtype=dtype)
    norm.build((None, gamma.shape[0]))
    norm.set_weights([gamma, beta])
    return norm


def _case(seed=0):
    r = np.random.RandomState(seed)
    x = (r.normal(size=(2, 3, 8)) * 2 + 1).astype("float32")
    gamma = (1 + 0.5 * r.normal(size=8)).astype("float32")
    beta = r.normal(size=8).astype("float32")
    weights = r.normal(size=(2, 3, 8)).astype("float32")  # a loss sum(weights * y)
    return x, gamma, beta, weights


def test_layer_norm_values_and_gradients_against_numpy():
    x, gamma, beta, w = _case()
    norm = _norm(gamma, beta)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer_norm(x, norm)), _np_layer_norm(x, gamma, beta), atol=2e-5
    )

    def loss(x, gamma, beta):
        # The weights are read from the layer: gradients w.r.t. them go through its variables,
        # so feed gamma and beta through a stand-in with the same attributes.
        class Stand:
            epsilon, compute_dtype = EPS, "float32"

        stand = Stand()
        stand.gamma, stand.beta = gamma, beta
        return ops.sum(layer_norm(x, stand) * w)

    got = _grads(loss, x, gamma, beta)
    args = [a.astype("float64") for a in (x, gamma, beta)]
    for i, g in enumerate(got):
        numeric = np.zeros_like(args[i])
        for j in np.ndindex(args[i].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[i][j] += 1e-6
            minus[i][j] -= 1e-6
            numeric[j] = ((_np_layer_norm(*plus) - _np_layer_norm(*minus)) * w).sum() / 2e-6
        np.testing.assert_allclose(g, numeric, atol=2e-3, rtol=1e-3)


def test_layer_norm_of_float16_computes_in_float32():
    x, gamma, beta, _ = _case(1)
    norm = _norm(gamma, beta, dtype="mixed_float16")
    out = layer_norm(ops.cast(x * 300, "float16"), norm)  # squares overflow float16
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    expected = _np_layer_norm((x * 300).astype("float16").astype("float64"), gamma, beta)
    np.testing.assert_allclose(ops.convert_to_numpy(out).astype("float64"), expected, atol=1e-2)
