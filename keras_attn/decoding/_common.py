"""Helpers shared by beam search, greedy search and sampling (private).

Arguments such as `beam_size` or `max_length` may be Python numbers or
scalar tensors. A value known when the graph is built (a Python number, an
eager tensor, a constant) is checked right away and raises `ValueError`; a
value known only at run time gets a `tf.debugging` assertion that every
later op depends on, so a bad value fails with `InvalidArgumentError`
whose message names the argument (also inside an exported SavedModel).
"""

import numbers

import numpy as np
import tensorflow as tf

from keras_attn import _checks

# A large negative *finite* score: used instead of -inf for impossible
# candidates so no arithmetic on it can produce NaN. Real scores are
# assumed to stay above NEG / 2.
NEG = -1e9


def static_value(value):
    """The value of `value` if known at graph-build time, else None."""
    if tf.is_tensor(value):
        return tf.get_static_value(value)
    return value


def check_int(name, value, minimum):
    """An integer argument `>= minimum`: a Python int when static, else an int32 tensor."""
    static = static_value(value)
    if static is not None:
        return _checks.check_int(name, static, minimum)
    value = tf.convert_to_tensor(value)
    if not value.dtype.is_integer:
        raise ValueError(f"`{name}` must be an integer tensor. Received: {name}={value!r}")
    if value.shape.rank not in (None, 0):
        raise ValueError(f"`{name}` must be a scalar. Received: {name}={value!r}")
    value = tf.cast(tf.reshape(value, []), tf.int32)
    check = tf.debugging.assert_greater_equal(
        value,
        tf.constant(minimum, tf.int32),
        message=f"`{name}` must be an integer >= {minimum}. Received an invalid {name}",
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def check_float(name, value, positive=False, minimum=None, maximum=None):
    """A real scalar argument: a Python float when static, else a float32 tensor.

    `minimum` / `maximum` (inclusive) give the documented range, if any; `positive`
    without `minimum` asks for > 0.
    """
    low, low_open = (
        (minimum, False) if minimum is not None else ((0, True) if positive else (None, False))
    )
    static = static_value(value)
    if static is not None:
        return _checks.check_number(name, static, low=low, high=maximum, low_open=low_open)
    value = tf.convert_to_tensor(value)
    if value.dtype == tf.string or value.dtype == tf.bool:
        raise ValueError(f"`{name}` must be a real number. Received: {name}={value!r}")
    value = tf.cast(tf.reshape(value, []), tf.float32)
    message = (
        f"`{name}` must be {_checks._bound_text(low, maximum, low_open, False)}. "
        f"Received an invalid {name}"
    )
    checks = [tf.debugging.assert_all_finite(value, f"`{name}` must be finite")]
    if low is not None:
        compare = tf.debugging.assert_greater if low_open else tf.debugging.assert_greater_equal
        checks.append(compare(value, float(low), message=message))
    if maximum is not None:
        checks.append(tf.debugging.assert_less_equal(value, float(maximum), message=message))
    with tf.control_dependencies(checks):
        return tf.identity(value)


def dim(x, axis):
    """Static size of `x` along `axis` when known, else a scalar tensor."""
    size = x.shape[axis]
    return int(size) if size is not None else tf.shape(x)[axis]


def mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return tf.cast(a, tf.int32) * tf.cast(b, tf.int32)


def as_tensor_nest(state):
    return tf.nest.map_structure(tf.convert_to_tensor, state)


def tile_nest(state, multiple):
    """Repeats every leaf `[B, ...] -> [B * multiple, ...]` (row `b * multiple + k`)."""
    if isinstance(multiple, int) and multiple == 1:
        return state
    return tf.nest.map_structure(lambda x: tf.repeat(x, multiple, axis=0), state)


def keep_shapes(new, old):
    """Gives each tensor of `new` the static shape of its counterpart in `old`.

    A `while_loop` needs loop variables whose static shape does not change;
    ops such as gather or reshape with a computed shape lose static sizes.
    """

    def fix(n, o):
        if not o.shape.is_compatible_with(n.shape):
            raise ValueError(
                "`step_fn` must return the state with the same shapes it receives "
                "(preallocate caches to max length): a state tensor changed shape between "
                f"decoding steps. Received: state shape {n.shape}, expected {o.shape}"
            )
        if n.dtype != o.dtype:
            raise ValueError(
                "`step_fn` must return the state with the dtypes it receives: a state tensor "
                f"changed dtype between decoding steps. Received: state dtype {n.dtype.name}, "
                f"expected {o.dtype.name}"
            )
        if not tf.executing_eagerly():
            n.set_shape(o.shape)
        return n

    tf.nest.assert_same_structure(new, old)
    return tf.nest.map_structure(fix, new, old)


def check_state_shapes(new, old):
    """After the first step: the state keeps the shapes of the (tiled) initial state."""

    def check(n, o):
        n, o = tf.convert_to_tensor(n), tf.convert_to_tensor(o)
        if not o.shape.is_compatible_with(n.shape):
            raise ValueError(
                "`step_fn` must return the state with the same shapes it receives "
                "(preallocate caches to max length). "
                f"Received: state shape {n.shape}, expected {o.shape}"
            )

    tf.nest.assert_same_structure(new, old)
    tf.nest.map_structure(check, new, old)
    return new


def check_end_token(end_token, vocab):
    """`end_token` must be a vocabulary id (`0 <= end_token < V`), or -1 for "never ends"."""
    static = static_value(end_token)
    static_vocab = vocab if isinstance(vocab, int) else None
    message = (
        "`end_token` must be an id of the vocabulary (0 <= end_token < V"
        + (f"={static_vocab}" if static_vocab is not None else "")
        + ") or -1 "
        "(no end token: every hypothesis runs to max_length)."
    )
    if static is not None:
        arr = np.asarray(static)
        if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"`end_token` must be an integer scalar. Received: end_token={static!r}"
            )
        value = int(arr)
        if value < -1 or (static_vocab is not None and value >= static_vocab):
            raise ValueError(f"{message} Received: end_token={value}")
        if static_vocab is not None:
            return end_token
    end_token = tf.cast(end_token, tf.int32)
    ok = tf.logical_and(end_token >= -1, end_token < tf.cast(vocab, tf.int32))
    check = tf.debugging.Assert(ok, [message + " Received: end_token=", end_token])
    with tf.control_dependencies([check]):
        return tf.identity(end_token)


