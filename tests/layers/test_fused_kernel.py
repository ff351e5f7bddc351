"""The fused-kernel path of MultiHeadAttention (docs/multi_head.md, "The fused kernel").

What the kernel receives (a spy in place of `jax.nn.dot_product_attention` on JAX, of
`keras.ops.dot_product_attention` on TensorFlow): `is_causal`, the sequence lengths of the
padding, the window, no dense mask where the structure describes it, grouped key/value heads
not repeated (but for XLA's implementation on a GPU), the `[B, T, N, H]` layout. Then the fused path's numbers against the reference
products (`flash_attention=False`, whose masked softmax is written out in NumPy in
test_multi_head.py) with padding, causal order, windows, grouped heads and the cache, their
gradients with padding of either branch, and NaN in padding reaching no output and no
gradient."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import GroupedQueryAttention, MultiHeadAttention, multi_head_fused

B, T, D, N, H = 2, 6, 8, 4, 2
JAX = keras.backend.backend() == "jax"


def _np(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


def _x(seed, shape=(B, T, D)):
    return np.random.RandomState(seed).normal(size=shape).astype("float32")


def _pad(lengths, size=T):
    return np.arange(size)[None, :] < np.asarray(lengths)[:, None]


def _pair(dtype="float32", **kwargs):
    """A reference layer and a fused one with the same weights."""
    ref = MultiHeadAttention(N, H, flash_attention=False, dtype=dtype, **kwargs)
    fused = MultiHeadAttention(N, H, flash_attention=True, dtype=dtype, **kwargs)
    ref.build((B, T, D))
    fused.build((B, T, D))
    r = np.random.RandomState(7)
    ref.set_weights([r.normal(scale=0.5, size=w.shape) for w in ref.get_weights()])
    fused.set_weights(ref.get_weights())
    return ref, fused


class KernelSpy:
    """A double of the backend's attention kernel: records what each call receives (the
    arrays' shapes, the lengths' values, the flags), then runs the real kernel."""

    def __init__(self, monkeypatch):
        self.calls = []
        if JAX:
            import jax

            self._real = jax.nn.dot_product_attention
            monkeypatch.setattr(jax.nn, "dot_product_attention", self)
        else:
            self._real = keras.ops.dot_product_attention
            monkeypatch.setattr(keras.ops, "dot_product_attention", self)

    def __call__(self, query, key, value, *args, **kwargs):
        def concrete(x):
            try:
                return None if x is None else np.asarray(x)
            except Exception:  # a traced value
                return "traced"

        mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
        self.calls.append(
            {
                "query": tuple(query.shape),
                "key": tuple(key.shape),
                "value": tuple(value.shape),
                "mask": None if mask is None else tuple(mask.shape),
                "is_causal": kwargs.get("is_causal", False),
                "query_seq_lengths": concrete(kwargs.get("query_seq_lengths")),
                "key_value_seq_lengths": concrete(kwargs.get("key_value_seq_lengths")),
                "local_window_size": kwargs.get("local_window_size"),
                "implementation": kwargs.get("implementation"),
            }
        )
        return self._real(query, key, value, *args, **kwargs)

    def only(self):
        assert len(self.calls) == 1, self.calls
        return self.calls[0]


# ------------------------------------------------------------- what the kernel receives
def test_causal_reaches_the_kernel_as_is_causal(monkeypatch):
    _, layer = _pair()
    spy = KernelSpy(monkeypatch)
    layer(_x(1), use_causal_mask=True)
    call = spy.only()
    assert call["is_causal"] is True
    assert call["mask"] is None
    assert call["query"] == (B, T, N, H) and call["key"] == (B, T, N, H)


@pytest.mark.skipif(not JAX, reason="sequence lengths and windows are jax.nn's arguments")
def test_padding_reaches_the_kernel_as_sequence_lengths(monkeypatch):
    _, layer = _pair()
    spy = KernelSpy(monkeypatch)
    mask = _pad([4, 6])
    layer(_x(1), _x(2), query_mask=mask, value_mask=_pad([3, 5]), use_causal_mask=True)
    call = spy.only()
    assert call["mask"] is None and call["is_causal"] is True
    np.testing.assert_array_equal(call["query_seq_lengths"], [4, 6])
    np.testing.assert_array_equal(call["key_value_seq_lengths"], [3, 5])


@pytest.mark.skipif(not JAX, reason="sequence lengths and windows are jax.nn's arguments")
def test_keras_mask_reaches_the_kernel_as_sequence_lengths(monkeypatch):
    """An Embedding's `mask_zero` mask, self-attention in a model: lengths, no dense mask."""
    tokens = np.array([[3, 1, 4, 1, 0, 0], [2, 7, 1, 8, 2, 8]])
    inputs = keras.Input((T,), dtype="int32")
    embedded = keras.layers.Embedding(10, D, mask_zero=True)(inputs)
    outputs = MultiHeadAttention(N, H, flash_attention=True)(embedded)
    model = keras.Model(inputs, outputs)
    spy = KernelSpy(monkeypatch)
    model(tokens)
    call = spy.only()
    assert call["mask"] is None and call["is_causal"] is False
    np.testing.assert_array_equal(call["query_seq_lengths"], [4, 6])
    np.testing.assert_array_equal(call["key_value_seq_lengths"], [4, 6])


