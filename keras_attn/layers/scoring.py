"""What the attention layers share: score functions, masked softmax, windows.

Everything here is written with `keras.ops` only, so it runs on every Keras
backend. Shapes use `B` batch, `Tq` query steps, `Tv` source positions,
`W` window width (`2D + 1`), `U` score units.

Keys handed to a score function are either "full" (`[B, Tv, U]`, one row per
source position) or "windowed" (`[B, Tq, W, U]`, the window of each query,
gathered with `gather_rows`). The score functions accept both, so global and
local attention share one implementation of every formula.
"""

from keras import ops

# Added to the scores of masked positions before the softmax (in float32).
MASK_FILL = -1e9
# Scores are clipped to this magnitude (in float32) so that an overflowed
# half-precision score (+-inf) can never turn the softmax into NaN.
SCORE_LIMIT = 1e30


def to_bool_mask(mask):
    """`mask` as a bool tensor, or None."""
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    if mask.dtype == "bool":
        return mask
    return ops.not_equal(mask, ops.zeros((), dtype=mask.dtype))


def masked_softmax(scores, mask=None, axis=-1, clip=True):
    """Softmax over the positions where `mask` is True; 0 elsewhere.

    A row with no True position gets all-zero weights (never NaN, never a
    uniform distribution). The softmax runs in float32 (float64 for float64
    scores) whatever the compute dtype and the result is cast back to the dtype
    of `scores`. With `clip`, scores are first clipped to +-`SCORE_LIMIT` so
    that overflowing ones cannot make a NaN; `clip=False` skips that pass over
    the scores (MultiHeadAttention does, for float32 scores, for speed).
    A single position gets weight 1 (0 where masked) without a softmax, and so
    without Keras' warning about a softmax over an axis of size 1, which a
    one-position memory or a first decoding step would raise.
    """
    dtype = scores.dtype
    mask = to_bool_mask(mask)
    if scores.shape[axis] == 1:
        ones = ops.ones_like(scores)
        return ones if mask is None else ops.where(mask, ones, ops.zeros_like(ones))
    s = scores if dtype == "float64" else ops.cast(scores, "float32")
    if clip:
        s = ops.clip(s, -SCORE_LIMIT, SCORE_LIMIT)
    if mask is None:
        return ops.cast(ops.softmax(s, axis=axis), dtype)
    w = ops.softmax(ops.where(mask, s, MASK_FILL), axis=axis)
    return ops.cast(ops.where(mask, w, ops.zeros((), w.dtype)), dtype)


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
    """One score function of API.md, its weights created on the owning layer.

    - `"additive"`: `v . tanh(W_q q + W_k k)`; `W_q [Dq, U]`, `W_k [Dk, U]`, `v [U]`.
    - `"dot"`: `q . k` (needs `Dq == Dk`); no weights.
    - `"general"`: `q . (k W)`; `W [Dk, Dq]`.
    - `"concat"`: `v . tanh([q; k] W)`; `W [Dq + Dk, U]`, `v [U]`. Computed as
      `v . tanh(q W[:Dq] + k W[Dq:])`, which is the same sum.

    `U` is `units`, defaulting to `Dq`. Keys are projected by `project_keys`
    once per source; `__call__` then scores queries against projected keys,
    full (`[B, Tv, .]`) or windowed (`[B, Tq, W, .]`).
    """

    def __init__(self, kind, units=None):
        if kind not in SCORES:
            raise ValueError(
                f"`score` must be one of {', '.join(repr(s) for s in SCORES)}. Received: score={kind!r}"
            )
        if units is not None and (isinstance(units, bool) or not isinstance(units, int) or units < 1):
            raise ValueError(f"`units` must be a positive integer or None. Received: units={units!r}")
        self.kind = kind
        self.units = units
        self.query_dim = None

    def build(self, layer, query_dim, key_dim):
        self.query_dim = query_dim
        units = self.units or query_dim
        add = layer.add_weight
        if self.kind == "additive":
            self.query_kernel = add(name="query_kernel", shape=(query_dim, units), initializer="glorot_uniform")
            self.key_kernel = add(name="key_kernel", shape=(key_dim, units), initializer="glorot_uniform")
            self.vector = add(name="attention_v", shape=(units,), initializer="glorot_uniform")
        elif self.kind == "dot":
            if query_dim != key_dim:
                raise ValueError(
                    "The 'dot' score needs the query and key dimensions to be equal. "
                    f"Received: query dim={query_dim}, key dim={key_dim}"
                )
        elif self.kind == "general":
            self.kernel = add(name="kernel", shape=(key_dim, query_dim), initializer="glorot_uniform")
        else:  # concat
            self.kernel = add(
                name="kernel", shape=(query_dim + key_dim, units), initializer="glorot_uniform"
            )
            self.vector = add(name="attention_v", shape=(units,), initializer="glorot_uniform")

    def project_keys(self, key):
        """Per-source work: `[B, Tv, Dk]` keys to what `__call__` scores against."""
        if self.kind == "additive":
            return project(key, self.key_kernel)
        if self.kind == "dot":
            return key
        if self.kind == "general":
            return project(key, self.kernel)
        return project(key, self.kernel[self.query_dim :])

    def __call__(self, query, keys, vector=None, bias=None):
        """Scores of `query [B, Tq, Dq]` against projected keys.

        `vector` replaces `v` and `bias` is added inside the tanh (additive
        and concat only; Bahdanau's weight normalisation uses them).
        """
        if self.kind in ("dot", "general"):
            return dot_score(query, keys)
        if self.kind == "additive":
            q = project(query, self.query_kernel)
        else:
            q = project(query, self.kernel[: self.query_dim])
        return additive_score(q, keys, self.vector if vector is None else vector, bias=bias)
