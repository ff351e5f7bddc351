"""Numerics under stress: property tests with `hypothesis` for every attention layer.

Random shapes, masks (none, random, all masked, some queries with nothing to attend to),
inputs of magnitude 1 or 1e4 and the float32 / mixed_float16 / mixed_bfloat16 policies. The
properties, checked with NumPy on the layers' outputs:
- every output is finite;
- the attention weights are >= 0, 0 at masked positions and sum to 1 over the unmasked
  positions of each query (0 when there is none; within the window for local-m; at most 1
  for local-p, whose Gaussian is not renormalised); a query with nothing to attend to gets
  a zero context.
Under mixed_float16 / mixed_bfloat16 every result is also compared with the float32 layer
holding the same weights, on the same inputs (rounded to the compute dtype first, as the mixed
layer would). The cross-attention layers compute their scores and softmax in float32, so their
weights may differ from float32 only by the final rounding, `u * max(|w|, smallest normal)`
(u the unit roundoff), and their context only by the roundings of a weighted sum of `n` terms:
`(n + 2) u max|value|`. Other layers get the checklist's tolerance (a few u of the output
scale). This fails on a path that silently loses precision, not only on NaN.
Backend neutral (keras.ops and NumPy only): also run with KERAS_BACKEND=jax. Deterministic
(`derandomize=True`) and small (`max_examples`), so CI stays fast. `make test` also runs this
file with TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow's portable kernels), so the results cannot depend
on the processor's half-precision kernels.
"""

import keras
import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from keras import ops

from keras_attn.layers import (
    AttentionDecoder,
    AttentionRNNCell,
    BahdanauAttention,
    HardAttention,
    LuongAttention,
    MultiHeadAttention,
)
from tests.layers.checklist import (
    DEFAULT_MIXED_TOLERANCE,
    SMALLEST_NORMAL,
    UNIT_ROUNDOFF,
    round_to,
)

SETTINGS = settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
TOLERANCE = {"float32": 1e-5, "mixed_float16": 1e-2, "mixed_bfloat16": 4e-2}
MASKS = ("none", "random", "all", "rows")


def stress(policy, square=False):
    """Always tried, besides the random draws: 1e4 inputs, one query row with every position
    masked next to a fully visible one, in half precision."""
    return {
        "batch": 2,
        "tq": 3,
        "tv": 5,
        "dq": 3,
        "dv": 3 if square else 1,
        "mask": "rows",
        "scale": 1e4,
        "policy": policy,
        "seed": 5,
    }


@st.composite
def problems(draw, square=False):
    """Shapes, a value mask, a magnitude, a policy and a seed for the data."""
    p = {
        # Few distinct sizes: JAX compiles every op per shape, so reused shapes keep it fast.
        "batch": draw(st.sampled_from((1, 2))),
        "tq": draw(st.sampled_from((1, 3))),
        "tv": draw(st.sampled_from((1, 2, 5))),
        "dq": draw(st.sampled_from((1, 3))),
        "dv": draw(st.sampled_from((1, 3))),
        "mask": draw(st.sampled_from(MASKS)),
        "scale": draw(st.sampled_from((1.0, 1e4))),
        "policy": draw(st.sampled_from(POLICIES)),
        "seed": draw(st.integers(0, 2**16)),
    }
    if square:
        p["dv"] = p["dq"]
    return p


def make_mask(kind, batch, length, rng):
    """`[batch, length]` bool (or None): random, all False, or some rows all False."""
    if kind == "none":
        return None
    if kind == "all":
        return np.zeros((batch, length), bool)
    mask = rng.rand(batch, length) < 0.6
    if kind == "rows":
        mask[0] = False
        if batch > 1:
            mask[1] = True
    return mask


def compute_dtype(policy):
    return policy.split("_", 1)[1] if policy.startswith("mixed_") else policy


def data(p):
    """Query, value (already rounded to the policy's compute dtype), mask, and the rng."""
    rng = np.random.RandomState(p["seed"])
    query = (rng.normal(size=(p["batch"], p["tq"], p["dq"])) * p["scale"]).astype("float32")
    value = (rng.normal(size=(p["batch"], p["tv"], p["dv"])) * p["scale"]).astype("float32")
    if p["policy"] != "float32":
        query, value = (round_to(x, compute_dtype(p["policy"])) for x in (query, value))
    return query, value, make_mask(p["mask"], p["batch"], p["tv"], rng), rng


