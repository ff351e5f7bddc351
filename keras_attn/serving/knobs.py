"""The served knob table: every input of every served signature, written once.

`SIGNATURES` names each signature's scalar inputs in order (besides the text `inputs` or the
`images`), `OUTPUTS` its outputs. What each input is (dtype, documented range, default, help)
is the decoding package's table (`keras_attn.decoding.KNOBS`), read through `ServedInput`.
From them:

- `keras_attn.serving.signatures` makes the signatures' input specs and the warm-up requests;
- `keras_attn.serving.client` routes a call to a signature (`route`) and checks and fills its
  knobs (`request_knobs`) before anything is sent;
- `keras-attn translate` makes its flags and checks them before it builds a request.

The ranges are those of the Python API (`keras_attn.decoding`), read from its table, and a
value out of range gets the Python API's message. Importing this module imports nothing else;
the decoding table is read when an input's dtype, default or range is first asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The text input of the text signatures (image models take `images` float32 [B, H, W, C]).
TEXT_INPUT = "inputs"
# Served defaults that differ from the Python API's: a request carries every input, so the
# seed is a number (the Python API's None, a fresh seed per call, has no tensor form).
_SERVED_DEFAULTS = {"seed": 0}


def _knob(name):
    """The decoding package's entry for a knob (its dtype, range, default and help)."""
    from keras_attn.decoding.config import KNOBS

    return KNOBS[name]


@dataclasses.dataclass(frozen=True)
class ServedInput:
    """One scalar input of the served signatures: a decoding knob (`keras_attn.decoding.KNOBS`)
    as a request carries it."""

    name: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def dtype(self) -> str:
        return _knob(self.name).dtype

    @property
    def default(self) -> Any:
        """What a client sends when the caller gives nothing."""
        return _SERVED_DEFAULTS.get(self.name, _knob(self.name).default)

    @property
    def help(self) -> str:
        return _knob(self.name).help

    @property
    def requirement(self) -> str:
        """The range in words, as the error messages write it ("a number in (0, 1]")."""
        return _knob(self.name).requirement

    def check(self, value: Any) -> Any:
        """`value` as a Python number if it is in range, else the Python API's `ValueError`."""
        from keras_attn.decoding.config import check_knob

        value = check_knob(self.name, value)
        if self.dtype == "int32" and not _INT32[0] <= value <= _INT32[1]:
            raise ValueError(
                f"`{self.name}` must fit in int32 (a request carries it as one). "
                f"Received: {self.name}={value!r}"
            )
        return value


_INT32 = (-(2**31), 2**31 - 1)

BEAM = ("beam_size", "max_length", "length_penalty", "coverage_penalty")
CONTROLS = ("min_length", "no_repeat_ngram_size", "repetition_penalty")
SAMPLING = ("temperature", "top_k", "top_p", "seed")

# Every signature's scalar inputs besides the text (or images) input, in order.
SIGNATURES = {
    "serving_default": (),
    "beam_search": BEAM,
    "greedy": (),
    "beam_search_controls": BEAM + CONTROLS,
    "greedy_controls": ("max_length",) + CONTROLS,
    "sample": SAMPLING + ("max_length",) + CONTROLS,
    "beam_search_constrained": BEAM,
}


@dataclasses.dataclass(frozen=True)
class TextArgument:
    """A string input of a signature besides `inputs`: its name, the shape a request gives it
    (`[B]` or `[B, C]`), the flag of `keras-attn translate` and the empty value (`''`: none)."""

    name: str
    shape: str
    flag: str
    help: str


