import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import MultiHeadAttention
from tests.layers.checklist import run_layer_checklist

B, TQ, TV, DQ, DV, N, H = 2, 5, 6, 8, 7, 3, 4


def _np(x):
    return ops.convert_to_numpy(x)


def _data(seed=0):
    r = np.random.RandomState(seed)
    return (
        r.normal(size=(B, TQ, DQ)).astype("float32"),
        r.normal(size=(B, TV, DV)).astype("float32"),
    )


def _random_weights(layer, seed=3):
    r = np.random.RandomState(seed)
    layer.set_weights(
        [r.normal(scale=0.5, size=w.shape).astype("float32") for w in layer.get_weights()]
    )


def _np_softmax(e, mask):
    e = np.where(mask, e, -np.inf)
    m = np.max(np.where(mask, e, -1e30), axis=-1, keepdims=True)
    x = np.where(mask, np.exp(e - m), 0.0)
    s = x.sum(-1, keepdims=True)
    return np.divide(x, s, out=np.zeros_like(x), where=s > 0)


def _np_mha(weights, q, v, k=None, mask=None, use_bias=True):
    """Multi-head attention written out (Vaswani et al. 2017), mask [B, Tq, Tk]."""
    k = v if k is None else k
    if use_bias:
        wq, bq, wk, bk, wv, bv, wo, bo = weights
    else:
        wq, wk, wv, wo = weights
        bq, bk, bv, bo = 0.0, 0.0, 0.0, 0.0
    qh = np.einsum("btd,dnh->btnh", q, wq) + bq
    kh = np.einsum("bsd,dnh->bsnh", k, wk) + bk
    vh = np.einsum("bsd,dnh->bsnh", v, wv) + bv
    e = np.einsum("btnh,bsnh->bnts", qh, kh) / np.sqrt(wq.shape[-1])
    if mask is None:
        mask = np.ones(e.shape[:1] + e.shape[2:], bool)
    a = _np_softmax(e, mask[:, None])
    ctx = np.einsum("bnts,bsnh->btnh", a, vh)
    out = np.tensordot(ctx, wo, axes=[[2, 3], [0, 1]]) + bo
    return out, a


def _bias(layer):
    """The output projection's bias: the whole output of a query that attends to nothing."""
    return _np(layer.get_weights()[-1])


# ---------------------------------------------------------------- checklist
def test_checklist_cross_attention():
    q, v = _data()
    run_layer_checklist(
        MultiHeadAttention,
        {"num_heads": N, "key_dim": H},
        {"query": q, "value": v},
        expected_output_shapes=[(B, TQ, DQ)],
        expected_num_trainable_weights=8,
    )


def test_checklist_self_attention_causal_scores_dropout():
    # One input: Keras hands its mask to `mask`; value=None is self-attention.
    q, _ = _data()
    run_layer_checklist(
        MultiHeadAttention,
        {"num_heads": N, "key_dim": H, "dropout": 0.1},
        {"query": q},
        call_kwargs={"use_causal_mask": True, "return_attention_scores": True},
        expected_output_shapes=[(B, TQ, DQ), (B, N, TQ, TQ)],
        expected_num_trainable_weights=8,
    )


