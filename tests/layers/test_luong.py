import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import LuongAttention, scoring
from tests.layers.checklist import check_padding_is_inert, run_layer_checklist

B, TQ, TV, DQ, DV, U = 3, 5, 9, 5, 3, 6
D = 2  # window half-width used by the formula tests


def _key_dim(score):
    return DQ if score == "dot" else 4


def _data(score, seed=0):
    r = np.random.RandomState(seed)
    q = r.normal(size=(B, TQ, DQ)).astype("float32")
    v = r.normal(size=(B, TV, DV)).astype("float32")
    k = r.normal(size=(B, TV, _key_dim(score))).astype("float32")
    return q, v, k


def _mask():
    mask = np.ones((B, TV), bool)
    mask[1, 2] = False  # a hole in the middle
    mask[1, 6:] = False  # and padding at the end
    mask[2, :] = False  # fully masked example
    return mask


def _np(x):
    return ops.convert_to_numpy(x)


def _randomize(layer, seed=5, g=1.7, position_spread=3.0):
    """Random weights (g != 1 so that `scale` matters; v_p spread so p_t covers the source)."""
    r = np.random.RandomState(seed)
    rp = np.random.RandomState(seed + 1)  # p_t does not depend on the score's weights
    new = []
    for w in layer.weights:
        name = w.path.split("/")[-1]
        if name == "attention_g":
            new.append(np.array(g, "float32"))
        elif name == "position_kernel":
            new.append(rp.normal(size=w.shape).astype("float32"))
        elif name == "position_v":
            new.append((position_spread * rp.normal(size=w.shape)).astype("float32"))
        else:
            new.append(r.normal(size=w.shape).astype("float32"))
    layer.set_weights(new)


# ----------------------------------------------------------------- reference
def _reference(q, k, val, weights, score, alignment, window, sigma, scale, mask, position=0):
    """Luong et al. (2015) written out with explicit loops (float64)."""
    q, k, val = (np.asarray(x, np.float64) for x in (q, k, val))
    weights = [np.asarray(w, np.float64) for w in weights]
    i = 0
    if score == "general":
        w_score = weights[0]
        i = 1
    elif score == "concat":
        w_score, v_score = weights[0], weights[1]
        i = 2
    g = 1.0
    if scale:
        g = float(weights[i])
        i += 1
    if alignment == "local-p":
        w_p, v_p = weights[i], weights[i + 1]
    sigma = sigma if sigma is not None else window / 2.0

    def e(h, ks):
        if score == "dot":
            return float(h @ ks)
        if score == "general":
            return float(h @ (ks @ w_score))
        return float(v_score @ np.tanh(np.concatenate([h, ks]) @ w_score))

    n_b, n_q, n_v = q.shape[0], q.shape[1], k.shape[1]
    a = np.zeros((n_b, n_q, n_v))
    centers = np.zeros((n_b, n_q))
    for b in range(n_b):
        size = int(mask[b].sum())
        for t in range(n_q):
            h = q[b, t]
            if alignment == "global":
                p = None
                cand = [s for s in range(n_v) if mask[b, s]]
            else:
                if alignment == "local-m":
                    p = float(position + t)
                else:
                    p = size / (1.0 + math.exp(-float(v_p @ np.tanh(h @ w_p))))
                centers[b, t] = p
                cand = [
                    s
                    for s in range(int(math.floor(p - window)) - 1, int(math.ceil(p + window)) + 2)
                    if 0 <= s < n_v and mask[b, s] and p - window <= s <= p + window
                ]
            if not cand:
                continue
            scores = [g * e(h, k[b, s]) for s in cand]
            top = max(scores)
            ex = [math.exp(x - top) for x in scores]
            total = sum(ex)
            for s, x in zip(cand, ex):
                a[b, t, s] = x / total
                if alignment == "local-p":
                    a[b, t, s] *= math.exp(-((s - p) ** 2) / (2.0 * sigma**2))
    return a @ val, a, centers


# ----------------------------------------------------------------- checklist
def _checklist_data():
    r = np.random.RandomState(0)
    return (
        r.normal(size=(B, TQ, DQ)).astype("float32"),
        r.normal(size=(B, TV, DQ)).astype("float32"),  # Dv = Dq so that "dot" applies
    )


