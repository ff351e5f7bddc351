"""MultiHeadAttention as a superset of Keras 3.15's MultiHeadAttention and GroupQueryAttention:
the same arguments and variables (outputs equal with copied weights), grouped-query attention,
rotary embeddings and sliding windows, with and without the key/value cache."""

import itertools
import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import MultiHeadAttention, RotaryEmbedding
from tests.layers.checklist import run_layer_checklist

B, T, S, D, N, H = 2, 5, 6, 8, 4, 4


def _np(x):
    return ops.convert_to_numpy(x)


def _x(seed, shape):
    return np.random.RandomState(seed).normal(size=shape).astype("float32")


def _randomize(layer, seed=3):
    r = np.random.RandomState(seed)
    layer.set_weights(
        [r.normal(scale=0.5, size=w.shape).astype("float32") for w in layer.get_weights()]
    )


def _copy_from(keras_layer, ours, *shapes):
    ours.build(*shapes)
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in keras_layer.weights]
    assert [w.path.split("/")[-2] for w in ours.weights] == [
        w.path.split("/")[-2] for w in keras_layer.weights
    ]
    ours.set_weights(keras_layer.get_weights())


# ------------------------------------------------------------- against Keras
KERAS_CASES = {
    "sliding_window": dict(init={"sliding_window": 2}, call={}),
    "sliding_window_causal": dict(init={"sliding_window": 3}, call={"use_causal_mask": True}),
    "use_gate": dict(init={"use_gate": True}, call={}),
    "use_gate_no_bias_value_dim": dict(
        init={"use_gate": True, "use_bias": False, "value_dim": 3}, call={}
    ),
    "gate_window_mask_output_shape": dict(
        init={"use_gate": True, "sliding_window": 2, "output_shape": (2, 3)}, call={}, mask=True
    ),
    "flash_attention_false": dict(init={"flash_attention": False}, call={"use_causal_mask": True}),
    "initializers_seed": dict(
        init={
            "kernel_initializer": keras.initializers.HeNormal(seed=1),
            "bias_initializer": "ones",
            "seed": 4,
        },
        call={},
    ),
    "attention_axes_image": dict(init={"attention_axes": (1, 2)}, call={}, image=True),
    "attention_axes_one": dict(
        init={"attention_axes": 2, "use_gate": True}, call={}, image=True, mask=True
    ),
    "attention_axes_negative": dict(init={"attention_axes": (-2,)}, call={}, image=True),
}


@pytest.mark.parametrize("case", sorted(KERAS_CASES))
def test_equals_keras_multi_head_attention(case):
    spec = KERAS_CASES[case]
    image = spec.get("image")
    q = _x(1, (B, 2, 3, D) if image else (B, T, D))
    v = _x(2, (B, 2, 4, 5) if image else (B, T if spec["call"] else S, 5))
    if spec["call"].get("use_causal_mask") or case.startswith("sliding"):
        v = q
    call = dict(spec["call"])
    if spec.get("mask"):
        mask_shape = (B, 2, 3, 4) if case == "attention_axes_one" else (B, q.shape[1], v.shape[1])
        mask = np.random.RandomState(5).rand(*mask_shape) > 0.4
        mask[0, 0] = False  # a query that sees nothing
        call["attention_mask"] = mask
    theirs = keras.layers.MultiHeadAttention(N, H, **spec["init"])
    expected, expected_w = theirs(q, v, return_attention_scores=True, **call)
    ours = MultiHeadAttention(N, H, **spec["init"])
    _copy_from(theirs, ours, q.shape, v.shape)
    got, got_w = ours(q, v, return_attention_scores=True, **call)
    expected_w = _np(expected_w)
    if spec.get("mask"):
        # Keras gives a query with no visible key uniform weights; ours gives it none (a zero
        # context, so its output is the output projection's bias). Elsewhere: equal.
        ok = np.any(call["attention_mask"], -1)  # [B, ..., Tq]
        np.testing.assert_allclose(_np(got)[ok], _np(expected)[ok], atol=1e-5)
        heads_last = np.moveaxis(_np(got_w), -3, -1)  # [B, ..., Tq, Tk, N]
        np.testing.assert_allclose(heads_last[ok], np.moveaxis(expected_w, -3, -1)[ok], atol=1e-5)
        assert not np.any(heads_last[~ok])
        return
    np.testing.assert_allclose(_np(got), _np(expected), atol=1e-5)
    np.testing.assert_allclose(_np(got_w), expected_w, atol=1e-5)
    # Without the scores (Keras then takes its fused path) the outputs agree too; Keras' own
    # fused path fails on JAX when value_dim != key_dim, so those cases compare with scores only.
    if "value_dim" not in spec["init"]:
        np.testing.assert_allclose(_np(ours(q, v, **call)), _np(theirs(q, v, **call)), atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2])
