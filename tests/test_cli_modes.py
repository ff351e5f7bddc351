"""The translate command's search flags are the table of search modes (`keras_attn.decoding.modes`):
each mode but the first (the default) is a flag, and what the flag asks for is that mode."""

import pytest

from keras_attn.cli import build_parser
from keras_attn.cli.translate import _check_n_best, _mode
from keras_attn.decoding.modes import MODES


def _args(*flags):
    return build_parser().parse_args(["translate", "DIR", "text", *flags])


def test_each_other_mode_is_a_flag_and_names_that_mode():
    default, *others = MODES
    assert _mode(_args()) == default
    for name in others:
        assert _mode(_args(f"--{name}")) == name


def test_two_mode_flags_are_refused_naming_both():
    _, *others = MODES
    with pytest.raises(ValueError, match="not both") as error:
        _mode(_args(*(f"--{name}" for name in others)))
    assert all(f"{name}=True" in str(error.value) for name in others)


def test_n_best_follows_the_table():
    for name, mode in MODES.items():
        if mode.n_best:
            _check_n_best(3, name, None)
        else:
            with pytest.raises(ValueError, match="n_best=3"):
                _check_n_best(3, name, None)
