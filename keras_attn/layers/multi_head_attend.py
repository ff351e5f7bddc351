"""The attention products of `MultiHeadAttention`, one function per layout.

- `head_major`: whole sequences, `queries [B, N, Tq, H]` against keys/values
  `[B, G, Tk, H]` (batched matmuls; on TensorFlow with the gradient written out,
  `attend_written_gradient`);
- `rows`: one query per example against a cache `[B, S, G, H]` (a decoding
  step: multiply-and-sum in the cache's layout, no transposes);
- `rows_shared`: several query rows per example against a precomputed cache in its
  layout (the hypotheses of a beam search reading one cross-attention cache per example);
- the backend's fused kernel: `multi_head_fused`.

`N = G * R`: with grouped-query attention (`G < N`) query head `n` reads
key/value head `n // R`, as `keras.layers.GroupQueryAttention` does after
repeating its keys; here nothing is repeated, the query heads of a group are
stacked instead. Scores and the softmax are computed in float32 whatever the
compute dtype (a half-precision score overflows at 65504); the weights are
cast back to the compute dtype for the product with the values.
See docs/multi_head.md.
"""

import keras
from keras import ops

from keras_attn.layers import scoring


def _float32(x):
    return x if x.dtype in ("float32", "float64") else ops.cast(x, "float32")


def _xla_compiled():
    """Whether TensorFlow is tracing a function that XLA compiles (jit_compile=True)."""
    if keras.backend.backend() != "tensorflow":
        return False
    from keras_attn.layers import rng

    return rng.in_xla()


def zero_masked_keys(x, key_visible, position_axis):
    """`x` with the positions where `key_visible [B|1, Tk]` is False set to 0, so that
    whatever padding holds (NaN, inf) cannot reach an output or a gradient."""
    if key_visible is None:
        return x
    shape = [ops.shape(key_visible)[0]] + [1] * (len(x.shape) - 1)
    shape[position_axis] = ops.shape(key_visible)[1]
    return ops.where(ops.reshape(key_visible, shape), x, ops.zeros((), x.dtype))


def written_gradient():
    """Whether `head_major` uses `attend_written_gradient` where it can (on TensorFlow,
    where it was measured faster: benchmarks/mha.py; JAX differentiates `products`)."""
    return keras.backend.backend() == "tensorflow"


def head_major(queries, keys, values, visible, dropout, weights_wanted=True):
    """`queries [B, N, Tq, H]` (already scaled), `keys [B, G, Tk, H]`, `values
    [B, G, Tk, Hv]`, `visible` broadcastable to `[B, N, Tq, Tk]` (or None) ->
    context `[B, N, Tq, Hv]`, weights `[B, N, Tq, Tk]` (before dropout).

    Without dropout, in float32 / float64, and when the weights are not wanted (None is
    returned for them, so no gradient can flow through them), the gradient is
    `attend_written_gradient`'s where `written_gradient()`."""
    same = {keras.backend.standardize_dtype(x.dtype) for x in (queries, keys, values)}
    if (
        dropout is None
        and not weights_wanted
        and written_gradient()
        and len(same) == 1
        and same <= {"float32", "float64"}
    ):
        return attend_written_gradient(queries, keys, values, visible), None
    return products(queries, keys, values, visible, dropout)


def _grouped(x, groups):
    """`[B, N, T, h]` -> `[B, G, R * T, h]`, a free reshape (N = G * R)."""
    if x.shape[1] == groups:
        return x
    return ops.reshape(x, (ops.shape(x)[0], groups, -1, ops.shape(x)[-1]))


def products(queries, keys, values, visible, dropout):
    """`head_major`'s forward pass, differentiated by the backend."""
    dtype = queries.dtype
    batch, num, length = ops.shape(queries)[0], queries.shape[1], ops.shape(queries)[2]
    groups = keys.shape[1]
    # [B, N, Tq, H] -> [B, G, R * Tq, H]: query head n reads key/value head n // R.
    q = _grouped(_float32(queries), groups)
    scores = ops.einsum("bgqh,bgkh->bgqk", q, _float32(keys))
    if groups != num:
        scores = ops.reshape(scores, (batch, num, length, ops.shape(scores)[-1]))
    weights = ops.cast(scoring.masked_softmax(scores, visible, clip=False), dtype)
    dropped = weights if dropout is None else dropout(weights)
    context = ops.einsum("bgqk,bgkh->bgqh", _grouped(dropped, groups), values)
    if groups != num:
        context = ops.reshape(context, (batch, num, length, values.shape[-1]))
    return context, weights