# ------------------------------------------------- against Keras and NumPy
CASES = {
    "self": dict(init={}, call={}, self_attention=True),
    "cross_with_key": dict(init={"value_dim": 2}, call={}, key=True),
    "attention_mask": dict(init={}, call={}, attention_mask=True),
    "causal": dict(init={}, call={"use_causal_mask": True}, self_attention=True),
    "output_shape": dict(init={"output_shape": (2, 3)}, call={}),
    "output_shape_int_no_bias": dict(init={"output_shape": 5, "use_bias": False}, call={}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_keras_multi_head_attention(case):
    spec = CASES[case]
    q, v = _data(1)
    k = (
        np.random.RandomState(2).normal(size=(B, TV, 3)).astype("float32")
        if spec.get("key")
        else None
    )
    if spec.get("self_attention"):
        v = q
    extra = {}
    mask = None
    if spec.get("attention_mask"):
        mask = np.random.RandomState(4).rand(B, TQ, TV) > 0.4
        mask[:, :, 0] = True  # no fully masked row: Keras makes those uniform, we make them 0
        extra["attention_mask"] = mask
    keras_layer = keras.layers.MultiHeadAttention(N, H, **spec["init"])
    kargs = (q, v) if k is None else (q, v, k)
    ref_out, ref_scores = keras_layer(*kargs, return_attention_scores=True, **spec["call"], **extra)
    layer = MultiHeadAttention(N, H, **spec["init"])
    layer.build(q.shape, v.shape, None if k is None else k.shape)
    assert [tuple(w.shape) for w in layer.weights] == [tuple(w.shape) for w in keras_layer.weights]
    assert [w.path.split("/", 1)[1] for w in layer.weights] == [
        w.path.split("/", 1)[1] for w in keras_layer.weights
    ]
    _random_weights(keras_layer)
    layer.set_weights(keras_layer.get_weights())
    ref_out, ref_scores = keras_layer(*kargs, return_attention_scores=True, **spec["call"], **extra)
    if "value_dim" in spec["init"]:
        # Keras' fused (no-scores) path rejects value_dim != key_dim on JAX.
        ref_plain = ref_out
    else:
        ref_plain = keras_layer(*kargs, **spec["call"], **extra)  # Keras' fused path
    value_arg = None if spec.get("self_attention") else v
    out, scores = layer(q, value_arg, key=k, return_attention_scores=True, **spec["call"], **extra)
    plain = layer(q, value_arg, key=k, **spec["call"], **extra)
    np.testing.assert_allclose(_np(out), _np(ref_out), atol=1e-5)
    np.testing.assert_allclose(_np(scores), _np(ref_scores), atol=1e-5)
    np.testing.assert_allclose(_np(plain), _np(ref_plain), atol=1e-5)

    # And against the formula written out in NumPy.
    full_mask = np.ones((B, TQ, v.shape[1]), bool) if mask is None else mask
    if spec["call"].get("use_causal_mask"):
        full_mask = full_mask & np.tril(np.ones((TQ, v.shape[1]), bool))[None]
    np_out, np_scores = _np_mha(
        layer.get_weights(), q, v, k, full_mask, use_bias=spec["init"].get("use_bias", True)
    )
    np.testing.assert_allclose(_np(scores), np_scores, atol=1e-5)
    np.testing.assert_allclose(_np(out), np_out.reshape(_np(out).shape), atol=1e-4)


@pytest.mark.parametrize(
    "init",
    [{}, {"value_dim": 5}, {"use_bias": False}, {"output_shape": (2, 3), "value_dim": 2}],
    ids=["plain", "value_dim", "no_bias", "output_shape"],
)
def test_self_attention_fused_projection_equals_separate(init):
    # `layer(x)` projects q, k, v with one matmul; `layer(x, copy_of_x)` takes the
    # three-projection path. Outputs and every gradient must agree.
    q, _ = _data(5)
    layer = MultiHeadAttention(N, H, **init)
    layer.build(q.shape)
    _random_weights(layer, seed=6)
    q_tensor = ops.convert_to_tensor(q)
    copy = ops.convert_to_tensor(q.copy())
    fused = layer(q_tensor, use_causal_mask=True)
    separate = layer(q_tensor, copy, use_causal_mask=True)
    np.testing.assert_allclose(_np(fused), _np(separate), atol=1e-5)

    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    wrt = [q_tensor] + layer.trainable_variables
    g_fused = _tf_grads(lambda: layer(q_tensor, use_causal_mask=True), wrt)
    g_separate = _tf_grads(
        lambda: layer(q_tensor, tf.identity(q_tensor), use_causal_mask=True), wrt
    )
    for a, b in zip(g_fused, g_separate):
        np.testing.assert_allclose(a, b, atol=1e-4)


def _tf_grads(call, wrt):
    """TensorFlow's gradients of `sum(sin(call()))` with respect to `wrt` (tensors watched),
    as NumPy arrays."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(wrt[0])
        loss = tf.reduce_sum(tf.sin(call()))
    return [g.numpy() for g in tape.gradient(loss, wrt)]


@pytest.mark.parametrize("flash", [False, True])
def test_self_attention_under_the_keys_padding_alone_projects_once(monkeypatch, flash):
    """One input as query, key and value with a `value_mask` and no query mask (a Transformer
    layer's self-attention): one projection matmul for the three, the same outputs and input
    gradients as the three-projection path, and junk in the padded rows reaching no real
    row."""
    from keras_attn.layers import multi_head_projection as proj

    q, _ = _data(5)
    pad = np.arange(TQ)[None, :] < np.array([3, 5])[:, None]
    layer = MultiHeadAttention(N, H, flash_attention=flash)
    layer.build(q.shape)
    _random_weights(layer, seed=6)
    calls = []
    for name in ("heads_of", "rows_of"):
        real = getattr(proj, name)
        monkeypatch.setattr(
            proj, name, lambda *a, real=real, name=name: calls.append(name) or real(*a)
        )
    x = ops.convert_to_tensor(q)
    once = layer(x, value_mask=pad, use_causal_mask=True)
    assert calls == ["rows_of" if flash else "heads_of"]
    separate = layer(x, ops.convert_to_tensor(q.copy()), value_mask=pad, use_causal_mask=True)
    np.testing.assert_allclose(_np(once), _np(separate), atol=1e-5)
    dirty = q.copy()
    dirty[~pad] = np.nan
    got = _np(layer(ops.convert_to_tensor(dirty), value_mask=pad, use_causal_mask=True))
    np.testing.assert_allclose(got[pad], _np(once)[pad], atol=1e-5)
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    np.testing.assert_allclose(
        _tf_grads(lambda: layer(x, value_mask=pad, use_causal_mask=True), [x])[0],
        _tf_grads(lambda: layer(x, tf.identity(x), value_mask=pad, use_causal_mask=True), [x])[0],
        atol=1e-4,
    )


def test_keras_masks_match_keras():
    # Keras masks on query and value (padding at the end): same as Keras on the
    # rows that attend to something.
    q, v = _data(5)
    q_mask = np.ones((B, TQ), bool)
    q_mask[1, 3:] = False
    v_mask = np.ones((B, TV), bool)
    v_mask[0, 4:] = False
    keras_layer = keras.layers.MultiHeadAttention(N, H)
    keras_layer(q, v)
    _random_weights(keras_layer)
    layer = MultiHeadAttention(N, H)
    layer(q, v)
    layer.set_weights(keras_layer.get_weights())
    ref, ref_w = keras_layer(
        q, v, query_mask=q_mask, value_mask=v_mask, return_attention_scores=True
    )
    out, w = layer(q, v, query_mask=q_mask, value_mask=v_mask, return_attention_scores=True)
    out, w = _np(out), _np(w)
    np.testing.assert_allclose(out[q_mask], _np(ref)[q_mask], atol=1e-5)
    np.testing.assert_allclose(
        w.transpose(0, 2, 1, 3)[q_mask], _np(ref_w).transpose(0, 2, 1, 3)[q_mask], atol=1e-5
    )
    # Padded query rows: zero weights, output is the bias (no attention contribution).
    assert np.all(w.transpose(0, 2, 1, 3)[~q_mask] == 0)
    np.testing.assert_allclose(
        out[~q_mask], np.broadcast_to(_bias(layer), out[~q_mask].shape), atol=1e-6
    )
    assert np.all(w[0, :, :, 4:] == 0)


# ------------------------------------------------------------------- cache
def _compiled(fn):
    """`fn` compiled with XLA on the current backend."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    return tf.function(fn, jit_compile=True)


def _self_layer(seed=7, dropout=0.0):
    layer = MultiHeadAttention(N, H, dropout=dropout)
    layer.build((B, TQ, DQ))
    _random_weights(layer, seed)
    return layer


def test_cached_one_token_at_a_time_equals_full_causal():
    q, _ = _data(6)
    layer = _self_layer()
    full, full_w = layer(q, use_causal_mask=True, return_attention_scores=True)
    cache = layer.init_cache(B, TQ)
    assert tuple(cache[0].shape) == (B, TQ, N, H) and tuple(cache[1].shape) == (B, TQ, N, H)
    assert not np.any(_np(cache[0])) and not np.any(_np(cache[1]))
    steps, weights = [], []
    for t in range(TQ):
        out, w, cache = layer(
            q[:, t : t + 1],
            use_causal_mask=True,
            return_attention_scores=True,
            cache=cache,
            cache_index=t,
        )
        assert tuple(out.shape) == (B, 1, DQ) and tuple(w.shape) == (B, N, 1, TQ)
        steps.append(_np(out))
        weights.append(_np(w))
    np.testing.assert_allclose(np.concatenate(steps, 1), _np(full), atol=1e-5)
    np.testing.assert_allclose(np.concatenate(weights, 2), _np(full_w), atol=1e-6)
    # The cache holds the projected keys/values of every position.
    keys, values = layer.compute_cache(q)
    np.testing.assert_allclose(_np(cache[0]), _np(keys), atol=1e-6)
    np.testing.assert_allclose(_np(cache[1]), _np(values), atol=1e-6)


def test_cached_decoding_in_a_while_loop_with_tensor_index():
    # cache_index is a tensor inside ops.while_loop (static shapes throughout).
    q, _ = _data(8)
    layer = _self_layer(9)
    full = _np(layer(q, use_causal_mask=True))
    q_t = ops.convert_to_tensor(q)

    def body(t, outputs, key_cache, value_cache):
        x = ops.slice(q_t, [0, t, 0], [B, 1, DQ])
        out, (key_cache, value_cache) = layer(
            x, use_causal_mask=True, cache=(key_cache, value_cache), cache_index=t
        )
        outputs = ops.slice_update(outputs, [0, t, 0], out)
        return t + 1, outputs, key_cache, value_cache

    def decode():
        key_cache, value_cache = layer.init_cache(B, TQ)
        start = (ops.convert_to_tensor(0, "int32"), ops.zeros((B, TQ, DQ)), key_cache, value_cache)
        return ops.while_loop(lambda t, *_: t < TQ, body, start)[1]

    np.testing.assert_allclose(_np(_compiled(decode)()), full, atol=1e-5)


def test_causal_mask_respects_cache_offset():
    # Prefill 2 rows, then 3 rows at once at cache_index=2 with a causal mask,
    # in a cache longer than the sequence (trailing empty slots stay invisible).
    q, _ = _data(10)
    layer = _self_layer(11)
    full, full_w = layer(q, use_causal_mask=True, return_attention_scores=True)
    cache = layer.init_cache(B, TQ + 3)
    out_a, cache = layer(q[:, :2], use_causal_mask=True, cache=cache, cache_index=0)
    out_b, w_b, cache = layer(
        q[:, 2:], use_causal_mask=True, return_attention_scores=True, cache=cache, cache_index=2
    )
    np.testing.assert_allclose(_np(out_a), _np(full)[:, :2], atol=1e-5)
    np.testing.assert_allclose(_np(out_b), _np(full)[:, 2:], atol=1e-5)
    w_b = _np(w_b)
    assert w_b.shape == (B, N, TQ - 2, TQ + 3)
    np.testing.assert_allclose(w_b[..., :TQ], _np(full_w)[:, :, 2:], atol=1e-6)
    for i in range(TQ - 2):  # row i is position 2 + i: sees keys j <= 2 + i only
        assert np.all(w_b[:, :, i, 2 + i + 1 :] == 0)
        assert np.all(w_b[:, :, i, : 2 + i + 1] > 0)
    # Without the causal mask the new rows see every written key, and nothing after.
    _, w_nc, _ = layer(
        q[:, 2:], return_attention_scores=True, cache=layer.init_cache(B, TQ + 3), cache_index=2
    )
    w_nc = _np(w_nc)
    assert np.all(w_nc[..., :TQ] > 0) and np.all(w_nc[..., TQ:] == 0)


def test_cached_rows_carry_their_keras_mask():
    # Self-attention: the query's mask also masks the keys it writes to the
    # cache, at the cache offset (here a hole in the middle, at position 3).
    q, _ = _data(18)
    layer = _self_layer(19)
    pad = np.ones((B, TQ), bool)
    pad[0, 3] = False
    pad[1, 1] = False
    full = _np(layer(q, query_mask=pad))
    cache = layer.init_cache(B, TQ)
    out_a, cache = layer(q[:, :2], query_mask=pad[:, :2], cache=cache, cache_index=0)
    # Rows 0-1 were written before rows 2-4 existed: compare them to a
    # full call over the first two positions.
    np.testing.assert_allclose(_np(out_a), _np(layer(q[:, :2], query_mask=pad[:, :2])), atol=1e-5)
    out_b, cache = layer(q[:, 2:], query_mask=pad[:, 2:], cache=cache, cache_index=2)
    # The earlier rows' masks are not remembered: give them as attention_mask.
    attn = np.broadcast_to(pad[:, None, :], (B, TQ - 2, TQ))
    out_c, _ = layer(
        q[:, 2:], query_mask=pad[:, 2:], attention_mask=attn, cache=cache, cache_index=2
    )
    np.testing.assert_allclose(_np(out_c), full[:, 2:], atol=1e-5)
    # Without it, only example 0 (whose hole is among the new rows) matches.
    np.testing.assert_allclose(_np(out_b)[0], full[0, 2:], atol=1e-5)
    assert not np.allclose(_np(out_b)[1, 0], full[1, 2], atol=1e-3)
    # A Keras-masked `value` given explicitly behaves the same.
    out_d, _ = layer(
        q[:, 2:], q[:, 2:], value_mask=pad[:, 2:], query_mask=pad[:, 2:], cache=cache, cache_index=2
    )
    np.testing.assert_allclose(_np(out_d), _np(out_b), atol=1e-6)


def test_precomputed_cross_attention_memory():
    q, v = _data(12)
    layer = MultiHeadAttention(N, H, value_dim=2)
    layer.build(q.shape, v.shape)
    _random_weights(layer, 13)
    v_mask = np.ones((B, TV), bool)
    v_mask[1, 2:] = False
    ref, ref_w = layer(q, v, value_mask=v_mask, return_attention_scores=True)
    memory = layer.compute_cache(v)
    assert tuple(memory[0].shape) == (B, TV, N, H) and tuple(memory[1].shape) == (B, TV, N, 2)
    out, w, same = layer(q, cache=memory, value_mask=v_mask, return_attention_scores=True)
    np.testing.assert_allclose(_np(out), _np(ref), atol=1e-5)
    np.testing.assert_allclose(_np(w), _np(ref_w), atol=1e-6)
    assert same[0] is memory[0] and same[1] is memory[1]
    # One decoder step at a time against the memory.
    step, memory = layer(q[:, 3:4], cache=memory, value_mask=v_mask)
    np.testing.assert_allclose(_np(step), _np(ref)[:, 3:4], atol=1e-5)


# --------------------------------------------------- fully masked queries
def test_fully_masked_queries_get_zero_weights_on_every_path():
    q, v = _data(14)
    layer = MultiHeadAttention(N, H, dropout=0.5)
    layer.build(q.shape, v.shape)
    _random_weights(layer, 15)
    bias = _bias(layer)
    attn = np.ones((B, TQ, TV), bool)
    attn[0, 1, :] = False  # one query of example 0 sees nothing
    v_mask = np.ones((B, TV), bool)
    v_mask[1] = False  # example 1 has no value at all
    dead = np.zeros((B, TQ), bool)
    dead[0, 1] = True
    dead[1] = True
    for training in (False, True):
        out, w = layer(
            q,
            v,
            attention_mask=attn,
            value_mask=v_mask,
            return_attention_scores=True,
            training=training,
        )
        out_only = layer(q, v, attention_mask=attn, value_mask=v_mask, training=training)
        for o in (_np(out), _np(out_only)):
            assert np.all(np.isfinite(o))
            np.testing.assert_allclose(o[dead], np.broadcast_to(bias, o[dead].shape), atol=1e-6)
            assert not np.allclose(o[~dead], bias, atol=1e-3)
        w = _np(w).transpose(0, 2, 1, 3)  # [B, Tq, N, Tv]
        assert np.all(w[dead] == 0)
        np.testing.assert_allclose(w[~dead].sum(-1), 1.0, rtol=1e-5)
    # Cached path: a query whose cache positions are all masked.
    memory = layer.compute_cache(v)
    out, w, _ = layer(
        q, cache=memory, value_mask=v_mask, return_attention_scores=True, training=True
    )
    assert np.all(_np(w)[1] == 0)
    np.testing.assert_allclose(_np(out)[1], np.broadcast_to(bias, (TQ, DQ)), atol=1e-6)
    # Self-attention with a cache, every key of the new rows masked out.
    self_layer = _self_layer(16, dropout=0.5)
    no_keys = np.zeros((B, 2, TQ), bool)
    out, w, _ = self_layer(
        q[:, :2],
        attention_mask=no_keys,
        cache=self_layer.init_cache(B, TQ),
        cache_index=0,
        return_attention_scores=True,
        training=True,
    )
    assert np.all(_np(w) == 0)
    np.testing.assert_allclose(_np(out), np.broadcast_to(_bias(self_layer), (B, 2, DQ)), atol=1e-6)


@pytest.mark.parametrize("mask_kind", ["none", "value_mask", "attention_mask", "per_head"])
def test_one_query_cache_path_equals_uncached(mask_kind):
    # A one-query call with a cache attends in the cache's [B, S, N, H] layout (its own code);
    # it must give what the uncached head-major path gives for the same query and memory.
    q, v = _data(21)
    layer = MultiHeadAttention(N, H)
    layer.build(q.shape, v.shape)
    _random_weights(layer, 22)
    q1 = q[:, 2:3]
    kwargs = {}
    r = np.random.RandomState(23)
    if mask_kind == "value_mask":
        m = r.rand(B, TV) > 0.4
        m[1] = False  # example 1 sees nothing: zero weights, output = bias
        kwargs["value_mask"] = m
    elif mask_kind == "attention_mask":
        kwargs["attention_mask"] = r.rand(B, 1, TV) > 0.4
    elif mask_kind == "per_head":
        kwargs["attention_mask"] = r.rand(B, N, 1, TV) > 0.4
    ref, ref_w = layer(q1, v, return_attention_scores=True, **kwargs)
    out, w, _ = layer(q1, cache=layer.compute_cache(v), return_attention_scores=True, **kwargs)
    np.testing.assert_allclose(_np(out), _np(ref), atol=1e-5)
    np.testing.assert_allclose(_np(w), _np(ref_w), atol=1e-6)
    assert np.all(np.isfinite(_np(out)))
    if mask_kind == "value_mask":
        assert np.all(_np(w)[1] == 0)
        np.testing.assert_allclose(_np(out)[1, 0], _bias(layer), atol=1e-6)


def test_one_query_cache_path_in_float16():
    q, v = _data(24)
    layer = MultiHeadAttention(N, H)
    layer.build(q.shape, v.shape)
    _random_weights(layer, 25)
    half = MultiHeadAttention(N, H, dtype="mixed_float16")
    half.build(q.shape, v.shape)
    half.set_weights(layer.get_weights())
    memory = half.compute_cache(v)
    out, w, _ = half(q[:, :1], cache=memory, return_attention_scores=True)
    ref, ref_w = layer(q[:, :1], v, return_attention_scores=True)
    assert _np(out).dtype == np.float16
    np.testing.assert_allclose(_np(out).astype("float32"), _np(ref), atol=3e-2, rtol=3e-2)
    np.testing.assert_allclose(_np(w).astype("float32").sum(-1), 1.0, atol=3e-3)


# ------------------------------------------------------ Sequential, masks
class _MaskOut(keras.layers.Layer):
    """Outputs the Keras mask it receives, as float."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        return ops.cast(mask, "float32")


def test_sequential_model_add_with_embedding_mask():
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 2]], "int32")
    model = keras.Sequential([keras.Input((TQ,), dtype="int32")])
    model.add(keras.layers.Embedding(10, DQ, mask_zero=True))
    model.add(MultiHeadAttention(N, H))
    model.add(_MaskOut())  # the query's mask must come out of the attention
    np.testing.assert_array_equal(_np(model(ids)), (ids != 0).astype("float32"))
    mha = model.layers[1]
    _random_weights(mha, 17)
    attn_model = keras.Model(model.inputs[0], mha.output)
    emb = _np(model.layers[0](ids))
    pad = ids != 0
    ref, _ = _np_mha(mha.get_weights(), emb, emb, mask=pad[:, :, None] & pad[:, None, :])
    out = _np(attn_model(ids))
    np.testing.assert_allclose(out[pad], ref[pad], atol=1e-5)
    # The padded queries attend to nothing: output = bias.
    np.testing.assert_allclose(out[~pad], np.broadcast_to(_bias(mha), out[~pad].shape), atol=1e-6)
    # Padded keys really are ignored: changing them changes nothing.
    emb2 = emb.copy()
    emb2[0, 3:] = 50.0
    again = _np(mha(emb2, mask=ops.convert_to_tensor(pad)))
    np.testing.assert_allclose(again[pad], out[pad], atol=1e-5)
    # And it trains inside the Sequential model.
    train = keras.Sequential([keras.Input((TQ,), dtype="int32")])
    train.add(keras.layers.Embedding(10, DQ, mask_zero=True))
    train.add(MultiHeadAttention(N, H))
    train.add(keras.layers.GlobalAveragePooling1D())
    train.compile("adam", "mse")
    history = train.fit(ids, np.ones((2, DQ), "float32"), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_inputs_keep_their_keras_mask():
    # Eager: a residual branch still sees the embedding's mask after the
    # attention used it (the layer must not strip the mask off its inputs).
    ids = np.array([[3, 1, 0, 0, 0], [2, 7, 1, 8, 2]], "int32")
    x = keras.layers.Embedding(10, DQ, mask_zero=True)(ids)
    y = keras.layers.Add()([x, MultiHeadAttention(N, H)(x, x)])
    expected = (ids != 0).astype("float32")
    np.testing.assert_array_equal(_np(_MaskOut()(x)), expected)
    np.testing.assert_array_equal(_np(_MaskOut()(y)), expected)
    # The same in a functional model.
    inp = keras.Input((TQ,), dtype="int32")
    x = keras.layers.Embedding(10, DQ, mask_zero=True)(inp)
    y = keras.layers.Add()([x, MultiHeadAttention(N, H)(x, x)])
    model = keras.Model(inp, _MaskOut()(y))
    np.testing.assert_array_equal(_np(model(ids)), expected)


# ------------------------------------------------------------ bad arguments
def test_bad_arguments():
    for kwargs, name in (
        ({"num_heads": 0, "key_dim": 4}, "num_heads"),
        ({"num_heads": 2, "key_dim": 4.0}, "key_dim"),
        ({"num_heads": 2, "key_dim": 4, "value_dim": -1}, "value_dim"),
        ({"num_heads": 2, "key_dim": 4, "dropout": 1.0}, "dropout"),
        ({"num_heads": 2, "key_dim": 4, "use_bias": "yes"}, "use_bias"),
        ({"num_heads": 2, "key_dim": 4, "output_shape": (3, 0)}, "output_shape"),
    ):
        with pytest.raises(ValueError, match=name):
            MultiHeadAttention(**kwargs)
    q, v = _data()
    layer = MultiHeadAttention(N, H)
    with pytest.raises(ValueError, match="compute_cache"):
        layer.compute_cache(v)
    with pytest.raises(ValueError, match="query"):
        layer(q[:, 0])
    layer(q, v)
    with pytest.raises(ValueError, match="value"):
        layer(q, q)  # value last dim 8, built with 7
    with pytest.raises(ValueError, match="key"):
        layer(q, v, key=q)
    with pytest.raises(ValueError, match="value"):
        layer.compute_cache(q)
    layer = _self_layer()
    with pytest.raises(ValueError, match="cache_index"):
        layer(q, cache_index=0)
    with pytest.raises(ValueError, match="cache_index"):
        layer(q[:, :2], cache=layer.init_cache(B, TQ), cache_index=TQ - 1)
    with pytest.raises(ValueError, match="key_cache"):
        layer(q, cache=(np.zeros((B, TQ, N + 1, H), "float32"), np.zeros((B, TQ, N, H), "float32")))
    with pytest.raises(ValueError, match="value_mask"):
        layer(q, cache=layer.init_cache(B, TQ + 1), value_mask=np.ones((B, TQ), bool))


def test_single_key_gives_weight_one_without_keras_warning():
    # One key (a one-token memory, a first decoding step): weight 1, or 0 where masked, and
    # no "softmax over an axis of size 1" warning from Keras.
    import warnings

    q, v = _data(30)
    layer = MultiHeadAttention(N, H)
    layer.build(q.shape, (B, 1, DV))
    _random_weights(layer, 31)
    v_mask = np.array([[True], [False]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, w = layer(q, v[:, :1], value_mask=v_mask, return_attention_scores=True)
    w = _np(w)
    assert np.all(w[0] == 1.0) and np.all(w[1] == 0.0)
    np.testing.assert_allclose(_np(out)[1], np.broadcast_to(_bias(layer), (TQ, DQ)), atol=1e-6)


# ------------------------------------------------------- the call's seams
def test_subclass_seams_see_every_layout():
    """`_attend` is the one attention (sequences, a cached step, rank-4 inputs) and `_output`
    the one gate + output projection: a subclass overriding them sees every call."""
    seen = []

    class Recording(MultiHeadAttention):
        def _attend(self, queries, keys, values, visible, training, weights_wanted, rows=False):
            seen.append(("attend", rows, tuple(queries.shape)))
            return super()._attend(queries, keys, values, visible, training, weights_wanted, rows)

        def _output(self, context, gate, head_major=True):
            seen.append(("output", len(context.shape)))
            return super()._output(context, gate, head_major) + 1.0

    q, _ = _data()
    plain = MultiHeadAttention(N, H, use_gate=True)
    for flash, layout in ((False, (False, (B, N, TQ, H))), (True, (True, (B, TQ, N, H)))):
        # The reference products take head-major queries, the fused kernel its own layout.
        layer = Recording(N, H, use_gate=True, flash_attention=flash)
        plain(q)
        layer(q)
        layer.set_weights(plain.get_weights())
        np.testing.assert_allclose(_np(layer(q)), _np(plain(q)) + 1.0, atol=1e-5)
        assert seen[-2:] == [("attend",) + layout, ("output", 4)]

    cache = layer.init_cache(B, TQ)
    got, _ = layer(q[:, :1], cache=cache, cache_index=0)
    want, _ = plain(q[:, :1], cache=cache, cache_index=0)
    np.testing.assert_allclose(_np(got), _np(want) + 1.0, atol=1e-5)
    assert seen[-2:] == [("attend", True, (B, 1, N, H)), ("output", 4)]

    images = np.random.RandomState(5).normal(size=(B, 2, 3, DQ)).astype("float32")
    plain4 = MultiHeadAttention(N, H, attention_axes=(1, 2))
    layer4 = Recording(N, H, attention_axes=(1, 2))
    plain4(images)
    layer4(images)
    layer4.set_weights(plain4.get_weights())
    np.testing.assert_allclose(_np(layer4(images)), _np(plain4(images)) + 1.0, atol=1e-5)
    # The two attended axes folded into one of 6 positions, head-major.
    assert seen[-2:] == [("attend", False, (B, N, 6, H)), ("output", 5)]


def test_compute_attention_override_runs_on_rank_4_inputs():
    """Keras' `_compute_attention` hook is on the one attention path, so it also runs for
    inputs of rank > 3 (their attended axes folded into one)."""
    calls = []

    class Softmax(MultiHeadAttention):
        # Attention written out in Keras' layout, as a subclass would.
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
            use_causal_mask=False,
        ):
            calls.append(tuple(query.shape))
            scores = ops.einsum("btnh,bsnh->bnts", query, key) / np.sqrt(self.key_dim)
            if attention_mask is not None:
                scores = ops.where(attention_mask, scores, -1e9)
            weights = ops.softmax(scores, axis=-1)
            return ops.einsum("bnts,bsnh->btnh", weights, value), weights

    images = np.random.RandomState(6).normal(size=(B, 2, 3, DQ)).astype("float32")
    plain = MultiHeadAttention(N, H, attention_axes=(2,))
    custom = Softmax(N, H, attention_axes=(2,))
    plain(images)
    custom(images)
    custom.set_weights(plain.get_weights())
    _random_weights(plain)
    custom.set_weights(plain.get_weights())
    got, got_w = custom(images, use_causal_mask=True, return_attention_scores=True)
    want, want_w = plain(images, use_causal_mask=True, return_attention_scores=True)
    # The non-attended axis 1 folded into the batch: [B * 2, 3, N, H].
    assert calls[-1] == (B * 2, 3, N, H)
    np.testing.assert_allclose(_np(got), _np(want), atol=1e-5)
    np.testing.assert_allclose(_np(got_w), _np(want_w), atol=1e-5)


def test_projections_under_keras_names():
    """`query_dense`, `key_dense`, `value_dense`, `output_dense`: None before `build`, then
    the projections (Keras' names and kernels), which LoRA can be enabled on."""
    names = ("query_dense", "key_dense", "value_dense", "output_dense")
    layer = MultiHeadAttention(2, 3, value_dim=5)
    assert [getattr(layer, n) for n in names] == [None] * 4
    layer.build((1, 4, 6), (1, 7, 8))
    kernels = [tuple(getattr(layer, n).kernel.shape) for n in names]
    assert kernels == [(6, 2, 3), (8, 2, 3), (8, 2, 5), (2, 5, 6)]
    layer.value_dense.enable_lora(1)
    assert layer.value_dense.lora_enabled and not layer.query_dense.lora_enabled