@pytest.mark.parametrize(
    "init_kwargs, scores, n_weights",
    [
        ({}, False, 1),
        ({"score": "dot", "alignment": "local-m", "window": 2}, True, 0),
        (
            {
                "score": "concat",
                "alignment": "local-p",
                "window": 2,
                "scale": True,
                "units": U,
                "dropout": 0.2,
            },
            True,
            5,
        ),
    ],
    ids=["general-global", "dot-local-m-scores", "concat-local-p-scale-scores-dropout"],
)
def test_checklist(init_kwargs, scores, n_weights):
    q, v = _checklist_data()
    run_layer_checklist(
        LuongAttention,
        init_kwargs,
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True} if scores else None,
        expected_output_shapes=[(B, TQ, DQ)] + ([(B, TQ, TV)] if scores else []),
        expected_num_trainable_weights=n_weights,
    )


# ------------------------------------------------------------------ formulas
_EVERY_SCORE_AND_ALIGNMENT = [
    (score, alignment, False)
    for score in ("dot", "general", "concat")
    for alignment in ("global", "local-m", "local-p")
]


@pytest.mark.parametrize(
    "score, alignment, scale",
    _EVERY_SCORE_AND_ALIGNMENT
    + [("general", "global", True), ("dot", "local-m", True), ("concat", "local-p", True)],
)
def test_formula_against_numpy(score, alignment, scale):
    q, v, k = _data(score, 1)
    mask = _mask()
    layer = LuongAttention(
        score, alignment, window=D, scale=scale, units=U if score == "concat" else None
    )
    layer.build((B, TQ, DQ), (B, TV, DV), (B, TV, k.shape[-1]))
    _randomize(layer, seed=7)  # p_t spread over the whole source
    kwargs = {"position": 4} if alignment == "local-m" else {}  # local-m windows run off the end
    ctx, w = layer(q, v, key=k, value_mask=mask, return_attention_scores=True, **kwargs)
    ref_ctx, ref_w, centers = _reference(
        q, k, v, layer.get_weights(), score, alignment, D, None, scale, mask, position=4
    )
    np.testing.assert_allclose(_np(w), ref_w, atol=2e-5)
    np.testing.assert_allclose(_np(ctx), ref_ctx, atol=2e-5)
    assert np.all(_np(w)[2] == 0) and np.all(_np(ctx)[2] == 0)
    if alignment == "local-p":
        # the data exercise windows running off both ends of the (unmasked) source
        assert centers[0].min() < D and centers[0].max() > TV - 1 - D, centers[0]
    if alignment != "global":
        assert np.any(ref_w[0] == 0)  # really local: something outside the window


@pytest.mark.parametrize("sigma", [None, 0.7])
def test_local_p_gaussian_is_not_renormalised(sigma):
    q, v, k = _data("general", 2)
    mask = _mask()
    layer = LuongAttention("general", "local-p", window=3, sigma=sigma)
    layer.build((B, TQ, DQ), (B, TV, DV), (B, TV, 4))
    _randomize(layer, seed=7)
    ctx, w = layer(q, v, key=k, value_mask=mask, return_attention_scores=True)
    ref_ctx, ref_w, _ = _reference(
        q, k, v, layer.get_weights(), "general", "local-p", 3, sigma, False, mask
    )
    np.testing.assert_allclose(_np(w), ref_w, atol=2e-5)
    np.testing.assert_allclose(_np(ctx), ref_ctx, atol=2e-5)
    sums = _np(w)[:2].sum(-1)
    assert np.all(sums < 1.0 - 1e-3)  # the Gaussian is applied after the softmax


