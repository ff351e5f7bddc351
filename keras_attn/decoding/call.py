"""What a search call takes: the one keyword table, the constraints object, and the rule.

Every search (`beam_search`, `greedy_search`, `sample_search`), `engine.decode` and
`generate` take the same three things besides the step function and its inputs:

- `config=`: a `DecodingConfig` (the knobs, validated once, frozen);
- `constraints=`: a `Constraints` (prefix, phrases, alternatives, suppressions, budgets,
  validated once, frozen), travelling as one object to the engine;
- keyword overrides, each a name of `KEYWORDS`, the one table: a config field or a
  constraints field, with the searches that read it.

The rule: **a keyword given explicitly wins** over the config and the constraints object,
whatever its value (its default and None included); a keyword not given leaves them alone.
A name that is not in the table, or that the search does not read (`beam_size` to
`greedy_search`), is a `ValueError` naming it. `resolve` applies the rule, once per call.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from keras_attn.decoding import backend as kb
from keras_attn.decoding.config import KNOBS, SEARCHES, STOP_AFTER, DecodingConfig

__all__ = [
    "KEYWORDS",
    "BeamKeywords",
    "Constraints",
    "EngineKeywords",
    "ForcedKeywords",
    "GenerateKeywords",
    "Keyword",
    "SampleKeywords",
    "resolve",
]


def _static(x):
    value = kb.static_value(x)
    return None if value is None else np.asarray(value)


def _check_padding(name, value, what):
    """Static `value` (NumPy): ids >= -1, right-padded with -1."""
    if value.size and value.min() < -1:
        raise ValueError(
            f"`{name}` must hold ids >= 0, right-padded with -1. "
            f"Received: {name} with {int(value.min())}"
        )
    valid = value >= 0
    later = np.cumsum(~valid, axis=-1) > 0
    if np.any(valid & later):
        raise ValueError(
            f"`{name}` must have each {what} right-padded with -1 (no id after a -1). "
            f"Received: {name}={value.tolist()}"
        )


def _contains(row, seq):
    """Whether the list `seq` occurs as a contiguous run of the list `row`."""
    n = len(seq)
    return any(row[i : i + n] == seq for i in range(len(row) - n + 1))


@dataclasses.dataclass(frozen=True, eq=False)
class Constraints:
    """The constraints of a search, validated once when built (frozen: `replace` for a copy).

    Every field is None (not used) or integer ids (a list, an array or a tensor, stored as an
    int32 tensor), right-padded with -1 (docs/decoding.md, "Constrained decoding"):

    Attributes:
      prefix_ids: `[B, P]`: every sequence of row b starts with row b's prefix.
      constraint_ids: `[B, C, L]`: phrases that must appear.
      constraint_alt_ids: `[B, C, L]` (with `constraint_ids`), -1 for none: a second id each
        phrase position accepts.
      suppress_ids: `[S, L]`: token sequences that never occur.
      budget_ids, budget_costs, budgets: a token budget, all three or none: token
        `budget_ids[u]` (`[U]`, distinct, -1 unused) costs `budget_costs[u, r]` (`[U, R]`,
        >= 0) of resource r; a hypothesis of example b spends at most `budgets[b, r]`
        (`[B, R]`, >= 0).

    Checked here: dtypes and ranks, the -1 padding, the alternatives' shape, the budget's
    three parts, no suppressed sequence inside a prefix. The search checks what needs the
    call (the batch, `max_length`, the vocabulary, the end token).
    """

    prefix_ids: Any = None
    constraint_ids: Any = None
    constraint_alt_ids: Any = None
    suppress_ids: Any = None
    budget_ids: Any = None
    budget_costs: Any = None
    budgets: Any = None

    def __post_init__(self) -> None:
        def put(name, value):
            object.__setattr__(self, name, value)

        if self.prefix_ids is not None:
            put("prefix_ids", kb.check_id_tensor("prefix_ids", self.prefix_ids, 2, "[B, P]"))
            value = _static(self.prefix_ids)
            if value is not None:
                _check_padding("prefix_ids", value, "row")
        if self.constraint_ids is not None:
            ids = kb.check_id_tensor("constraint_ids", self.constraint_ids, 3, "[B, C, L]")
            put("constraint_ids", ids)
            value = _static(ids)
            if value is not None:
                _check_padding("constraint_ids", value, "phrase")
        if self.constraint_alt_ids is not None:
            self._check_alternatives(put)
        if self.suppress_ids is not None:
            put("suppress_ids", kb.check_id_tensor("suppress_ids", self.suppress_ids, 2, "[S, L]"))
            value = _static(self.suppress_ids)
            if value is not None:
                _check_padding("suppress_ids", value, "sequence")
                prefix = None if self.prefix_ids is None else _static(self.prefix_ids)
                if prefix is not None:
                    _check_prefix_not_suppressed(prefix, value)
        self._check_budget(put)

    def _check_alternatives(self, put):
        if self.constraint_ids is None:
            raise ValueError(
                "`constraint_alt_ids` needs `constraint_ids` (it gives their alternatives). "
                "Received: constraint_ids=None"
            )
        phrases = self.constraint_ids
        alts = kb.check_id_tensor("constraint_alt_ids", self.constraint_alt_ids, 3, "[B, C, L]")
        put("constraint_alt_ids", alts)
        known = [(a, b) for a, b in zip(alts.shape, phrases.shape) if None not in (a, b)]
        if any(a != b for a, b in known):
            raise ValueError(
                "`constraint_alt_ids` must have the shape of `constraint_ids` "
                f"{tuple(phrases.shape)}. Received: constraint_alt_ids.shape={tuple(alts.shape)}"
            )
        alt_value, phrase_value = _static(alts), _static(phrases)
        if alt_value is not None and alt_value.size and alt_value.min() < -1:
            raise ValueError(
                "`constraint_alt_ids` must hold ids >= 0 or -1 (none). "
                f"Received: constraint_alt_ids with {int(alt_value.min())}"
            )
        if alt_value is not None and phrase_value is not None:
            if np.any((alt_value >= 0) & (phrase_value < 0)):
                raise ValueError(
                    "`constraint_alt_ids` may give an alternative only where `constraint_ids` "
                    f"has a token (not in its -1 padding). Received: constraint_alt_ids="
                    f"{alt_value.tolist()}"
                )

    def _check_budget(self, put):
        given = {
            "budget_ids": self.budget_ids,
            "budget_costs": self.budget_costs,
            "budgets": self.budgets,
        }
        missing = [name for name, value in given.items() if value is None]
        if len(missing) == 3:
            return
        if missing:
            raise ValueError(
                "`budget_ids`, `budget_costs` and `budgets` go together (a token budget). "
                f"Received: {', '.join(missing)}=None"
            )
        ids = kb.check_id_tensor("budget_ids", self.budget_ids, 1, "[U]")
        costs = kb.check_id_tensor("budget_costs", self.budget_costs, 2, "[U, R]")
        limits = kb.check_id_tensor("budgets", self.budgets, 2, "[B, R]")
        for name, a, axis_a, b, axis_b, what in (
            ("budget_costs", costs, 0, ids, 0, "one row per id of `budget_ids`"),
            ("budgets", limits, 1, costs, 1, "one column per column of `budget_costs`"),
        ):
            got, want = a.shape[axis_a], b.shape[axis_b]
            if got is not None and want is not None and got != want:
                raise ValueError(
                    f"`{name}` must have {what} ({want}). Received: {name}.shape={tuple(a.shape)}"
                )
        for name, x in (("budget_costs", costs), ("budgets", limits)):
            value = _static(x)
            if value is not None and value.size and value.min() < 0:
                raise ValueError(f"`{name}` must be >= 0. Received: {name} with {int(value.min())}")
        value = _static(ids)
        if value is not None:
            if value.size and value.min() < -1:
                raise ValueError(
                    "`budget_ids` must hold ids >= 0 (-1: an unused entry). "
                    f"Received: budget_ids with {int(value.min())}"
                )
            real = value[value >= 0]
            if len(np.unique(real)) != len(real):
                raise ValueError(
                    "`budget_ids` must not repeat an id (give its costs in one row). "
                    f"Received: budget_ids={value.tolist()}"
                )
        put("budget_ids", ids)
        put("budget_costs", costs)
        put("budgets", limits)

    @property
    def empty(self) -> bool:
        """No constraint at all (the search then builds no constraint state)."""
        return all(getattr(self, f.name) is None for f in dataclasses.fields(self))

    @property
    def budget(self):
        """`(budget_ids, budget_costs, budgets)`, or None without a budget."""
        if self.budget_ids is None:
            return None
        return self.budget_ids, self.budget_costs, self.budgets

    def replace(self, **changes: Any) -> Constraints:
        """A copy with `changes` (validated again)."""
        return dataclasses.replace(self, **changes)


def _check_prefix_not_suppressed(prefix, suppress):
    for b, row in enumerate(prefix.tolist()):
        row = [t for t in row if t >= 0]
        for seq in suppress.tolist():
            seq = [t for t in seq if t >= 0]
            if seq and _contains(row, seq):
                raise ValueError(
                    "`prefix_ids` must not hold a sequence of `suppress_ids` (the prefix is "
                    f"forced, the sequence forbidden). Received: prefix_ids row {b}={row} "
                    f"holds {seq}"
                )


@dataclasses.dataclass(frozen=True)
class Keyword:
    """One keyword of the searches: which object it sets and which searches read it."""

    name: str
    holder: str  # "config" (a `DecodingConfig` field) or "constraints" (a `Constraints` field)
    searches: tuple[str, ...]
    help: str


def _table() -> Mapping[str, Keyword]:
    rows = [Keyword(k.name, "config", k.searches, k.help) for k in KNOBS.values()]
    rows += [
        Keyword("bad_token_ids", "config", SEARCHES, "ids never generated"),
        Keyword("report_invalid", "config", SEARCHES, "under XLA, also return the NaN check"),
        Keyword("stop_after", "config", SEARCHES, STOP_AFTER.help),
        Keyword("prefix_ids", "constraints", SEARCHES, "[B, P]: every sequence starts so"),
        Keyword("constraint_ids", "constraints", SEARCHES, "[B, C, L]: phrases that must appear"),
        Keyword(
            "constraint_alt_ids", "constraints", SEARCHES, "[B, C, L]: a second id per position"
        ),
        Keyword("suppress_ids", "constraints", SEARCHES, "[S, L]: sequences that never occur"),
        Keyword("budget_ids", "constraints", SEARCHES, "[U]: the tokens that cost"),
        Keyword("budget_costs", "constraints", SEARCHES, "[U, R]: what each costs"),
        Keyword("budgets", "constraints", SEARCHES, "[B, R]: what a hypothesis may spend"),
    ]
    return types.MappingProxyType({row.name: row for row in rows})


#: The one table of the searches' keywords (order: `KNOBS`, then the rest of the config, then
#: the constraints).
KEYWORDS: Mapping[str, Keyword] = _table()

#: What each caller reads: a search its own knobs; the engine everything but the strategy's.
_ENGINE = tuple(name for name, kw in KEYWORDS.items() if set(kw.searches) == set(SEARCHES))


# The keywords each function takes, typed (`**keywords: Unpack[BeamKeywords]`): a type checker
# refuses any other name and an editor leads from a keyword to its line here, named as the
# field of `DecodingConfig` or `Constraints` that carries it. Each name is written once; the
# table `KEYWORDS` says the same (tests/decoding/test_call_surface.py holds them equal) and
# `resolve` refuses any other name at run time.
class _Controls(TypedDict, total=False):
    """The `DecodingConfig` knobs every search reads, but `max_length` (see `KNOBS`)."""

    length_penalty: Any
    coverage_penalty: Any
    eos_penalty: Any
    min_length: Any
    no_repeat_ngram_size: Any
    repetition_penalty: Any
    bad_token_ids: Sequence[int] | Any | None
    report_invalid: bool
    stop_after: Any


class _ConstraintFields(TypedDict, total=False):
    """The fields of `Constraints`."""

    prefix_ids: Any
    constraint_ids: Any
    constraint_alt_ids: Any
    suppress_ids: Any
    budget_ids: Any
    budget_costs: Any
    budgets: Any


class _BeamKnobs(TypedDict, total=False):
    beam_size: Any


class _SamplingKnobs(TypedDict, total=False):
    temperature: Any
    top_k: Any
    top_p: Any
    seed: Any


class ForcedKeywords(_Controls, total=False):
    """`forced_search`'s keywords: the config's, no constraints."""

    max_length: Any


class EngineKeywords(ForcedKeywords, _ConstraintFields, total=False):
    """`greedy_search`'s and `engine.decode`'s keywords: every search's."""