@pytest.mark.skipif(not JAX, reason="sequence lengths and windows are jax.nn's arguments")
def test_keras_mask_with_holes_reaches_a_causal_kernel_as_sequence_lengths(monkeypatch):
    """Causal self-attention under an Embedding's mask that is not a prefix (left padding, a
    hole): the kept positions moved to the front, `is_causal` and the counts, no dense mask;
    the model's output equals the reference layer's with the same weights."""
    tokens = np.array([[0, 3, 1, 0, 4, 1], [0, 0, 2, 7, 1, 8]])
    inputs = keras.Input((T,), dtype="int32")
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    ref, fused = _pair()
    models = [
        keras.Model(inputs, layer(embedding(inputs), use_causal_mask=True))
        for layer in (ref, fused)
    ]
    want = _np(models[0](tokens))
    spy = KernelSpy(monkeypatch)
    got = _np(models[1](tokens))
    call = spy.only()
    assert call["mask"] is None and call["is_causal"] is True
    np.testing.assert_array_equal(call["query_seq_lengths"], [4, 4])
    np.testing.assert_array_equal(call["key_value_seq_lengths"], [4, 4])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    import jax

    assert "cond[" not in str(jax.make_jaxpr(models[1])(tokens))  # no branch on the values


@pytest.mark.skipif(not JAX, reason="sequence lengths and windows are jax.nn's arguments")
@pytest.mark.parametrize("causal, window", [(True, (2, 0)), (False, (2, 2))])
def test_sliding_window_reaches_the_kernel_as_local_window_size(monkeypatch, causal, window):
    _, layer = _pair(sliding_window=3)
    spy = KernelSpy(monkeypatch)
    layer(_x(1), use_causal_mask=causal)
    call = spy.only()
    assert tuple(call["local_window_size"]) == window
    assert call["mask"] is None and call["is_causal"] is causal


@pytest.mark.parametrize("groups", [2, 1])
def test_grouped_heads_reach_the_kernel_unrepeated(monkeypatch, groups):
    layer = GroupedQueryAttention(H, N, groups, flash_attention=True)
    layer.build((B, T, D))
    spy = KernelSpy(monkeypatch)
    layer(_x(1), use_causal_mask=True)
    call = spy.only()
    assert call["query"] == (B, T, N, H)
    # (TensorFlow's keras.ops.dot_product_attention takes grouped heads only in newer Keras,
    # by repeating them, and never a single one: there, and only there, they are repeated.)
    heads = groups if JAX else N
    assert call["key"] == (B, T, heads, H) and call["value"] == (B, T, heads, H)
    assert call["mask"] is None and call["is_causal"] is True


