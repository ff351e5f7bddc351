"""The served signatures, one row each, and their request parameters: written once.

A *request parameter* is a scalar input of a served signature besides its text `inputs` (or
`images`): `beam_size`, `max_length`, `temperature`, .... What each is (dtype, documented range,
default, help) is the decoding package's table (`keras_attn.decoding.KNOBS`), read through
`RequestParam`. `SPECS` holds one `SignatureSpec` per search signature: its request parameters
in order, its string inputs, its outputs, the search it runs and the settings it takes from the
export. From them:

- `keras_attn.serving.signatures` builds every signature's body, input specs and warm-up values;
- `keras_attn.serving.client` routes a call to a signature (`route`) and checks and fills its
  request parameters (`request_values`) before anything is sent;
- `keras-attn translate` makes its flags and checks them before it builds a request.

The ranges are those of the Python API (`keras_attn.decoding`), read from its table, and a
value out of range gets the Python API's message. Importing this module imports nothing else;
the decoding table is read when a parameter's dtype, default or range is first asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The text input of the text signatures (image models take `images` float32 [B, H, W, C]).
TEXT_INPUT = "inputs"
# Served defaults that differ from the Python API's: a request carries every input, so the
# seed is a number (the Python API's None, a fresh seed per call, has no tensor form).
_SERVED_DEFAULTS = {"seed": 0}
_INT32 = (-(2**31), 2**31 - 1)


def _decoding_entry(name):
    """The decoding package's entry for a parameter (its dtype, range, default and help)."""
    from keras_attn.decoding.config import KNOBS

    return KNOBS[name]


@dataclasses.dataclass(frozen=True)
class RequestParam:
    """One request parameter of the served signatures: a decoding parameter
    (`keras_attn.decoding.KNOBS`) as a request carries it."""

    name: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def dtype(self) -> str:
        return _decoding_entry(self.name).dtype

    @property
    def default(self) -> Any:
        """What a client sends when the caller gives nothing."""
        return _SERVED_DEFAULTS.get(self.name, _decoding_entry(self.name).default)

    @property
    def help(self) -> str:
        return _decoding_entry(self.name).help

    @property
    def requirement(self) -> str:
        """The range in words, as the error messages write it ("a number in (0, 1]")."""
        return _decoding_entry(self.name).requirement

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


BEAM = ("beam_size", "max_length", "length_penalty", "coverage_penalty")
CONTROLS = ("min_length", "no_repeat_ngram_size", "repetition_penalty")
SAMPLING = ("temperature", "top_k", "top_p", "seed")
# Every request parameter some signature takes, in the order of the decoding table.
REQUEST_PARAMS = BEAM + CONTROLS + SAMPLING


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

BEAM_OUTPUTS = ("outputs", "scores", "log_probs", "lengths", "alignments", "token_log_probs")
SINGLE_OUTPUTS = ("outputs", "scores", "alignments")
# The settings of `ServingSettings` a signature may take as its search's values in place of a
# request parameter of the same name.
SEARCH_SETTINGS = ("beam_size", "max_length", "length_penalty", "coverage_penalty")


@dataclasses.dataclass(frozen=True)
class SignatureSpec:
    """One served search signature.

    Args:
        name: the signature's name.
        search: the search it runs: `"beam"`, `"greedy"` or `"sample"` (also the client's
            mode that routes to it, unless `best_only`).
        params: its request parameters besides the text input, in order.
        outputs: its outputs (`[B, K]` n-best lists, or one `[B]` per input).
        settings: the export's settings (`ServingSettings`) it passes to its search as values,
            fixed at export (among `SEARCH_SETTINGS`, none of them in `params`).
        texts: its string inputs besides the text input (`TextArgument`s; text exports only).
        placeholders: with `keep_placeholders`, the search requires the source's placeholders.
        best_only: answers the best hypothesis per input (`[B]`) of its beam search.
        xla: may also be exported compiled with XLA, as `<name>_xla`.
    """

    name: str
    search: str
    params: tuple = ()
    outputs: tuple = BEAM_OUTPUTS
    settings: tuple = ()
    texts: tuple = ()
    placeholders: bool = False
    best_only: bool = False
    xla: bool = True


CONSTRAINED = "beam_search_constrained"
# Every search signature. The first three are every export's oldest; the controls, sampling and
# constrained ones came after them, so requests to the first three stay valid unchanged.
SPECS = (
    SignatureSpec(
        "serving_default",
        "beam",
        outputs=("outputs", "scores"),
        settings=SEARCH_SETTINGS,
        placeholders=True,
        best_only=True,
    ),
    SignatureSpec("beam_search", "beam", BEAM, placeholders=True),
    SignatureSpec(
        "greedy",
        "greedy",
        outputs=SINGLE_OUTPUTS,
        settings=("max_length", "length_penalty", "coverage_penalty"),
    ),
    SignatureSpec("beam_search_controls", "beam", BEAM + CONTROLS),
    SignatureSpec(
        "greedy_controls",
        "greedy",
        ("max_length",) + CONTROLS,
        SINGLE_OUTPUTS,
        settings=("length_penalty", "coverage_penalty"),
    ),
    # No XLA twin: under XLA the draws come from another generator (keras_attn.layers.rng), so
    # `sample_xla` would answer other samples than `sample` for the same seed.
    SignatureSpec(
        "sample",
        "sample",
        SAMPLING + ("max_length",) + CONTROLS,
        SINGLE_OUTPUTS,
        settings=("length_penalty", "coverage_penalty"),
        xla=False,
    ),
    SignatureSpec(
        CONSTRAINED,
        "beam",
        BEAM,
        BEAM_OUTPUTS + ("constraints_met",),
        texts=(PREFIX, CONSTRAINTS),
        placeholders=True,
    ),
)
SPEC = {spec.name: spec for spec in SPECS}

