"""MultiStepAttention (ConvS2S, Gehring et al. 2017) against its formula in NumPy; masks;
checklist. TF and JAX."""

import numpy as np
import pytest
from keras import ops

from keras_attn.layers import MultiStepAttention
from tests.layers.checklist import run_layer_checklist
from tests.layers.test_hard import _grad_of_trainable
from tests.test_losses import _grads

B, TQ, TS, DH, E = 3, 4, 6, 5, 7


def _data(seed=0):
    r = np.random.RandomState(seed)
    return {
        "decoder_state": r.normal(size=(B, TQ, DH)).astype("float32"),
        "target_embedding": r.normal(size=(B, TQ, E)).astype("float32"),
        "encoder_output": r.normal(size=(B, TS, E)).astype("float32"),
        "source_embedding": r.normal(size=(B, TS, E)).astype("float32"),
    }


def _reference(x, kernel, bias, mask, scale):
    d = x["decoder_state"] @ kernel + bias + x["target_embedding"]
    z, e = x["encoder_output"], x["source_embedding"]
    scores = np.einsum("bqe,bse->bqs", d, z)
    m = mask[:, None, :]
    top = np.max(np.where(m, scores, -np.inf), -1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # a fully masked row
    w = np.where(m, np.exp(np.where(m, scores, 0.0) - top), 0.0)
    s = w.sum(-1, keepdims=True)
    a = np.divide(w, s, out=np.zeros_like(w), where=s > 0)
    c = np.einsum("bqs,bse->bqe", a, np.where(mask[..., None], z + e, 0.0))
    if scale:
        c = c * np.sqrt(mask.sum(1))[:, None, None]
    return c, a


@pytest.mark.parametrize("scale", [True, False])
def test_checklist(scale):
    run_layer_checklist(
        MultiStepAttention,
        {"scale_context": scale},
        _data(),
        expected_output_shapes=[(B, TQ, E)],
        expected_num_trainable_weights=2,
    )


def test_checklist_with_scores():
    run_layer_checklist(
        MultiStepAttention,
        {},
        _data(),
        call_kwargs={"return_attention_scores": True},
        expected_output_shapes=[(B, TQ, E), (B, TQ, TS)],
        expected_num_trainable_weights=2,
        run_saving=False,
        run_mixed_precision=False,
        run_training=False,
    )


@pytest.mark.parametrize("scale", [True, False])
def test_formula_weight_order_and_masks(scale):
    x = _data(1)
    mask = np.ones((B, TS), bool)
    mask[1, 2:] = False
    mask[2] = False
    layer = MultiStepAttention(scale_context=scale)
    layer.build(*(v.shape for v in x.values()))
    r = np.random.RandomState(2)
    layer.set_weights([r.normal(size=w.shape).astype("float32") * 0.3 for w in layer.get_weights()])
    assert [tuple(w.shape) for w in layer.get_weights()] == [(DH, E), (E,)]
    c, a = layer(**x, source_mask=mask, return_attention_scores=True)
    ref_c, ref_a = _reference(x, *layer.get_weights(), mask, scale)
    np.testing.assert_allclose(ops.convert_to_numpy(a), ref_a, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(c), ref_c, atol=1e-4)
    assert np.all(ops.convert_to_numpy(c)[2] == 0)
    # Without a mask every position counts, m = Ts.
    c_all = ops.convert_to_numpy(layer(**x))
    np.testing.assert_allclose(
        c_all, _reference(x, *layer.get_weights(), np.ones((B, TS), bool), scale)[0], atol=1e-4
    )


@pytest.mark.parametrize("junk", [np.nan, np.inf, 1e30])
def test_masked_source_never_reaches_outputs_or_gradients(junk):
    x = _data(3)
    mask = np.ones((B, TS), bool)
    mask[0, 3:] = False
    mask[2] = False
    dirty = dict(x)
    for k in ("encoder_output", "source_embedding"):
        dirty[k] = np.where(mask[..., None], x[k], np.float32(junk)).astype("float32")
    clean = dict(x)
    for k in ("encoder_output", "source_embedding"):
        clean[k] = np.where(mask[..., None], x[k], 0.0).astype("float32")
    layer = MultiStepAttention()
    np.testing.assert_array_equal(
        ops.convert_to_numpy(layer(**dirty, source_mask=mask)),
        ops.convert_to_numpy(layer(**clean, source_mask=mask)),
    )
    names = list(dirty)
    grads = _grads(
        lambda *a: ops.sum(layer(**dict(zip(names, a)), source_mask=mask)), *dirty.values()
    )
    for name, g in zip(names, grads):
        assert np.all(np.isfinite(g)), name
    assert np.all(grads[2][~mask] == 0) and np.all(grads[3][~mask] == 0)
    for gw in _grad_of_trainable(layer, ops.sum, (), {**dirty, "source_mask": mask}):
        assert np.all(np.isfinite(gw))


def test_bad_arguments():
    x = _data()
    with pytest.raises(ValueError, match="scale_context"):
        MultiStepAttention(scale_context=1)
    bad = dict(x, source_embedding=x["source_embedding"][..., :3])
    with pytest.raises(ValueError, match="source_embedding"):
        MultiStepAttention()(**bad)
