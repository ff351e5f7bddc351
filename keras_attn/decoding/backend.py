"""What the decoding engine needs that `keras.ops` does not give, in one place.

The engine (engine.py, strategies.py, processors.py, penalties.py, constraints.py,
contract.py, shapes.py) is written once, with `keras.ops` and these helpers, and runs on
TensorFlow and on JAX. Each helper below has a TensorFlow branch and a branch for the other
backends; the reasons:

- `while_loop`: `tf.while_loop` on TensorFlow (exported signatures and XLA clusters unchanged,
  loop variables whose static shapes may be partly unknown), `keras.ops.while_loop` elsewhere.
- sizes (`dim`, `shape_of`, `full`, `zeros`, `reshape`, `broadcast_to`): TensorFlow traces
  with unknown sizes (a served batch is `[None]`), which `keras.ops` cannot build shapes from;
  JAX shapes are always static, so these are plain `keras.ops` there.
- `take`, `take_rows` (`tf.gather`, with `batch_dims=1`), `argmax`, `top_k`, `sort_desc`,
  `argsort_desc`, `reduce_max`, `reduce_min`, `exclusive_cumsum`: on TensorFlow the same op
  as the plain TensorFlow one, because `keras.ops` adds run-time ops on the decoding loop's hot path
  there (negative-index fixing in `take`, a `-0.0` fix in `argmax`); elsewhere `keras.ops`.
- `scatter_max`, `scatter_min` (a finished hypothesis's slot, the phrase tokens' needs):
  `keras.ops` has no scatter with a max / min combiner: `tf.tensor_scatter_nd_*` on
  TensorFlow, `jax.Array.at[...].max / .min` on JAX.
- `log_softmax`: on JAX written out as `jax.nn.log_softmax` computes it (the same ops, the
  same numbers) so that the NaN check can sum the shifted logits it reads anyway, per row,
  instead of writing and summing the `[N, V]` log-probs once more per step. TensorFlow keeps
  its one `LogSoftmax` kernel (and the check its sum).
- `segment_sum`: `tf.math.unsorted_segment_sum` on TensorFlow, `keras.ops.segment_sum`
  elsewhere (same numbers).
- random draws (`fold_in`, `categorical`, `fresh_seed`): `keras.random` takes no seed tensor
  that can change per step inside a compiled loop. TensorFlow keeps its stateless ops
  (`stateless_fold_in`, `stateless_categorical`; Gumbel-max under XLA); JAX uses
  `jax.random.fold_in` and `jax.random.categorical` on the same `[2]` seed, each row with its
  own key (the step's folded with the row), so a row's draws do not depend on the batch. The same seed gives
  the same samples on each backend; the two backends' samples differ (other generators).
- run-time checks (`run_time_check`, `static_value`, `is_concrete`): TensorFlow keeps its
  graph assertions (`tf.debugging.Assert`, an `InvalidArgumentError` also inside a
  SavedModel). JAX has no graph assertion: a value known when it is given (an eager array) is
  checked right away (`ValueError` with the same words); inside a search compiled by
  `compiled.py` a traced value's check is collected (`collect_checks`) as a flag the program
  returns, raised after the call as the same `ValueError`; under the caller's `jax.jit` a traced
  value cannot be checked and the search documents what it answers then (docs/decoding.md,
  "Backends").
- nests (`flatten`, `pack`, `map_structure`, `assert_same_structure`): `tf.nest` on
  TensorFlow (unchanged semantics for the models' states), `keras.tree` elsewhere.
- `set_static_shape`: TensorFlow graphs lose static sizes through gathers, which a
  `tf.while_loop` needs back; JAX keeps them (a no-op there).
- `do_not_convert`: AutoGraph's marker on TensorFlow; nothing elsewhere.

No TensorFlow import happens on JAX: every TensorFlow branch imports it inside the function,
after checking the backend.
"""

from __future__ import annotations

import contextlib
import functools
import random as _random

import keras
import numpy as np
from keras import ops


def is_tf() -> bool:
    """Whether Keras runs on TensorFlow."""
    return keras.backend.backend() == "tensorflow"


def _tf():
    import tensorflow as tf

    return tf