def test_local_m_window_off_the_start_and_empty_windows():
    q, v, k = _data("dot", 3)
    mask = np.zeros((B, TV), bool)
    mask[:, :2] = True  # source positions 0, 1 ...
    mask[:, 7:] = True  # ... and 7, 8
    layer = LuongAttention("dot", "local-m", window=D)
    ctx, w = layer(q, v, key=k, value_mask=mask, return_attention_scores=True)  # position 0
    ref_ctx, ref_w, _ = _reference(q, k, v, [], "dot", "local-m", D, None, False, mask)
    w, ctx = _np(w), _np(ctx)
    np.testing.assert_allclose(w, ref_w, atol=2e-5)
    np.testing.assert_allclose(ctx, ref_ctx, atol=2e-5)
    # p_t = t, D = 2: windows of t = 0, 1 run off the start; t = 4 sees [2, 6], all masked
    np.testing.assert_allclose(w[:, :4].sum(-1), 1.0, rtol=1e-5)
    assert np.all(w[:, 3, 0] == 0) and np.all(w[:, :, 7:] == 0)
    assert np.all(w[:, 4] == 0) and np.all(ctx[:, 4] == 0)
    assert np.all(np.isfinite(ctx))


# ------------------------------------------------------------ one step, keys
@pytest.mark.parametrize("alignment", ["global", "local-m", "local-p"])
def test_one_step_with_position_equals_row_of_full_call(alignment):
    q, v, k = _data("general", 4)
    mask = _mask()
    layer = LuongAttention("general", alignment, window=D, scale=True)
    full_ctx, full_w = (
        _np(x) for x in layer(q, v, key=k, value_mask=mask, return_attention_scores=True)
    )
    for t in (0, 2, TQ - 1):
        kw = {"position": t} if alignment == "local-m" else {}
        ctx, w = layer(q[:, t], v, key=k, value_mask=mask, return_attention_scores=True, **kw)
        assert tuple(ctx.shape) == (B, DV) and tuple(w.shape) == (B, TV)
        np.testing.assert_allclose(_np(ctx), full_ctx[:, t], atol=1e-5)
        np.testing.assert_allclose(_np(w), full_w[:, t], atol=1e-5)
    if alignment == "local-m":
        # position as an int tensor scalar, as a [B] tensor, and a chunk of steps
        ctx = layer(q[:, 3], v, key=k, value_mask=mask, position=ops.convert_to_tensor(3, "int32"))
        np.testing.assert_allclose(_np(ctx), full_ctx[:, 3], atol=1e-5)
        steps = np.array([0, 4, 2], "int32")
        ctx = layer(
            q[np.arange(B), steps], v, key=k, value_mask=mask, position=ops.convert_to_tensor(steps)
        )
        np.testing.assert_allclose(_np(ctx), full_ctx[np.arange(B), steps], atol=1e-5)
        chunk_ctx, chunk_w = layer(
            q[:, 2:], v, key=k, value_mask=mask, position=2, return_attention_scores=True
        )
        np.testing.assert_allclose(_np(chunk_ctx), full_ctx[:, 2:], atol=1e-5)
        np.testing.assert_allclose(_np(chunk_w), full_w[:, 2:], atol=1e-5)


@pytest.mark.parametrize(
    "score, alignment",
    [("general", "global"), ("concat", "local-m"), ("concat", "local-p"), ("general", "local-p")],
)
def test_projected_key_once_per_source_gives_the_same_answer(score, alignment):
    q, v, k = _data(score, 6)
    layer = LuongAttention(score, alignment, window=D, units=U)
    full = _np(layer(q, v, key=k))
    keys = layer.project_keys(k)
    for t in (1, TQ - 1):
        kw = {"position": t} if alignment == "local-m" else {}
        step = _np(layer(q[:, t], v, key=k, projected_key=keys, **kw))
        np.testing.assert_allclose(step, full[:, t], atol=1e-5)
    np.testing.assert_allclose(_np(layer(q, v, key=k, projected_key=keys)), full, atol=1e-6)


def test_symbolic_one_step_with_position_input():
    q, v, k = _data("dot", 8)
    layer = LuongAttention("dot", "local-m", window=D)
    qi = keras.Input(shape=(DQ,))
    vi = keras.Input(shape=(TV, DV))
    ki = keras.Input(shape=(TV, DQ))
    pi = keras.Input(shape=(), dtype="int32")
    ctx, w = layer(qi, vi, key=ki, position=pi, return_attention_scores=True)
    model = keras.Model([qi, vi, ki, pi], [ctx, w])
    pos = np.array([1, 3, 4], "int32")
    got_ctx, got_w = model([q[np.arange(B), pos], v, k, pos])
    full_ctx, full_w = layer(q, v, key=k, return_attention_scores=True)
    np.testing.assert_allclose(_np(got_ctx), _np(full_ctx)[np.arange(B), pos], atol=1e-5)
    np.testing.assert_allclose(_np(got_w), _np(full_w)[np.arange(B), pos], atol=1e-5)