# The table by column: every signature's request parameters, outputs and string inputs.
SIGNATURES = {spec.name: spec.params for spec in SPECS}
OUTPUTS = {spec.name: spec.outputs for spec in SPECS}
TEXT_ARGUMENTS = {spec.name: spec.texts for spec in SPECS if spec.texts}
# The signatures of text exports only (their extra inputs are strings the target tokenizer reads).
TEXT_ONLY_NAMES = tuple(TEXT_ARGUMENTS)
# The signatures that may also be exported compiled with XLA, as `<name>_xla` (docs/serving.md).
XLA_SIGNATURE_NAMES = tuple(spec.name for spec in SPECS if spec.xla)
XLA_SUFFIX = "_xla"
# The searches an export's `word_rules` bind (docs/serving.md, "Word rules"). The greedy
# search stays the model's own argmax decode in every export (`greedy`, `greedy_controls` and
# the streaming client's greedy): the reference the other searches are measured against, and
# what a training run's own test decode equals.
RULED_SEARCHES = ("beam", "sample")
# A search mode's signatures (`keras_attn.decoding.modes`), smallest first: a request goes to
# the first that takes every parameter given (so a request without controls reaches the
# signatures every export has).
MODE_SIGNATURES = {
    mode: tuple(s.name for s in SPECS if s.search == mode and not s.best_only)
    for mode in dict.fromkeys(s.search for s in SPECS)
}


@dataclasses.dataclass(frozen=True)
class ExtraSignatures:
    """Signatures another module adds to an export beside the search signatures: give them to
    the export as the `extra_signatures` setting (`export_text_model(..., extra_signatures=
    [rows])`).

    Args:
        names: the names of the signatures (none of them a search signature's).
        functions: `functions(signatures) -> {name: tf ConcreteFunction}`, given the export's
            `keras_attn.serving.signatures.ServingSignatures` (its model, settings, tokenizers
            and shared pieces: `model_inputs`, `encode`, `checked_inputs`, ...).
        warmup: `warmup(signatures, inputs) -> [(name, {input: numpy array}), ...]`, their
            warm-up requests given the export's warm-up batch (strings, or images); None: none.
    """

    names: tuple
    functions: Any
    warmup: Any = None


def takes(signature):
    """The names a request to `signature` may set: its request parameters and its string inputs
    besides `inputs` (`prefix`, `constraints`)."""
    return tuple(SIGNATURES[signature]) + tuple(a.name for a in TEXT_ARGUMENTS.get(signature, ()))


def mode_takes(mode):
    """The names some signature of `mode` takes (`takes`), sorted."""
    return sorted(set().union(*(takes(n) for n in MODE_SIGNATURES[mode])))


def check_takes(mode, given):
    """`ValueError` naming what none of `mode`'s signatures takes among the names `given`."""
    extra = sorted(set(given) - set(mode_takes(mode)))
    if extra:
        raise ValueError(f"A {mode} request takes only {mode_takes(mode)}. Received: {extra}")


def route(mode, given):
    """The signature of `mode` (`"beam"`, `"greedy"`, `"sample"`) that takes every request
    parameter (or string input: `prefix`, `constraints`) named in `given` (what the caller set)."""
    from keras_attn.decoding.modes import mode as check_mode

    check_mode(mode)
    given = set(given)
    for name in MODE_SIGNATURES[mode]:
        if given <= set(takes(name)):
            return name
    if mode == "beam" and given & {"prefix", "constraints"}:
        raise ValueError(
            f"A request with `prefix` or `constraints` goes to `{CONSTRAINED}`, which takes "
            f"{list(takes(CONSTRAINED))}. Received: {sorted(given - set(takes(CONSTRAINED)))}"
        )
    check_takes(mode, given)
    raise ValueError(f"No {mode} signature takes these together. Received: {sorted(given)}")


def request_values(signature, given):
    """`{name: value}` for every request parameter of `signature`: the values given (None: not
    given), checked against the table, and the table's defaults for the rest. Plain Python
    values; `as_arrays` makes the request's numpy scalars."""
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
        name: request_param(name).check(given[name])
        if name in given
        else request_param(name).default
        for name in SIGNATURES[signature]
    }


def as_arrays(values):
    """`{name: numpy scalar of the table's dtype}`."""
    import numpy as np

    return {name: np.asarray(value, request_param(name).dtype) for name, value in values.items()}


def request_param(name):
    """The `RequestParam` of a request parameter that some signature takes."""
    if name not in REQUEST_PARAMS:
        raise ValueError(f"`name` must be one of {list(REQUEST_PARAMS)}. Received: name={name!r}")
    return RequestParam(name)
