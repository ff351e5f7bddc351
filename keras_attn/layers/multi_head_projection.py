"""How `MultiHeadAttention` projects its inputs and writes its key/value cache.

The variables are Keras' `EinsumDense` kernels `[D, heads, size]` (and biases
`[heads, size]`); these helpers use them directly in the layouts the
attention wants (head-major `[B, N, T, H]` for whole sequences, `[B, 1, N, H]`
for one decoding step), with the softmax scale folded into the query kernel.
A projection whose kernel is quantized, LoRA-adapted or activity-regularized
is called as the Keras layer instead (its own arithmetic, its own losses).
See docs/multi_head.md.
"""

import dataclasses

import keras
from keras import ops

from keras_attn.layers import masks


def proj_equation(free_dims, bound_dims, output_dims):
    """An EinsumDense equation contracting `bound_dims` input axes into `output_dims`
    kernel axes, keeping the `free_dims` leading axes: `(equation, bias_axes)`."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    free = letters[:free_dims]
    bound = letters[free_dims : free_dims + bound_dims]
    out = letters[free_dims + bound_dims : free_dims + bound_dims + output_dims]
    return f"{free}{bound},{bound}{out}->{free}{out}", out


def project(dense, x):
    """`dense(x)` without handing `x`'s Keras mask to the projection (the attention
    applies the masks itself; an EinsumDense would only warn that it drops them)."""
    with masks.keras_masks_hidden(x):
        return dense(x)


def check_input(dense, x):
    expected = dense.kernel.shape[0]
    if len(x.shape) != 3 or x.shape[-1] != expected:
        raise ValueError(
            f"`{dense.name}` must have shape [batch, length, {expected}], as when the layer "
            f"was built. Received: {dense.name}.shape={tuple(x.shape)}"
        )


def plain(dense):
    """Whether we may use `dense`'s float kernel directly (same numbers, same losses)."""
    return (
        getattr(dense, "quantization_mode", None) is None
        and not getattr(dense, "lora_enabled", False)
        and dense.activity_regularizer is None
    )


def kernel_and_bias(dense, dtype, scale=None):
    """A plain `dense`'s kernel `[D, N, H]` and bias `[N, H]` (or None) in `dtype`, both
    times `scale` if given: scaling the weights costs less than scaling the output."""
    kernel = ops.cast(dense.kernel, dtype)
    bias = None if dense.bias is None else ops.cast(dense.bias, dtype)
    if scale is not None:
        scale = ops.cast(scale, dtype)
        kernel = kernel * scale
        bias = None if bias is None else bias * scale
    return kernel, bias


def _activate(dense, y):
    activation = getattr(dense, "activation", None)
    return y if activation is None else activation(y)


def _own_way(dense, x, scale=None):
    """`dense(x) * scale` by the layer's own arithmetic: `[B, T, N, H]`."""
    y = project(dense, x)
    return y if scale is None else y * ops.cast(scale, y.dtype)


def heads(dense, x, dtype, scale=None):
    """`x [B, T, D]` projected by `dense` straight into head-major `[B, N, T, H]`,
    times `scale` if given (and through `dense`'s activation, e.g. the gate's sigmoid).

    Head-major projections make both attention products plain batched matmuls over
    `[B, N]`, with no transposes of the `[B, N, Tq, Tk]`-sized operands."""
    check_input(dense, x)
    if not plain(dense):
        return ops.transpose(_own_way(dense, x, scale), (0, 2, 1, 3))
    kernel, bias = kernel_and_bias(dense, dtype, scale)
    y = ops.einsum("abc,cde->adbe", ops.cast(x, dtype), kernel)
    if bias is not None:
        y = y + ops.expand_dims(bias, 1)  # [N, 1, H]
    return _activate(dense, y)


