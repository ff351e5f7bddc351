"""MultiHeadAttention: masked positions never matter whatever they hold, masking is exact,
the attention dropout is really applied, and a cache index past the cache is a clear error."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import MultiHeadAttention, TransformerEncoderLayer

B, T, D, N, H = 2, 5, 8, 2, 4


def _np(x):
    return ops.convert_to_numpy(x)


def _layer(seed=3, **kwargs):
    layer = MultiHeadAttention(N, H, **kwargs)
    layer.build((B, T, D))
    r = np.random.RandomState(seed)
    layer.set_weights(
        [r.normal(scale=0.5, size=w.shape).astype("float32") for w in layer.get_weights()]
    )
    return layer


def _inputs():
    x = np.random.RandomState(0).normal(size=(B, T, D)).astype("float32")
    pad = np.ones((B, T), bool)
    pad[0, 3:] = False
    pad[1, 4] = False
    return x, pad


def _grads(fn, x):
    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(jax.grad(lambda v: ops.sum(fn(v)))(x))
    import tensorflow as tf

    v = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(v)
        loss = tf.reduce_sum(fn(v))
    return tape.gradient(loss, v).numpy()


@pytest.mark.parametrize("junk", [np.nan, np.inf, 1e30])
def test_junk_at_masked_positions_never_leaks(junk):
    x, pad = _inputs()
    dirty = x.copy()
    dirty[~pad] = junk
    rows = pad[:, :, None]
    for kwargs in ({}, {"num_key_value_heads": 1, "use_gate": True}):
        layer = _layer(**kwargs)

        def cross(v):  # clean queries, dirty keys/values
            return layer(x, v, value_mask=pad)

        def cached_step(v):  # one query against a cache holding the dirty rows
            cache = layer.compute_cache(v)
            return layer(x[:, -1:], cache=cache, value_mask=pad)[0]

        def zeroed_step(v):  # the cache zeroed once by compute_cache(mask=), not per call
            cache = layer.compute_cache(v, mask=pad)
            return layer(x[:, -1:], cache=cache, value_mask=pad, cache_zeroed=True)[0]

        for fn in (cross, cached_step, zeroed_step):
            clean, got = _np(fn(x)), _np(fn(dirty))
            np.testing.assert_allclose(got, clean, atol=1e-5)
            g = _grads(fn, dirty)
            assert np.all(np.isfinite(g))
            assert not np.any(g[~pad])
            np.testing.assert_allclose(g[pad], _grads(fn, x)[pad], atol=1e-4)
        # Self-attention: the real rows' outputs are unaffected (padded rows are ignored).
        out = _np(layer(dirty, value_mask=pad, query_mask=pad))
        np.testing.assert_allclose(out[rows[..., 0]], _np(layer(x, value_mask=pad))[pad], atol=1e-5)
    encoder = TransformerEncoderLayer(N, 16)
    clean = _np(encoder(x, padding_mask=pad))
    np.testing.assert_allclose(_np(encoder(dirty, padding_mask=pad))[pad], clean[pad], atol=1e-5)


@pytest.mark.parametrize("junk", [np.nan, np.inf])
def test_junk_in_self_attention_padding_reaches_no_gradient(junk):
    """Padded rows of a self-attention input (masked as queries and as keys/values) reach
    neither the inputs' nor the weights' gradients: a projection's kernel gradient sums input
    rows times output gradients, and a padded query row meets the keys' gradients through the
    scores, so the rows must be zero before any projection."""
    x, pad = _inputs()
    dirty = x.copy()
    dirty[~pad] = junk
    rows = ops.convert_to_tensor(pad[:, :, None])
    for kwargs in ({}, {"num_key_value_heads": 1, "use_gate": True}):
        layer = _layer(**kwargs)

        def real_rows(v, layer=layer):
            out = layer(v, query_mask=pad, value_mask=pad)
            return ops.where(rows, out, ops.zeros((), out.dtype))

        g = _grads(real_rows, dirty)
        assert np.all(np.isfinite(g))
        assert not np.any(g[~pad])
        np.testing.assert_allclose(g[pad], _grads(real_rows, x)[pad], atol=1e-4)
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            def weight_grads(v):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(real_rows(tf.constant(v)))
                return [w.numpy() for w in tape.gradient(loss, layer.trainable_weights)]

            for got, want in zip(weight_grads(dirty), weight_grads(x)):
                assert np.all(np.isfinite(got))
                np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_huge_inputs_at_masked_positions_stay_finite(policy):
    x, pad = _inputs()
    dirty = x.copy()
    dirty[~pad] = 1e30
    layer = MultiHeadAttention(N, H, dtype=policy)
    out = _np(layer(x, dirty, value_mask=pad)).astype("float32")
    assert np.all(np.isfinite(out))
    clean = _np(layer(x, x, value_mask=pad)).astype("float32")
    np.testing.assert_allclose(out, clean, atol=1e-5 if policy == "float32" else 1e-2)


def _identity_layer():
    """One head whose projections are the identity on the first H features, no biases:
    the scores are q . k / sqrt(H) of the inputs themselves."""
    layer = MultiHeadAttention(1, H, use_bias=False)
    layer.build((1, 4, H))
    eye = np.eye(H, dtype="float32")[:, None, :]
    layer.set_weights([eye, eye, eye, np.eye(H, dtype="float32")[None]])
    return layer


def test_masking_is_exact_when_every_real_score_is_hugely_negative():
    # q = 1e5 * 1, k = -1e5 * 1: every real score is -1e10 * sqrt(H)/... far below -1e9. With
    # one key masked the three real keys still get 1/3 each, on both paths.
    layer = _identity_layer()
    q = np.full((1, 1, H), 1e5, "float32")
    k = np.full((1, 4, H), -1e5, "float32")
    mask = np.array([[True, True, True, False]])
    _, w = layer(q, k, value_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(_np(w)[0, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], rtol=1e-5)
    _, w, _ = layer(q, cache=layer.compute_cache(k), value_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(_np(w)[0, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], rtol=1e-5)


def test_attention_weight_dropout_is_applied():
    # Dropout on the attention weights changes the training outputs (on both paths) and
    # leaves the returned weights (before dropout) and the inference outputs alone.
    x, _ = _inputs()
    layer = _layer(dropout=0.5, seed=4)
    plain = _layer(seed=4)
    expected = _np(plain(x))
    np.testing.assert_allclose(_np(layer(x, training=False)), expected, atol=1e-6)
    out, w = layer(x, training=True, return_attention_scores=True)
    assert np.abs(_np(out) - expected).max() > 1e-2
    np.testing.assert_allclose(_np(w).sum(-1), 1.0, rtol=1e-5)
    cache = layer.compute_cache(x)
    step = _np(layer(x[:, :1], cache=cache, training=True)[0])
    assert np.abs(step - _np(plain(x[:, :1], x))).max() > 1e-2


def test_cache_index_past_the_cache_is_a_clear_error():
    x, _ = _inputs()
    layer = _layer()
    cache = layer.init_cache(B, T)
    with pytest.raises(ValueError, match="cache_index"):
        layer(x[:, :1], cache=cache, cache_index=ops.convert_to_tensor(T, "int32"))
    with pytest.raises(ValueError, match="cache_index"):
        layer(x[:, :2], cache=cache, cache_index=ops.convert_to_tensor(T - 1, "int32"))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        @tf.function
        def step(index):
            return layer(x[:, :1], cache=cache, cache_index=index)[0]

        with pytest.raises(tf.errors.InvalidArgumentError, match="cache_index"):
            step(tf.constant(T))
        assert step(tf.constant(T - 1)).shape == (B, 1, D)


def _attention_mask(form, pad):
    """`pad` [B, T] (keys) as an attention mask of the given rank, hiding those keys from
    every query (and head)."""
    full = np.broadcast_to(pad[:, None, :], (B, T, T))
    if form == "rank2":  # one mask for the whole batch: the keys row 0 pads
        return np.broadcast_to(pad[0][None, :], (T, T))
    if form == "rank3":
        return full
    return np.broadcast_to(full[:, None], (B, N, T, T))


@pytest.mark.parametrize("junk", [np.nan, np.inf, 1e30])
@pytest.mark.parametrize("form", ["rank2", "rank3", "rank4"])
def test_junk_behind_attention_mask_never_leaks(junk, form):
    """Keys that `attention_mask` hides from every query hold junk: the outputs, the inputs'
    gradients and the weights' gradients are those of clean keys (eager and compiled)."""
    x, pad = _inputs()
    if form == "rank2":
        pad = np.broadcast_to(pad[0], pad.shape)
    mask = _attention_mask(form, pad)
    dirty = x.copy()
    dirty[~pad] = junk
    for kwargs in ({}, {"num_key_value_heads": 1, "use_gate": True}):
        layer = _layer(**kwargs)

        def cross(v, layer=layer):  # clean queries, dirty keys/values
            return layer(x, v, attention_mask=mask)

        def separate_key(v, layer=layer):
            return layer(x, v, key=v * 2.0, attention_mask=mask)

        for fn in (cross, separate_key):
            clean = _np(fn(x))
            np.testing.assert_allclose(_np(fn(dirty)), clean, atol=1e-5)
            g = _grads(fn, dirty)
            assert np.all(np.isfinite(g))
            assert not np.any(g[~pad])
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            compiled = tf.function(cross, jit_compile=True)
            want = _np(cross(x))
            np.testing.assert_allclose(_np(compiled(tf.constant(dirty))), want, atol=1e-5)

            def weight_grads(v):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(cross(tf.constant(v)))
                return [w.numpy() for w in tape.gradient(loss, layer.trainable_weights)]

            for got, want in zip(weight_grads(dirty), weight_grads(x)):
                assert np.all(np.isfinite(got))
                np.testing.assert_allclose(got, want, atol=1e-4)
        else:
            import jax

            np.testing.assert_allclose(_np(jax.jit(cross)(dirty)), _np(cross(x)), atol=1e-5)
