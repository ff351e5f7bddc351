"""AttentionPooling (Yang et al. 2016) against its formula in NumPy; masks; checklist. TF and JAX."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import AttentionPooling
from tests.layers.checklist import run_layer_checklist
from tests.layers.test_hard import _grad_of_trainable
from tests.test_losses import _grads

B, T, D, U = 3, 5, 6, 4


def _data(seed=0):
    return np.random.RandomState(seed).normal(size=(B, T, D)).astype("float32")


def _reference(h, kernel, bias, uc, mask):
    u = np.tanh(h @ kernel + bias)
    e = u @ uc
    e = np.where(mask, e, -np.inf)
    x = np.where(mask, np.exp(e - np.max(np.where(mask, e, -1e30), -1, keepdims=True)), 0.0)
    s = x.sum(-1, keepdims=True)
    a = np.divide(x, s, out=np.zeros_like(x), where=s > 0)
    return np.einsum("bt,btd->bd", a, np.where(mask[..., None], h, 0.0)), a


def test_checklist():
    run_layer_checklist(
        AttentionPooling,
        {"units": U},
        {"inputs": _data()},
        expected_output_shapes=[(B, D)],
        expected_num_trainable_weights=3,
        expect_mask_out=False,
        build_shapes={"input_shape": (B, T, D)},
    )


def test_checklist_with_scores():
    run_layer_checklist(
        AttentionPooling,
        {"units": U},
        {"inputs": _data()},
        call_kwargs={"return_attention_scores": True},
        expected_output_shapes=[(B, D), (B, T)],
        expected_num_trainable_weights=3,
        build_shapes={"input_shape": (B, T, D)},
        expect_mask_out=False,
        run_saving=False,
        run_mixed_precision=False,
        run_training=False,
    )


def test_formula_weight_order_and_masks():
    h = _data(1)
    mask = np.ones((B, T), bool)
    mask[1, 3:] = False
    mask[2] = False  # nothing to pool: zeros
    layer = AttentionPooling(U)
    layer.build((B, T, D))
    r = np.random.RandomState(2)
    layer.set_weights([r.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    assert [tuple(w.shape) for w in layer.get_weights()] == [(D, U), (U,), (U,)]
    pooled, alpha = layer(h, mask=mask, return_attention_scores=True)
    ref, ref_alpha = _reference(h, *layer.get_weights(), mask)
    np.testing.assert_allclose(ops.convert_to_numpy(alpha), ref_alpha, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(pooled), ref, atol=1e-5)
    assert np.all(ops.convert_to_numpy(pooled)[2] == 0) and np.all(
        ops.convert_to_numpy(alpha)[2] == 0
    )


@pytest.mark.parametrize("junk", [np.nan, np.inf, 1e30])
def test_masked_steps_never_reach_outputs_or_gradients(junk):
    h = _data(3)
    mask = np.ones((B, T), bool)
    mask[0, 2:] = False
    mask[2] = False
    dirty = np.where(mask[..., None], h, np.float32(junk)).astype("float32")
    layer = AttentionPooling(U)
    clean_out = ops.convert_to_numpy(layer(np.where(mask[..., None], h, 0.0), mask=mask))
    out = ops.convert_to_numpy(layer(dirty, mask=mask))
    np.testing.assert_array_equal(out, clean_out)
    (g,) = _grads(lambda x: ops.sum(layer(x, mask=mask)), dirty)
    assert np.all(np.isfinite(g)) and np.all(g[~mask] == 0)
    for gw in _grad_of_trainable(layer, ops.sum, (dirty,), {"mask": mask}):
        assert np.all(np.isfinite(gw))


def test_keras_mask_from_embedding_in_sequential():
    ids = np.array([[4, 5, 6, 0, 0], [7, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    model = keras.Sequential(
        [
            keras.Input((T,), dtype="int32"),
            keras.layers.Embedding(10, D, mask_zero=True),
            AttentionPooling(U),
        ]
    )
    out = ops.convert_to_numpy(model(ids))
    emb = ops.convert_to_numpy(model.layers[0].embeddings)
    np.testing.assert_allclose(out[1], emb[7], atol=1e-6)  # one real word: weight 1
    assert np.all(out[2] == 0)


def test_time_distributed_pools_every_sentence():
    docs = np.random.RandomState(4).normal(size=(2, 3, T, D)).astype("float32")
    pool = AttentionPooling(U)
    wrapped = keras.layers.TimeDistributed(pool)
    out = ops.convert_to_numpy(wrapped(docs))
    assert out.shape == (2, 3, D)
    for s in range(3):
        np.testing.assert_allclose(out[:, s], ops.convert_to_numpy(pool(docs[:, s])), atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="units"):
        AttentionPooling(0)
    with pytest.raises(ValueError, match="inputs"):
        AttentionPooling(U)(np.zeros((B, D), "float32"))
    with pytest.raises(ValueError, match="inputs"):
        AttentionPooling(U)(np.zeros((B, T, D), "int32"))
