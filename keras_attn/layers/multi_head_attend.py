"""The attention products of `MultiHeadAttention`, one function per layout.

- `head_major`: whole sequences, `queries [B, N, Tq, H]` against keys/values
  `[B, G, Tk, H]` (batched matmuls; on TensorFlow with the gradient written out,
  `attend_written_gradient`);
- `rows`: one query per example against a cache `[B, S, G, H]` (a decoding
  step: multiply-and-sum in the cache's layout, no transposes);
- `rows_shared`: several query rows per example against a precomputed cache in its
  layout (the hypotheses of a beam search reading one cross-attention cache per example);
- `fused`: the backend's fused kernel (`jax.nn.dot_product_attention`, cuDNN's
  flash attention on a GPU; `keras.ops.dot_product_attention` on TensorFlow) in its
  layout `[B, T, N, H]`, handed the mask's structure (`KernelMask`).

`N = G * R`: with grouped-query attention (`G < N`) query head `n` reads
key/value head `n // R`, as `keras.layers.GroupQueryAttention` does after
repeating its keys; here nothing is repeated, the query heads of a group are
stacked instead. Scores and the softmax are computed in float32 whatever the
compute dtype (a half-precision score overflows at 65504); the weights are
cast back to the compute dtype for the product with the values.
See docs/multi_head.md.
"""