class BeamKeywords(EngineKeywords, _BeamKnobs, total=False):
    """`beam_search`'s keywords."""


class SampleKeywords(EngineKeywords, _SamplingKnobs, total=False):
    """`sample_search`'s keywords."""


class GenerateKeywords(_Controls, _ConstraintFields, _BeamKnobs, _SamplingKnobs, total=False):
    """`generate`'s keywords (its `max_length` is an argument of its own)."""


def resolve(
    caller: str,
    search: str | None,
    config: DecodingConfig | None,
    constraints: Constraints | None,
    overrides: Mapping[str, Any],
) -> tuple[DecodingConfig, Constraints | None]:
    """`(config, constraints)` of one call: the objects given (or the defaults) with every
    keyword of `overrides` put in (the rule of the module docstring). `caller` names the
    function in messages; `search` (`"beam"`, `"greedy"`, `"sample"`, or None for the engine,
    whose strategy holds its own knobs) says which keywords it reads. Constraints with no
    field set come back as None."""
    if config is not None and not isinstance(config, DecodingConfig):
        raise ValueError(f"`config` must be a DecodingConfig or None. Received: config={config!r}")
    if constraints is not None and not isinstance(constraints, Constraints):
        raise ValueError(
            f"`constraints` must be a Constraints or None. Received: constraints={constraints!r}"
        )
    changes = {"config": {}, "constraints": {}}
    for name, value in overrides.items():
        keyword = KEYWORDS.get(name)
        if keyword is None:
            raise ValueError(
                f"`{caller}` takes no keyword `{name}` (its keywords: the table "
                f"`keras_attn.decoding.call.KEYWORDS`: {', '.join(_names(search))}). "
                f"Received: {name}={value!r}"
            )
        if (search is None and name not in _ENGINE) or (search and search not in keyword.searches):
            readers = ", ".join(f"{s}_search" for s in keyword.searches)
            raise ValueError(
                f"`{caller}` does not read `{name}` (read by: {readers}; "
                f"{'the strategy holds it' if search is None else 'remove it'}). "
                f"Received: {name}={value!r}"
            )
        changes[keyword.holder][name] = value
    config = DecodingConfig.build(config, changes["config"])
    if changes["constraints"]:
        base = constraints if constraints is not None else Constraints()
        constraints = base.replace(**changes["constraints"])
    if constraints is not None and constraints.empty:
        constraints = None
    return config, constraints


def _names(search):
    if search is None:
        return _ENGINE
    return tuple(name for name, kw in KEYWORDS.items() if search in kw.searches)
