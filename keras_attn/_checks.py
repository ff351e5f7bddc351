"""Argument checks shared by the whole package (private).

Every check raises a `ValueError` whose message names the argument and shows
what it received, in one form:

    `window` must be an integer >= 1. Received: window=0

and returns the value normalised (a Python `int`, `float` or `bool`), so a
constructor reads `self.window = check_int("window", window)`.

Booleans are never accepted where a number is expected (`True` is an `int`
in Python, but `dropout=True` is a mistake). NumPy scalars and 0-d arrays
are accepted where a Python number is (a value read back from a tensor).
The checks are plain Python: tensors known only at run time are checked by
the decoding and serving code with TensorFlow assertions.
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


def check_int(name, value, minimum=1, maximum=None, allow_none=False):
    """An integer in `[minimum, maximum]`; either bound may be None (the default: a size, >= 1)."""
    value = _plain(value)
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral) and not _is_bool(value)
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        if minimum is not None and maximum is not None:
            requirement = f"an integer in [{minimum}, {maximum}]"
        elif minimum is not None:
            requirement = f"an integer >= {minimum}"
        elif maximum is not None:
            requirement = f"an integer <= {maximum}"
        else:
            requirement = "an integer"
        _fail(name, requirement + (" or None" if allow_none else ""), value)
    return int(value)


def check_positive_int(name, value, allow_none=False):
    """An integer >= 1 (a size, a count, a window)."""
    return check_int(name, value, minimum=1, allow_none=allow_none)


def check_seed(name, value):
    """An integer seed or None."""
    return check_int(name, value, minimum=None, allow_none=True)


def _bound_text(low, high, low_open, high_open):
    low, high = (None if b is None else f"{b:g}" for b in (low, high))  # 10.0 -> "10"
    if low is not None and high is not None:
        return f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"a number {'>' if low_open else '>='} {low}"
    if high is not None:
        return f"a number {'<' if high_open else '<='} {high}"
    return "a finite number"


def check_number(
    name, value, low=None, high=None, low_open=False, high_open=False, allow_none=False
):
    """A finite real number within the bounds given (open or closed at each end)."""
    value = _plain(value)
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not _is_bool(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        requirement = _bound_text(low, high, low_open, high_open)
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
