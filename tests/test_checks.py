"""The shared argument checks (keras_attn._checks): what passes, what fails, the message form."""

import math
import re

import numpy as np
import pytest

from keras_attn import _checks


def _raises(fn, name, value, *args, **kwargs):
    """`fn(name, value)` raises a ValueError of the form "`name` must ... Received: name=value"."""
    with pytest.raises(ValueError) as info:
        fn(name, value, *args, **kwargs)
    message = str(info.value)
    assert message.startswith(f"`{name}` must "), message
    assert message.endswith(f"Received: {name}={_checks._plain(value)!r}"), message
    return message


def test_bool():
    assert _checks.check_bool("flag", True) is True
    assert _checks.check_bool("flag", np.bool_(False)) is False
    for bad in (0, 1, None, "True", 1.0):
        _raises(_checks.check_bool, "flag", bad)


def test_int_bounds():
    assert _checks.check_int("n", 3) == 3
    assert type(_checks.check_int("n", np.int64(3))) is int
    assert _checks.check_int("n", np.array(4, dtype=np.int32)) == 4
    assert _checks.check_int("n", -2, minimum=None) == -2
    assert "integer >= 1" in _raises(_checks.check_int, "n", 0)  # sizes by default
    assert _checks.check_int("n", 5, minimum=1, maximum=5) == 5
    assert _checks.check_int("n", None, allow_none=True) is None
    assert "integer >= 1" in _raises(_checks.check_int, "n", 0, minimum=1)
    assert "integer in [1, 5]" in _raises(_checks.check_int, "n", 6, minimum=1, maximum=5)
    assert "integer <= 2" in _raises(_checks.check_int, "n", 3, minimum=None, maximum=2)
    assert "or None" in _raises(_checks.check_int, "n", "x", allow_none=True)
    for bad in (True, 2.0, 2.5, "2", None, np.float32(2.0), np.array([2])):
        with pytest.raises(ValueError, match="`n` must be an integer"):
            _checks.check_int("n", bad)


def test_positive_int_and_seed():
    assert _checks.check_positive_int("units", 1) == 1
    assert _checks.check_positive_int("units", None, allow_none=True) is None
    _raises(_checks.check_positive_int, "units", 0)
    _raises(_checks.check_positive_int, "units", -3)
    _raises(_checks.check_positive_int, "units", None)
    assert _checks.check_seed("seed", None) is None
    assert _checks.check_seed("seed", -7) == -7
    for bad in (True, 1.5, "1"):
        _raises(_checks.check_seed, "seed", bad)


@pytest.mark.parametrize(
    "fn, good, bad",
    [
        (_checks.check_rate, (0, 0.0, 0.5, 0.999), (1, 1.0, -0.1, True, math.nan, "0.1", None)),
        (_checks.check_probability, (0, 1, 1.0, 0.3), (1.01, -1e-9, False, math.inf)),
        (_checks.check_positive, (1e-12, 3, 2.5), (0, 0.0, -1, math.inf, math.nan, True)),
        (_checks.check_non_negative, (0, 0.0, 7), (-1e-9, math.inf, False, None)),
        (_checks.check_finite, (-1e6, 0, 3.5), (math.inf, -math.inf, math.nan, True, "1", None)),
    ],
)
def test_number_ranges(fn, good, bad):
    for value in good:
        out = fn("x", value)
        assert type(out) is float and out == float(value)
    for value in bad:
        _raises(fn, "x", value)


def test_number_messages_state_the_range():
    assert "a number in [0, 1)" in _raises(_checks.check_rate, "dropout", 1.0)
    assert "a number in [0, 1]" in _raises(_checks.check_probability, "p", 2)
    assert "a number > 0" in _raises(_checks.check_positive, "sigma", 0)
    assert "a number >= 0" in _raises(_checks.check_non_negative, "w", -1)
    assert "a finite number" in _raises(_checks.check_finite, "alpha", math.inf)
    assert "a number > 0 or None" in _raises(_checks.check_positive, "s", -1, allow_none=True)
    assert _checks.check_positive("s", None, allow_none=True) is None
    assert _checks.check_number("x", np.float32(0.5), low=0, high=1) == 0.5
    assert "a number in [0.01, 100]" in _raises(
        _checks.check_number, "t", 0.0, low=0.01, high=100.0
    )
    _raises(_checks.check_number, "x", 0.0, low=0, low_open=True, high=1)


def test_choice():
    choices = ("dot", "general", "concat")
    assert _checks.check_choice("score", "dot", choices) == "dot"
    assert type(_checks.check_choice("score", np.str_("dot"), choices)) is str
    message = _raises(_checks.check_choice, "score", "additive", choices)
    assert re.search(r"one of 'dot', 'general', 'concat'", message)
    for bad in (None, 1, ["dot"], np.array(["dot", "general"]), np.str_("dot ")):
        _raises(_checks.check_choice, "score", bad, choices)
    # A bool is not the int 1 and an int is not the float 1.0.
    _raises(_checks.check_choice, "k", True, (1, 2))
    _raises(_checks.check_choice, "k", 1.0, (1, 2))
    assert _checks.check_choice("k", None, (None, "additive")) is None


def test_float_tensor():
    assert _checks.check_float_tensor("query", [1, 2]) == [1, 2]  # no dtype: not checked here
    x = np.zeros((2, 3), np.float32)
    assert _checks.check_float_tensor("query", x) is x
    with pytest.raises(
        ValueError, match=r"`query` must be a floating-point tensor.*query.dtype=int32"
    ):
        _checks.check_float_tensor("query", np.zeros((2, 3), np.int32))


def test_copies_are_the_shared_checks():
    """The modules that used to carry their own copies now hand out the shared ones."""
    from keras_attn.layers import base, hard
    from keras_attn.models import common

    assert base.check_rate is _checks.check_rate
    assert base.check_positive_int is _checks.check_positive_int
    assert base.check_choice is _checks.check_choice
    assert base.check_float_tensor is _checks.check_float_tensor
    assert hard.check_probability is _checks.check_probability
    assert common.check_int is _checks.check_int
    assert common.check_choice is _checks.check_choice
    assert common.check_rate is _checks.check_rate


def test_split_fractions():
    _checks.check_split_fractions(0.1, 0.2)
    for val, test in ((0.0, 0.2), (1.0, 0.2), (0.1, -0.1), (0.1, 1.5)):
        name, value = ("val_fraction", val) if not 0 < val < 1 else ("test_fraction", test)
        with pytest.raises(ValueError, match=rf"`{name}` must be in \(0, 1\)\. Received: {name}="):
            _checks.check_split_fractions(val, test)
    with pytest.raises(ValueError, match=r"`val_fraction \+ test_fraction` must be < 1"):
        _checks.check_split_fractions(0.5, 0.5)


@pytest.mark.parametrize("fractions", [(0.0, 0.1), (0.1, 1.0), (0.6, 0.4)])
def test_the_splits_refuse_bad_fractions(fractions):
    """The generated splits (dates, digit strips) check their fractions before drawing."""
    from keras_attn.data.dates import dates_splits
    from keras_attn.data.digits import split_digit_pools

    val, test = fractions
    with pytest.raises(ValueError, match="fraction"):
        dates_splits(4, 2, 2, val_fraction=val, test_fraction=test)
    with pytest.raises(ValueError, match="fraction"):
        split_digit_pools(val_fraction=val, test_fraction=test)