def _check_rows(what, x, n_rows):
    """`x` must have `n_rows` rows (static check, else a run-time assertion)."""
    message = f"`step_fn` must return {what} with one row per hypothesis (N = batch * beam_size)."
    static_n = n_rows if isinstance(n_rows, int) else None
    if static_n is not None and x.shape[0] is not None:
        if x.shape[0] != static_n:
            raise ValueError(f"{message} Received: {what}.shape={x.shape}, N={static_n}")
        return x
    check = tf.debugging.assert_equal(
        tf.shape(x)[0], tf.cast(n_rows, tf.int32), message=f"{message} Received: {what} rows != N"
    )
    with tf.control_dependencies([check]):
        # A gather of N rows: the row count is then a run-time size, so shape inference
        # cannot fail at tracing before the assertion has a chance to run.
        return tf.gather(x, tf.range(tf.cast(n_rows, tf.int32)))


def step_outputs(outputs, n_rows):
    """Normalises what a step function returns: float32 logits and attention."""
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 3:
        raise ValueError(
            "`step_fn` must return a tuple `(logits, state, attention)` (attention may be "
            f"None). Received: {type(outputs).__name__} of length "
            f"{len(outputs) if isinstance(outputs, (tuple, list)) else 'n/a'}"
        )
    logits, state, attention = outputs
    logits = tf.convert_to_tensor(logits)
    if logits.shape.rank != 2:
        raise ValueError(
            f"`step_fn` must return logits of shape [N, V]. Received: logits.shape={logits.shape}"
        )
    logits = _check_rows("logits", logits, n_rows)
    logits = tf.cast(logits, tf.float32)
    if attention is not None:
        attention = tf.cast(tf.convert_to_tensor(attention), tf.float32)
        if attention.shape.rank != 2:
            raise ValueError(
                "`step_fn` must return attention of shape [N, S] or None. "
                f"Received: attention.shape={attention.shape}"
            )
        attention = _check_rows("attention", attention, n_rows)
    return logits, state, attention


def source_info(source_mask, attention, batch):
    """`(mask [B, S] bool or None, |X| [B] float32)` for the coverage and EOS penalties.

    |X| is the number of unmasked source positions: from `source_mask` when
    given, else the attention width S, else 0 (no source is known, so the
    EOS penalty is 0).
    """
    if source_mask is not None:
        mask = tf.cast(tf.convert_to_tensor(source_mask), tf.bool)
        if mask.shape.rank != 2:
            raise ValueError(
                f"`source_mask` must have shape [B, S]. Received: source_mask.shape={mask.shape}"
            )
        if attention is not None:
            s_mask, s_att = mask.shape[1], attention.shape[1]
            if s_mask is not None and s_att is not None and s_mask != s_att:
                raise ValueError(
                    "`source_mask` must have as many positions as the attention the step "
                    f"returns ({s_att}). Received: source_mask.shape={mask.shape}"
                )
        return mask, tf.reduce_sum(tf.cast(mask, tf.float32), axis=-1)
    if attention is not None:
        width = tf.cast(tf.shape(attention)[1], tf.float32)
        return None, tf.fill(tf.reshape(batch, [1]), width)
    return None, tf.zeros(tf.reshape(batch, [1]), tf.float32)