def do_not_convert(fn):
    """AutoGraph leaves `fn` alone on TensorFlow (tracing stays fast); a no-op elsewhere."""
    if is_tf():
        return _tf().autograph.experimental.do_not_convert(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------- tensors, values
def is_tensor(x) -> bool:
    """A backend tensor (TensorFlow tensor, JAX array or tracer), not a Python / NumPy value."""
    if is_tf():
        return _tf().is_tensor(x)
    return ops.is_tensor(x)


def convert(x, dtype=None):
    """`x` as a tensor of the backend (optionally cast)."""
    if is_tf():
        tf = _tf()
        x = tf.convert_to_tensor(x)
        return x if dtype is None else tf.cast(x, dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        # a host array: cast on the host and transferred, no program run (`jnp.asarray` runs a
        # small one, compiled once per shape)
        import jax
        import jax.numpy as jnp

        target = jax.dtypes.canonicalize_dtype(jnp.dtype(x.dtype if dtype is None else dtype))
        return jax.device_put(np.asarray(x).astype(target, copy=False))
    x = ops.convert_to_tensor(x)
    return x if dtype is None else ops.cast(x, dtype)


def is_concrete(x) -> bool:
    """Whether the value of `x` is known now (a Python / NumPy value, an eager tensor, a JAX
    array that is no tracer)."""
    if is_tf():
        return not is_tensor(x) or _tf().get_static_value(x) is not None
    if not ops.is_tensor(x):
        return True
    import jax

    return not isinstance(x, jax.core.Tracer)


def static_value(x):
    """The value of `x` (NumPy or Python) when known now, else None."""
    if is_tf():
        if not _tf().is_tensor(x):
            return x
        return _tf().get_static_value(x)
    if not ops.is_tensor(x):
        return x
    return np.asarray(x) if is_concrete(x) else None


def rank(x) -> int | None:
    shape = x.shape
    if is_tf():
        return shape.rank
    return len(shape)


def is_integer(x) -> bool:
    return "int" in keras.backend.standardize_dtype(x.dtype)


def dtype_name(x) -> str:
    return keras.backend.standardize_dtype(x.dtype)


def compatible(new_shape, old_shape) -> bool:
    """Whether two static shapes may be the same (unknown sizes match anything)."""
    if is_tf():
        return _tf().TensorShape(old_shape).is_compatible_with(new_shape)
    return tuple(new_shape) == tuple(old_shape)


def set_static_shape(x, shape):
    """TensorFlow graphs: gives `x` the static `shape` (lost through a gather); elsewhere a
    no-op (JAX shapes are static)."""
    if is_tf() and not _tf().executing_eagerly():
        x.set_shape(shape)
    return x


# ------------------------------------------------------------------------------------ sizes
def dim(x, axis):
    """Static size of `x` along `axis` when known, else a scalar tensor (TensorFlow only)."""
    size = x.shape[axis]
    if size is not None:
        return int(size)
    return _tf().shape(x)[axis]


def dynamic_shape(x):
    """The shape of `x` as a list of Python ints or scalar tensors."""
    return [dim(x, axis) for axis in range(len(x.shape))]


def shape_of(*dims):
    """A shape from sizes that may be Python ints or (TensorFlow) scalar tensors."""
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return tuple(int(d) for d in dims)
    tf = _tf()
    return tf.stack([tf.cast(d, tf.int32) for d in dims])


def full(shape, value, dtype):
    """`tf.fill` / `keras.ops.full` with a shape from `shape_of`."""
    if is_tf():
        tf = _tf()
        return tf.fill(shape, tf.cast(value, dtype))
    return ops.full(shape, ops.cast(value, dtype), dtype=dtype)


def zeros(shape, dtype):
    if is_tf():
        return _tf().zeros(shape, dtype)
    return ops.zeros(shape, dtype=dtype)


def ones(shape, dtype):
    if is_tf():
        return _tf().ones(shape, dtype)
    return ops.ones(shape, dtype=dtype)


def reshape(x, shape):
    if is_tf():
        return _tf().reshape(x, shape)
    return ops.reshape(x, shape)


def broadcast_to(x, shape):
    if is_tf():
        return _tf().broadcast_to(x, shape)
    return ops.broadcast_to(x, shape)


def shape_like(x):
    """The full shape of `x` (static tuple, or a TensorFlow shape tensor)."""
    return shape_of(*dynamic_shape(x))


def range_(n):
    """`[0, n)` int32."""
    if is_tf():
        tf = _tf()
        return tf.range(n) if isinstance(n, int) else tf.range(tf.cast(n, tf.int32))
    return ops.arange(n, dtype="int32")


# ------------------------------------------------------------------- gathers, sorts, scatters
def take(x, indices, axis=0):
    if is_tf():
        return _tf().gather(x, indices, axis=axis)
    return ops.take(x, indices, axis=axis)


def take_rows(x, indices):
    """`out[b, ...] = x[b, indices[b, ...]]` (`tf.gather(x, indices, batch_dims=1)`)."""
    if is_tf():
        return _tf().gather(x, indices, batch_dims=1)
    index_rank = len(indices.shape)
    extra = len(x.shape) - 2  # trailing axes of x past the gathered one
    idx = ops.reshape(indices, tuple(indices.shape) + (1,) * extra)
    idx = ops.broadcast_to(idx, tuple(indices.shape) + tuple(x.shape[2:]))
    if index_rank == 1:
        return ops.take_along_axis(x, idx[:, None], axis=1)[:, 0]
    flat = ops.reshape(idx, (idx.shape[0], -1) + tuple(x.shape[2:]))
    out = ops.take_along_axis(x, flat, axis=1)
    return ops.reshape(out, tuple(indices.shape) + tuple(x.shape[2:]))


def argmax(x, axis=-1):
    """int32 argmax (ties: the lowest index)."""
    if is_tf():
        tf = _tf()
        return tf.argmax(x, axis=axis, output_type=tf.int32)
    return ops.cast(ops.argmax(x, axis=axis), "int32")


def top_k(x, k, sorted=True):
    """`(values, int32 indices)` of the `k` largest along the last axis (ties: lowest index)."""
    if is_tf():
        return _tf().math.top_k(x, k=k, sorted=sorted)
    values, indices = ops.top_k(x, k, sorted=sorted)
    return values, ops.cast(indices, "int32")


def sort_desc(x):
    if is_tf():
        return _tf().sort(x, axis=-1, direction="DESCENDING")
    return ops.flip(ops.sort(x, axis=-1), axis=-1)


def argsort_desc(x):
    """Stable descending argsort along the last axis (equal values keep their order)."""
    if is_tf():
        return _tf().argsort(x, axis=-1, direction="DESCENDING", stable=True)
    # `keras.ops.argsort` is stable on JAX; negating an int or a score keeps ties in order
    return ops.cast(ops.argsort(-x, axis=-1), "int32")


def reduce_max(x, axis=None, keepdims=False):
    if is_tf():
        return _tf().reduce_max(x, axis=axis, keepdims=keepdims)
    return ops.max(x, axis=axis, keepdims=keepdims)


def reduce_min(x, axis=None, keepdims=False):
    if is_tf():
        return _tf().reduce_min(x, axis=axis, keepdims=keepdims)
    return ops.min(x, axis=axis, keepdims=keepdims)


def exclusive_cumsum(x):
    """Sum of the entries before each one along the last axis."""
    if is_tf():
        return _tf().cumsum(x, axis=-1, exclusive=True)
    inclusive = ops.cumsum(x, axis=-1)
    return ops.pad(inclusive[..., :-1], [[0, 0]] * (len(x.shape) - 1) + [[1, 0]])


def log_softmax(x, x_max=None):
    """`(log_softmax(x) over the last axis, probe)`; `probe` is `[..., 1]`, NaN in exactly the
    rows whose log-softmax holds a NaN (a NaN or `+inf` in the row, or a row of only `-inf`),
    0 elsewhere, or None where it is not at hand (TensorFlow: check the log-softmax itself).

    On JAX the ops of `jax.nn.log_softmax` (`shifted = x - max(x)`, `shifted - log(sum(exp(
    shifted)))`, the same numbers), with the row's maximum and its "holds NaN or `+inf`" flag
    taken by one reduction (a variadic `lax.reduce` over `x` and `~(x < inf)`): the probe
    costs no pass over `[N, V]` of its own, and does not rely on a maximum or an `exp`
    carrying a NaN (vectorised ones on a CPU need not).

    `x_max`: `[..., 1]`, each row's maximum where the caller has it already (the first of a
    row's `top_k`; a row holding a NaN may give any value: its probe is NaN): then no
    reduction takes the maximum, and the flag rides on the sum of the exponentials (a NaN in
    place of the exponential of a NaN or `+inf`: an add carries a NaN on). TensorFlow ignores
    it."""
    if is_tf():
        return _tf().nn.log_softmax(x, axis=-1), None
    import jax
    import jax.numpy as jnp

    x = ops.convert_to_tensor(x)
    frozen = jax.lax.stop_gradient(x)  # the maximum is a constant shift (as in jax.nn)
    axes = (x.ndim - 1,)
    if x_max is None:
        x_max, bad = jax.lax.reduce(
            (frozen, ~(frozen < np.inf)),
            (np.array(-np.inf, frozen.dtype), np.array(False)),
            lambda a, b: (jax.lax.max(a[0], b[0]), jnp.logical_or(a[1], b[1])),
            axes,
        )
        x_max, bad = x_max[..., None], bad[..., None]
        shifted = x - x_max
        norm = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))
    else:
        x_max = jax.lax.stop_gradient(ops.convert_to_tensor(x_max, x.dtype))
        shifted = x - x_max
        # a NaN or +inf puts a NaN into the sum, which an add always carries on
        total = jnp.sum(jnp.where(frozen < np.inf, jnp.exp(shifted), np.nan), -1, keepdims=True)
        norm, bad = jnp.log(total), jnp.isnan(total)
    probe = jnp.where(bad | (x_max == -np.inf), np.float32(np.nan), np.float32(0.0))
    return shifted - norm, probe