def float32_twin(layer, *build_shapes):
    """The same layer (same config and weights) under the float32 policy, built from shapes."""
    twin = type(layer).from_config({**layer.get_config(), "dtype": "float32"})
    twin.build(*build_shapes)
    twin.set_weights(layer.get_weights())
    return twin


def rounding_bound(x, policy):
    """How far rounding float32 `x` to the compute dtype may move it (elementwise)."""
    dtype = compute_dtype(policy)
    return UNIT_ROUNDOFF[dtype] * np.maximum(np.abs(x), SMALLEST_NORMAL[dtype])


def check_cross_against_float32(layer, p, query, value, mask, context, weights, terms, **call):
    """Mixed precision: weights equal float32's up to their final rounding, context up to the
    roundings of a weighted sum of `terms` rows (see the module docstring)."""
    if p["policy"] == "float32":
        return
    twin = float32_twin(layer, query.shape, value.shape)
    ref_context, ref_weights = twin(
        query, value, value_mask=mask, return_attention_scores=True, **call
    )
    ref_context, ref_weights = numpy(ref_context), numpy(ref_weights)
    assert np.all(np.abs(weights - ref_weights) <= rounding_bound(ref_weights, p["policy"])), (
        np.max(np.abs(weights - ref_weights))
    )
    u = UNIT_ROUNDOFF[compute_dtype(p["policy"])]
    bound = (
        (terms + 2)
        * u
        * max(
            float(np.max(np.abs(value), initial=0.0)), SMALLEST_NORMAL[compute_dtype(p["policy"])]
        )
    )
    assert np.max(np.abs(context - ref_context), initial=0.0) <= bound


def check_close_to_float32(got, want, policy, tolerance=DEFAULT_MIXED_TOLERANCE):
    """Layers with half-precision weights inside (MHA, the RNN): the checklist's tolerance."""
    u = UNIT_ROUNDOFF[compute_dtype(policy)]
    bound = tolerance * u * max(float(np.max(np.abs(want), initial=0.0)), 1.0)
    assert np.max(np.abs(got - want), initial=0.0) <= bound, (np.max(np.abs(got - want)), bound)


