"""What the attention layers share: score functions, masked softmax, windows.

Everything here is written with `keras.ops` only, so it runs on every Keras
backend. Shapes use `B` batch, `Tq` query steps, `Tv` source positions,
`W` window width (`2D + 1`), `U` score units.

Keys handed to a score function are either "full" (`[B, Tv, U]`, one row per
source position) or "windowed" (`[B, Tq, W, U]`, the window of each query,
gathered with `gather_rows`). The score functions accept both, so global and
local attention share one implementation of every formula.
"""

import keras
from keras import ops

from keras_attn import _checks

# Scores are clipped to this magnitude (in float32) so that an overflowed
# score (+-inf) can never turn the softmax into NaN.
SCORE_LIMIT = 1e30


def to_bool_mask(mask):
    """`mask` as a bool tensor, or None."""
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    if mask.dtype == "bool":
        return mask
    return ops.not_equal(mask, ops.zeros((), dtype=mask.dtype))


def score_dtype(dtype):
    """The dtype attention scores and softmaxes are computed in: float32, or float64 for float64.

    Under mixed precision (`float16` / `bfloat16` compute dtype) the scores are
    computed in float32: a dot product of activations of a few hundred already
    exceeds float16's range (65504), and whether the overflow turns into a NaN
    (inf - inf in the reduction) depends on the CPU's or GPU's kernel.
    """
    return "float64" if dtype == "float64" else "float32"


def to_score_dtype(x):
    """`x` cast to `score_dtype` (a no-op for float32 / float64 tensors)."""
    target = score_dtype(x.dtype)
    return x if x.dtype == target else ops.cast(x, target)


def zero_masked(x, mask):
    """`x [B, T, ..., D]` with the rows where `mask [B, T, ...]` is False set to 0 by selection.

    Padding may hold anything (NaN, inf, 1e30): multiplying it by a zero weight
    would still give NaN, and so would the gradient through such a product.
    Selecting zeros instead means a masked row never reaches an output or a
    gradient. `mask` None returns `x`.
    """
    if mask is None:
        return x
    mask = ops.cast(mask, "bool")
    return ops.where(ops.expand_dims(mask, -1), x, ops.zeros((), dtype=x.dtype))


def _shifted_scores(scores, mask, axis, clip):
    """`(s - max_unmasked(s), dtype)` in float32/float64 with `-inf` where `mask` is False.

    The maximum is taken over the unmasked positions only (0 for a row with
    none, so nothing overflows), and without gradient (softmax does not depend
    on the shift). Masked positions are selected away before any arithmetic,
    so whatever they hold cannot reach the result or its gradient.
    """
    dtype = scores.dtype
    s = to_score_dtype(scores)
    if clip:
        s = ops.clip(s, -SCORE_LIMIT, SCORE_LIMIT)
    if mask is not None:
        s = ops.where(mask, s, float("-inf"))
    top = ops.max(s, axis=axis, keepdims=True)
    if mask is not None:
        top = ops.where(ops.isfinite(top), top, ops.zeros((), dtype=top.dtype))
    return s - ops.stop_gradient(top), dtype


def masked_softmax(scores, mask=None, axis=-1, clip=True):
    """Softmax over the positions where `mask` is True; exactly 0 elsewhere.

    Masking is by selection, not by adding a large negative number: the
    masked scores are replaced by `-inf` before the softmax (whose maximum is
    then over the unmasked scores only) and its result is selected again, so
    no real score, however negative, is hidden, and whatever a masked
    position holds (NaN, inf) cannot reach the weights or their gradient. A row with no True position
    gets all-zero weights (never NaN, never a uniform distribution).

    The softmax runs in float32 (float64 for float64 scores) whatever the
    compute dtype, and the result is cast back to the dtype of `scores`.
    With `clip`, scores are first clipped to +-`SCORE_LIMIT` so that an
    overflowed one (+-inf) cannot make a NaN; `clip=False` skips that pass
    (MultiHeadAttention does, for float32 scores). A single position gets
    weight 1 (0 where masked) without a softmax, and so without Keras'
    warning about a softmax over an axis of size 1, which a one-position
    memory or a first decoding step would raise.
    """
    dtype = scores.dtype
    mask = to_bool_mask(mask)
    if scores.shape[axis] == 1:
        ones = ops.ones_like(scores)
        return ones if mask is None else ops.where(mask, ones, ops.zeros_like(ones))
    if axis % len(scores.shape) != len(scores.shape) - 1:
        s = to_score_dtype(scores)
        if clip:
            s = ops.clip(s, -SCORE_LIMIT, SCORE_LIMIT)
        return ops.cast(_written_out_softmax(s, mask, axis), dtype)
    if mask is None:
        s = to_score_dtype(scores)
        if clip:
            s = ops.clip(s, -SCORE_LIMIT, SCORE_LIMIT)
        return ops.cast(ops.softmax(s, axis=axis), dtype)
    s = to_score_dtype(scores)
    if clip:
        s = ops.clip(s, -SCORE_LIMIT, SCORE_LIMIT)
    # exp(-inf - max) is exactly 0, so a masked position gets exactly 0 and no
    # real score is hidden. A row with no True position is all -inf and comes
    # out NaN; the outer selection turns it into zeros, and its gradient
    # (0 there) cannot come back as NaN: the inner selection passes the
    # gradient of masked entries to the -inf constant, not to `scores`. One
    # fused softmax kernel and two selections (MultiHeadAttention's cost).
    w = ops.softmax(ops.where(mask, s, float("-inf")), axis=axis)
    return ops.cast(ops.where(mask, w, ops.zeros((), dtype=w.dtype)), dtype)