@pytest.mark.skipif(not JAX, reason="the GPU's choice of implementation is JAX's")
def test_on_a_gpu_xla_gets_grouped_heads_repeated_cudnn_as_they_are(monkeypatch):
    """On a GPU, XLA's implementation (float32) gets the key/value heads repeated to the query
    heads, cuDNN's (half precision) the grouped ones; the numbers stay the reference's."""
    monkeypatch.setattr(multi_head_fused, "_platform", lambda: "gpu")
    for policy, implementation, heads in (("float32", None, N), ("mixed_bfloat16", "cudnn", 2)):
        ref = GroupedQueryAttention(H, N, 2, flash_attention=False, dtype=policy)
        layer = GroupedQueryAttention(H, N, 2, flash_attention=True, dtype=policy)
        ref.build((B, T, D))
        layer.build((B, T, D))
        layer.set_weights(ref.get_weights())
        spy = KernelSpy(monkeypatch)
        got = _np(layer(_x(1), use_causal_mask=True))
        first = spy.calls[0]
        assert first["implementation"] == implementation, policy
        assert first["key"] == (B, T, heads, H) and first["value"] == (B, T, heads, H), policy
        want = _np(ref(_x(1), use_causal_mask=True))
        tol = TOLERANCE[policy]
        np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


def test_an_arbitrary_attention_mask_is_the_one_dense_mask(monkeypatch):
    _, layer = _pair()
    spy = KernelSpy(monkeypatch)
    mask = np.random.RandomState(3).rand(B, T, T) > 0.3
    layer(_x(1), attention_mask=mask)
    call = spy.only()
    assert call["mask"] is not None and call["mask"][-2:] == (T, T)


@pytest.mark.skipif(not JAX, reason="the choice by device is JAX's (TensorFlow: never)")
def test_the_default_is_chosen_by_device_not_dtype(monkeypatch):
    """`flash_attention=None`: the kernel on an accelerator whatever the dtype, our products
    on the CPU whatever the dtype."""
    for policy in ("float32", "mixed_bfloat16"):
        layer = MultiHeadAttention(N, H, dtype=policy)
        layer.build((B, T, D))
        monkeypatch.setattr(multi_head_fused, "_platform", lambda: "gpu")
        spy = KernelSpy(monkeypatch)
        layer(_x(1), use_causal_mask=True)
        # In half precision cuDNN's kernel is asked first (here, without a GPU, it refuses
        # and XLA's implementation runs).
        first = "cudnn" if policy == "mixed_bfloat16" else None
        assert [c["implementation"] for c in spy.calls][:1] == [first], policy
        count = len(spy.calls)
        monkeypatch.setattr(multi_head_fused, "_platform", lambda: "cpu")
        layer(_x(1), use_causal_mask=True)
        assert len(spy.calls) == count, policy


def test_weights_or_dropout_keep_the_reference_products(monkeypatch):
    layer = MultiHeadAttention(N, H, dropout=0.5, flash_attention=None)
    layer.build((B, T, D))
    spy = KernelSpy(monkeypatch)
    monkeypatch.setattr(multi_head_fused, "fused_by_default", lambda: True)
    layer(_x(1), training=True)
    layer(_x(1), return_attention_scores=True)
    assert spy.calls == []
    layer(_x(1), training=False)
    assert len(spy.calls) == 1