def scatter_indices(rows, cols):
    """Where `scatter_max` / `scatter_min` write: `x[rows[i], cols[i]]` (same shapes)."""
    if is_tf():
        return _tf().stack([rows, cols], axis=-1)
    return (rows, cols)


def _scatter(x, indices, values, combine):
    """`x[indices] = combine(x[indices], values)` for 2-D `x` (`indices`: `scatter_indices`)."""
    if is_tf():
        tf = _tf()
        fn = tf.tensor_scatter_nd_max if combine == "max" else tf.tensor_scatter_nd_min
        return fn(x, indices, values)
    if keras.backend.backend() == "jax":
        at = x.at[indices]
        return at.max(values) if combine == "max" else at.min(values)
    raise NotImplementedError(
        'The searches run on the TensorFlow and JAX backends (docs/decoding.md, "Backends"): '
        f"keras.ops has no scatter-{combine}. Received: backend={keras.backend.backend()!r}"
    )


def scatter_max(x, indices, values):
    return _scatter(x, indices, values, "max")


def scatter_min(x, indices, values):
    return _scatter(x, indices, values, "min")


def segment_sum(data, segment_ids, num_segments):
    if is_tf():
        return _tf().math.unsorted_segment_sum(data, segment_ids, num_segments)
    return ops.segment_sum(
        ops.reshape(data, (-1,)), ops.reshape(segment_ids, (-1,)), num_segments=num_segments
    )