_LOWEST = {"float32": -3.4028234663852886e38, "float64": -1.7976931348623157e308}


def _written_out_softmax(s, mask, axis):
    """The masked softmax of `s` over an axis that is not the last, written out: TensorFlow's
    softmax kernel works on the last axis only, so `ops.softmax` would transpose there and
    back (two copies and their permutations, which a decoding step pays per attention; the
    one-query path of `multi_head_attend.rows` normalizes over axis 1).

    Masked scores are replaced by the lowest float before anything else (so their content
    cannot reach the result or a gradient), their exponentials selected to exactly 0, and
    the sum kept >= 1e-30, so a row with no True position is all 0."""
    if mask is not None:
        lowest = _LOWEST[keras.backend.standardize_dtype(s.dtype)]
        s = ops.where(mask, s, ops.convert_to_tensor(lowest, s.dtype))
    top = ops.stop_gradient(ops.max(s, axis=axis, keepdims=True))
    e = ops.exp(s - top)
    if mask is not None:
        e = ops.where(mask, e, ops.zeros((), s.dtype))
    total = ops.maximum(ops.sum(e, axis=axis, keepdims=True), ops.convert_to_tensor(1e-30, s.dtype))
    return e / total


# Below every log-probability `masked_log_softmax` can produce for an unmasked
# position (those are >= -2 * SCORE_LIMIT - log(Tv)); stands for log(0) at masked
# positions instead of -inf, so that nothing downstream can become NaN.
LOG_ZERO = -3.0e38


def masked_log_softmax(scores, mask=None, axis=-1):
    """Log-softmax over the positions where `mask` is True, in float32 (float64 for float64).

    Masked positions get `LOG_ZERO`; a row with no True position gets all
    `LOG_ZERO`. Every value and every gradient is finite, whatever the masked
    positions hold: they are selected away before the exponential (see
    `masked_softmax`).
    """
    mask = to_bool_mask(mask)
    if mask is None:
        return ops.log_softmax(
            ops.clip(to_score_dtype(scores), -SCORE_LIMIT, SCORE_LIMIT), axis=axis
        )
    shifted, _ = _shifted_scores(scores, mask, axis, clip=True)
    total = ops.sum(ops.exp(shifted), axis=axis, keepdims=True)
    total = ops.where(total > 0, total, ops.ones((), dtype=total.dtype))
    log_alpha = ops.where(mask, shifted, ops.zeros((), dtype=shifted.dtype)) - ops.log(total)
    return ops.where(mask, log_alpha, LOG_ZERO)


_PROJECT = {2: "bd,du->bu", 3: "btd,du->btu", 4: "bqwd,du->bqwu"}


def project(x, kernel):
    """`x [..., D] @ kernel [D, U]` for inputs of rank 2 to 4.

    Written as an einsum with explicit subscripts rather than `ops.matmul`:
    on TensorFlow a rank-3 matmul becomes `tensordot`, whose gradient inside
    a `while_loop` needs run-time shape values that XLA cannot compile
    (`jit_compile=True` training of a recurrent attention decoder).
    """
    return ops.einsum(_PROJECT[len(x.shape)], x, kernel)