def numpy(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def check_distribution(weights, allowed, tol, exact_sum=True):
    """`weights [..., T]` against `allowed [..., T]` bool (where it may be non-zero)."""
    assert np.all(np.isfinite(weights))
    assert np.all(weights >= 0.0)
    assert np.all(weights[~allowed] == 0.0)
    sums = weights.sum(-1)
    has_any = allowed.any(-1)
    if exact_sum:
        np.testing.assert_allclose(sums[has_any], 1.0, atol=tol)
    else:
        assert np.all(sums <= 1.0 + tol)
    assert np.all(sums[~has_any] == 0.0)
    return has_any


def full_mask(mask, batch, tq, tv):
    """`[B, Tq, Tv]` bool of the value mask (all True when None)."""
    if mask is None:
        return np.ones((batch, tq, tv), bool)
    return np.broadcast_to(mask[:, None, :], (batch, tq, tv))


def check_cross(layer, p, query, value, mask, allowed=None, exact_sum=True, **call):
    context, weights = layer(query, value, value_mask=mask, return_attention_scores=True, **call)
    context, weights = numpy(context), numpy(weights)
    b, tq, tv = p["batch"], p["tq"], p["tv"]
    if allowed is None:
        allowed = full_mask(mask, b, tq, tv)
    assert context.shape == (b, tq, p["dv"]) and weights.shape == (b, tq, tv)
    assert np.all(np.isfinite(context))
    has_any = check_distribution(weights, allowed, TOLERANCE[p["policy"]], exact_sum)
    assert np.all(context[~has_any] == 0.0)  # nothing to attend to: zero context
    check_cross_against_float32(layer, p, query, value, mask, context, weights, terms=tv, **call)
    return context, weights


# ------------------------------------------------------------------ layers
@SETTINGS
@given(problems(), st.booleans(), st.booleans())
@example(stress("mixed_float16"), True, False)
def test_bahdanau(p, normalize, single_step):
    query, value, mask, _ = data(p)
    layer = BahdanauAttention(3, normalize=normalize, dtype=p["policy"])
    if single_step:  # one decoder step: [B, Dq] -> weights [B, Tv]
        context, weights = layer(query[:, 0], value, value_mask=mask, return_attention_scores=True)
        allowed = full_mask(mask, p["batch"], 1, p["tv"])[:, 0]
        has_any = check_distribution(numpy(weights), allowed, TOLERANCE[p["policy"]])
        assert np.all(np.isfinite(numpy(context))) and np.all(numpy(context)[~has_any] == 0.0)
        if p["policy"] != "float32":
            twin = float32_twin(layer, query[:, 0].shape, value.shape)
            ref_context, ref_weights = twin(
                query[:, 0], value, value_mask=mask, return_attention_scores=True
            )
            w, rw = numpy(weights), numpy(ref_weights)
            assert np.all(np.abs(w - rw) <= rounding_bound(rw, p["policy"]))
            u = UNIT_ROUNDOFF[compute_dtype(p["policy"])]
            bound = (p["tv"] + 2) * u * max(float(np.abs(value).max()), 1e-30)
            assert np.max(np.abs(numpy(context) - numpy(ref_context))) <= bound
    else:
        check_cross(layer, p, query, value, mask)


@SETTINGS
@given(problems(square=True), st.sampled_from(("dot", "general", "concat")), st.booleans())
@example(stress("mixed_bfloat16", True), "general", True)
def test_luong_global(p, score, scale):
    query, value, mask, _ = data(p)
    layer = LuongAttention(score, scale=scale, dtype=p["policy"])
    check_cross(layer, p, query, value, mask)


@SETTINGS
@given(problems(square=True), st.sampled_from(("dot", "general", "concat")), st.integers(1, 3))
@example(stress("mixed_float16", True), "dot", 1)
def test_luong_local_m(p, score, window):
    """Weights sum to 1 over the unmasked positions of the window [t - D, t + D] (0 if none)."""
    query, value, mask, _ = data(p)
    layer = LuongAttention(score, alignment="local-m", window=window, dtype=p["policy"])
    t = np.arange(p["tq"])[:, None]
    s = np.arange(p["tv"])[None, :]
    in_window = np.abs(s - t) <= window  # [Tq, Tv]
    allowed = full_mask(mask, p["batch"], p["tq"], p["tv"]) & in_window[None]
    check_cross(layer, p, query, value, mask, allowed=allowed)


@SETTINGS
@given(problems(square=True), st.sampled_from(("dot", "general", "concat")), st.integers(1, 3))
@example(stress("mixed_bfloat16", True), "concat", 1)
def test_luong_local_p(p, score, window):
    """A window softmax times a Gaussian: in [0, 1], 0 where masked, sum <= 1, 0 with nothing to see."""
    query, value, mask, _ = data(p)
    layer = LuongAttention(score, alignment="local-p", window=window, dtype=p["policy"])
    allowed = full_mask(mask, p["batch"], p["tq"], p["tv"])
    _, weights = check_cross(layer, p, query, value, mask, allowed=allowed, exact_sum=False)
    assert np.all(weights <= 1.0 + TOLERANCE[p["policy"]])


@SETTINGS
@given(
    problems(square=True), st.sampled_from(("additive", "dot", "general", "concat")), st.booleans()
)
@example(stress("mixed_float16", True), "additive", True)
def test_hard(p, score, training):
    """alpha is a distribution; the context is exactly one unmasked row of `value` (or 0)."""
    query, value, mask, _ = data(p)
    layer = HardAttention(score, seed=3, dtype=p["policy"])
    context, alpha = check_cross(layer, p, query, value, mask, training=training)
    rows = numpy(
        ops.cast(ops.convert_to_tensor(value), layer.compute_dtype)
    )  # value as the layer sees it
    allowed = full_mask(mask, p["batch"], p["tq"], p["tv"])
    for b in range(p["batch"]):
        for t in range(p["tq"]):
            if allowed[b, t].any():
                matches = [
                    s
                    for s in range(p["tv"])
                    if allowed[b, t, s] and np.array_equal(context[b, t], rows[b, s])
                ]
                assert matches, (b, t)
                if not training:  # inference: the most probable position
                    assert np.isclose(alpha[b, t, matches].max(), alpha[b, t].max(), rtol=1e-3)


@SETTINGS
@given(problems(), st.integers(1, 3), st.integers(1, 3), st.booleans(), st.booleans())
@example(stress("mixed_bfloat16"), 2, 2, False, True)
def test_multi_head(p, heads, key_dim, self_attention, causal):
    query, value, mask, _ = data(p)
    layer = MultiHeadAttention(heads, key_dim, dtype=p["policy"])
    b, tq = p["batch"], p["tq"]
    if self_attention:
        tk = tq
        mask = (
            None if mask is None else make_mask(p["mask"], b, tq, np.random.RandomState(p["seed"]))
        )
        output, weights = layer(
            query,
            attention_mask=None if mask is None else mask[:, None, :],
            use_causal_mask=causal,
            return_attention_scores=True,
        )
    else:
        tk = p["tv"]
        output, weights = layer(
            query, value, value_mask=mask, use_causal_mask=causal, return_attention_scores=True
        )
    output, weights = numpy(output), numpy(weights)
    assert output.shape == (b, tq, p["dq"]) and weights.shape == (b, heads, tq, tk)
    assert np.all(np.isfinite(output))
    if p["policy"] != "float32":
        twin = float32_twin(layer, query.shape, query.shape if self_attention else value.shape)
        if self_attention:
            ref = twin(
                query,
                attention_mask=None if mask is None else mask[:, None, :],
                use_causal_mask=causal,
                return_attention_scores=True,
            )
        else:
            ref = twin(
                query, value, value_mask=mask, use_causal_mask=causal, return_attention_scores=True
            )
        check_close_to_float32(output, numpy(ref[0]), p["policy"])
        check_close_to_float32(weights, numpy(ref[1]), p["policy"])
    allowed = full_mask(mask, b, tq, tk)
    if causal:
        allowed = allowed & (np.arange(tk)[None, :] <= np.arange(tq)[:, None])[None]
    allowed = np.broadcast_to(allowed[:, None], weights.shape)
    check_distribution(weights, allowed, TOLERANCE[p["policy"]])


# ---------------------------------------------------------------- decoder
@SETTINGS
@given(problems(), st.sampled_from(("bahdanau", "luong")), st.sampled_from(("none", "random")))
@example(stress("mixed_float16"), "luong", "random")
def test_attention_decoder(p, style, target_mask):
    """Per-step weights are distributions over the unmasked memory; padded steps give zeros."""
    inputs, memory, mask, rng = data(p)
    attention = BahdanauAttention(3) if style == "bahdanau" else LuongAttention("general")
    cell = AttentionRNNCell(keras.layers.GRUCell(4), attention, style=style, dtype=p["policy"])
    decoder = AttentionDecoder(cell, return_attention=True, dtype=p["policy"])
    steps = make_mask(target_mask, p["batch"], p["tq"], rng)
    outputs, weights = decoder(inputs, memory, memory_mask=mask, mask=steps)
    outputs, weights = numpy(outputs), numpy(weights)
    if p["policy"] != "float32":
        twin = float32_twin(decoder, inputs.shape, memory.shape)
        ref_outputs, ref_weights = twin(inputs, memory, memory_mask=mask, mask=steps)
        check_close_to_float32(outputs, numpy(ref_outputs), p["policy"])
        check_close_to_float32(weights, numpy(ref_weights), p["policy"])
    b, t, s = p["batch"], p["tq"], p["tv"]
    assert weights.shape == (b, t, s) and np.all(np.isfinite(outputs))
    allowed = full_mask(mask, b, t, s)
    if steps is not None:
        allowed = allowed & steps[:, :, None]
        assert np.all(outputs[~steps] == 0.0)
    check_distribution(weights, allowed, TOLERANCE[p["policy"]])
