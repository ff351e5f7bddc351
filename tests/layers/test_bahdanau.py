import numpy as np
import pytest
from keras import ops

from keras_attn.layers import BahdanauAttention
from tests.layers.checklist import check_padding_is_inert, run_layer_checklist

B, TQ, TV, DQ, DK, DV, U = 3, 4, 6, 5, 7, 7, 8


def _np(x):
    return ops.convert_to_numpy(x)


def _data(seed=0):
    r = np.random.RandomState(seed)
    return (
        r.normal(size=(B, TQ, DQ)).astype("float32"),
        r.normal(size=(B, TV, DV)).astype("float32"),
    )


def _np_softmax(e, mask):
    e = np.where(mask, e, -np.inf)
    m = np.max(np.where(mask, e, -1e30), axis=-1, keepdims=True)
    x = np.where(mask, np.exp(e - m), 0.0)
    s = x.sum(-1, keepdims=True)
    return np.divide(x, s, out=np.zeros_like(x), where=s > 0)


def _reference(q, k, v_in, weights, normalize, mask):
    wq, wk, v = weights[:3]
    hid = (q @ wq)[:, :, None, :] + (k @ wk)[:, None, :, :]
    if normalize:
        g, b = weights[3], weights[4]
        hid = hid + b
        v = g * v / np.linalg.norm(v)
    e = np.tanh(hid) @ v
    a = _np_softmax(e, mask[:, None, :])
    return a @ v_in, a


@pytest.mark.parametrize("normalize", [False, True])
def test_checklist(normalize):
    q, v = _data()
    run_layer_checklist(
        BahdanauAttention,
        {"units": U, "normalize": normalize},
        {"query": q, "value": v},
        expected_output_shapes=[(B, TQ, DV)],
        expected_num_trainable_weights=5 if normalize else 3,
    )


def test_checklist_with_scores_and_dropout():
    q, v = _data()
    run_layer_checklist(
        BahdanauAttention,
        {"units": U, "dropout": 0.2},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shapes=[(B, TQ, DV), (B, TQ, TV)],
        expected_num_trainable_weights=3,
    )