# ------------------------------------------------------------------------------------ loops
def while_loop(cond, body, loop_vars, maximum_iterations):
    if is_tf():
        return _tf().while_loop(cond, body, loop_vars, maximum_iterations=maximum_iterations)
    return ops.while_loop(
        _in_loop(cond), _in_loop(body), loop_vars, maximum_iterations=maximum_iterations
    )


def _in_loop(fn):
    """`fn`, marked as traced inside the loop: a check there is no flag of the program (its
    values live in the loop; the engine carries what the loop must report)."""

    @functools.wraps(fn)
    def wrapper(*args):
        _COLLECTING.append(None)
        try:
            return fn(*args)
        finally:
            _COLLECTING.pop()

    return wrapper


# ------------------------------------------------------------------------------------ nests
def flatten(x):
    if is_tf():
        return _tf().nest.flatten(x)
    return keras.tree.flatten(x)


def pack(structure, leaves):
    if is_tf():
        return _tf().nest.pack_sequence_as(structure, leaves)
    return keras.tree.pack_sequence_as(structure, leaves)


def map_structure(fn, *structures):
    if is_tf():
        return _tf().nest.map_structure(fn, *structures)
    return keras.tree.map_structure(fn, *structures)


def assert_same_structure(a, b):
    if is_tf():
        return _tf().nest.assert_same_structure(a, b)
    return keras.tree.assert_same_structure(a, b)


