"""The search modes, written once: mode name -> the search it runs and what it answers.

A *mode* is what a caller asks for by name: `"beam"`, `"greedy"` or `"sample"`. The command line
(`keras-attn translate --greedy`), the served table (`keras_attn.serving.specs`: a signature's
search), the clients, the streaming client and `keras_attn.decoding.generate` all name a search
this way and read this table for which function runs it; the searches themselves read it for
their strategy (`Mode.strategy_for`) and whether they answer with a K axis (`n_best`). Which
knobs a mode reads is the knob table's column (`keras_attn.decoding.config.KNOBS`,
`Knob.searches`), so `reads` is derived from it, never restated.

Importing this module imports nothing (the command line reads it before any command runs);
`Mode.function()` and `Mode.strategy_for()` import the search when first asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Mode:
    """One search mode.

    Attributes:
      name: the mode's name (`"beam"`).
      search: the name of its function in `keras_attn.decoding` (`"beam_search"`).
      n_best: answers K hypotheses per input (`[B, K]`); otherwise one per input (`[B]`).
      strategy: the name of the `Strategy` that runs it in `keras_attn.decoding.strategies`.
      help: one line for documentation and command-line help.
    """

    name: str
    search: str
    n_best: bool
    strategy: str
    help: str

    def function(self):
        """The search function (`keras_attn.decoding.beam_search`, ...)."""
        return getattr(importlib.import_module("keras_attn.decoding"), self.search)

    def strategy_for(self, config):
        """The mode's `Strategy` for a validated `DecodingConfig` (`Strategy.of`: the knobs
        it reads are taken from `config`, not checked again)."""
        strategies = importlib.import_module("keras_attn.decoding.strategies")
        return getattr(strategies, self.strategy).of(config)

    @property
    def reads(self) -> tuple[str, ...]:
        """The knobs of `KNOBS` this mode reads, in the table's order."""
        from keras_attn.decoding.config import KNOBS

        return tuple(name for name, knob in KNOBS.items() if self.name in knob.searches)


#: The one table of search modes, in the order of documentation and flags.
MODES: Mapping[str, Mode] = types.MappingProxyType(
    {
        mode.name: mode
        for mode in (
            Mode(
                "beam", "beam_search", True, "Beam", "beam search: the K best hypotheses per input"
            ),
            Mode(
                "greedy", "greedy_search", False, "Greedy", "greedy search: the most likely token"
            ),
            Mode(
                "sample", "sample_search", False, "Sampling", "sampling: one drawn output per input"
            ),
        )
    }
)
#: The modes' names.
NAMES: tuple[str, ...] = tuple(MODES)


def mode(name: str, argument: str = "mode", also: str = "") -> Mode:
    """The `Mode` called `name`; otherwise a `ValueError` naming `argument` (the caller's word
    for it) and the modes, with `also` after them (what else the caller takes)."""
    if not isinstance(name, str) or name not in MODES:
        raise ValueError(
            f"`{argument}` must be one of {list(NAMES)}{also}. Received: {argument}={name!r}"
        )
    return MODES[name]