@pytest.mark.parametrize("normalize", [False, True])
def test_formula_against_numpy(normalize):
    q, v = _data(1)
    mask = np.ones((B, TV), bool)
    mask[1, 3:] = False
    mask[2, :] = False  # fully masked example
    layer = BahdanauAttention(U, normalize=normalize)
    layer.build((B, TQ, DQ), (B, TV, DV))
    r = np.random.RandomState(5)
    layer.set_weights([r.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    shapes = [tuple(w.shape) for w in layer.get_weights()]
    expected_shapes = [(DQ, U), (DV, U), (U,)] + ([(), (U,)] if normalize else [])
    assert shapes == expected_shapes
    ctx, w = layer(q, v, value_mask=mask, return_attention_scores=True)
    ref_ctx, ref_w = _reference(q, v, v, layer.get_weights(), normalize, mask)
    np.testing.assert_allclose(ops.convert_to_numpy(w), ref_w, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(ctx), ref_ctx, atol=1e-5)
    assert np.all(ops.convert_to_numpy(w)[2] == 0) and np.all(ops.convert_to_numpy(ctx)[2] == 0)


def test_single_step_query_and_separate_key():
    q, v = _data(2)
    k = np.random.RandomState(3).normal(size=(B, TV, 4)).astype("float32")
    layer = BahdanauAttention(U)
    ctx, w = layer(q[:, 0], v, key=k, return_attention_scores=True)
    assert tuple(ctx.shape) == (B, DV) and tuple(w.shape) == (B, TV)
    full_ctx, full_w = layer(q, v, key=k, return_attention_scores=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ctx), ops.convert_to_numpy(full_ctx)[:, 0], atol=1e-6
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(w), ops.convert_to_numpy(full_w)[:, 0], atol=1e-6
    )


def test_fully_masked_rows_with_dropout_in_training():
    q, v = _data(4)
    mask = np.zeros((B, TV), bool)
    mask[0, :2] = True
    layer = BahdanauAttention(U, dropout=0.5)
    for training in (False, True):
        ctx, w = layer(q, v, value_mask=mask, return_attention_scores=True, training=training)
        ctx, w = ops.convert_to_numpy(ctx), ops.convert_to_numpy(w)
        assert np.all(np.isfinite(ctx)) and np.all(np.isfinite(w))
        assert np.all(ctx[1:] == 0) and np.all(w[1:] == 0)
        np.testing.assert_allclose(w[0].sum(-1), 1.0, rtol=1e-5)
        ctx_only = ops.convert_to_numpy(layer(q, v, value_mask=mask, training=training))
        assert np.all(ctx_only[1:] == 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="units"):
        BahdanauAttention(0)
    with pytest.raises(ValueError, match="dropout"):
        BahdanauAttention(4, dropout=1.0)
    layer = BahdanauAttention(4)
    q, v = _data()
    with pytest.raises(ValueError, match="value"):
        layer(q, v[:, :, 0])
    with pytest.raises(ValueError, match="value_mask"):
        layer(q, v, value_mask=np.ones((B, TV + 1), bool))


def test_projected_key_once_per_source_gives_the_same_answer():
    q, v = _data(6)
    layer = BahdanauAttention(U)
    full = ops.convert_to_numpy(layer(q, v))
    keys = layer.project_keys(v)
    steps = [ops.convert_to_numpy(layer(q[:, t], v, projected_key=keys)) for t in range(TQ)]
    np.testing.assert_allclose(np.stack(steps, 1), full, atol=1e-6)


def test_single_memory_position_gives_weight_one_without_keras_warning():
    # A one-position memory: weight 1, or 0 where masked (zero context), and no Keras
    # "softmax over an axis of size 1" warning.
    import warnings

    q, v = _data(40)
    layer = BahdanauAttention(U)
    mask = np.array([[True], [False], [True]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        context, w = layer(q, v[:, :1], value_mask=mask, return_attention_scores=True)
    w = ops.convert_to_numpy(w)
    np.testing.assert_array_equal(w[:, :, 0], np.array([[1.0] * TQ, [0.0] * TQ, [1.0] * TQ]))
    context = ops.convert_to_numpy(context)
    np.testing.assert_allclose(context[0], np.broadcast_to(v[0, 0], context[0].shape), atol=1e-6)
    assert np.all(context[1] == 0.0)


# ------------------------------------------------- masks, dropout
def _built(seed=3, **kwargs):
    layer = BahdanauAttention(U, **kwargs)
    layer.build((B, TQ, DQ), (B, TV, DV))
    r = np.random.RandomState(seed)
    layer.set_weights([r.normal(size=w.shape).astype("float32") for w in layer.weights])
    return layer


@pytest.mark.parametrize("normalize", [False, True])
def test_masked_memory_positions_never_matter(normalize):
    """NaN, inf, 1e30 or 300 at masked value rows reach no output and no gradient."""
    q, v = _data()
    mask = np.ones((B, TV), bool)
    mask[0, 4:] = False
    mask[1, 1] = False
    mask[2, :] = False
    padded = np.broadcast_to(~mask[:, :, None], v.shape)
    check_padding_is_inert(
        lambda: _built(normalize=normalize),
        {"query": q, "value": v},
        {"value": padded},
        {"value_mask": mask, "return_attention_scores": True},
    )


def test_masked_query_rows_get_a_zero_context_whatever_they_hold():
    q, v = _data()
    query_mask = np.ones((B, TQ), bool)
    query_mask[0, 2:] = False
    query_mask[2, 0] = False
    q_bad = np.where(query_mask[:, :, None], q, np.nan).astype("float32")
    layer = _built()
    context = _np(layer(q_bad, v, query_mask=query_mask))
    full = _np(layer(q, v))
    np.testing.assert_array_equal(context[~query_mask], 0.0)
    np.testing.assert_allclose(context[query_mask], full[query_mask], rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(full[~query_mask]) > 0)  # so zero there is the mask's doing


def test_attention_dropout_drops_weights_of_the_context():
    """With one-hot value rows the context *is* the dropped-out weight matrix: every entry
    is 0 or w / (1 - rate), and some of each appear (dropout removed: context == w)."""
    q, _ = _data()
    v = np.tile(np.eye(TV, dtype="float32"), (B, 1, 1))  # DV = TV
    layer = BahdanauAttention(U, dropout=0.5)
    context, weights = (_np(x) for x in layer(q, v, training=True, return_attention_scores=True))
    kept = context != 0.0
    np.testing.assert_allclose(context[kept], 2.0 * weights[kept], rtol=1e-5)
    assert 0.2 < kept.mean() < 0.8, kept.mean()
    # inference: no dropout at all
    np.testing.assert_allclose(_np(layer(q, v)), weights, rtol=1e-5, atol=1e-7)


def test_a_call_argument_of_another_layer_is_refused_by_name():
    # The cross-attention layers share one `call`; what each adds goes through its
    # `call_options`. Bahdanau adds none, so Luong's `position` is refused by name.
    q, v = _data()
    layer = BahdanauAttention(4)
    layer(q, v)
    with pytest.raises(ValueError, match="position=2"):
        layer(q, v, position=2)