# ----------------------------------------------------------------------------------- checks
def run_time_check(x, ok, message, *data):
    """`x`, after checking the boolean scalar `ok`.

    TensorFlow: a graph assertion (`InvalidArgumentError` with `message` when `ok` is False,
    also eagerly). JAX: `ValueError(message)` when `ok` is known now and False; under `jax.jit`
    (a traced `ok`) nothing can be checked and `x` comes back as it is."""
    if is_tf():
        tf = _tf()
        check = tf.debugging.Assert(ok, [message, *data])
        with tf.control_dependencies([check]):
            return tf.identity(x)
    value = static_value(ok)
    if value is not None:
        if not bool(np.all(value)):
            raise ValueError(check_message(message, data))
    elif _COLLECTING and _COLLECTING[-1] is not None:
        _COLLECTING[-1].append((ok, message, tuple(data)))
    return x


def check_message(message, data):
    """The words of a failed `run_time_check`: `message` and the values of `data` known now."""
    detail = " ".join(str(np.asarray(d).tolist()) for d in data if is_concrete(d))
    return f"{message} {detail}".rstrip()


_COLLECTING: list = []


@contextlib.contextmanager
def collect_checks():
    """JAX: inside, `run_time_check` on a traced value appends `(ok, message, data)` to the
    list this yields, for a compiled program to return its flags and its caller to raise the
    same `ValueError` after the call (`compiled.py`)."""
    found: list = []
    _COLLECTING.append(found)
    try:
        yield found
    finally:
        _COLLECTING.pop()


# ------------------------------------------------------------------------------ random draws
def fresh_seed():
    """A new random `[2]` int32 seed (`seed=None`). On JAX it is drawn in Python, so under
    `jax.jit` it is fixed when the function is traced: pass a seed to vary the draws."""
    if is_tf():
        tf = _tf()
        return tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    return convert(np.array([_random.randrange(2**31 - 1), _random.randrange(2**31 - 1)], np.int32))


def seed_tensor(seed):
    """A checked sampling seed as an int32 `[2]` tensor (see `_checks.seed_tensor`)."""
    from keras_attn import _checks

    if is_tf():
        return _checks.seed_tensor(seed)
    if seed is None:
        return fresh_seed()
    if ops.is_tensor(seed) and not isinstance(seed, np.ndarray):
        if not is_integer(seed):
            _checks._fail("seed", "an integer, an integer tensor of shape [] or [2], or None", seed)
        seed = ops.cast(seed, "int32")
        if len(seed.shape) == 0:
            seed = ops.stack([ops.zeros((), "int32"), seed])
        if tuple(seed.shape) != (2,):
            raise ValueError(
                "`seed` must be an integer tensor of shape [] or [2]. "
                f"Received: seed.shape={tuple(seed.shape)}"
            )
        return seed
    checked = _checks_plain_seed(seed)
    return convert(np.asarray(checked, np.int32))


def _checks_plain_seed(seed):
    """A Python / NumPy seed -> `[0, seed]` or the `[2]` pair, checked as on TensorFlow."""
    import numbers

    from keras_attn import _checks

    if isinstance(seed, bool) or not (
        isinstance(seed, (numbers.Integral, np.integer))
        or (isinstance(seed, (list, tuple, np.ndarray)) and np.asarray(seed).dtype.kind in "iu")
    ):
        _checks._fail("seed", "an integer, an integer tensor of shape [] or [2], or None", seed)
    if isinstance(seed, (numbers.Integral, np.integer)):
        return [0, int(seed) % (2**31 - 1)]
    arr = np.asarray(seed)
    if arr.ndim == 0:
        return [0, int(arr)]
    if arr.shape != (2,):
        raise ValueError(
            f"`seed` must be an integer tensor of shape [] or [2]. Received: seed.shape={arr.shape}"
        )
    return [int(v) for v in arr]