def _pair(query, keys):
    """Broadcast `query [B, Tq, U]` against full or windowed keys."""
    if len(keys.shape) == 3:  # full: [B, Tv, U]
        return ops.expand_dims(query, 2) + ops.expand_dims(keys, 1)
    return ops.expand_dims(query, 2) + keys  # windowed: [B, Tq, W, U]


def additive_score(query_proj, key_proj, v, bias=None):
    """`v . tanh(q + k (+ b))` with projections already applied.

    `query_proj [B, Tq, U]`, `key_proj` full or windowed, `v [U]`.
    Returns `[B, Tq, Tv]` or `[B, Tq, W]`.
    """
    hidden = _pair(query_proj, key_proj)
    if bias is not None:
        hidden = hidden + bias
    equation = "bqtu,u->bqt"  # full and windowed keys both give a rank-4 hidden
    return ops.einsum(equation, ops.tanh(hidden), v)


def dot_score(query, keys):
    """`q . k`: `query [B, Tq, D]`, keys full `[B, Tv, D]` or windowed."""
    if len(keys.shape) == 3:
        return ops.einsum("bqd,btd->bqt", query, keys)
    return ops.einsum("bqd,bqwd->bqw", query, keys)


def weighted_sum(weights, values):
    """Context from weights and values, full or windowed.

    `weights [B, Tq, Tv]` with `values [B, Tv, D]`, or
    `weights [B, Tq, W]` with gathered `values [B, Tq, W, D]`.
    """
    if len(values.shape) == 3:
        return ops.einsum("bqt,btd->bqd", weights, values)
    return ops.einsum("bqw,bqwd->bqd", weights, values)


def gather_rows(x, positions):
    """Rows of `x [B, T, ...]` at integer `positions [B, ...]` (in range).

    Returns `positions.shape + x.shape[2:]`. One flat gather, so the cost is
    proportional to the number of positions, not to `T`.
    """
    shape = ops.shape(x)
    batch, length = shape[0], shape[1]
    flat = ops.reshape(x, (-1,) + tuple(x.shape[2:]))
    positions = ops.cast(positions, "int32")
    offsets = ops.arange(batch, dtype="int32") * ops.cast(length, "int32")
    offsets = ops.reshape(offsets, (-1,) + (1,) * (len(positions.shape) - 1))
    return ops.take(flat, positions + offsets, axis=0)


def window_positions(center, window, length):
    """The `2D + 1` source positions around each (possibly real) centre.

    `center [B, Tq]` (int or float, in source positions), `window` = `D`,
    `length` = `Tv`. The window is `{s : center - D <= s <= center + D}`,
    enumerated from `start = ceil(center - D)`.

    Returns `(positions, inside, start)`: `positions [B, Tq, 2D+1]` int32
    clipped into `[0, Tv)` (safe to gather), `inside` bool marking those that
    really are in the window and in the source, and `start [B, Tq]` int32.
    """
    center = ops.cast(center, "float32")
    start = ops.cast(ops.ceil(center - window), "int32")
    offsets = ops.arange(2 * window + 1, dtype="int32")
    positions = ops.expand_dims(start, -1) + offsets
    length = ops.cast(length, "int32")
    inside = ops.logical_and(positions >= 0, positions < length)
    inside = ops.logical_and(
        inside,
        ops.cast(positions, "float32") <= ops.expand_dims(center, -1) + window,
    )
    clipped = ops.clip(positions, 0, length - 1)
    return clipped, inside, start


def window_to_full(window_weights, start, length):
    """Scatter `[B, Tq, W]` window weights into a `[B, Tq, Tv]` matrix.

    Position `s` takes the weight of window slot `s - start` when that slot
    exists, 0 otherwise. Only used when the caller asks for the attention
    scores. Written as a one-hot contraction (no gather on the weights) so
    its gradient compiles under XLA inside a recurrent decoder's loop.
    """
    width = window_weights.shape[-1]
    source = ops.arange(length, dtype="int32")
    rel = ops.reshape(source, (1, 1, -1)) - ops.expand_dims(start, -1)  # [B, Tq, Tv]
    inside = ops.logical_and(rel >= 0, rel < width)
    slots = ops.one_hot(ops.where(inside, rel, -1), width, dtype=window_weights.dtype)
    return ops.einsum("bqtw,bqw->bqt", slots, window_weights)


def gaussian(positions, center, sigma):
    """`exp(-(s - p)^2 / (2 sigma^2))` for `positions [B, Tq, W]`, `center [B, Tq]`."""
    diff = ops.cast(positions, "float32") - ops.expand_dims(ops.cast(center, "float32"), -1)
    return ops.exp(-ops.square(diff) / (2.0 * sigma * sigma))


