"""Layer normalisation over the last axis with a hand-written gradient: `layer_norm`.

`keras.layers.LayerNormalization` computes `x * inv + (beta - mean * inv)` with
`inv = gamma / sqrt(var + eps)` broadcast to the input's full shape, and its gradient is left to
automatic differentiation, which walks back through each of those full-size products. The
closed form is shorter: with `xhat = (x - mean) / sqrt(var + eps)` and `g` the gradient of the
output,

    dgamma = sum(g * xhat)       dbeta = sum(g)       (over every axis but the last)
    dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) / sqrt(var + eps),  dxhat = g * gamma

(means over the last axis). A training step's layer norm, forward and backward, runs faster
this way on a TensorFlow CPU (benchmarks/RESULTS.md, "Transformer layers ... vs KerasHub", has
the figure). The Transformer layers (docs/layers.md) normalise with it, reading the weights of
their `keras.layers.LayerNormalization` sublayers, so weights and checkpoints are unchanged.
"""

import keras
from keras import ops

_LOW_PRECISION = ("float16", "bfloat16")


def _normalize(x, gamma, beta, epsilon):
    @ops.custom_gradient
    def normalize(x, gamma, beta):
        mean = ops.mean(x, axis=-1, keepdims=True)
        centered = x - mean
        inv_std = ops.rsqrt(ops.mean(ops.square(centered), axis=-1, keepdims=True) + epsilon)
        xhat = centered * inv_std

        def grad(*args, upstream=None):
            g = args[0] if upstream is None else upstream
            dxhat = g * gamma
            dx = inv_std * (
                dxhat
                - ops.mean(dxhat, axis=-1, keepdims=True)
                - xhat * ops.mean(dxhat * xhat, axis=-1, keepdims=True)
            )
            axes = tuple(range(len(g.shape) - 1))
            return dx, ops.sum(g * xhat, axis=axes), ops.sum(g, axis=axes)

        return xhat * gamma + beta, grad

    return normalize(x, gamma, beta)


def layer_norm(x, norm):
    """`norm(x)` for a built `keras.layers.LayerNormalization` `norm` over the last axis with
    a scale and an offset (the Transformer layers' own), computed as above: in float32 for
    float16 / bfloat16 inputs (as Keras does), the result in `norm`'s compute dtype."""
    if keras.backend.standardize_dtype(x.dtype) in _LOW_PRECISION:
        x = ops.cast(x, "float32")
    gamma = ops.cast(norm.gamma, x.dtype)
    beta = ops.cast(norm.beta, x.dtype)
    out = _normalize(x, gamma, beta, norm.epsilon)
    return ops.cast(out, norm.compute_dtype)