def rows(dense, x, dtype, scale=None):
    """`x [B, 1, D]` (one decoding step) projected to `[B, 1, N, H]` with one 2-D matmul
    whose bias add TensorFlow fuses into it (an einsum costs several ops more, which a
    step pays in every layer); also fine for `[B, T, D]`. `scale` multiplies the
    output (one multiply of `B x N x H` numbers; scaling the `[D, N, H]` kernel and the
    bias instead, as `heads` does for long queries, would be two ops per step)."""
    check_input(dense, x)
    if not plain(dense):
        return _own_way(dense, x, scale)
    kernel, bias = kernel_and_bias(dense, dtype)
    features, num, size = kernel.shape
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    y = ops.matmul(
        ops.reshape(ops.cast(x, dtype), (-1, features)), ops.reshape(kernel, (features, -1))
    )
    if bias is not None:
        y = y + ops.reshape(bias, (-1,))
    y = _activate(dense, ops.reshape(y, (batch, length, num, size)))
    return y if scale is None else y * ops.cast(scale, y.dtype)


# One head's matmul (`[T, D] x [D, H]`) needs this many multiply-adds for `batched_project`
# to beat `fused_heads` on TensorFlow (benchmarks/mha.py times both; RESULTS.md has the figures).
BATCHED_MIN_WORK = 1 << 20


def batched_heads(length, features, size):
    """Whether self-attention's head-major projections of `[B, length, features]` into heads
    of `size` run as `batched_project` (on TensorFlow, for large enough heads) rather than
    as one 2-D matmul and a transpose (`fused_heads`, the reference, and JAX's path: XLA
    fuses the transpose itself)."""
    return (
        keras.backend.backend() == "tensorflow"
        and length is not None
        and length * features * size >= BATCHED_MIN_WORK
    )


def heads_of(denses, scales, x, dtype):
    """Head-major projections `[B, N_i, T, H_i]` of one input `x [B, T, D]` by several
    plain denses (self-attention's query, key, value and gate), each times its scale:
    `batched_project` where `batched_heads` says so, else `fused_heads`."""
    size = min(dense.kernel.shape[-1] for dense in denses)
    if not batched_heads(x.shape[1], x.shape[-1], size):
        return fused_heads(denses, scales, x, dtype)
    for dense in denses:
        check_input(dense, x)
    weights = [kernel_and_bias(d, dtype, s) for d, s in zip(denses, scales)]
    kernels = [k for k, _ in weights]
    biases = [b for _, b in weights if b is not None]
    parts = batched_project(ops.cast(x, dtype), kernels, biases)
    return [_activate(d, p) for d, p in zip(denses, parts)]


def batched_project(x, kernels, biases):
    """`x [B, T, D]` times each kernel `[D, N_i, H_i]` (plus its bias `[N_i, H_i]`, if
    `biases` is not empty), straight into head-major `[B, N_i, T, H_i]`: a batched matmul
    `[B, 1, T, D] x [1, N_i, D, H_i]`, with no transpose of the output (`fused_heads`'
    one 2-D matmul needs a transpose of all of it to head-major).

    The gradient is written out: autodiff of a broadcast matmul would compute the input's
    gradient per head (`[B, N_i, T, D]`, then summed over the heads); here the head-major
    gradients go back to `[B*T, N_i H_i]` (one transpose each, which a 2-D matmul's
    backward pass needs anyway) for one 2-D matmul each for the input's and the kernel's
    gradients, and a matrix-vector product for the bias's (its rows' sum)."""
    count = len(kernels)
    features = kernels[0].shape[0]

    @ops.custom_gradient
    def project(x, *weights):
        kernels, biases = weights[:count], weights[count:]
        rows = ops.expand_dims(x, 1)  # [B, 1, T, D]
        outs = []
        for i, kernel in enumerate(kernels):
            y = ops.matmul(rows, ops.transpose(kernel, (1, 0, 2)))  # [B, N, T, H]
            if biases:
                y = y + ops.expand_dims(biases[i], 1)
            outs.append(y)

        def grad(*args, upstream=None):
            if upstream is None:  # TensorFlow: one argument per output; JAX: their list
                upstream = args[0] if len(args) == 1 else args
            flat_x = ops.reshape(x, (-1, features))
            ones = ops.ones((1, ops.shape(flat_x)[0]), x.dtype)  # for column_sums
            dx, dkernels, dbiases = None, [], []
            for d, kernel in zip(upstream, kernels):
                _, num, size = kernel.shape
                if d is None:
                    dkernels.append(ops.zeros_like(kernel))
                    dbiases.append(ops.zeros((num, size), kernel.dtype))
                    continue
                flat = ops.reshape(ops.transpose(d, (0, 2, 1, 3)), (-1, num * size))
                part = ops.matmul(flat, ops.transpose(ops.reshape(kernel, (features, -1))))
                dx = part if dx is None else dx + part
                dkernel = ops.matmul(ops.transpose(flat_x), flat)
                dkernels.append(ops.reshape(dkernel, (features, num, size)))
                dbiases.append(ops.reshape(column_sums(flat, ones), (num, size)))
            dx = ops.zeros_like(x) if dx is None else ops.reshape(dx, ops.shape(x))
            return (dx, *dkernels, *dbiases[: len(biases)])

        return outs, grad

    return list(project(x, *kernels, *biases))