def attend_written_gradient(queries, keys, values, visible):
    """`products`' context (no dropout; all of one float dtype) with its gradient written
    out from the softmax weights `P` (kept from the forward pass) and the context `C`:

        dV = P^T dC,  dS = P * (dC V^T - rowsum(dC * C)),  dQ = dS K,  dK = dS^T Q

    (`rowsum(dC * C)` equals the softmax gradient's `rowsum(dP * P)` at a quarter of the
    work for `Tk = 4 H`). Autodiff of the softmax costs two more passes over the
    `[B, N, Tq, Tk]` weights (a product and a sum) and a transpose of the keys' gradient.
    Masked weights are exactly 0, so masked scores get a zero gradient, as with autodiff
    (the keys and values at masked positions are zeroed before, by `zero_masked_keys`).
    Checked against autodiff of `products` in tests/layers/test_multi_head_gradients.py."""
    num, groups = queries.shape[1], keys.shape[1]

    @ops.custom_gradient
    def attend(q, k, v):
        context, weights = products(q, k, v, visible, None)

        def grad(*args, upstream=None):
            d = args[0] if upstream is None else upstream
            p, dc, c = (_grouped(t, groups) for t in (weights, d, context))
            qg = _grouped(q, groups)
            # P^T dC and dS^T Q as matmuls of a swapped operand: TensorFlow folds the swap
            # into the batched matmul (no copy), which beats its einsum kernel here.
            dv = ops.matmul(ops.swapaxes(p, -1, -2), dc)
            dp = ops.einsum("bgqh,bgkh->bgqk", dc, v)
            ds = p * (dp - ops.sum(dc * c, axis=-1, keepdims=True))
            dq = ops.einsum("bgqk,bgkh->bgqh", ds, k)
            dk = ops.matmul(ops.swapaxes(ds, -1, -2), qg)
            if groups != num:
                dq = ops.reshape(dq, ops.shape(q))
            return dq, dk, dv

        return context, grad

    return attend(queries, keys, values)


def rows(queries, keys, values, visible, dropout):
    """One query per example in the cache layout: `queries [B, 1, N, H]`, `keys
    [B, S, N, H]`, `values [B, S, N, Hv]`, `visible` `[B|1, S, N|1]` (or None) ->
    context `[B, 1, N, Hv]` and the weights `[B, S, N]` (before dropout).

    Multiply-and-sum over the cache and the softmax over the key axis where it is: a
    decoding step's attention is a few element-wise passes, no transposes of the cache.
    (Measured best at the decoding benchmark's sizes; at long contexts `rows_grouped`'s
    matmuls may be faster, see benchmarks/gqa.py.)"""
    dtype = queries.dtype
    product = _float32(queries) * _float32(keys)  # [B, S, N, H]
    if _xla_compiled():
        # XLA:CPU compiles a sum over the minor axis into a scalar loop per output; the same
        # sum as a matmul with a ones vector is faster there (benchmarks/served_xla.py)
        size = product.shape[-1]
        summed = ops.matmul(ops.reshape(product, (-1, size)), ops.ones((size, 1), product.dtype))
        scores = ops.reshape(summed, ops.shape(product)[:-1])
    else:
        scores = ops.sum(product, axis=-1)  # [B, S, N]
    # scoring.masked_softmax writes the softmax out (exp, sum), so axis 1 costs no
    # transposes (TensorFlow's softmax kernel works on the last axis only).
    weights = ops.cast(scoring.masked_softmax(scores, visible, axis=1, clip=False), dtype)
    dropped = weights if dropout is None else dropout(weights)
    context = ops.sum(ops.expand_dims(dropped, -1) * values, axis=1)  # [B, N, Hv]
    return ops.expand_dims(context, 1), weights