# ---------------------------------------------------------- fused vs reference numbers
HOLES = np.array([[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 1]], bool)  # one mask: queries and keys
LEFT = ~_pad([2, 0])
CASES = {
    "padding": (dict(), dict(query_mask=_pad([4, 6]), value_mask=_pad([3, 6]))),
    "causal": (dict(), dict(use_causal_mask=True)),
    "causal+padding": (dict(), dict(use_causal_mask=True, value_mask=_pad([2, 5]))),
    "window": (dict(sliding_window=2), dict(value_mask=_pad([4, 6]))),
    "causal window": (dict(sliding_window=3), dict(use_causal_mask=True)),
    "gqa": (dict(num_key_value_heads=2, use_gate=True), dict(use_causal_mask=True)),
    "mqa+padding": (dict(num_key_value_heads=1), dict(value_mask=_pad([1, 4]))),
    "left padding": (dict(), dict(value_mask=~_pad([2, 0]), query_mask=~_pad([2, 0]))),
    "causal, one mask with holes": (
        dict(),
        dict(use_causal_mask=True, query_mask=HOLES, value_mask=HOLES),
    ),
    "causal, one left padding": (
        dict(),
        dict(use_causal_mask=True, query_mask=LEFT, value_mask=LEFT),
    ),
    "causal, the keys' left padding": (dict(), dict(use_causal_mask=True, value_mask=LEFT)),
    "gqa causal, one mask": (
        dict(num_key_value_heads=2),
        dict(use_causal_mask=True, query_mask=HOLES, value_mask=HOLES),
    ),
    "no keys": (dict(), dict(value_mask=_pad([0, 6]))),
    "window past the keys": (dict(sliding_window=2), dict(value_mask=_pad([1, 6]))),
    "attention_mask": (dict(), dict(attention_mask=np.random.RandomState(4).rand(B, T, T) > 0.5)),
    "rotary": (dict(rotary_max_wavelength=100), dict(use_causal_mask=True)),
}
TOLERANCE = {"float32": 1e-5, "mixed_bfloat16": 2e-2}


def _tensors(call):
    """`call` with its arrays as tensors, one tensor per array: a layer called eagerly converts
    each NumPy argument on its own, so one array passed twice would arrive as two tensors."""
    made = {}
    return {
        k: made.setdefault(id(v), ops.convert_to_tensor(v)) if isinstance(v, np.ndarray) else v
        for k, v in call.items()
    }


# Every case in float32; in bfloat16 those whose kernel arguments differ.
HALF = ("padding", "causal+padding", "window", "gqa", "no keys", "causal, one mask with holes")


@pytest.mark.parametrize(
    "case, policy",
    [(c, "float32") for c in CASES] + [(c, "mixed_bfloat16") for c in HALF],
)
def test_fused_equals_the_reference(case, policy):
    init, call = CASES[case]
    ref, fused = _pair(policy, **init)
    x = _x(1)
    want, got = _np(ref(x, **call)), _np(fused(x, **_tensors(call)))
    np.testing.assert_allclose(got, want, atol=TOLERANCE[policy], rtol=TOLERANCE[policy])
    if "value_mask" in call and not call["value_mask"][0].any():  # nothing to see: the bias
        bias = ref.get_weights()[-1]
        tol = TOLERANCE[policy]
        np.testing.assert_allclose(got[0], np.broadcast_to(bias, (T, D)), atol=tol, rtol=tol)