def test_equals_keras_group_query_attention(groups):
    q, v = _x(1, (B, T, D)), _x(2, (B, S, 5))
    for init, call, value in (
        ({"use_gate": True}, {}, v),
        ({"sliding_window": 2}, {"use_causal_mask": True}, q),
    ):
        theirs = keras.layers.GroupQueryAttention(H, N, groups, **init)
        expected, expected_w = theirs(q, value, return_attention_scores=True, **call)
        ours = MultiHeadAttention(N, H, num_key_value_heads=groups, **init)
        _copy_from(theirs, ours, q.shape, value.shape)
        got, got_w = ours(q, value, return_attention_scores=True, **call)
        np.testing.assert_allclose(_np(got), _np(expected), atol=1e-5)
        np.testing.assert_allclose(_np(got_w), _np(expected_w), atol=1e-5)


def test_regularizers_and_constraints_train_like_keras():
    # One SGD step: the regularizers' losses enter the gradients and the constraints clip the
    # updated variables, so equal weights afterwards means both behave as in Keras.
    args = dict(
        use_gate=True,
        kernel_regularizer=keras.regularizers.L2(0.1),
        bias_regularizer=keras.regularizers.L1(0.1),
        activity_regularizer=keras.regularizers.L2(0.01),
        kernel_constraint="non_neg",
        bias_constraint=keras.constraints.MaxNorm(0.05),
    )
    q, v = _x(1, (B, T, D)), _x(2, (B, S, 5))
    y = _x(3, (B, T, D))
    models = []
    for cls in (keras.layers.MultiHeadAttention, MultiHeadAttention):
        layer = cls(N, H, **args)
        qi, vi = keras.Input((T, D)), keras.Input((S, 5))
        model = keras.Model([qi, vi], layer(qi, vi))
        model.compile(keras.optimizers.SGD(0.5), "mse")
        models.append((model, layer))
    models[1][1].set_weights(models[0][1].get_weights())
    losses = [float(m.train_on_batch([q, v], y)) for m, _ in models]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert len(models[1][1].losses) == len(models[0][1].losses) >= 10
    for a, b in zip(models[0][1].get_weights(), models[1][1].get_weights()):
        np.testing.assert_allclose(b, a, atol=1e-5)
    kernels = [w for w in models[1][1].weights if "kernel" in w.path]
    assert all(np.all(_np(k) >= 0) for k in kernels)


def test_config_round_trip_of_every_option():
    args = dict(
        attention_axes=(1,),
        sliding_window=3,
        flash_attention=False,
        use_gate=True,
        seed=2,
        kernel_regularizer="l2",
        bias_regularizer="l1",
        activity_regularizer="l2",
        kernel_constraint="non_neg",
        bias_constraint="unit_norm",
        num_key_value_heads=2,
        rotary_max_wavelength=500,
        rotary_scaling_factor=2.0,
    )
    layer = MultiHeadAttention(N, H, **args)
    config = layer.get_config()
    again = MultiHeadAttention.from_config(config)
    assert again.get_config() == config
    for name in ("sliding_window", "use_gate", "num_key_value_heads", "flash_attention"):
        assert getattr(again, name) == args[name]
    assert again.rotary_max_wavelength == 500.0 and again.rotary_scaling_factor == 2.0
    assert isinstance(again.projection_activity_regularizer, keras.regularizers.L2)