def column_sums(x, ones):
    """The sums over the rows of a matrix `x [M, K]`, as `[1, M] x [M, K]` with `ones` a
    row of M ones: on TensorFlow's CPU kernels a matrix-vector product reads `x` faster than
    a reduction over the first axis (benchmarks/mha.py). In
    float32 and float64 only; half precision sums with `ops.sum` (it accumulates wider)."""
    if keras.backend.standardize_dtype(x.dtype) in ("float32", "float64"):
        return ops.matmul(ones, x)
    return ops.sum(x, axis=0)


def _one_matmul(denses, scales, x, dtype):
    """`x [B, T, D]` times the denses' kernels side by side (each times its scale), plus their
    biases: `([B*T, sum N_i H_i], [(N_i, H_i)], B, T)`, the one matmul `fused_heads` and
    `rows_of` split."""
    for dense in denses:
        check_input(dense, x)
    weights = [kernel_and_bias(d, dtype, s) for d, s in zip(denses, scales)]
    shapes = [tuple(k.shape[1:]) for k, _ in weights]  # (N_i, H_i)
    features = weights[0][0].shape[0]
    kernel = ops.concatenate(
        [ops.reshape(k, (features, n * h)) for (k, _), (n, h) in zip(weights, shapes)], axis=1
    )
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    y = ops.matmul(ops.reshape(ops.cast(x, dtype), (-1, features)), kernel)
    if weights[0][1] is not None:
        y = y + ops.concatenate([ops.reshape(b, (-1,)) for _, b in weights], axis=0)
    return y, shapes, batch, length


def fused_heads(denses, scales, x, dtype):
    """Head-major projections of one input `x [B, T, D]` by several plain denses (self-
    attention's query, key, value and gate) from one `[B*T, D] x [D, sum N_i H_i]` matmul:
    one large matmul instead of several, and in the backward pass one matmul for the
    input's gradient. The same numbers as `heads` for each (up to float rounding)."""
    y, shapes, batch, length = _one_matmul(denses, scales, x, dtype)
    if len(set(shapes)) == 1:
        # One transpose to [P, B, N, T, H]; splitting its first axis shares the buffer.
        num, size = shapes[0]
        y = ops.reshape(y, (batch, length, len(denses), num, size))
        y = ops.transpose(y, (2, 0, 3, 1, 4))
        parts = [ops.squeeze(p, 0) for p in ops.split(y, len(denses), axis=0)]
    else:
        sizes = [n * h for n, h in shapes]
        cuts = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
        parts = [
            ops.transpose(ops.reshape(p, (batch, length, n, h)), (0, 2, 1, 3))
            for p, (n, h) in zip(ops.split(y, cuts, axis=1), shapes)
        ]
    return [_activate(d, p) for d, p in zip(denses, parts)]