SCORES = ("additive", "dot", "general", "concat")


class Score:
    """One score function, its weights created on the owning layer.

    - `"additive"`: `v . tanh(W_q q + W_k k)`; `W_q [Dq, U]`, `W_k [Dk, U]`, `v [U]`.
    - `"dot"`: `q . k` (needs `Dq == Dk`); no weights.
    - `"general"`: `q . (k W)`; `W [Dk, Dq]`.
    - `"concat"`: `v . tanh([q; k] W)`; `W [Dq + Dk, U]`, `v [U]`. Computed as
      `v . tanh(q W[:Dq] + k W[Dq:])`, which is the same sum.

    `U` is `units`, defaulting to `Dq`. Keys are projected by `project_keys`
    once per source; `__call__` then scores queries against projected keys,
    full (`[B, Tv, .]`) or windowed (`[B, Tq, W, .]`). With `raw_keys=True`
    it takes unprojected keys instead and projects only what it is given (a
    window): for `"general"` it projects the query, `q . (k W) = (q W^T) . k`,
    which costs one `[Dq, Dk]` product per query instead of one per key.

    Everything is computed in float32 (float64 for float64 inputs) whatever
    the compute dtype, and the weights are created without autocasting, so
    mixed precision scores with the float32 weights themselves: a
    half-precision score overflows (65504) for activations of a few hundred,
    and what the overflow becomes depends on the kernel the device runs.
    """

    def __init__(self, kind, units=None):
        if kind not in SCORES:
            raise ValueError(
                f"`score` must be one of {', '.join(repr(s) for s in SCORES)}. Received: score={kind!r}"
            )
        self.kind = kind
        self.units = _checks.check_positive_int("units", units, allow_none=True)
        self.query_dim = None

    def build(self, layer, query_dim, key_dim):
        self.query_dim = query_dim
        units = self.units or query_dim

        def add(name, shape):
            return layer.add_weight(
                name=name, shape=shape, initializer="glorot_uniform", autocast=False
            )

        if self.kind == "additive":
            self.query_kernel = add("query_kernel", (query_dim, units))
            self.key_kernel = add("key_kernel", (key_dim, units))
            self.vector = add("attention_v", (units,))
        elif self.kind == "dot":
            if query_dim != key_dim:
                raise ValueError(
                    "The 'dot' score needs the query and key dimensions to be equal. "
                    f"Received: query dim={query_dim}, key dim={key_dim}"
                )
        elif self.kind == "general":
            self.kernel = add("kernel", (key_dim, query_dim))
        else:  # concat
            self.kernel = add("kernel", (query_dim + key_dim, units))
            self.vector = add("attention_v", (units,))

    @staticmethod
    def _weight(w, like):
        return ops.cast(w, score_dtype(like.dtype))

    def project_keys(self, key):
        """Per-source work: keys `[B, Tv, Dk]` (or a window `[B, Tq, W, Dk]`) to what
        `__call__` scores against, in float32 (float64 for float64 keys)."""
        key = to_score_dtype(key)
        if self.kind == "additive":
            return project(key, self._weight(self.key_kernel, key))
        if self.kind == "dot":
            return key
        if self.kind == "general":
            return project(key, self._weight(self.kernel, key))
        return project(key, self._weight(self.kernel, key)[self.query_dim :])

    def __call__(self, query, keys, vector=None, bias=None, raw_keys=False):
        """Scores of `query [B, Tq, Dq]` against projected keys, in float32 (float64).

        `vector` replaces `v` and `bias` is added inside the tanh (additive
        and concat only; Bahdanau's weight normalisation uses them).
        `raw_keys=True`: `keys` are not projected yet (see the class doc).
        """
        query = to_score_dtype(query)
        keys = to_score_dtype(keys)
        if self.kind == "general" and raw_keys:
            kernel = self._weight(self.kernel, query)
            return dot_score(ops.einsum("bqd,kd->bqk", query, kernel), keys)
        if raw_keys:
            keys = self.project_keys(keys)
        if self.kind in ("dot", "general"):
            return dot_score(query, keys)
        if self.kind == "additive":
            q = project(query, self._weight(self.query_kernel, query))
        else:
            q = project(query, self._weight(self.kernel, query)[: self.query_dim])
        vector = self.vector if vector is None else vector
        if bias is not None:
            bias = self._weight(bias, query)
        return additive_score(q, keys, self._weight(vector, query), bias=bias)
