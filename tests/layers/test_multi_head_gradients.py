"""MultiHeadAttention's written-out gradients (docs/multi_head.md, "Speed"): the attention
block's (`multi_head_attend.attend_written_gradient`) and the batched head-major projection's
(`multi_head_projection.batched_project`) must equal autodiff of the reference paths, with
masks, grouped-query heads, the gate, rotary embeddings and without biases, on both backends
(each backend runs the written gradients here, whichever it uses by default)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import MultiHeadAttention
from keras_attn.layers import multi_head_attend as attend
from keras_attn.layers import multi_head_projection as proj

B, T, D = 2, 5, 8


def _np(x):
    return ops.convert_to_numpy(x)


def _grad(fn, args):
    """Gradients of the scalar `fn(*args)` with respect to every tensor in `args`."""
    if keras.backend.backend() == "jax":
        import jax

        return [np.asarray(g) for g in jax.grad(fn, argnums=tuple(range(len(args))))(*args)]
    import tensorflow as tf

    args = [tf.convert_to_tensor(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch(args)
        loss = fn(*args)
    return [g.numpy() for g in tape.gradient(loss, args)]


def _visible():
    """Padding (example 0 sees 3 keys) and causal, and example 1's query 0 sees nothing."""
    pad = np.ones((B, T), bool)
    pad[0, 3:] = False
    pad[1, 0] = False
    causal = np.tril(np.ones((T, T), bool))
    return ops.convert_to_tensor(pad[:, None, None, :] & causal[None, None])


@pytest.mark.parametrize("heads, groups", [(4, 4), (4, 2), (4, 1)], ids=["full", "gqa", "mqa"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_attention_gradient_equals_autodiff(heads, groups, masked):
    r = np.random.RandomState(heads + groups + masked)
    q = r.normal(size=(B, heads, T, 3)).astype("float32")
    k = r.normal(size=(B, groups, T, 3)).astype("float32")
    v = r.normal(size=(B, groups, T, 2)).astype("float32")
    upstream = ops.convert_to_tensor(r.normal(size=(B, heads, T, 2)).astype("float32"))
    visible = _visible() if masked else None

    def loss(fn):
        return lambda q, k, v: ops.sum(fn(q, k, v) * upstream)

    def written(q, k, v):
        return attend.attend_written_gradient(q, k, v, visible)

    def reference(q, k, v):
        return attend.products(q, k, v, visible, None)[0]

    np.testing.assert_allclose(_np(written(q, k, v)), _np(reference(q, k, v)), atol=1e-6)
    got = _grad(loss(written), [q, k, v])
    want = _grad(loss(reference), [q, k, v])
    for name, g, w in zip("qkv", got, want):
        assert np.abs(w).max() > 1e-3, name  # the check has something to compare
        np.testing.assert_allclose(g, w, atol=2e-5, err_msg=f"d{name}")


@pytest.mark.parametrize("bias", [True, False])
def test_batched_projection_gradient_equals_formula(bias):
    # y_i = x W_i + b_i in head-major layout; loss = sum_i <y_i, U_i>:
    # dx = sum_i U_i W_i^T, dW_i = x^T U_i, db_i = sum of U_i over batch and time.
    r = np.random.RandomState(bias)
    x = r.normal(size=(B, T, D)).astype("float32")
    shapes = [(3, 4), (1, 4), (3, 2)]  # (heads, size) of each projection
    kernels = [r.normal(size=(D, n, h)).astype("float32") for n, h in shapes]
    biases = [r.normal(size=(n, h)).astype("float32") for n, h in shapes] if bias else []
    ups = [r.normal(size=(B, n, T, h)).astype("float32") for n, h in shapes]

    outs = proj.batched_project(x, [ops.convert_to_tensor(k) for k in kernels], biases)
    for i, (y, kernel) in enumerate(zip(outs, kernels)):
        want = np.einsum("btd,dnh->bnth", x, kernel)
        if bias:
            want = want + biases[i][None, :, None, :]
        np.testing.assert_allclose(_np(y), want, atol=1e-5)

    def loss(x, *weights):
        ys = proj.batched_project(x, list(weights[:3]), list(weights[3:]))
        return sum(ops.sum(y * u) for y, u in zip(ys, ups))

    grads = _grad(loss, [x] + kernels + biases)
    np.testing.assert_allclose(
        grads[0], sum(np.einsum("bnth,dnh->btd", u, k) for u, k in zip(ups, kernels)), atol=1e-4
    )
    for g, u in zip(grads[1:4], ups):
        np.testing.assert_allclose(g, np.einsum("btd,bnth->dnh", x, u), atol=1e-4)
    for g, u in zip(grads[4:], ups):
        np.testing.assert_allclose(g, u.sum(axis=(0, 2)), atol=1e-4)


def _layer_grads(layer, x, mask, use_written):
    keep = attend.written_gradient, proj.batched_heads
    attend.written_gradient = lambda: use_written
    proj.batched_heads = lambda *shape: use_written
    try:
        weights = list(layer.trainable_variables)
        if keras.backend.backend() == "jax":
            import jax

            def stateless(x, *values):
                out, _ = layer.stateless_call(
                    list(values), [], x, attention_mask=mask, use_causal_mask=True
                )
                return ops.sum(ops.sin(out))

            return [
                np.asarray(g)
                for g in jax.grad(stateless, argnums=tuple(range(len(weights) + 1)))(
                    x, *[w.value for w in weights]
                )
            ]
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, attention_mask=mask, use_causal_mask=True)
            total = tf.reduce_sum(tf.sin(out))
        return [g.numpy() for g in tape.gradient(total, [x] + weights)]
    finally:
        attend.written_gradient, proj.batched_heads = keep


_LAYER_CASES = [
    pytest.param({"num_key_value_heads": 1, "use_gate": True, "value_dim": 2}, id="mqa_gate"),
    pytest.param({"use_bias": False, "rotary_max_wavelength": 100.0}, id="no_bias_rotary"),
    pytest.param({}, id="plain"),
    # Half precision: the batched projections (float16 kernels) and the reference attention.
    pytest.param({"dtype": "mixed_float16"}, id="mixed_float16"),
]


# The written gradients are TensorFlow's default; JAX (eager here, slow) checks one case.
@pytest.mark.parametrize(
    "init", _LAYER_CASES if keras.backend.backend() == "tensorflow" else _LAYER_CASES[:1]
)
def test_layer_gradients_equal_reference_paths(init):
    layer = MultiHeadAttention(4, 4, **init)
    layer.build((B, T, D))
    r = np.random.RandomState(7)
    layer.set_weights(
        [r.normal(scale=0.5, size=w.shape).astype("float32") for w in layer.get_weights()]
    )
    x = r.normal(size=(B, T, D)).astype("float32")
    mask = np.ones((B, T, T), bool)
    mask[0, :, 3:] = False
    got = _layer_grads(layer, x, mask, True)
    want = _layer_grads(layer, x, mask, False)
    assert len(got) == len(layer.trainable_variables) + 1
    tolerance = 2e-2 if "dtype" in init else 1e-4
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = g.astype("float32"), w.astype("float32")
        np.testing.assert_allclose(g, w, atol=tolerance * max(1.0, np.abs(w).max()), err_msg=f"{i}")