# ------------------------------------------------------------------- weights
@pytest.mark.parametrize(
    "score, alignment, scale, expected",
    [
        ("dot", "global", False, []),
        ("dot", "local-p", True, [(), (DQ, DQ), (DQ,)]),
        ("general", "global", False, [(4, DQ)]),
        ("general", "local-p", True, [(4, DQ), (), (DQ, DQ), (DQ,)]),
        ("concat", "local-m", True, [(DQ + 4, U), (U,), ()]),
        ("concat", "local-p", False, [(DQ + 4, U), (U,), (DQ, DQ), (DQ,)]),
    ],
)
def test_weight_shapes_and_order(score, alignment, scale, expected):
    kd = _key_dim(score)
    layer = LuongAttention(score, alignment, scale=scale, units=U)
    layer.build((B, TQ, DQ), (B, TV, DV), (B, TV, kd))
    shapes = [tuple(w.shape) for w in layer.weights]
    assert shapes == expected
    assert len(layer.trainable_weights) == len(expected)
    if scale:
        g = [w for w in layer.weights if tuple(w.shape) == ()]
        assert len(g) == 1 and float(_np(g[0])) == 1.0


def test_concat_units_default_to_query_dim():
    layer = LuongAttention("concat")
    layer.build((B, TQ, DQ), (B, TV, DV), (B, TV, 4))
    assert [tuple(w.shape) for w in layer.weights] == [(DQ + 4, DQ), (DQ,)]


# -------------------------------------------------------------- masked rows
@pytest.mark.parametrize("alignment", ["global", "local-m", "local-p"])
def test_fully_masked_rows_with_dropout_in_training(alignment):
    q, v, k = _data("concat", 9)
    mask = np.zeros((B, TV), bool)
    mask[0, :] = True
    layer = LuongAttention("concat", alignment, window=D, dropout=0.5)
    for training in (False, True):
        ctx, w = layer(
            q, v, key=k, value_mask=mask, return_attention_scores=True, training=training
        )
        ctx, w = _np(ctx), _np(w)
        assert np.all(np.isfinite(ctx)) and np.all(np.isfinite(w))
        assert np.all(ctx[1:] == 0) and np.all(w[1:] == 0)
        assert np.all(w[0].sum(-1) > 0.05)
        if alignment != "local-p":
            np.testing.assert_allclose(w[0].sum(-1), 1.0, rtol=1e-5)
        ctx_only = _np(layer(q, v, key=k, value_mask=mask, training=training))
        assert np.all(np.isfinite(ctx_only)) and np.all(ctx_only[1:] == 0)
        one = _np(layer(q[:, 0], v, key=k, value_mask=mask, training=training, position=0))
        assert np.all(np.isfinite(one)) and np.all(one[1:] == 0)


# -------------------------------------------------------------------- errors
def test_bad_arguments():
    with pytest.raises(ValueError, match="additive"):
        LuongAttention("additive")
    with pytest.raises(ValueError, match="score"):
        LuongAttention("multiplicative")
    with pytest.raises(ValueError, match="alignment"):
        LuongAttention(alignment="local")
    for bad in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="window"):
            LuongAttention(alignment="local-m", window=bad)
    with pytest.raises(ValueError, match="sigma"):
        LuongAttention(alignment="local-p", sigma=0.0)
    with pytest.raises(ValueError, match="scale"):
        LuongAttention(scale="yes")
    with pytest.raises(ValueError, match="units"):
        LuongAttention("concat", units=0)
    with pytest.raises(ValueError, match="dropout"):
        LuongAttention(dropout=1.0)
    q, v, k = _data("general")
    with pytest.raises(ValueError, match="dot"):
        LuongAttention("dot")(q, v, key=k)  # Dq = 5, Dk = 4
    layer = LuongAttention("general", "local-m", window=2)
    layer(q, v, key=k)
    with pytest.raises(ValueError, match="position"):
        layer(q[:, 0], v, key=k)