import dataclasses

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
    it is stored (`_shared_products`: the cache read once per example, no transpose written
    out; always under XLA and on JAX), or multiply-and-sum as `rows` does (`_shared_sums`:
    fewer, cheaper kernels, for small products on TensorFlow without XLA). Where the size is
    known only at run time (a served signature), TensorFlow picks with a `tf.cond`."""
    args = (queries, keys, values, visible, dropout, weights_wanted)
    if keras.backend.backend() != "tensorflow" or _xla_compiled():
        return _shared_products(*args)
    dims = (queries.shape[0], queries.shape[1], keys.shape[1])
    if all(d is not None for d in dims):
        work = dims[0] * dims[1] * dims[2] * queries.shape[2] * queries.shape[3]
        return (_shared_products if work >= SHARED_MIN_WORK else _shared_sums)(*args)
    import tensorflow as tf

    work = tf.size(queries, out_type="int64") * tf.cast(tf.shape(keys)[1], "int64")
    return tf.cond(
        work >= SHARED_MIN_WORK, lambda: _shared_products(*args), lambda: _shared_sums(*args)
    )


def _shared_products(queries, keys, values, visible, dropout, weights_wanted):
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


@dataclasses.dataclass
class KernelMask:
    """What a query may see, in the terms the fused kernel takes (`fused`).

    `causal`: key `j` visible to query `i` iff `j <= i` (positions from 0 on both sides);
    `window`: `(left, right)`, key `j` visible iff `i - left <= j <= i + right`;
    `key_visible [B, S]` / `query_visible [B, T]`: padding masks (handed to the kernel as
    sequence lengths when they are prefixes, see `fused`); `dense`: any other mask, bool
    broadcastable to `[B, N, T, S]` (an arbitrary `attention_mask`, a cache's positions)."""

    causal: bool = False
    window: tuple = None
    key_visible: object = None
    query_visible: object = None
    dense: object = None

    def padded(self):
        return self.key_visible is not None or self.query_visible is not None

    def visible(self, length, num_keys):
        """The whole mask, bool broadcastable to `[B, N, T, S]` (None: every key)."""
        from keras_attn.layers import masks

        visible = self.dense
        if self.causal or self.window is not None:
            q = ops.reshape(ops.arange(length, dtype="int32"), (-1, 1))
            k = ops.reshape(ops.arange(num_keys, dtype="int32"), (1, -1))
            by_position = None
            if self.causal:
                by_position = k <= q
            if self.window is not None:
                left, right = self.window
                by_position = masks.logical_and(
                    by_position, ops.logical_and(k >= q - left, k <= q + right)
                )
            visible = masks.logical_and(visible, by_position[None, None])
        if self.key_visible is not None:
            kv = scoring.to_bool_mask(self.key_visible)
            visible = masks.logical_and(visible, kv[:, None, None, :])
        if self.query_visible is not None:
            qv = scoring.to_bool_mask(self.query_visible)
            visible = masks.logical_and(visible, qv[:, None, :, None])
        return visible


def fused_by_default():
    """Whether `flash_attention=None` runs the fused kernel: on JAX with an accelerator
    (cuDNN's flash attention on a GPU, the backend's kernels on a TPU), whatever the dtype.
    On a CPU, XLA's implementation of `jax.nn.dot_product_attention` is slower than our
    products, forward and backward, in float32 and in bfloat16 alike (benchmarks/gpu.py
    --small prints the ratio), and TensorFlow's `keras.ops.dot_product_attention` is a
    composition of ops slower than ours on its CPU kernels (benchmarks/mha.py): there the
    reference products run. `keras.config.disable_flash_attention()` turns it off."""
    if keras.config.is_flash_attention_enabled() is False:
        return False
    return keras.backend.backend() == "jax" and _platform() != "cpu"


def _platform():
    """JAX's default device kind: "cpu", "gpu" or "tpu"."""
    import jax

    return jax.devices()[0].platform


def _prefix_lengths(mask):
    """`(lengths int32 [B], is_prefix bool scalar)` of a padding mask `[B, L]`: how many
    positions each row keeps, and whether every row keeps exactly its first ones."""
    mask = scoring.to_bool_mask(mask)
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
    prefix = ops.arange(ops.shape(mask)[1], dtype="int32")[None, :] < lengths[:, None]
    return lengths, ops.all(ops.equal(mask, prefix))


def _live_rows(structure, length, num_keys, kv_lengths):
    """`[B|1, T]` bool: the query rows that see some key under `structure` without a dense
    mask (row `i` sees keys from `max(0, i - left)` on, and there are `kv_lengths` of them)
    and are not padding; None where every row does."""
    from keras_attn.layers import masks

    live = None
    if kv_lengths is not None or structure.window is not None:
        first = ops.zeros((length,), "int32")  # row i's first key
        if structure.window is not None:
            first = ops.maximum(ops.arange(length, dtype="int32") - structure.window[0], 0)
        if kv_lengths is not None:
            live = first[None, :] < kv_lengths[:, None]
        else:
            live = (first < num_keys)[None, :]
    if structure.query_visible is not None:
        live = masks.logical_and(live, scoring.to_bool_mask(structure.query_visible))
    return live


def _seen_rows(visible):
    """`[B|1, T, N|1]` bool: whether query row `t` of head `n` sees some key under
    `visible` (`[B|1, N|1, T, S]`); None for None."""
    if visible is None:
        return None
    return ops.transpose(ops.any(visible, axis=-1), (0, 2, 1))


def _zero_rows(out, live):
    """`out [B, T, N, H]` with the rows where `live` (`[B|1, T]`, or per head `[B|1, T,
    N|1]`) is False set to 0."""
    if live is None:
        return out
    live = live[:, :, None, None] if len(live.shape) == 2 else live[..., None]
    return ops.where(live, out, ops.zeros((), out.dtype))


def _jax_kernel(queries, keys, values, mask, structure, q_lengths, kv_lengths):
    """`jax.nn.dot_product_attention` handed the structure: cuDNN's kernel on a GPU where it
    takes the call (half precision), XLA's otherwise."""
    import jax

    kwargs = dict(
        mask=mask,
        scale=1.0,
        is_causal=structure.causal,
        query_seq_lengths=q_lengths,
        key_value_seq_lengths=kv_lengths,
        local_window_size=structure.window,
    )
    half = keras.backend.standardize_dtype(queries.dtype) in ("bfloat16", "float16")
    gpu = _platform() == "gpu"
    if half and gpu:
        try:
            return jax.nn.dot_product_attention(
                queries, keys, values, implementation="cudnn", **kwargs
            )
        except Exception:  # a shape or option cuDNN refuses: XLA's implementation
            pass
    groups = queries.shape[2] // keys.shape[2]
    if gpu and groups > 1:
        # XLA's implementation computes grouped heads as one product over `[B, T, G, N/G, H]`
        # queries, slower on a GPU than the same products over repeated key/value heads
        # (benchmarks/gpu.py, grouped-query attention in float32)
        keys, values = (ops.repeat(x, groups, axis=2) for x in (keys, values))
    return jax.nn.dot_product_attention(queries, keys, values, **kwargs)


def fused(queries, keys, values, structure):
    """The attention through the backend's fused kernel, in its layout: scaled `queries
    [B, T, N, H]`, `keys [B, S, G, H]`, `values [B, S, G, Hv]` (grouped heads as they are,
    never repeated), `structure` a `KernelMask` -> context `[B, T, N, Hv]` (no weights, no
    dropout).

    On JAX, `jax.nn.dot_product_attention` gets `is_causal`, `local_window_size` and the
    padding as `query_seq_lengths` / `key_value_seq_lengths`; a dense mask only for
    `structure.dense`. Without window, every padding mask is made sequence lengths by moving
    each row's kept queries and keys to the front (`_compacted`: no branch on the mask's
    values) where there is no causal order, or where one mask pads queries and keys alike
    (self-attention under a Keras mask). Otherwise (a window; causal order with the keys'
    padding alone, as in a Transformer decoder), a padding mask is a sequence length when it
    keeps a prefix of the positions (right padding, the usual case); one that does not (left
    padding, holes) is found at run time and takes the reference products instead (a `cond`:
    the kernel never reads a dense padding mask). TensorFlow's `keras.ops.dot_product_attention` has no
    sequence lengths or windows: it gets `is_causal` and the rest as one mask.

    As on every path, a query that sees no key gets a zero context (the kernels' masked
    softmax would spread it uniformly), and the keys and values at masked positions must
    already be zero (`zero_masked_keys`), so that what padding holds reaches nothing."""
    length, num_keys = ops.shape(queries)[1], ops.shape(keys)[1]
    if keras.backend.backend() != "jax":
        groups = queries.shape[2] // keys.shape[2]
        if groups > 1:
            # TensorFlow's op takes grouped heads only in newer Keras (by this same repeat) and
            # never broadcasts a single one: the heads are repeated here, on every version.
            keys = ops.repeat(keys, groups, axis=2)
            values = ops.repeat(values, groups, axis=2)
        mask = dataclasses.replace(structure, causal=False).visible(length, num_keys)
        out = ops.dot_product_attention(
            queries, keys, values, mask=mask, scale=1.0, is_causal=structure.causal
        )
        if mask is None:
            return out
        return _zero_rows(out, _seen_rows(structure.visible(length, num_keys)))
    if structure.dense is not None:
        visible = structure.visible(length, num_keys)
        out = _jax_kernel(queries, keys, values, visible, KernelMask(), None, None)
        return _zero_rows(out, _seen_rows(visible))
    if structure.window is None and structure.padded():
        if not structure.causal or _one_padding(structure, length, num_keys):
            return _compacted(queries, keys, values, structure)
    q_lengths = kv_lengths = None
    prefix = []
    if structure.query_visible is not None:
        q_lengths, ok = _prefix_lengths(structure.query_visible)
        prefix.append(ok)
    if structure.key_visible is not None:
        kv_lengths, ok = _prefix_lengths(structure.key_visible)
        prefix.append(ok)

    def kernel():
        out = _jax_kernel(queries, keys, values, None, structure, q_lengths, kv_lengths)
        return _zero_rows(out, _live_rows(structure, length, num_keys, kv_lengths))

    if not prefix:
        return kernel()

    def reference():
        visible = structure.visible(length, num_keys)
        return _shared_products(queries, keys, values, visible, None, False)[0]

    import jax

    is_prefix = prefix[0] if len(prefix) == 1 else ops.logical_and(*prefix)
    # Differentiated, a `cond` keeps the residuals of both branches (zeros for the one not
    # taken): the reference products' `[B, N, T, S]` weights would be written and kept on
    # every step of the kernel's case. Recomputed in the backward pass instead, the branch
    # keeps only its inputs, which the kernel's branch keeps too.
    return ops.cond(is_prefix, kernel, jax.checkpoint(reference))


def _compaction(mask):
    """`(lengths [B], perm [B, L], inverse [B, L])` of a padding mask `[B, L]`: `perm` puts
    each row's kept positions first, in their order, then the others (`x[perm]`), `inverse`
    undoes it; for a prefix, both are the identity."""
    mask = scoring.to_bool_mask(mask)
    kept = ops.cast(mask, "int32")
    lengths = ops.sum(kept, axis=1)
    # where position i goes: its rank among the kept ones, or after them among the others
    inverse = ops.where(
        mask, ops.cumsum(kept, axis=1) - 1, lengths[:, None] + ops.cumsum(1 - kept, axis=1) - 1
    )
    rows = ops.arange(ops.shape(mask)[0], dtype="int32")[:, None]
    positions = ops.broadcast_to(ops.arange(ops.shape(mask)[1], dtype="int32")[None, :], mask.shape)
    perm = ops.zeros_like(inverse).at[rows, inverse].set(positions)
    return lengths, perm, inverse


def _permuted(x, perm, inverse):
    """`x [B, L, ...]` with its rows reordered, `x[b, perm[b, i]]`; the gradient goes back by
    `inverse` (a gather both ways, no scatter: `perm` is a permutation)."""
    import jax

    def take(x, index):
        return ops.take_along_axis(x, ops.reshape(index, index.shape + (1,) * (x.ndim - 2)), 1)

    @jax.custom_vjp
    def permute(x, perm, inverse):
        return take(x, perm)

    def forward(x, perm, inverse):
        return take(x, perm), inverse

    def backward(inverse, g):
        return take(g, inverse), None, None

    permute.defvjp(forward, backward)
    return permute(x, perm, inverse)


def _one_padding(structure, length, num_keys):
    """Whether the queries and the keys are the same positions under one padding mask
    (`structure.query_visible is structure.key_visible`, as many queries as keys): then
    moving the kept positions of both to the front keeps their order on both sides, and
    causal order among them is causal order of the moved rows."""
    same = structure.query_visible is not None and structure.query_visible is structure.key_visible
    return same and isinstance(length, int) and length == num_keys


def _compacted(queries, keys, values, structure):
    """`fused` for padding without window (JAX), without causal order or with one padding
    mask for queries and keys (`_one_padding`): each row's kept queries and keys moved to the
    front (`_compaction`), so that any padding mask, a prefix or not, is sequence lengths for
    the kernel, with no branch on the mask's values (a `cond` on a device value makes XLA's
    GPU runtime wait for the device before it goes on). Without causal order the keys' order
    does not matter and each query row is its own; with it, one mask moves queries and keys
    alike, and key `j` precedes query `i` after the move exactly when it did before. The
    context rows go back to their places."""
    length, num_keys = ops.shape(queries)[1], ops.shape(keys)[1]
    q_lengths = kv_lengths = None
    q_order = None
    if structure.query_visible is not None:
        q_lengths, perm, inverse = _compaction(structure.query_visible)
        queries = _permuted(queries, perm, inverse)
        q_order = (inverse, perm)
        if structure.key_visible is structure.query_visible:  # one mask: the same moves
            kv_lengths = q_lengths
            keys, values = (_permuted(x, perm, inverse) for x in (keys, values))
    if structure.key_visible is not None and kv_lengths is None:
        kv_lengths, perm, inverse = _compaction(structure.key_visible)
        keys, values = (_permuted(x, perm, inverse) for x in (keys, values))
    out = _jax_kernel(queries, keys, values, None, structure, q_lengths, kv_lengths)
    if q_order is not None:
        out = _permuted(out, *q_order)
    return _zero_rows(out, _live_rows(structure, length, num_keys, kv_lengths))


def fused_head_major(queries, keys, values, visible):
    """`fused` for head-major operands (`queries [B, N, T, H]`, `keys` / `values [B, G, S,
    H]`, `visible` broadcastable to `[B, N, T, S]`, or None), context head-major: the folded
    axes of inputs of rank > 3 and `_compute_attention`'s default (a dense mask)."""
    to_rows = (0, 2, 1, 3)
    q, k, v = (ops.transpose(x, to_rows) for x in (queries, keys, values))
    out = fused(q, k, v, KernelMask(dense=visible))
    return ops.transpose(out, to_rows)