def rows_grouped(queries, keys, values, visible, dropout):
    """`rows` with `G < N` key/value heads: `keys [B, S, G, H]`, `values [B, S, G, Hv]`,
    `visible` broadcastable to `[B, N, 1, S]` -> context `[B, 1, N, Hv]`, weights
    `[B, N, 1, S]`.

    The `R = N / G` query heads of a group form a `[R, H]` matrix, so both products are
    batched matmuls over `[B, G]` reading the (G-head, R times smaller) cache once; it is
    moved to `[B, G, S, H]` first (free for G = 1). Multiply-and-sum would broadcast the
    cache over `R`, costing as much as full heads."""
    dtype = queries.dtype
    batch, num, size = ops.shape(queries)[0], queries.shape[2], queries.shape[-1]
    groups = keys.shape[2]

    def by_group(x):  # [B, S, G, h] -> [B, G, S, h]
        if groups == 1:
            return ops.reshape(x, (ops.shape(x)[0], 1, ops.shape(x)[1], x.shape[-1]))
        return ops.transpose(x, (0, 2, 1, 3))

    q = ops.reshape(_float32(queries), (batch, groups, num // groups, size))
    scores = ops.einsum("bgrh,bgsh->bgrs", q, _float32(by_group(keys)))
    scores = ops.reshape(scores, (batch, num, 1, ops.shape(scores)[-1]))
    weights = ops.cast(scoring.masked_softmax(scores, visible, clip=False), dtype)
    dropped = weights if dropout is None else dropout(weights)
    dropped = ops.reshape(dropped, (batch, groups, num // groups, ops.shape(dropped)[-1]))
    context = ops.einsum("bgrs,bgsh->bgrh", dropped, by_group(values))
    return ops.reshape(context, (batch, 1, num, values.shape[-1])), weights


# `rows_shared` on TensorFlow without XLA: from this many multiply-adds per product (`T B S N H`,
# the size of a broadcast product) the einsums beat multiply-and-sum, whose kernels cost less
# per call but read the cache once per query row (`benchmarks/mha.py` times both on a CPU).
SHARED_MIN_WORK = 1 << 15


def rows_shared(queries, keys, values, visible, dropout, weights_wanted=True):
    """Several query rows per example against a cache in its layout: `queries [B, T, N, H]`
    (already scaled), `keys [B, S, G, H]`, `values [B, S, G, Hv]`, `visible` broadcastable to
    `[B, N, T, S]` (or None) -> context `[B, T, N, Hv]`, weights `[B, N, T, S]` (before
    dropout; None unless `weights_wanted`).

    The rows of an example share its cache (the K hypotheses of a beam search attending one
    cross-attention cache per example). Two ways, the same numbers: einsums over the cache as
    it is stored (`shared_products`: the cache read once per example, no transpose written
    out; always under XLA and on JAX), or multiply-and-sum as `rows` does (`_shared_sums`:
    fewer, cheaper kernels, for small products on TensorFlow without XLA). Where the size is
    known only at run time (a served signature), TensorFlow picks with a `tf.cond`."""
    args = (queries, keys, values, visible, dropout, weights_wanted)
    if keras.backend.backend() != "tensorflow" or _xla_compiled():
        return shared_products(*args)
    dims = (queries.shape[0], queries.shape[1], keys.shape[1])
    if all(d is not None for d in dims):
        work = dims[0] * dims[1] * dims[2] * queries.shape[2] * queries.shape[3]
        return (shared_products if work >= SHARED_MIN_WORK else _shared_sums)(*args)
    import tensorflow as tf

    work = tf.size(queries, out_type="int64") * tf.cast(tf.shape(keys)[1], "int64")
    return tf.cond(
        work >= SHARED_MIN_WORK, lambda: shared_products(*args), lambda: _shared_sums(*args)
    )


def shared_products(queries, keys, values, visible, dropout, weights_wanted):
    """`rows_shared` by einsums (with `G < N`, the `R = N / G` query heads of a group
    stacked, as in `rows_grouped`)."""
    dtype = queries.dtype
    batch, length = ops.shape(queries)[0], ops.shape(queries)[1]
    num, size, groups = queries.shape[2], queries.shape[-1], keys.shape[2]
    q = _float32(queries)
    if groups == num:
        scores = ops.einsum("btnh,bsnh->bnts", q, _float32(keys))
    else:
        q = ops.reshape(q, (batch, length, groups, num // groups, size))
        scores = ops.einsum("btgrh,bsgh->bgrts", q, _float32(keys))
        scores = ops.reshape(scores, (batch, num, length, ops.shape(scores)[-1]))
    weights = ops.cast(scoring.masked_softmax(scores, visible, clip=False), dtype)
    dropped = weights if dropout is None else dropout(weights)
    if groups == num:
        context = ops.einsum("bnts,bsnh->btnh", dropped, values)
    else:
        dropped = ops.reshape(dropped, (batch, groups, num // groups, length, -1))
        context = ops.einsum("bgrts,bsgh->btgrh", dropped, values)
        context = ops.reshape(context, (batch, length, num, values.shape[-1]))
    return context, weights if weights_wanted else None


def _shared_sums(queries, keys, values, visible, dropout, weights_wanted):
    """`rows_shared` by multiply-and-sum over `[B, T, S, N, H]` products (a group's key and
    value head repeated for its `N / G` query heads: TensorFlow's broadcasting kernels stop at
    five axes), the softmax over the key axis where it is."""
    dtype = queries.dtype
    num, groups = queries.shape[2], keys.shape[2]
    if groups != num:  # head n reads group n // (N / G), as the reshapes of the other paths
        keys = ops.repeat(keys, num // groups, axis=2)
        values = ops.repeat(values, num // groups, axis=2)
    q = ops.expand_dims(_float32(queries), 2)  # [B, T, 1, N, H]
    k = ops.expand_dims(_float32(keys), 1)  # [B, 1, S, N, H]
    scores = ops.sum(q * k, axis=-1)  # [B, T, S, N]
    if visible is not None:  # [B|1, N|1, T|1, S] -> [B|1, T|1, S, N|1]
        visible = ops.transpose(visible, (0, 2, 3, 1))
    weights = ops.cast(scoring.masked_softmax(scores, visible, axis=2, clip=False), dtype)
    dropped = weights if dropout is None else dropout(weights)
    v = ops.expand_dims(values, 1)  # [B, 1, S, N, Hv]
    context = ops.sum(ops.expand_dims(dropped, -1) * v, axis=2)  # [B, T, N, Hv]
    return context, ops.transpose(weights, (0, 3, 1, 2)) if weights_wanted else None