def write_column(buffer, t, values, axis):
    """`buffer` with index `t` along `axis` replaced by `values` (broadcast).

    A `where` over a one-hot column: static shapes, fine under XLA.
    """
    length = dim(buffer, axis)
    column = tf.equal(tf.range(length), t)
    shape = [1] * buffer.shape.rank
    shape[axis] = -1
    column = tf.reshape(column, shape)
    return tf.where(column, tf.cast(values, buffer.dtype), buffer)


# The documented ranges of the real-valued knobs (docs/decoding.md, "Ranges"): outside them
# the formulas overflow or stop meaning anything (e.g. lp = ((5 + |Y|) / 6) ** -1000 is inf).
RANGES = {
    "length_penalty": dict(minimum=0, maximum=10),
    "coverage_penalty": dict(minimum=0, maximum=10),
    "eos_penalty": dict(minimum=-10, maximum=10),
    "repetition_penalty": dict(minimum=0.01, maximum=100),
    "temperature": dict(minimum=0.01, maximum=100),
    "top_p": dict(positive=True, maximum=1),
}


def check_knob(name, value):
    """A real knob of `RANGES`, checked against its documented range."""
    return check_float(name, value, **RANGES[name])


def check_search_args(
    max_length, length_penalty, coverage_penalty, eos_penalty, start_tokens, end_token
):
    """The checks every search makes; returns the normalised arguments.

    `(max_length, alpha, beta, gamma, start_tokens int32 [B], end_token int32)`.
    """
    max_length = check_int("max_length", max_length, 1)
    alpha = check_knob("length_penalty", length_penalty)
    beta = check_knob("coverage_penalty", coverage_penalty)
    gamma = check_knob("eos_penalty", eos_penalty)
    start_tokens = tf.convert_to_tensor(start_tokens)
    if start_tokens.shape.rank != 1:
        raise ValueError(
            f"`start_tokens` must have shape [B]. Received: start_tokens.shape={start_tokens.shape}"
        )
    if not start_tokens.dtype.is_integer:
        raise ValueError(
            f"`start_tokens` must be integer ids. Received: start_tokens.dtype={start_tokens.dtype.name}"
        )
    start_tokens = tf.cast(start_tokens, tf.int32)
    end_token = tf.cast(tf.convert_to_tensor(end_token), tf.int32)
    return max_length, alpha, beta, gamma, start_tokens, end_token


def check_batch(name, x, batch, what="have"):
    """`x`'s first axis must be `batch` (the batch of `start_tokens`); static or run-time."""
    x = tf.convert_to_tensor(x)
    if x.shape.rank == 0:
        raise ValueError(
            f"`{name}` must {what} a batch axis first (B = the batch of `start_tokens`). "
            f"Received: a scalar"
        )
    static = batch if isinstance(batch, int) else None
    if static is not None and x.shape[0] is not None:
        if x.shape[0] != static:
            raise ValueError(
                f"`{name}` must {what} the batch size of `start_tokens` ({static}) first. "
                f"Received: {name} tensor of shape {tuple(x.shape)}"
            )
        return x
    check = tf.debugging.assert_equal(
        tf.shape(x)[0],
        tf.cast(batch, tf.int32),
        message=f"`{name}` must {what} the batch size of `start_tokens` first. Received a {name} "
        "tensor whose first axis differs",
    )
    with tf.control_dependencies([check]):
        return tf.identity(x)


def check_seed(seed):
    """`seed` as an int32 `[2]` tensor: an int, an int32 `[]` / `[2]` tensor, or None (fresh)."""
    if seed is None:
        return tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    if isinstance(seed, (bool, np.bool_)) or not (
        isinstance(seed, (numbers.Integral, np.integer))
        or (tf.is_tensor(seed) and seed.dtype.is_integer)
        or (isinstance(seed, (list, tuple, np.ndarray)) and np.asarray(seed).dtype.kind in "iu")
    ):
        raise ValueError(
            "`seed` must be an integer, an integer tensor of shape [] or [2], or None. "
            f"Received: seed={seed!r}"
        )
    if isinstance(seed, (numbers.Integral, np.integer)):
        return tf.constant([0, int(seed) % (2**31 - 1)], tf.int32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
    if seed.shape.rank == 0:
        seed = tf.stack([tf.zeros([], tf.int32), seed])
    if seed.shape.rank != 1 or seed.shape[0] not in (None, 2):
        raise ValueError(
            f"`seed` must be an integer tensor of shape [] or [2]. Received: seed.shape={seed.shape}"
        )
    return tf.reshape(seed, [2])
