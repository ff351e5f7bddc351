"""The decoding knobs, written once: their table (`KNOBS`) and one validated object (`DecodingConfig`).

`KNOBS` maps every scalar knob of the searches to a `Knob`: its dtype, its documented range,
its default and one line of help. Every range check of the package reads it, so a value out
of range gives the same message wherever it is checked (a search, a served request, the
command line, a client):

    `top_p` must be a number in (0, 1]. Received: top_p=1.5

`check_knob(name, value)` is that check. On a Python number it is plain Python (no TensorFlow
import: the CLI and the clients call it) and returns the number normalised; on a scalar
tensor known only at run time it returns the tensor behind an assertion with the same words.
On JAX a scalar array is checked as the number it holds; one traced under `jax.jit` has no
value to check and is used as given.

`DecodingConfig` holds every knob of a search in one frozen object, checked once when it is
built; `beam_search`, `greedy_search` and `sample_search` take it as `config=`, with keyword
overrides: a keyword given explicitly wins over the config (`call.py`). Each search reads the knobs it uses (the beam reads `beam_size`, sampling
`temperature`, `top_k`, `top_p` and `seed`) and ignores the others.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import Any

from keras_attn import _checks
from keras_attn.decoding.modes import NAMES as SEARCHES

__all__ = ["KNOBS", "DecodingConfig", "Knob", "check_knob"]


@dataclasses.dataclass(frozen=True)
class Knob:
    """One scalar knob of the searches.

    Attributes:
      name: the keyword argument (and the served signature input) it is.
      dtype: `"int32"` or `"float32"`, the dtype of a tensor that carries it.
      minimum, maximum: the documented range, inclusive; None: unbounded on that side.
      default: the value a search uses when the knob is not given.
      help: one line for documentation and command-line help.
      searches: the searches that read it (`"beam"`, `"greedy"`, `"sample"`).
      minimum_open: the range excludes `minimum` (`top_p` is in (0, 1]).
      hint: added to the message of a refused value (say what to write instead).
    """

    name: str
    dtype: str
    minimum: float | None
    maximum: float | None
    default: Any
    help: str
    searches: tuple[str, ...] = SEARCHES
    minimum_open: bool = False
    hint: str | None = None

    @property
    def requirement(self) -> str:
        """The words of the range: "an integer >= 1", "a number in (0, 1]"."""
        if self.dtype == "int32":
            words = _checks.int_requirement(self.minimum, self.maximum)
        else:
            words = _checks.bound_text(self.minimum, self.maximum, self.minimum_open, False)
        return words + (f" ({self.hint})" if self.hint else "")

    def check(self, value: Any) -> Any:
        """`value` checked against the range: a Python number, or a checked scalar tensor."""
        if _is_jax(value):
            value = _jax_value(value)
            if _is_jax(value):
                return value  # traced under jax.jit: nothing to check it with (module docstring)
        if self.dtype == "int32":
            return _checks.check_scalar_int(self.name, value, self.minimum, self.maximum)
        return _checks.check_scalar_number(
            self.name,
            value,
            low=self.minimum,
            high=self.maximum,
            low_open=self.minimum_open,
            hint=self.hint,
        )


def _is_jax(value: Any) -> bool:
    """A JAX array or tracer (checked without importing JAX or TensorFlow)."""
    return type(value).__module__.startswith(("jax", "jaxlib"))


def _jax_value(value: Any) -> Any:
    """A JAX value known now as NumPy (checked like a Python number), a traced one as is."""
    import jax
    import numpy as np

    if isinstance(value, jax.core.Tracer):
        return value
    return np.asarray(value)


def _knobs(*knobs: Knob) -> Mapping[str, Knob]:
    return types.MappingProxyType({knob.name: knob for knob in knobs})


# The one table. Outside these ranges the formulas overflow or stop meaning anything
# (`lp = ((5 + |Y|) / 6) ** -1000` is inf). Its order is the order of documentation and flags.
KNOBS: Mapping[str, Knob] = _knobs(
    Knob("beam_size", "int32", 1, None, 4, "hypotheses kept per example (K)", ("beam",)),
    Knob("max_length", "int32", 1, None, 50, "most tokens generated, the end token counted"),
    Knob("length_penalty", "float32", 0, 10, 0.0, "GNMT alpha: lp = ((5 + |Y|) / 6) ** alpha"),
    Knob(
        "coverage_penalty",
        "float32",
        0,
        10,
        0.0,
        "GNMT beta: cp = beta * sum_s log(clip(coverage_s, 1e-10, 1))",
    ),
    Knob("eos_penalty", "float32", -10, 10, 0.0, "GNMT gamma: ep = gamma * |X| / |Y|"),
    Knob("min_length", "int32", 0, None, 0, "no hypothesis ends before this many tokens"),
    Knob("no_repeat_ngram_size", "int32", 0, None, 0, "n > 0: no n-gram occurs twice (0: off)"),
    Knob(
        "repetition_penalty",
        "float32",
        0.01,
        100,
        1.0,
        "CTRL penalty on the logits of tokens already generated (1: off)",
    ),
    Knob(
        "temperature",
        "float32",
        0.01,
        100,
        1.0,
        "sampling from softmax(log_probs / temperature)",
        ("sample",),
        hint="temperature 0 is not sampling: greedy_search picks the most likely token",
    ),
    Knob(
        "top_k", "int32", 0, None, 0, "sample among the k most likely tokens (0: all)", ("sample",)
    ),
    Knob(
        "top_p",
        "float32",
        0,
        1,
        1.0,
        "then among the smallest set whose probability reaches p (nucleus)",
        ("sample",),
        minimum_open=True,
    ),
    Knob("seed", "int32", None, None, None, "the same seed gives the same samples", ("sample",)),
)


def check_knob(name: str, value: Any) -> Any:
    """`value` checked against the range of the knob `name` in `KNOBS`.

    A Python number (or NumPy scalar) comes back as a Python `int` / `float`, in plain Python;
    a scalar tensor known only at run time comes back as an int32 / float32 tensor whose use
    runs an assertion with the same message first. Out of range: `ValueError` (or, at run
    time, `InvalidArgumentError`) naming the knob, e.g.
    "`top_p` must be a number in (0, 1]. Received: top_p=1.5". `seed` also accepts None.
    """
    if name not in KNOBS:
        raise ValueError(f"`name` must be one of {sorted(KNOBS)}. Received: name={name!r}")
    if name == "seed" and value is None:
        return None
    return KNOBS[name].check(value)


# `stop_after`: a config field checked as a knob is (a Python int, a scalar tensor at run time,
# a traced JAX value as given), not in `KNOBS`: no served request parameter or flag of its own.
STOP_AFTER = Knob("stop_after", "int32", 1, None, None, "run at most this many steps (None: all)")


def _check_stop_after(value: Any) -> Any:
    """`stop_after`: None, or an integer >= 1 (`STOP_AFTER.check`)."""
    return None if value is None else STOP_AFTER.check(value)


def _check_ids(name: str, ids: Any) -> Any:
    """`bad_token_ids`: None, a list of ids (kept as a tuple of ints) or a 1-D integer tensor."""
    if ids is None:
        return None
    if _is_jax(ids):
        ids = _jax_value(ids)
        if _is_jax(ids):  # traced: a tensor as on TensorFlow
            if "int" not in str(ids.dtype) or len(ids.shape) != 1:
                raise ValueError(
                    f"`{name}` must be a 1-D integer tensor or a list of ids. "
                    f"Received: {name}={ids!r}"
                )
            return ids
    if _checks.is_tensor(ids):
        if not ids.dtype.is_integer or ids.shape.rank != 1:
            raise ValueError(
                f"`{name}` must be a 1-D integer tensor or a list of ids. Received: {name}={ids!r}"
            )
        return ids
    import numpy as np

    try:
        arr = np.asarray(ids)
    except ValueError:
        arr = np.asarray([None])
    if arr.size == 0:
        return None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"`{name}` must be a list of integer ids. Received: {name}={ids!r}")
    return tuple(int(i) for i in arr)


@dataclasses.dataclass(frozen=True)
class DecodingConfig:
    """Every knob of a search, validated once when built (frozen: change one with `replace`).

    The scalar knobs are those of `KNOBS` (same names and ranges, their defaults read from
    it); each may be a Python number or a scalar tensor (a served request's input). Python
    values come back normalised (`top_p=1` is stored as `1.0`); tensors known only at run
    time are stored behind assertions. Also checked here: `min_length <= max_length`.

    Attributes:
      max_length, beam_size, length_penalty, coverage_penalty, eos_penalty, min_length,
      no_repeat_ngram_size, repetition_penalty, temperature, top_k, top_p, seed: see `KNOBS`.
      bad_token_ids: ids never generated (a list, or a 1-D integer tensor), or None.
      report_invalid: under XLA, also return the NaN check as `"invalid"` (docs/decoding.md).
      stop_after: run at most this many steps (an integer >= 1, or a scalar int32 tensor),
        or None: to the end. The result is then the hypotheses so far, scored as if they
        ended there, and also holds `"done"` (bool scalar: the search ended by itself, every
        row finished or `max_length` reached, so the answer is final) and `"steps"` (int32
        scalar: the steps run). The same call with a larger `stop_after` runs the same steps
        first: a client that asks again with more steps streams a search with no state of
        its own (docs/decoding.md, "Stopping after some steps").
    """

    max_length: Any = KNOBS["max_length"].default
    beam_size: Any = KNOBS["beam_size"].default
    length_penalty: Any = KNOBS["length_penalty"].default
    coverage_penalty: Any = KNOBS["coverage_penalty"].default
    eos_penalty: Any = KNOBS["eos_penalty"].default
    min_length: Any = KNOBS["min_length"].default
    no_repeat_ngram_size: Any = KNOBS["no_repeat_ngram_size"].default
    repetition_penalty: Any = KNOBS["repetition_penalty"].default
    bad_token_ids: Sequence[int] | Any | None = None
    temperature: Any = KNOBS["temperature"].default
    top_k: Any = KNOBS["top_k"].default
    top_p: Any = KNOBS["top_p"].default
    seed: Any = KNOBS["seed"].default
    report_invalid: bool = False
    stop_after: Any = None

    def __post_init__(self) -> None:
        for name in KNOBS:
            if name == "seed":
                continue
            object.__setattr__(self, name, check_knob(name, getattr(self, name)))
        seed = self.seed
        if not (seed is None or _checks.is_tensor(seed) or _is_jax(seed)):
            # an int, or a [2] pair of ints (checked when the sampler builds its seed tensor)
            if isinstance(seed, (list, tuple)):
                _checks.seed_tensor(seed)
            else:
                object.__setattr__(self, "seed", _checks.check_seed("seed", seed))
        object.__setattr__(self, "bad_token_ids", _check_ids("bad_token_ids", self.bad_token_ids))
        object.__setattr__(
            self, "report_invalid", _checks.check_bool("report_invalid", self.report_invalid)
        )
        object.__setattr__(self, "stop_after", _check_stop_after(self.stop_after))
        self._check_min_length()

    def _check_min_length(self) -> None:
        low, high = self.min_length, self.max_length
        if _is_jax(low) or _is_jax(high):
            return  # traced under jax.jit (values known now came back as Python numbers)
        static_low, static_high = _checks.static_value(low), _checks.static_value(high)
        if static_low is not None and static_high is not None:
            if static_low > static_high:
                raise ValueError(
                    "`min_length` must be <= `max_length` (a hypothesis cut at max_length "
                    f"would end earlier). Received: min_length={static_low}, "
                    f"max_length={static_high}"
                )
            return
        import tensorflow as tf

        check = tf.debugging.assert_less_equal(
            tf.cast(low, tf.int32),
            tf.cast(high, tf.int32),
            message="`min_length` must be <= `max_length`. Received an invalid min_length",
        )
        with tf.control_dependencies([check]):
            object.__setattr__(self, "min_length", tf.identity(tf.cast(low, tf.int32)))

    def replace(self, **changes: Any) -> DecodingConfig:
        """A copy with `changes` (validated again)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(
                f"`DecodingConfig` has no field {unknown[0]!r} (fields: "
                f"{', '.join(f.name for f in dataclasses.fields(self))}). "
                f"Received: {unknown[0]}={changes[unknown[0]]!r}"
            )
        return dataclasses.replace(self, **changes)

    @classmethod
    def build(
        cls, config: DecodingConfig | None, keywords: Mapping[str, Any] = types.MappingProxyType({})
    ) -> DecodingConfig:
        """The config of one search call: `config` (or the defaults) with every keyword given
        (`{name: value}`) put in. A keyword given wins, whatever its value (its default too):
        pass only the keywords the caller gave (`call.resolve` does)."""
        if config is not None and not isinstance(config, DecodingConfig):
            raise ValueError(
                f"`config` must be a DecodingConfig or None. Received: config={config!r}"
            )
        if config is None:
            return cls(**keywords)
        return config.replace(**keywords) if keywords else config
