"""Argument checks shared by the whole package (private).

Every check raises a `ValueError` whose message names the argument and shows
what it received, in one form:

    `window` must be an integer >= 1. Received: window=0

and returns the value normalised (a Python `int`, `float` or `bool`), so a
constructor reads `self.window = check_int("window", window)`.

Booleans are never accepted where a number is expected (`True` is an `int`
in Python, but `dropout=True` is a mistake). NumPy scalars and 0-d arrays
are accepted where a Python number is (a value read back from a tensor).
The checks above the line in the middle of the file are plain Python; those below it
(`check_scalar_int`, `check_scalar_number`, `check_batch_axis`, `seed_tensor`,
`check_id_tensor`, `check_end_token`) also take tensors: a value known only at run time is
checked by a TensorFlow assertion with the same words (TensorFlow is imported only then).
"""

import math
import numbers

import numpy as np


def _plain(value):
    """`value` with NumPy scalars and 0-d arrays turned into Python numbers."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _fail(name, requirement, value):
    raise ValueError(f"`{name}` must be {requirement}. Received: {name}={value!r}")


def _is_bool(value):
    return isinstance(value, (bool, np.bool_))


def check_bool(name, value):
    """`True` or `False` (not 0/1, not None)."""
    value = _plain(value)
    if not isinstance(value, bool):
        _fail(name, "a bool (True or False)", value)
    return value


def _range_words(noun, low, high, low_open=False, high_open=False, unbounded=None):
    """`noun` within the bounds given, as words ("an integer >= 1", "a number in (0, 1]");
    `unbounded`: the words without bounds (default: `noun`)."""
    if low is not None and high is not None:
        return f"{noun} in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{noun} {'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{noun} {'<' if high_open else '<='} {high}"
    return unbounded or noun


def int_requirement(minimum=None, maximum=None):
    """The words for an integer in `[minimum, maximum]` (either bound may be None)."""
    return _range_words("an integer", minimum, maximum)


def check_int(name, value, minimum=1, maximum=None, allow_none=False):
    """An integer in `[minimum, maximum]`; either bound may be None (the default: a size, >= 1)."""
    value = _plain(value)
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral) and not _is_bool(value)
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        requirement = int_requirement(minimum, maximum)
        _fail(name, requirement + (" or None" if allow_none else ""), value)
    return int(value)


def check_positive_int(name, value, allow_none=False):
    """An integer >= 1 (a size, a count, a window)."""
    return check_int(name, value, minimum=1, allow_none=allow_none)


def check_seed(name, value):
    """An integer seed or None."""
    return check_int(name, value, minimum=None, allow_none=True)


def bound_text(low, high, low_open=False, high_open=False):
    """The words for a real number within the bounds ("a number in (0, 1]")."""
    low, high = (None if b is None else f"{b:g}" for b in (low, high))  # 10.0 -> "10"
    return _range_words("a number", low, high, low_open, high_open, "a finite number")


def check_number(
    name, value, low=None, high=None, low_open=False, high_open=False, allow_none=False, what=None
):
    """A finite real number within the bounds given (open or closed at each end); `what`
    replaces the requirement's words in the message (default: the bounds')."""
    value = _plain(value)
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not _is_bool(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        requirement = what or bound_text(low, high, low_open, high_open)
        _fail(name, requirement + (" or None" if allow_none else ""), value)
    return float(value)


def check_finite(name, value):
    """Any finite real number (a penalty, a weight that may be negative)."""
    return check_number(name, value)


def check_positive(name, value, allow_none=False):
    """A finite number > 0 (a scale, a standard deviation, an epsilon, a timeout)."""
    return check_number(name, value, low=0, low_open=True, allow_none=allow_none)


def check_non_negative(name, value):
    """A finite number >= 0 (a loss weight)."""
    return check_number(name, value, low=0)


def check_rate(name, value):
    """A rate in `[0, 1)` (dropout: 1 would drop everything)."""
    return check_number(name, value, low=0, high=1, high_open=True)


def check_probability(name, value):
    """A probability in `[0, 1]`."""
    return check_number(name, value, low=0, high=1)


def check_split_fractions(val_fraction, test_fraction, allow_zero=False):
    """The validation and test shares of a split: each in `(0, 1)` (`[0, 1)` with `allow_zero`:
    a split may be left empty), together below 1."""
    for arg, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        above_low = float(value) >= 0.0 if allow_zero else float(value) > 0.0
        if not (above_low and float(value) < 1.0):
            bounds = "[0, 1)" if allow_zero else "(0, 1)"
            raise ValueError(f"`{arg}` must be in {bounds}. Received: {arg}={value}")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"`val_fraction + test_fraction` must be < 1. Received: val_fraction={val_fraction}, "
            f"test_fraction={test_fraction}"
        )


def check_choice(name, value, choices):
    """One of `choices` (a tuple of allowed values)."""
    value = _plain(value)
    try:
        ok = not _is_bool(value) and any(type(value) is type(c) and value == c for c in choices)
    except (TypeError, ValueError):  # an array or another value that cannot be compared
        ok = False
    if not ok:
        _fail(name, "one of " + ", ".join(repr(c) for c in choices), value)
    return value


def check_float_tensor(name, x):
    """`x` must hold floating-point values (features, e.g. from an Embedding), not ids or flags.

    Anything without a `dtype` (a Python list, a Keras symbolic shape) passes unchanged.
    """
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return x
    import keras  # a tensor is about to be used anyway; keeps this module light

    dtype = keras.backend.standardize_dtype(dtype)
    if "float" not in dtype:
        raise ValueError(
            f"`{name}` must be a floating-point tensor (features, e.g. from an Embedding). "
            f"Received: {name}.dtype={dtype}"
        )
    return x


# ---------------------------------------------------------------------------------------------
# Arguments that may be tensors (the decoding searches, the served signatures).
#
# A value known when the graph is built (a Python number, an eager tensor, a constant) is
# checked right away by the plain checks above and comes back as a Python number; a value
# known only at run time comes back as a scalar tensor behind a `tf.debugging` assertion whose
# message names the argument, so a bad value fails with `InvalidArgumentError` (also inside an
# exported SavedModel). TensorFlow is imported only when a tensor is seen.


def is_tensor(value):
    """Whether `value` is a TensorFlow tensor (without importing TensorFlow for other values)."""
    if not type(value).__module__.startswith("tensorflow"):
        return False
    import tensorflow as tf

    return tf.is_tensor(value)


def static_value(value):
    """The value of `value` if known when the graph is built (a tensor's constant value), else
    None."""
    if is_tensor(value):
        import tensorflow as tf

        return tf.get_static_value(value)
    return value


def _run_time_checked(value, checks):
    import tensorflow as tf

    with tf.control_dependencies(checks):
        return tf.identity(value)


def check_scalar_int(name, value, minimum=None, maximum=None):
    """An integer in `[minimum, maximum]` given as a Python int or a scalar integer tensor:
    a Python `int` when known while tracing, else an int32 scalar tensor checked at run time."""
    static = static_value(value)
    if static is not None or not is_tensor(value):
        return check_int(name, static, minimum=minimum, maximum=maximum)
    import tensorflow as tf

    value = tf.convert_to_tensor(value)
    if not value.dtype.is_integer:
        _fail(name, "an integer tensor", value)
    if value.shape.rank not in (None, 0):
        _fail(name, "a scalar", value)
    value = tf.cast(tf.reshape(value, []), tf.int32)
    requirement = int_requirement(minimum, maximum)
    message = f"`{name}` must be {requirement}. Received an invalid {name}"
    checks = []
    if minimum is not None:
        checks.append(tf.debugging.assert_greater_equal(value, int(minimum), message=message))
    if maximum is not None:
        checks.append(tf.debugging.assert_less_equal(value, int(maximum), message=message))
    return _run_time_checked(value, checks)


def check_scalar_number(name, value, low=None, high=None, low_open=False, hint=None):
    """A finite real number within the bounds (closed, or open at `low`) given as a Python
    number or a scalar tensor: a Python `float` when known while tracing, else a float32 scalar
    tensor checked at run time. `hint` (optional) is added to the requirement in the message."""
    requirement = bound_text(low, high, low_open, False) + (f" ({hint})" if hint else "")
    static = static_value(value)
    if static is not None or not is_tensor(value):
        return check_number(name, static, low=low, high=high, low_open=low_open, what=requirement)
    import tensorflow as tf

    value = tf.convert_to_tensor(value)
    if value.dtype in (tf.string, tf.bool):
        _fail(name, "a real number", value)
    value = tf.cast(tf.reshape(value, []), tf.float32)
    message = f"`{name}` must be {requirement}. Received an invalid {name}"
    checks = [tf.debugging.assert_all_finite(value, f"`{name}` must be finite")]
    if low is not None:
        compare = tf.debugging.assert_greater if low_open else tf.debugging.assert_greater_equal
        checks.append(compare(value, float(low), message=message))
    if high is not None:
        checks.append(tf.debugging.assert_less_equal(value, float(high), message=message))
    return _run_time_checked(value, checks)


def check_batch_axis(name, x, batch, what="have"):
    """`x` (a tensor) must have `batch` rows first (the batch of the search's `start_tokens`);
    checked while tracing when both are known, else at run time. Returns `x` as a tensor."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    if x.shape.rank == 0:
        raise ValueError(
            f"`{name}` must {what} a batch axis first (B = the batch of `start_tokens`). "
            "Received: a scalar"
        )
    if isinstance(batch, int) and x.shape[0] is not None:
        if x.shape[0] != batch:
            raise ValueError(
                f"`{name}` must {what} the batch size of `start_tokens` ({batch}) first. "
                f"Received: {name} tensor of shape {tuple(x.shape)}"
            )
        return x
    check = tf.debugging.assert_equal(
        tf.shape(x)[0],
        tf.cast(batch, tf.int32),
        message=f"`{name}` must {what} the batch size of `start_tokens` first. Received a "
        f"{name} tensor whose first axis differs",
    )
    return _run_time_checked(x, [check])


def seed_tensor(seed):
    """A sampling `seed` as an int32 `[2]` tensor: an int, an integer `[]` / `[2]` tensor, or
    None (a fresh random seed)."""
    import tensorflow as tf

    if seed is None:
        return tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    if _is_bool(seed) or not (
        isinstance(seed, (numbers.Integral, np.integer))
        or (is_tensor(seed) and seed.dtype.is_integer)
        or (isinstance(seed, (list, tuple, np.ndarray)) and np.asarray(seed).dtype.kind in "iu")
    ):
        _fail("seed", "an integer, an integer tensor of shape [] or [2], or None", seed)
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


def check_id_tensor(name, x, rank, shape_text):
    """`x` as an int32 tensor of `rank` (integer ids, e.g. `[B, P]` padded with -1)."""
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    if not x.dtype.is_integer:
        raise ValueError(
            f"`{name}` must be integer ids of shape {shape_text}. "
            f"Received: {name}.dtype={x.dtype.name}"
        )
    if x.shape.rank != rank:
        raise ValueError(
            f"`{name}` must have shape {shape_text}. Received: {name}.shape={tuple(x.shape)}"
        )
    return tf.cast(x, tf.int32)


def check_end_token(end_token, vocab):
    """`end_token` must be a vocabulary id (`0 <= end_token < vocab`), or -1 for "never ends";
    `vocab` a Python int or a scalar tensor. Returns it (an int32 tensor when not static)."""
    import tensorflow as tf

    static = static_value(end_token)
    static_vocab = vocab if isinstance(vocab, int) else None
    message = (
        "`end_token` must be an id of the vocabulary (0 <= end_token < V"
        + (f"={static_vocab}" if static_vocab is not None else "")
        + ") or -1 (no end token: every hypothesis runs to max_length)."
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
    return _run_time_checked(end_token, [check])
