"""AttentionOverAttention (Cui et al. 2017) against its formula in NumPy; masks; checklist. TF and JAX."""

import numpy as np
import pytest
from keras import ops

from keras_attn.layers import AttentionOverAttention
from tests.layers.checklist import run_layer_checklist
from tests.test_losses import _grads

B, TD, TQ, D = 3, 7, 4, 5


def _data(seed=0):
    r = np.random.RandomState(seed)
    return r.normal(size=(B, TD, D)).astype("float32"), r.normal(size=(B, TQ, D)).astype("float32")


def _softmax(x, mask, axis):
    e = np.where(mask, x, -np.inf)
    m = np.max(np.where(mask, x, -1e30), axis=axis, keepdims=True)
    w = np.where(mask, np.exp(e - m), 0.0)
    s = w.sum(axis, keepdims=True)
    return np.divide(w, s, out=np.zeros_like(w), where=s > 0)


def _reference(doc, qry, dm, qm):
    pair = dm[:, :, None] & qm[:, None, :]
    m = np.einsum("bid,bjd->bij", np.where(dm[..., None], doc, 0), np.where(qm[..., None], qry, 0))
    alpha = _softmax(m, pair, 1)
    beta = _softmax(m, pair, 2)
    n = dm.sum(1, keepdims=True)
    beta_bar = np.divide(beta.sum(1), n, out=np.zeros((B, TQ)), where=n > 0)
    return np.einsum("bij,bj->bi", alpha, beta_bar), alpha, beta_bar


def test_checklist():
    doc, qry = _data()
    run_layer_checklist(
        AttentionOverAttention,
        {},
        {"document": doc, "query": qry},
        expected_output_shapes=[(B, TD)],
        expected_num_trainable_weights=0,
    )


def test_checklist_with_scores():
    doc, qry = _data()
    run_layer_checklist(
        AttentionOverAttention,
        {},
        {"document": doc, "query": qry},
        call_kwargs={"return_attention_scores": True},
        expected_output_shapes=[(B, TD), (B, TD, TQ), (B, TQ)],
        expected_num_trainable_weights=0,
        run_training=False,
        run_mixed_precision=False,
    )


def test_formula_with_masks():
    doc, qry = _data(1)
    dm = np.ones((B, TD), bool)
    qm = np.ones((B, TQ), bool)
    dm[1, 4:] = False
    qm[1, 2:] = False
    dm[2] = False  # empty document: zeros
    s, alpha, beta_bar = AttentionOverAttention()(
        doc, qry, document_mask=dm, query_mask=qm, return_attention_scores=True
    )
    ref_s, ref_alpha, ref_bb = _reference(doc, qry, dm, qm)
    np.testing.assert_allclose(ops.convert_to_numpy(alpha), ref_alpha, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(beta_bar), ref_bb, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(s), ref_s, atol=1e-5)
    s = ops.convert_to_numpy(s)
    np.testing.assert_allclose(s[:2].sum(-1), 1.0, atol=1e-5)  # a distribution over the document
    assert np.all(s[2] == 0) and np.all(s[1, 4:] == 0)
    # No masks at all: the same formula with everything real.
    s_all = ops.convert_to_numpy(AttentionOverAttention()(doc, qry))
    np.testing.assert_allclose(
        s_all, _reference(doc, qry, np.ones((B, TD), bool), np.ones((B, TQ), bool))[0], atol=1e-5
    )


@pytest.mark.parametrize("junk", [np.nan, np.inf, 1e30])
def test_masked_positions_never_reach_outputs_or_gradients(junk):
    doc, qry = _data(2)
    dm = np.ones((B, TD), bool)
    qm = np.ones((B, TQ), bool)
    dm[0, 3:] = False
    qm[0, 1:] = False
    qm[2] = False
    dirty_d = np.where(dm[..., None], doc, np.float32(junk)).astype("float32")
    dirty_q = np.where(qm[..., None], qry, np.float32(junk)).astype("float32")
    layer = AttentionOverAttention()
    clean = ops.convert_to_numpy(
        layer(
            np.where(dm[..., None], doc, 0.0),
            np.where(qm[..., None], qry, 0.0),
            document_mask=dm,
            query_mask=qm,
        )
    )
    got = ops.convert_to_numpy(layer(dirty_d, dirty_q, document_mask=dm, query_mask=qm))
    np.testing.assert_array_equal(got, clean)
    assert np.all(got[2] == 0)
    weights = np.random.RandomState(3).normal(size=(B, TD)).astype("float32")
    gd, gq = _grads(
        lambda d, q: ops.sum(layer(d, q, document_mask=dm, query_mask=qm) * weights),
        dirty_d,
        dirty_q,
    )
    assert np.all(np.isfinite(gd)) and np.all(np.isfinite(gq))
    assert np.all(gd[~dm] == 0) and np.all(gq[~qm] == 0)


def test_bad_arguments():
    doc, qry = _data()
    with pytest.raises(ValueError, match="last dimension"):
        AttentionOverAttention()(doc, qry[..., :3])
    with pytest.raises(ValueError, match="query_mask"):
        AttentionOverAttention()(doc, qry, query_mask=np.ones((B, TQ + 1), bool))