def rows_of(denses, scales, x, dtype):
    """The projections of one input `x [B, T, D]` by several plain denses (self-attention's
    query, key, value and gate), each times its scale, in the fused kernel's layout
    `[B, T, N_i, H_i]`: one `[B*T, D] x [D, sum N_i H_i]` matmul, its output split and
    reshaped (no transposes)."""
    y, shapes, batch, length = _one_matmul(denses, scales, x, dtype)
    sizes = [n * h for n, h in shapes]
    cuts = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
    parts = [
        ops.reshape(p, (batch, length, n, h))
        for p, (n, h) in zip(ops.split(y, cuts, axis=1), shapes)
    ]
    return [_activate(d, p) for d, p in zip(denses, parts)]


def output(dense, context, dtype, head_major=True):
    """The output projection of the context, head-major `[B, N, Tq, Hv]` or (with
    `head_major=False`) `[B, Tq, N, Hv]`, as one 2-D matmul whose bias add fuses."""
    if head_major:
        context = ops.transpose(context, (0, 2, 1, 3))
    if not plain(dense):
        return project(dense, context)
    kernel, bias = kernel_and_bias(dense, dtype)  # [N, Hv, *out], [*out]
    out_shape = tuple(kernel.shape[2:])
    batch, length = ops.shape(context)[0], ops.shape(context)[1]
    inner = kernel.shape[0] * kernel.shape[1]
    y = ops.matmul(ops.reshape(context, (-1, inner)), ops.reshape(kernel, (inner, -1)))
    if bias is not None:
        y = y + ops.reshape(bias, (-1,))
    return ops.reshape(y, (batch, length) + out_shape)


def write_rows(caches, new_rows, index):
    """`cache[:, index : index + T] = rows` for each `cache [B, L, ...]` of `caches` and
    `rows [B, T, ...]` of `new_rows` (the key and the value cache): a tuple of the caches.

    Not `ops.slice_update`, whose TF kernel (XlaDynamicUpdateSlice) TensorFlow
    Serving does not have: one row (a decoding step) is a scatter of B slices,
    which TensorFlow may do in place, the scatter's indices built once for all the
    caches; several rows a gather and a select.
    """
    length = ops.shape(caches[0])[1]
    if new_rows[0].shape[1] == 1:
        batch = ops.shape(caches[0])[0]
        at = ops.stack([ops.arange(batch, dtype="int32"), ops.ones((batch,), "int32") * index], 1)
        return tuple(
            ops.scatter_update(cache, at, ops.squeeze(rows, 1))
            for cache, rows in zip(caches, new_rows)
        )
    count = ops.shape(new_rows[0])[1]
    rel = ops.arange(length, dtype="int32") - index
    inside = ops.logical_and(rel >= 0, rel < count)
    taken = ops.clip(rel, 0, count - 1)
    out = []
    for cache, rows in zip(caches, new_rows):
        visible = ops.reshape(inside, (1, -1) + (1,) * (len(cache.shape) - 2))
        out.append(ops.where(visible, ops.take(rows, taken, axis=1), cache))
    return tuple(out)


@dataclasses.dataclass
class Projected:
    """What the layer's `_project` / `_update_cache` hand on to the attention.

    `query`: the input (its padding rows zeroed); `keys` / `values`: head-major `[B, G, S, H]`,
    or `[B, S, G, H]` in `rows_layout` (one query row against a cache); `num_keys`: `S`;
    `value_mask` / `key_mask`: over the keys; `fused`: the fused kernel attends (in
    `rows_layout`, every query row); `queries` / `gate`: when projected with the
    keys (else None); `query_offset`: the first query's position; `key_positions`: the
    positions a ring cache's rows hold (None: key `j` is at `j`); `visible_limit`: key `j`
    is visible iff `j < visible_limit` (None: no limit); `cache`: the updated cache."""

    query: object
    keys: object
    values: object
    num_keys: object
    value_mask: object
    key_mask: object
    queries: object = None
    gate: object = None
    query_offset: object = 0
    key_positions: object = None
    visible_limit: object = None
    cache: object = None
    rows_layout: bool = False
    fused: bool = False