def fold_in(seed, step):
    """The seed of step `step`: TensorFlow's `stateless_fold_in`, JAX's `random.fold_in`."""
    if is_tf():
        return _tf().random.experimental.stateless_fold_in(seed, step)
    import jax

    key = ops.cast(seed, "uint32")
    return jax.random.fold_in(key, ops.cast(step, "uint32"))


def categorical(logits, seed):
    """`[N]` int32 draws from `softmax(logits)` with a step seed from `fold_in`."""
    if is_tf():
        tf = _tf()
        from keras_attn.layers import rng

        if rng.in_xla():
            # XLA:CPU compiles stateless_categorical's generator into slow code; Gumbel-max
            # over keras_attn's fused draws samples the same distribution:
            # argmax(logits + G), G = -log(-log(U)).
            uniform = rng.uniform(tf.shape(logits), minval=1e-20, maxval=1.0, seed=seed)
            gumbel = -tf.math.log(-tf.math.log(uniform))
            return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)
        return tf.random.stateless_categorical(logits, 1, seed, dtype=tf.int32)[:, 0]
    import jax

    # one key per row (the step's key folded with the row index): a row's draw does not depend
    # on how many rows there are, so padding a batch changes no real row's samples
    rows = jax.numpy.arange(logits.shape[0], dtype="uint32")
    keys = jax.vmap(lambda row: jax.random.fold_in(seed, row))(rows)
    draws = jax.vmap(lambda key, row: jax.random.categorical(key, row, axis=-1))(keys, logits)
    return ops.cast(draws, "int32")


# ------------------------------------------------- the package's argument checks, on any backend
# `keras_attn._checks` checks tensors with TensorFlow; on another backend every shape is static,
# so the same checks (same words) are plain Python on the shapes and on values known now.
def check_id_tensor(name, x, rank_, shape_text):
    """`x` as an int32 tensor of `rank_` (integer ids, e.g. `[B, P]` padded with -1)."""
    from keras_attn import _checks

    if is_tf():
        return _checks.check_id_tensor(name, x, rank_, shape_text)
    x = convert(x)
    if not is_integer(x):
        raise ValueError(
            f"`{name}` must be integer ids of shape {shape_text}. "
            f"Received: {name}.dtype={dtype_name(x)}"
        )
    if len(x.shape) != rank_:
        raise ValueError(
            f"`{name}` must have shape {shape_text}. Received: {name}.shape={tuple(x.shape)}"
        )
    return ops.cast(x, "int32")


def check_batch_axis(name, x, batch, what="have"):
    """`x` (a tensor) must have `batch` rows first (see `_checks.check_batch_axis`)."""
    from keras_attn import _checks

    if is_tf():
        return _checks.check_batch_axis(name, x, batch, what)
    x = convert(x)
    if len(x.shape) == 0:
        raise ValueError(
            f"`{name}` must {what} a batch axis first (B = the batch of `start_tokens`). "
            "Received: a scalar"
        )
    if x.shape[0] != batch:
        raise ValueError(
            f"`{name}` must {what} the batch size of `start_tokens` ({batch}) first. "
            f"Received: {name} tensor of shape {tuple(x.shape)}"
        )
    return x


def check_end_token(end_token, vocab):
    """`end_token` in `[-1, vocab)` (see `_checks.check_end_token`). On JAX a traced end token
    (under `jax.jit`) is not checked: one outside the vocabulary never ends a row."""
    from keras_attn import _checks

    if is_tf():
        return _checks.check_end_token(end_token, vocab)
    static = static_value(end_token)
    if static is None:
        return end_token
    arr = np.asarray(static)
    if arr.ndim != 0 or not _is_int(arr):
        raise ValueError(f"`end_token` must be an integer scalar. Received: end_token={static!r}")
    value = int(arr)
    if value < -1 or value >= vocab:
        raise ValueError(
            f"`end_token` must be an id of the vocabulary (0 <= end_token < V={vocab}) or -1 "
            f"(no end token: every hypothesis runs to max_length). Received: end_token={value}"
        )
    return end_token


def _is_int(value):
    return np.issubdtype(np.asarray(value).dtype, np.integer)
