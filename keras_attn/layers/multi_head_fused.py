"""The fused-kernel path of `MultiHeadAttention`: the backend's fused attention kernel
(`jax.nn.dot_product_attention`, cuDNN's flash attention on a GPU;
`keras.ops.dot_product_attention` on TensorFlow) in its layout `[B, T, N, H]`, handed the
mask's structure (`KernelMask`) rather than a dense mask where it can: causal order and the
sliding window as flags, padding as sequence lengths. `fused_by_default` says where
`flash_attention=None` takes it. See docs/multi_head.md, "`flash_attention`: the fused kernel".
"""

import dataclasses

import keras
from keras import ops

from keras_attn.layers import masks, scoring
from keras_attn.layers import multi_head_attend as attend


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
        return attend.shared_products(queries, keys, values, visible, None, False)[0]

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