# ------------------------------------------------------------------- rotary
def test_rotary_embedding_equals_the_formula():
    # d = 4, max_wavelength = 100: frequencies 100^0 = 1 and 100^-1/2 = 0.1. Position p
    # rotates the pairs (x[0], x[2]) by p * 1 and (x[1], x[3]) by p * 0.1.
    x = np.array([[[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]], "float32")  # [1, 2, 4]
    c, s = math.cos, math.sin

    def rotated(p, f=1.0):
        a, b = p / f, 0.1 * p / f
        return [1 * c(a) - 3 * s(a), 2 * c(b) - 4 * s(b), 3 * c(a) + 1 * s(a), 4 * c(b) + 2 * s(b)]

    out = RotaryEmbedding(max_wavelength=100)(x, start_index=3)
    np.testing.assert_allclose(_np(out)[0], [rotated(3), rotated(4)], rtol=1e-5, atol=1e-6)
    out = RotaryEmbedding(max_wavelength=100, scaling_factor=2.0)(x)
    np.testing.assert_allclose(
        _np(out)[0], [rotated(0, 2.0), rotated(1, 2.0)], rtol=1e-5, atol=1e-6
    )
    # [B, T, heads, d]: every head rotated by its position (axis 1).
    x4 = np.stack([x, 2 * x], axis=2)  # [1, 2, 2, 4]
    out = _np(RotaryEmbedding(max_wavelength=100)(x4, start_index=3))
    np.testing.assert_allclose(
        out[0, :, 1], 2 * np.array([rotated(3), rotated(4)]), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding()(np.ones((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match="max_wavelength"):
        RotaryEmbedding(max_wavelength=0)


def test_rotary_scores_depend_on_relative_position_only():
    # The same four tokens written into the cache at offset 0 or at offset 7 (earlier
    # positions masked): equal weights with rotary; and rotary does change them.
    x = _x(4, (B, 4, D))
    layer = MultiHeadAttention(N, H, rotary_max_wavelength=20.0)
    plain = MultiHeadAttention(N, H)
    layer.build(x.shape)
    plain.build(x.shape)
    _randomize(layer)
    plain.set_weights(layer.get_weights())
    _, w0, _ = layer(x, cache=layer.init_cache(B, 4), cache_index=0, return_attention_scores=True)
    shifted_mask = np.arange(11)[None].repeat(B, 0) >= 7
    _, w7, _ = layer(
        x,
        cache=layer.init_cache(B, 11),
        cache_index=7,
        value_mask=shifted_mask,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(_np(w7)[..., 7:], _np(w0), atol=1e-5)
    assert not np.any(_np(w7)[..., :7])
    w_plain = _np(plain(x, return_attention_scores=True)[1])
    assert np.abs(w_plain - _np(w0)).max() > 1e-2


# --------------------------------------------------------- cached = uncached
COMBOS = list(itertools.product([None, 2, 1], [None, 50.0], [None, 2], [False, True]))


def test_cached_equals_uncached_for_every_combination():
    x = _x(5, (B, T, D))
    pad = np.ones((B, T), bool)
    pad[1, 1] = False
    for groups, wavelength, window, causal in COMBOS:
        layer = MultiHeadAttention(
            N,
            H,
            num_key_value_heads=groups,
            rotary_max_wavelength=wavelength,
            sliding_window=window,
            use_gate=groups == 2,
        )
        layer.build(x.shape)
        _randomize(layer, seed=11)
        label = (groups, wavelength, window, causal)
        if not causal:
            # Non-causal: the whole sequence cached at once, then a precomputed memory.
            full = _np(layer(x, value_mask=pad))
            out, _ = layer(x, cache=layer.init_cache(B, T), cache_index=0, value_mask=pad)
            np.testing.assert_allclose(_np(out), full, atol=1e-5, err_msg=str(label))
            out = layer(x, cache=layer.compute_cache(x), value_mask=pad)[0]
            np.testing.assert_allclose(_np(out), full, atol=1e-5, err_msg=str(label))
            continue
        full = _np(layer(x, use_causal_mask=True, value_mask=pad))
        cache = layer.init_cache(B, T)
        assert tuple(cache[0].shape) == (B, T, groups or N, H)
        # Two rows at once, then one at a time (the one-query path).
        out, cache = layer(
            x[:, :2], use_causal_mask=True, cache=cache, cache_index=0, value_mask=pad
        )
        steps = [_np(out)]
        for t in range(2, T):
            out, cache = layer(
                x[:, t : t + 1], use_causal_mask=True, cache=cache, cache_index=t, value_mask=pad
            )
            steps.append(_np(out))
        np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5, err_msg=str(label))


def _compiled(fn):
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    return tf.function(fn, jit_compile=True)


def test_cached_decoding_in_a_compiled_while_loop():
    x = _x(6, (B, T, D))
    layer = MultiHeadAttention(
        N, H, num_key_value_heads=2, rotary_max_wavelength=30.0, sliding_window=2, use_gate=True
    )
    layer.build(x.shape)
    _randomize(layer, seed=12)
    full = _np(layer(x, use_causal_mask=True))
    x_t = ops.convert_to_tensor(x)

    def body(t, outputs, key_cache, value_cache):
        row = ops.slice(x_t, [0, t, 0], [B, 1, D])
        out, (key_cache, value_cache) = layer(
            row, use_causal_mask=True, cache=(key_cache, value_cache), cache_index=t
        )
        return t + 1, ops.slice_update(outputs, [0, t, 0], out), key_cache, value_cache

    def decode():
        key_cache, value_cache = layer.init_cache(B, T)
        start = (ops.convert_to_tensor(0, "int32"), ops.zeros((B, T, D)), key_cache, value_cache)
        return ops.while_loop(lambda t, *_: t < T, body, start)[1]

    np.testing.assert_allclose(_np(_compiled(decode)()), full, atol=1e-5)


def test_sliding_window_with_a_cache_offset():
    # Query at absolute position c sees keys c - w + 1 .. c (causal) whatever the offset.
    x = _x(7, (1, 6, D))
    layer = MultiHeadAttention(N, H, sliding_window=3)
    layer.build(x.shape)
    _, cache = layer(x[:, :4], cache=layer.init_cache(1, 6), cache_index=0, use_causal_mask=True)
    _, w, _ = layer(
        x[:, 4:], cache=cache, cache_index=4, use_causal_mask=True, return_attention_scores=True
    )
    seen = _np(w)[0, 0] > 0  # [Tq=2, S=6]
    np.testing.assert_array_equal(seen, [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]])


def test_fused_kernel_path_equals_ours():
    # flash_attention=True runs keras.ops.dot_product_attention: our numbers, including a zero
    # context for a query that sees nothing.
    from keras_attn.layers import multi_head_fused

    q, v = _x(1, (B, T, D)), _x(2, (B, S, 5))
    mask = np.random.RandomState(5).rand(B, T, S) > 0.4
    mask[0, 0] = False
    layer = MultiHeadAttention(N, H, num_key_value_heads=2, use_gate=True, flash_attention=False)
    layer.build(q.shape, v.shape)
    _randomize(layer)
    expected = _np(layer(q, v, attention_mask=mask))
    fused = MultiHeadAttention(N, H, num_key_value_heads=2, use_gate=True, flash_attention=True)
    fused.build(q.shape, v.shape)
    fused.set_weights(layer.get_weights())
    calls = []
    keep = multi_head_fused.fused
    multi_head_fused.fused = lambda *a: calls.append(1) or keep(*a)
    try:
        got = _np(fused(q, v, attention_mask=mask))
    finally:
        multi_head_fused.fused = keep
    assert calls
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_own_features_need_no_keras_attention_layer(monkeypatch):
    """Keras' MultiHeadAttention takes `use_gate` from 3.14 and `sliding_window` from 3.15 on;
    ours takes every option on every supported Keras (3.8 on): none reaches Keras' attention
    layers, which are replaced here by a double that refuses to be built."""
    from keras_attn.layers import GroupedQueryAttention

    class RefusingKerasLayer:
        def __init__(self, *args, **kwargs):
            raise TypeError(f"Keras' attention layer was built with {sorted(kwargs)}")

    monkeypatch.setattr(keras.layers, "MultiHeadAttention", RefusingKerasLayer)
    monkeypatch.setattr(keras.layers, "GroupQueryAttention", RefusingKerasLayer)
    x = _x(1, (B, T, D))
    options = dict(sliding_window=3, use_gate=True, rotary_max_wavelength=100.0)
    for layer in (
        MultiHeadAttention(N, H, num_key_value_heads=2, **options),
        GroupedQueryAttention(H, N, 2, **options),
    ):
        out = _np(layer(x, use_causal_mask=True))
        assert out.shape == (B, T, D) and np.isfinite(out).all()
        again = type(layer).from_config(layer.get_config())
        assert again.sliding_window == 3 and again.use_gate is True
        assert keras.layers.Layer in type(layer).__mro__


def test_bad_option_values():
    for kwargs, name in (
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"use_gate": "yes"}, "use_gate"),
        ({"flash_attention": True, "dropout": 0.1}, "dropout"),
        ({"rotary_max_wavelength": -1}, "rotary_max_wavelength"),
        ({"attention_axes": "x"}, "attention_axes"),
        ({"seed": 1.5}, r"`seed` must be an integer or None\. Received: seed=1\.5"),
        ({"seed": True}, r"`seed` must be an integer or None\. Received: seed=True"),
    ):
        with pytest.raises(ValueError, match=name):
            MultiHeadAttention(N, H, **kwargs)
    with pytest.raises(ValueError, match="key_dim"):
        MultiHeadAttention(N, 3, rotary_max_wavelength=100)
    with pytest.raises(ValueError, match="attention_axes"):
        MultiHeadAttention(N, H, attention_axes=(3,))(np.ones((B, T, D), "float32"))
    with pytest.raises(ValueError, match="use_causal_mask"):
        MultiHeadAttention(N, H)(np.ones((B, 2, 3, D), "float32"), use_causal_mask=True)
    layer = MultiHeadAttention(N, H, num_key_value_heads=2)
    layer.build((B, T, D))
    with pytest.raises(ValueError, match="key_cache"):
        layer(
            np.ones((B, 1, D), "float32"),
            cache=(np.zeros((B, T, N, H), "float32"),) * 2,
            cache_index=0,
        )


# ---------------------------------------------------------------- checklist
def test_checklist_with_every_new_option():
    x = _x(8, (B, T, D))
    run_layer_checklist(
        MultiHeadAttention,
        {
            "num_heads": N,
            "key_dim": H,
            "num_key_value_heads": 2,
            "use_gate": True,
            "sliding_window": 2,
            "rotary_max_wavelength": 100.0,
        },
        {"query": x},
        call_kwargs={"use_causal_mask": True, "return_attention_scores": True},
        expected_output_shapes=[(B, T, D), (B, N, T, T)],
        expected_num_trainable_weights=10,
    )


def test_rotary_embedding_config_round_trip():
    layer = RotaryEmbedding(max_wavelength=100, scaling_factor=2.0, name="rope")
    config = layer.get_config()
    assert (config["max_wavelength"], config["scaling_factor"]) == (100.0, 2.0)
    clone = RotaryEmbedding.from_config(config)
    assert (clone.max_wavelength, clone.scaling_factor) == (100.0, 2.0)
    assert clone.get_config() == config