# The string inputs of the constrained signature, after `inputs` (text exports only).
PREFIX = TextArgument(
    "prefix",
    "[B]",
    "--prefix",
    "the text every output starts with (tokenized alone, with the target tokenizer; default: none)",
)
CONSTRAINTS = TextArgument(
    "constraints",
    "[B, C]",
    "--constraint",
    "a phrase every output must hold (repeatable; each tokenized alone, as a word start; "
    "default: none)",
)
TEXT_ARGUMENTS = {"beam_search_constrained": (PREFIX, CONSTRAINTS)}
CONSTRAINED = "beam_search_constrained"
# The signatures of text exports only (their extra inputs are strings the target tokenizer reads).
TEXT_ONLY_NAMES = tuple(TEXT_ARGUMENTS)
# The signatures that may also be exported compiled with XLA, as `<name>_xla` (docs/serving.md,
# "XLA"). Not `sample`: under XLA the draws come from another generator (keras_attn.layers.rng),
# so `sample_xla` would answer other samples than `sample` for the same seed.
XLA_SIGNATURE_NAMES = tuple(name for name in SIGNATURES if name != "sample")
# Every knob some signature takes, in the order of the decoding table.
KNOB_NAMES = BEAM + CONTROLS + SAMPLING

BEAM_OUTPUTS = ("outputs", "scores", "log_probs", "lengths", "alignments", "token_log_probs")
SINGLE_OUTPUTS = ("outputs", "scores", "alignments")
# Every signature's outputs, by kind: `[B, K]` n-best lists or one output `[B]` per input.
OUTPUTS = {
    "serving_default": ("outputs", "scores"),
    "beam_search": BEAM_OUTPUTS,
    "greedy": SINGLE_OUTPUTS,
    "beam_search_controls": BEAM_OUTPUTS,
    "greedy_controls": SINGLE_OUTPUTS,
    "sample": SINGLE_OUTPUTS,
    "beam_search_constrained": BEAM_OUTPUTS + ("constraints_met",),
}

# A search mode's signatures, smallest first: a request goes to the first that takes every
# knob given (so a request without controls reaches the signatures every export has).
MODES = {
    "beam": ("beam_search", "beam_search_controls", "beam_search_constrained"),
    "greedy": ("greedy", "greedy_controls"),
    "sample": ("sample",),
}


def takes(signature):
    """The names a request to `signature` may set: its knobs and its string inputs besides
    `inputs` (`prefix`, `constraints`)."""
    return tuple(SIGNATURES[signature]) + tuple(a.name for a in TEXT_ARGUMENTS.get(signature, ()))


def route(mode, given):
    """The signature of `mode` (`"beam"`, `"greedy"`, `"sample"`) that takes every knob (or
    string input: `prefix`, `constraints`) named in `given` (what the caller set)."""
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {sorted(MODES)}. Received: mode={mode!r}")
    given = set(given)
    for name in MODES[mode]:
        if given <= set(takes(name)):
            return name
    takes_ = sorted(set().union(*(takes(n) for n in MODES[mode])))
    if mode == "beam" and given & {"prefix", "constraints"}:
        raise ValueError(
            f"A request with `prefix` or `constraints` goes to `{CONSTRAINED}`, which takes "
            f"{list(takes(CONSTRAINED))}. Received: {sorted(given - set(takes(CONSTRAINED)))}"
        )
    raise ValueError(
        f"A {mode} request takes only {takes_}. Received: {sorted(given - set(takes_))}"
    )


def request_knobs(signature, given):
    """`{alias: value}` for every knob of `signature`: the values given (None: not given),
    checked against the table, and the table's defaults for the rest. Plain Python values;
    `as_arrays` makes the request's numpy scalars."""
    if signature not in SIGNATURES:
        raise ValueError(
            f"`signature` must be one of {list(SIGNATURES)}. Received: signature={signature!r}"
        )
    given = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(given) - set(SIGNATURES[signature]))
    if unknown:
        raise ValueError(
            f"The `{signature}` signature takes {list(SIGNATURES[signature])}. Received: {unknown}"
        )
    return {
        name: served_input(name).check(given[name]) if name in given else served_input(name).default
        for name in SIGNATURES[signature]
    }


def as_arrays(knobs):
    """`{alias: numpy scalar of the table's dtype}`."""
    import numpy as np

    return {name: np.asarray(value, served_input(name).dtype) for name, value in knobs.items()}


def served_input(name):
    """The `ServedInput` of a knob that some signature takes."""
    if name not in KNOB_NAMES:
        raise ValueError(f"`name` must be one of {list(KNOB_NAMES)}. Received: name={name!r}")
    return ServedInput(name)