# -------------------------------------------------------- really local
BIG_TQ, BIG_TV, SMALL = 16, 509, 4  # BIG_TV distinctive; every other dim small


def _traced_shapes(fn, *args):
    """Shapes of every intermediate tensor of `fn(*args)`, traced by the backend."""
    if keras.backend.backend() == "jax":
        import jax

        shapes = []

        def walk(jaxpr):
            for eqn in jaxpr.eqns:
                shapes.extend(tuple(var.aval.shape) for var in eqn.outvars)
                for param in eqn.params.values():
                    for sub in param if isinstance(param, (list, tuple)) else (param,):
                        if hasattr(sub, "eqns"):
                            walk(sub)
                        elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                            walk(sub.jaxpr)

        walk(jax.make_jaxpr(fn)(*args).jaxpr)
        return shapes
    import tensorflow as tf

    specs = [tf.TensorSpec(a.shape, a.dtype) for a in args]
    graph = tf.function(fn).get_concrete_function(*specs).graph
    return [tuple(t.shape.as_list()) for op in graph.get_operations() for t in op.outputs]


def _non_local(shapes):
    """Intermediates as large as a [B, Tq, Tv] matrix, or with both a Tq and a Tv axis."""
    unknown = [s for s in shapes if any(d is None for d in s)]
    assert not unknown, unknown  # every size is known, so the check below sees everything
    limit = 2 * BIG_TQ * BIG_TV
    return [s for s in shapes if (BIG_TQ in s and BIG_TV in s) or int(np.prod(s)) >= limit]


class MaskedRowLuong(LuongAttention):
    """The implementation that is ruled out: score every position, mask outside the window."""

    def _attend_local(
        self, query, keys, value, value_mask, return_weights, training, position, keys_projected
    ):
        length = ops.shape(value)[1]
        center = self._centers(query, value_mask, length, position)
        if not keys_projected:
            keys = self.project_keys(keys)  # every key, then every score
        scores = self._scores(query, keys)  # [B, Tq, Tv]
        s = ops.cast(ops.arange(length), "float32")
        inside = ops.abs(ops.reshape(s, (1, 1, -1)) - ops.expand_dims(center, -1)) <= self.window
        weights = scoring.masked_softmax(scores, inside)
        if self.alignment == "local-p":
            diff = ops.reshape(s, (1, 1, -1)) - ops.expand_dims(center, -1)
            weights = weights * ops.exp(-ops.square(diff) / (2.0 * (self.window / 2.0) ** 2))
        return scoring.weighted_sum(weights, value), weights


@pytest.mark.parametrize(
    "score, alignment", [("dot", "local-m"), ("general", "local-p"), ("concat", "local-m")]
)
def test_local_attention_is_really_local(score, alignment):
    r = np.random.RandomState(0)
    q = r.normal(size=(2, BIG_TQ, SMALL)).astype("float32")
    v = r.normal(size=(2, BIG_TV, SMALL)).astype("float32")
    mask = np.ones((2, BIG_TV), bool)
    mask[1, 300:] = False

    def traced(cls, scores):
        layer = cls(score, alignment, window=3, units=SMALL + 2)
        layer(q, v, value_mask=mask)  # build

        def fn(query, value, value_mask):
            out = layer(query, value, value_mask=value_mask, return_attention_scores=scores)
            return out[0] if scores else out

        return _non_local(_traced_shapes(fn, q, v, mask))

    assert traced(LuongAttention, scores=False) == []
    # the checker does see full-row tensors: the scores themselves, and a masked-row layer
    assert (2, BIG_TQ, BIG_TV) in traced(LuongAttention, scores=True)
    assert traced(MaskedRowLuong, scores=False)
    # and the masked-row layer computes the same thing, so only the structure tells them apart
    layer = LuongAttention(score, alignment, window=3, units=SMALL + 2)
    ref = MaskedRowLuong(score, alignment, window=3, units=SMALL + 2)
    layer(q[:, :3], v[:, :40], value_mask=mask[:, :40])
    ref(q[:, :3], v[:, :40], value_mask=mask[:, :40])
    ref.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        _np(layer(q[:, :3], v[:, :40], value_mask=mask[:, :40])),
        _np(ref(q[:, :3], v[:, :40], value_mask=mask[:, :40])),
        atol=1e-5,
    )