@pytest.mark.parametrize(
    "case",
    [
        "padding",
        "left padding",
        "causal+padding",
        "mqa+padding",
        "causal, one mask with holes",
        "causal, the keys' left padding",
        "gqa causal, one mask",
    ],
)
def test_fused_gradients_equal_the_reference(case):
    """Gradients (input and every weight) of the fused path against the reference products,
    with padding moved to sequence lengths (without causal order, or one mask for queries and
    keys), a prefix of the keys under causal order (the kernel's branch) and one that is not
    (the products' branch, recomputed in the backward pass on JAX)."""
    init, call = CASES[case]
    ref, fused = _pair(**init)
    weights = [ops.convert_to_tensor(w) for w in fused.get_weights()]
    probe = ops.convert_to_tensor(_x(9))

    def loss_of(layer):
        def loss(x, *ws):
            return ops.sum(layer.stateless_call(ws, [], x, **call)[0] * probe)

        return loss

    got = _grad(loss_of(fused), [_x(1)] + weights)
    want = _grad(loss_of(ref), [_x(1)] + weights)
    assert any(np.abs(w).max() > 1e-3 for w in want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


BRANCH_CASES = {
    # name: (layer options, call, whether a `cond` on the mask's values is traced)
    "no causal order": (dict(), dict(query_mask=LEFT, value_mask=LEFT), False),
    "causal, one mask": (
        dict(),
        dict(query_mask=LEFT, value_mask=LEFT, use_causal_mask=True),
        False,
    ),
    "causal, the keys' padding alone": (dict(), dict(value_mask=LEFT, use_causal_mask=True), True),
    "causal, two masks of equal values": (
        dict(),
        dict(query_mask=LEFT, value_mask=LEFT.copy(), use_causal_mask=True),
        True,
    ),
    "window, one mask": (dict(sliding_window=3), dict(query_mask=LEFT, value_mask=LEFT), True),
}


@pytest.mark.skipif(not JAX, reason="the branch on the mask's values is JAX's path")
@pytest.mark.parametrize("case", sorted(BRANCH_CASES))
def test_which_padding_takes_a_branch(case):
    """Padding of any shape reaches the kernel without a branch on the mask's values (no
    `cond` in the traced gradient) where there is no causal order or window, and under causal
    order where one mask pads queries and keys; otherwise a mask that is not a prefix still
    takes the products' branch."""
    import jax

    init, call, branch = BRANCH_CASES[case]
    _, layer = _pair(**init)
    weights = [ops.convert_to_tensor(w) for w in layer.get_weights()]

    def loss(x):
        return ops.sum(layer.stateless_call(weights, [], x, **call)[0])

    traced = str(jax.make_jaxpr(jax.grad(loss))(_x(1)))
    assert ("cond[" in traced) == branch


@pytest.mark.skipif(not JAX, reason="the branch on the mask's values is JAX's path")
def test_transformer_layers_take_no_branch_on_their_padding(monkeypatch):
    """A Transformer layer's padding pads its self-attention's queries and keys as one mask,
    so a training step on the fused path holds no `cond` on the mask's values (on a GPU a
    wait for the device in every layer), whatever the padding (here holes and left padding),
    and the decoder's causal self-attention reaches the kernel as `is_causal` with sequence
    lengths."""
    import jax

    from keras_attn.layers import TransformerDecoderLayer, TransformerEncoderLayer

    x, enc = _x(1), _x(2, (B, T + 1, D))
    pad, enc_pad = LEFT.copy(), _pad([T + 1, 3], T + 1)
    pad[1, 3] = False  # a hole
    encoder = TransformerEncoderLayer(N, 16, flash_attention=True)
    decoder = TransformerDecoderLayer(N, 16, flash_attention=True)
    encoder(x, padding_mask=pad)
    decoder(x, enc, decoder_padding_mask=pad, encoder_padding_mask=enc_pad)
    spy = KernelSpy(monkeypatch)
    for layer, call in (
        (encoder, lambda w, v: encoder.stateless_call(w, [], v, padding_mask=pad)[0]),
        (
            decoder,
            lambda w, v: decoder.stateless_call(
                w, [], v, enc, decoder_padding_mask=pad, encoder_padding_mask=enc_pad
            )[0],
        ),
    ):
        weights = [ops.convert_to_tensor(w) for w in layer.get_weights()]
        traced = str(jax.make_jaxpr(jax.grad(lambda w, v: ops.sum(call(w, v)), (0, 1)))(weights, x))
        assert "cond[" not in traced
    self_attention = [c for c in spy.calls if c["key"][1] == T]
    assert self_attention and all(c["mask"] is None for c in spy.calls)
    assert [c["is_causal"] for c in self_attention] == [False, True]
    assert all(c["query_seq_lengths"] is not None for c in self_attention)


@pytest.mark.parametrize("policy", list(TOLERANCE))
def test_fused_equals_the_reference_with_a_cache(policy):
    """A prompt written at 0 (causal: `is_causal`), a chunk written at 2, a cross-attention
    memory attended as it is, each T > 1 rows."""
    ref, fused = _pair(policy, num_key_value_heads=2)
    x = _x(1)
    tol = TOLERANCE[policy]
    for layer_out in [
        (
            layer(x[:, :3], cache=layer.init_cache(B, T), cache_index=0, use_causal_mask=True)
            for layer in (ref, fused)
        ),
        (
            layer(
                x[:, 2:5],
                cache=layer.init_cache(B, T),
                cache_index=2,
                use_causal_mask=True,
                value_mask=_pad([2, 3], 3),
            )
            for layer in (ref, fused)
        ),
    ]:
        (want, want_cache), (got, got_cache) = layer_out
        np.testing.assert_allclose(_np(got), _np(want), atol=tol, rtol=tol)
        np.testing.assert_allclose(_np(got_cache[0]), _np(want_cache[0]), atol=tol, rtol=tol)
    memory = _x(5)
    mask = _pad([4, 6])
    outs = [
        layer(x[:, :4], cache=layer.compute_cache(memory, mask=mask), value_mask=mask)[0]
        for layer in (ref, fused)
    ]
    np.testing.assert_allclose(_np(outs[1]), _np(outs[0]), atol=tol, rtol=tol)


# --------------------------------------------------------------- NaN in padding is inert
def _grad(fn, args):
    if JAX:
        import jax

        return [np.asarray(g) for g in jax.grad(fn, argnums=tuple(range(len(args))))(*args)]
    import tensorflow as tf

    args = [tf.convert_to_tensor(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch(args)
        loss = fn(*args)
    return [g.numpy() for g in tape.gradient(loss, args)]


@pytest.mark.parametrize(
    "junk, causal, window", [(np.nan, True, 4), (np.inf, False, 4), (np.nan, True, None)]
)
def test_junk_in_padding_reaches_nothing_on_the_fused_path(junk, causal, window):
    ref, fused = _pair(num_key_value_heads=2, sliding_window=window)
    lengths = [3, 6]
    mask = _pad(lengths)
    clean = _x(1)
    dirty = clean.copy()
    dirty[0, 3:] = junk
    weights = [ops.convert_to_tensor(w) for w in fused.get_weights()]

    def loss_of(layer):
        def loss(x, *ws):
            out = layer.stateless_call(
                ws, [], x, query_mask=mask, value_mask=mask, use_causal_mask=causal
            )[0]
            return ops.sum(out * ops.convert_to_tensor(_x(9)))

        return loss

    out = _np(fused(dirty, query_mask=mask, value_mask=mask, use_causal_mask=causal))
    want = _np(ref(clean, query_mask=mask, value_mask=mask, use_causal_mask=causal))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, want, atol=1e-5)
    grads = _grad(loss_of(fused), [dirty] + weights)
    for g in grads:
        assert np.isfinite(g).all()
    assert np.all(grads[0][0, 3:] == 0)
    want_grads = _grad(loss_of(ref), [clean] + weights)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_junk_in_a_cache_reaches_nothing_on_the_fused_path():
    """A memory cache whose padded rows hold NaN (projected from dirty rows, no `mask=`):
    several query rows attend it on the fused path, the rows zeroed there."""
    ref, fused = _pair(num_key_value_heads=2)
    mask = _pad([3, 6])
    memory = _x(5)
    dirty = memory.copy()
    dirty[0, 3:] = np.nan
    queries = _x(6)[:, :4]
    got = _np(fused(queries, cache=fused.compute_cache(dirty), value_mask=mask)[0])
    want = _np(ref(queries, cache=ref.compute_cache(memory), value_mask=mask)[0])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-5)
