"""GroupedQueryAttention: Keras' GroupQueryAttention constructor and variables on our
MultiHeadAttention's path. Outputs against a NumPy formula and against Keras' layer with the
same weights, masks, cached decoding (also a ring cache and rotary embeddings) against the
full call, configs (ours and Keras'), Keras' `_compute_attention` override convention."""

import inspect
import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import GroupedQueryAttention, MultiHeadAttention
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


def _reference(q_in, kv_in, weights, groups, visible=None, gate=False):
    """Grouped-query attention written out: query head n reads key/value head n // (N / G)."""
    if gate:
        wq, bq, wk, bk, wg, bg, wv, bv, wo, bo = weights
    else:
        wq, bq, wk, bk, wv, bv, wo, bo = weights
    q = np.einsum("btd,dnh->btnh", q_in, wq) + bq
    k = np.einsum("bsd,dgh->bsgh", kv_in, wk) + bk
    v = np.einsum("bsd,dgh->bsgh", kv_in, wv) + bv
    k = np.repeat(k, N // groups, axis=2)
    v = np.repeat(v, N // groups, axis=2)
    scores = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(H)
    if visible is not None:
        scores = np.where(visible[:, None], scores, -1e30)
    scores = scores - scores.max(-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(-1, keepdims=True)
    context = np.einsum("bnts,bsnh->btnh", p, v)
    if gate:
        context = context / (1 + np.exp(-(np.einsum("btd,dnh->btnh", q_in, wg) + bg)))
    return np.einsum("btnh,nhd->btd", context, wo) + bo, p


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("gate", [False, True])
def test_equals_the_formula(groups, gate):
    q, v = _x(1, (B, T, D)), _x(2, (B, S, D))
    layer = GroupedQueryAttention(H, N, groups, use_gate=gate)
    layer.build(q.shape, v.shape)
    _randomize(layer)
    out, weights = layer(q, v, return_attention_scores=True)
    expected, expected_w = _reference(q, v, layer.get_weights(), groups, gate=gate)
    np.testing.assert_allclose(_np(out), expected, atol=1e-4)
    np.testing.assert_allclose(_np(weights), expected_w, atol=1e-5)


def _keras_takes(*names):
    """Skip unless the installed Keras' GroupQueryAttention takes every argument of `names`
    (older Keras has no `use_gate` or `sliding_window`: there is nothing to compare with)."""
    taken = inspect.signature(keras.layers.GroupQueryAttention.__init__).parameters
    missing = [name for name in names if name not in taken]
    if missing:
        pytest.skip(f"Keras {keras.__version__}'s GroupQueryAttention has no {missing}")


KERAS_CASES = {
    "plain": ({}, {}),
    "no_bias": ({"use_bias": False}, {}),
    "gate": ({"use_gate": True}, {}),
    "causal": ({}, {"use_causal_mask": True}),
    "window_causal": ({"sliding_window": 2}, {"use_causal_mask": True}),
    "window": ({"sliding_window": 3}, {}),
    "initializers": (
        {"kernel_initializer": keras.initializers.HeNormal(seed=1), "bias_initializer": "ones"},
        {},
    ),
}


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", sorted(KERAS_CASES))
def test_equals_keras_with_the_same_weights(case, groups):
    init, call = KERAS_CASES[case]
    _keras_takes(*init)
    q = _x(1, (B, T, D))
    v = q if call.get("use_causal_mask") or "sliding_window" in init else _x(2, (B, S, D))
    theirs = keras.layers.GroupQueryAttention(H, N, groups, **init)
    theirs.build(q.shape, v.shape)
    _randomize(theirs)
    ours = GroupedQueryAttention(H, N, groups, **init)
    ours.build(q.shape, v.shape)
    # The same variables, in the same order, under the same names.
    assert [(w.path.split("/")[-2:], tuple(w.shape)) for w in ours.weights] == [
        (w.path.split("/")[-2:], tuple(w.shape)) for w in theirs.weights
    ]
    ours.set_weights(theirs.get_weights())
    expected, expected_w = theirs(q, v, return_attention_scores=True, **call)
    got, got_w = ours(q, v, return_attention_scores=True, **call)
    np.testing.assert_allclose(_np(got), _np(expected), atol=1e-5)
    np.testing.assert_allclose(_np(got_w), _np(expected_w), atol=1e-5)
    # Without the scores Keras takes its fused kernel; the outputs still agree.
    np.testing.assert_allclose(_np(ours(q, v, **call)), _np(theirs(q, v, **call)), atol=1e-5)


def test_masks_equal_keras_and_the_formula():
    q, v = _x(1, (B, T, D)), _x(2, (B, S, D))
    query_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    value_mask = np.array([[1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 1, 1]], bool)
    attention_mask = np.ones((B, T, S), bool)
    attention_mask[0, 1, 0] = attention_mask[1, 4, 5] = False
    theirs = keras.layers.GroupQueryAttention(H, N, 2)
    theirs.build(q.shape, v.shape)
    _randomize(theirs)
    ours = GroupedQueryAttention(H, N, 2)
    ours.build(q.shape, v.shape)
    ours.set_weights(theirs.get_weights())
    masks = dict(query_mask=query_mask, value_mask=value_mask, attention_mask=attention_mask)
    expected, expected_w = theirs(q, v, return_attention_scores=True, **masks)
    got, got_w = ours(q, v, return_attention_scores=True, **masks)
    live = query_mask  # a query row that is masked out: Keras spreads it uniformly, ours is 0
    np.testing.assert_allclose(_np(got)[live], _np(expected)[live], atol=1e-5)
    np.testing.assert_allclose(
        _np(got_w).transpose(0, 2, 1, 3)[live],
        _np(expected_w).transpose(0, 2, 1, 3)[live],
        atol=1e-6,
    )
    visible = attention_mask & value_mask[:, None] & query_mask[:, :, None]
    reference, _ = _reference(q, v, ours.get_weights(), 2, visible)
    np.testing.assert_allclose(_np(got)[live], reference[live], atol=1e-4)
    np.testing.assert_allclose(_np(got_w)[~visible[:, None].repeat(N, 1)], 0.0)
    # Keras masks on the inputs are the same as the explicit masks.
    q_t, v_t = ops.convert_to_tensor(q), ops.convert_to_tensor(v)
    q_t._keras_mask = ops.convert_to_tensor(query_mask)
    v_t._keras_mask = ops.convert_to_tensor(value_mask)
    from_inputs = ours(q_t, v_t, attention_mask=attention_mask)
    np.testing.assert_allclose(_np(from_inputs), _np(got), atol=1e-6)


def test_activity_regularizer_losses_equal_keras():
    q, v = _x(1, (B, T, D)), _x(2, (B, S, D))
    _keras_takes("use_gate")
    init = {"activity_regularizer": keras.regularizers.L2(0.01), "use_gate": True}
    theirs = keras.layers.GroupQueryAttention(H, N, 2, **init)
    theirs.build(q.shape, v.shape)
    _randomize(theirs)
    ours = GroupedQueryAttention(H, N, 2, **init)
    ours.build(q.shape, v.shape)
    ours.set_weights(theirs.get_weights())
    np.testing.assert_allclose(_np(ours(q, v)), _np(theirs(q, v)), atol=1e-5)
    # Each projection's output and the layer's output, as in Keras.
    assert len(ours.losses) == len(theirs.losses) == 6
    np.testing.assert_allclose(
        float(_np(sum(ours.losses))), float(_np(sum(theirs.losses))), rtol=1e-5
    )


# ------------------------------------------------------------------- cache
@pytest.mark.parametrize(
    "init",
    [
        {},
        {"use_gate": True},
        {"rotary_max_wavelength": 100.0},
        {"sliding_window": 3, "rotary_max_wavelength": 100.0},
    ],
    ids=["plain", "gate", "rotary", "window_rotary"],
)
@pytest.mark.parametrize("groups", [1, 2])
def test_cached_decoding_equals_the_full_call(init, groups):
    x = _x(4, (B, T, D))
    layer = GroupedQueryAttention(H, N, groups, **init)
    layer.build(x.shape, x.shape)
    _randomize(layer)
    full = layer(x, use_causal_mask=True)
    cache = layer.init_cache(B, T)
    assert tuple(cache[0].shape) == tuple(cache[1].shape) == (B, T, groups, H)
    # A two-row prompt, then one position per call.
    first, cache = layer(x[:, :2], cache=cache, cache_index=0, use_causal_mask=True)
    steps = [first]
    for t in range(2, T):
        out, cache = layer(x[:, t : t + 1], cache=cache, cache_index=t, use_causal_mask=True)
        steps.append(out)
    np.testing.assert_allclose(_np(ops.concatenate(steps, axis=1)), _np(full), atol=1e-5)


def test_ring_cache_decoding_equals_the_full_call():
    x = _x(5, (B, T + 3, D))
    layer = GroupedQueryAttention(H, N, 2, sliding_window=3)
    layer.build(x.shape, x.shape)
    _randomize(layer)
    full = layer(x, use_causal_mask=True)
    cache = layer.init_cache(B, x.shape[1], ring=True)
    assert tuple(cache[0].shape) == (B, 3, 2, H)
    steps = []
    for t in range(x.shape[1]):
        out, cache = layer(x[:, t : t + 1], cache=cache, cache_index=t, use_causal_mask=True)
        steps.append(out)
    np.testing.assert_allclose(_np(ops.concatenate(steps, axis=1)), _np(full), atol=1e-5)


# ------------------------------------------------------------------ config
def test_config_round_trip_and_keras_configs():
    _keras_takes("sliding_window", "use_gate")
    layer = GroupedQueryAttention(
        H,
        N,
        2,
        dropout=0.1,
        use_bias=False,
        sliding_window=4,
        use_gate=True,
        kernel_regularizer="l2",
        kernel_constraint="non_neg",
        seed=3,
        rotary_max_wavelength=50.0,
    )
    config = layer.get_config()
    theirs = keras.layers.GroupQueryAttention(
        H, N, 2, dropout=0.1, use_bias=False, sliding_window=4, use_gate=True, seed=3
    )
    # Keras' keys, and their values where both layers take the same arguments.
    for key, value in theirs.get_config().items():
        assert key in config, key
        if key not in ("name", "kernel_regularizer", "kernel_constraint"):
            assert config[key] == value, key
    for absent in ("num_heads", "key_dim", "value_dim", "output_shape", "attention_axes"):
        assert absent not in config
    clone = GroupedQueryAttention.from_config(config)
    assert clone.get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(revived, GroupedQueryAttention)
    assert revived.get_config() == config
    # A config written by Keras' layer builds ours.
    from_keras = GroupedQueryAttention.from_config(theirs.get_config())
    assert (from_keras.head_dim, from_keras.num_query_heads) == (H, N)
    assert (from_keras.num_key_value_heads, from_keras.num_repeats) == (2, 2)
    assert from_keras.sliding_window == 4 and from_keras.use_gate


def test_checklist():
    x = _x(8, (B, T, D))
    run_layer_checklist(
        GroupedQueryAttention,
        {"head_dim": H, "num_query_heads": N, "num_key_value_heads": 2, "use_gate": True},
        {"query": x},
        call_kwargs={"use_causal_mask": True, "return_attention_scores": True},
        expected_output_shapes=[(B, T, D), (B, N, T, T)],
        expected_num_trainable_weights=10,
        run_mixed_precision=False,
    )


# ----------------------------------------------------------------- Keras' API
def test_subclass_override_gets_keras_layout_and_equals_the_layer():
    seen = {}

    class KerasStyle(GroupedQueryAttention):
        # Keras' own attention products on repeated heads, as a Keras subclass writes them.
        def _compute_attention(self, query, key, value, attention_mask=None, training=None):
            seen["shapes"] = (tuple(key.shape), tuple(value.shape))
            seen["scores"] = self._return_attention_scores
            scores = ops.einsum("bquh,bkuh->buqk", query, key) / math.sqrt(self.head_dim)
            scores = ops.where(attention_mask, scores, -1e9)
            weights = ops.softmax(scores, axis=-1)
            return ops.einsum("buqk,bkuh->bquh", weights, value), weights

    x = _x(6, (B, T, D))
    plain = GroupedQueryAttention(H, N, 2, sliding_window=3)
    plain.build(x.shape, x.shape)
    _randomize(plain)
    custom = KerasStyle(H, N, 2, sliding_window=3)
    custom.build(x.shape, x.shape)
    custom.set_weights(plain.get_weights())
    pad = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], bool)
    expected, expected_w = plain(
        x, x, value_mask=pad, use_causal_mask=True, return_attention_scores=True
    )
    got, got_w = custom(x, x, value_mask=pad, use_causal_mask=True, return_attention_scores=True)
    assert seen == {"shapes": ((B, T, N, H), (B, T, N, H)), "scores": True}
    np.testing.assert_allclose(_np(got), _np(expected), atol=1e-5)
    np.testing.assert_allclose(_np(got_w), _np(expected_w), atol=1e-5)


def test_override_calling_super_equals_the_layer():
    class Passing(GroupedQueryAttention):
        def _compute_attention(self, query, key, value, attention_mask=None, training=None):
            return super()._compute_attention(query, key, value, attention_mask, training)

    x = _x(7, (B, T, D))
    plain = GroupedQueryAttention(H, N, 1)
    plain.build(x.shape, x.shape)
    _randomize(plain)
    passing = Passing(H, N, 1)
    passing.build(x.shape, x.shape)
    passing.set_weights(plain.get_weights())
    expected = plain(x, x, use_causal_mask=True, return_attention_scores=True)
    got = passing(x, x, use_causal_mask=True, return_attention_scores=True)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(_np(a), _np(b), atol=1e-5)


def test_is_our_multi_head_attention_with_keras_attributes():
    layer = GroupedQueryAttention(H, N, 2)
    assert isinstance(layer, MultiHeadAttention)
    layer.build((B, T, D), (B, S, 5))
    assert (layer.head_dim, layer.num_query_heads, layer.num_key_value_heads) == (H, N, 2)
    assert (layer.num_repeats, layer.feature_dim) == (2, D)
    assert tuple(layer.key_dense.kernel.shape) == (5, 2, H)
    assert tuple(layer.output_dense.kernel.shape) == (N, H, D)


def test_bad_arguments_name_the_argument():
    for kwargs, name in (
        ({"head_dim": 0, "num_query_heads": 4, "num_key_value_heads": 2}, "head_dim"),
        ({"head_dim": 4, "num_query_heads": 0, "num_key_value_heads": 2}, "num_query_heads"),
        ({"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 0}, "num_key_value_heads"),
        ({"head_dim": 4, "num_query_heads": 6, "num_key_value_heads": 4}, "num_key_value_heads"),
        ({"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2, "dropout": 2}, "dropout"),
    ):
        with pytest.raises(ValueError, match=name):
            GroupedQueryAttention(**kwargs)
    layer = GroupedQueryAttention(H, N, 2)
    with pytest.raises(ValueError, match="`query` and `value`"):
        layer.compute_output_shape((B, T, D), (B, S, D + 1))
    with pytest.raises(ValueError, match="`key` and `value`"):
        layer.compute_output_shape((B, T, D), (B, S, D), (B, S + 1, D))
    assert layer.compute_output_shape((B, T, D), (B, S, D), (B, S, 3)) == (B, T, D)


# A value other than the default for each of MultiHeadAttention's arguments that
# GroupedQueryAttention takes as they are (its layout arguments are its own).
_SHARED = {
    "dropout": 0.25,
    "use_bias": False,
    "sliding_window": 3,
    "flash_attention": False,
    "kernel_initializer": "ones",
    "bias_initializer": "ones",
    "kernel_regularizer": "l2",
    "bias_regularizer": "l1",
    "activity_regularizer": "l2",
    "kernel_constraint": "non_neg",
    "bias_constraint": "non_neg",
    "use_gate": True,
    "seed": 7,
    "rotary_max_wavelength": 100.0,
    "rotary_scaling_factor": 2.0,
}
_LAYOUT = ("num_heads", "key_dim", "value_dim", "output_shape", "attention_axes")


def test_takes_exactly_the_multi_head_arguments_but_the_layout():
    # One table: MultiHeadAttention's signature. GroupedQueryAttention names its three and
    # shows the rest (help(), inspect.signature) from that table.
    mha = [
        name
        for name in inspect.signature(MultiHeadAttention).parameters
        if name not in ("kwargs", *_LAYOUT)
    ]
    assert set(mha) == set(_SHARED) | {"num_key_value_heads"}
    shown = list(inspect.signature(GroupedQueryAttention).parameters)
    assert shown[:3] == ["head_dim", "num_query_heads", "num_key_value_heads"]
    assert shown[3:] == [n for n in mha if n != "num_key_value_heads"] + ["kwargs"]
    for name, default in (("dropout", 0.0), ("use_gate", False), ("rotary_scaling_factor", 1.0)):
        assert inspect.signature(GroupedQueryAttention).parameters[name].default == default
    # Each one reaches the layer, and its config, and comes back from it.
    layer = GroupedQueryAttention(H, N, 2, **_SHARED)
    config = layer.get_config()
    clone = GroupedQueryAttention.from_config(config)
    for name, value in _SHARED.items():
        if name.endswith(("initializer", "regularizer", "constraint")):
            assert config[name] is not None and config[name]["class_name"], name
        else:
            assert config[name] == value == getattr(clone, name), name
    assert clone.get_config() == config
    # MultiHeadAttention's layout arguments are refused by name (GQA has its own names).
    for name in _LAYOUT:
        with pytest.raises(ValueError, match=f"`{name}` is an argument of MultiHeadAttention"):
            GroupedQueryAttention(H, N, 2, **{name: 2})
    with pytest.raises(ValueError, match="Unrecognized keyword"):
        GroupedQueryAttention(H, N, 2, num_kv_heads=2)