# ------------------------------------------------- masks, dropout
def _built(score, alignment, seed=3, **kwargs):
    layer = LuongAttention(
        score, alignment, window=D, units=U if score == "concat" else None, **kwargs
    )
    layer.build((B, TQ, DQ), (B, TV, DV), (B, TV, _key_dim(score)))
    _randomize(layer, seed=seed)
    return layer


@pytest.mark.parametrize(
    "score, alignment",
    [
        ("dot", "global"),
        ("general", "global"),
        ("general", "local-p"),
        ("concat", "local-m"),
        ("general", "local-m"),
    ],
)
def test_masked_memory_positions_never_matter(score, alignment):
    """NaN, inf, 1e30 or 300 at masked key and value rows reach no output and no gradient."""
    q, v, k = _data(score, 2)
    mask = _mask()
    padded_v = np.broadcast_to(~mask[:, :, None], v.shape)
    padded_k = np.broadcast_to(~mask[:, :, None], k.shape)
    call = {"value_mask": mask, "return_attention_scores": True}
    if alignment == "local-m":
        call["position"] = 3
    check_padding_is_inert(
        lambda: _built(score, alignment),
        {"query": q, "value": v, "key": k},
        {"value": padded_v, "key": padded_k},
        call,
    )


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_masking_is_exact_whatever_the_scores(policy):
    """q = 1e5 * 1, k = -1e5 * 1 (300 under mixed_float16): every real score is far
    below any finite fill; one masked position must still leave 1/3 on each of the others."""
    big = 1e5 if policy == "float32" else 300.0
    q = np.full((1, 1, 4), big, "float32")
    v = np.full((1, 4, 4), -big, "float32")
    mask = np.array([[True, True, False, True]])
    for alignment in ("global", "local-m"):
        layer = LuongAttention("dot", alignment, window=3, dtype=policy)
        context, weights = layer(q, v, value_mask=mask, return_attention_scores=True)
        np.testing.assert_allclose(
            _np(ops.cast(weights, "float32"))[0, 0], [1 / 3, 1 / 3, 0, 1 / 3], rtol=1e-3
        )
        np.testing.assert_allclose(_np(ops.cast(context, "float32")), -big, rtol=1e-3)


@pytest.mark.parametrize("alignment", ["global", "local-p"])
def test_masked_query_rows_get_a_zero_context_whatever_they_hold(alignment):
    q, v, k = _data("general", 3)
    query_mask = np.ones((B, TQ), bool)
    query_mask[0, 3:] = False
    query_mask[1, 0] = False
    q_bad = np.where(query_mask[:, :, None], q, np.nan).astype("float32")
    layer = _built("general", alignment)
    context = _np(layer(q_bad, v, key=k, query_mask=query_mask))
    full = _np(layer(q, v, key=k))
    np.testing.assert_array_equal(context[~query_mask], 0.0)
    np.testing.assert_allclose(context[query_mask], full[query_mask], rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(full[~query_mask]).sum(-1) > 0)  # so zero there is the mask's doing


@pytest.mark.parametrize("alignment", ["global", "local-m"])
def test_attention_dropout_drops_weights_of_the_context(alignment):
    """With one-hot value rows the context *is* the dropped-out weight matrix: every entry
    is 0 or w / (1 - rate), and some of each appear (dropout removed: context == w)."""
    q = np.random.RandomState(4).normal(size=(B, TQ, TV)).astype("float32")
    v = np.tile(np.eye(TV, dtype="float32"), (B, 1, 1))
    layer = LuongAttention("general", alignment, window=2, dropout=0.5)
    context, weights = (_np(x) for x in layer(q, v, training=True, return_attention_scores=True))
    kept = context != 0.0
    np.testing.assert_allclose(context[kept], 2.0 * weights[kept], rtol=1e-5)
    live = weights > 0
    assert 0.2 < kept[live].mean() < 0.8, kept[live].mean()
    np.testing.assert_allclose(_np(layer(q, v)), weights, rtol=1e-5, atol=1e-7)
