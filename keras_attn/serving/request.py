"""One request to a served search, built once where it enters and handed down as one object.

`SearchRequest` is what a caller of a served model asks for: the search mode
(`keras_attn.decoding.modes`), its knobs as one checked `DecodingConfig` (each range checked
there, once, with the Python API's message) together with the names the caller gave, and the
string inputs of a constrained request (`prefix`, `constraints`). Each edge builds it once: the
clients' keyword methods (`client.beam_search(texts, beam_size=8)`), the `keras-attn translate`
flags, the streaming client. Below the edge, functions take the object and read a knob by name
(`request.config.beam_size`); nothing checks a range again.

The signature a request goes to is the served table's routing (`specs.route`: the smallest of
the mode's signatures that takes every name given), and the values it sends are the config's
(`values`): the knobs given, and for the others the config's defaults, which are the decoding
table's. Importing this module imports neither Keras nor TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from keras_attn.serving import specs

_INT32 = (-(2**31), 2**31 - 1)
# Where an export keeps its search settings (`keras_attn.serving.writer.write_savedmodel`).
SETTINGS_FILE = os.path.join("assets.extra", "search_settings.json")


def _decoding_config():
    from keras_attn.decoding.config import DecodingConfig

    return DecodingConfig


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """One request to a served search, checked once when it is built (`build`); frozen.

    Attributes:
      mode: `"beam"`, `"greedy"` or `"sample"` (`keras_attn.decoding.modes.MODES`).
      config: the request's knobs, a `keras_attn.decoding.DecodingConfig` (the ones not given
        at their defaults).
      given: the request parameters the caller set (`specs.REQUEST_PARAMS`), in the table's
        order: what the request is routed by.
      prefix: the text every output starts with (one for every input, or one per input), or
        None.
      constraints: phrases every output holds (a list for every input, or one list per
        input), or None.
    """

    mode: str
    config: Any
    given: tuple[str, ...] = ()
    prefix: str | bytes | Sequence | None = None
    constraints: Sequence | None = None

    @classmethod
    def build(
        cls,
        mode: str,
        params: Mapping[str, Any],
        prefix: str | bytes | Sequence | None = None,
        constraints: Sequence | None = None,
    ) -> SearchRequest:
        """The request of `mode` with the request parameters `params` (`{name: value}`, None:
        not given), `prefix` and `constraints`. Each value is checked here against its range
        (`ValueError` naming it, the Python API's message) and against int32 (a request
        carries it as one); the names against the mode's signatures (`specs.check_takes`; the
        signature itself is chosen when the request is sent: `signature`)."""
        from keras_attn.decoding.modes import mode as check_mode

        check_mode(mode)
        given = {name: value for name, value in params.items() if value is not None}
        strings = [
            n for n, v in (("prefix", prefix), ("constraints", constraints)) if v is not None
        ]
        specs.check_takes(mode, list(given) + strings)
        config = _decoding_config()(**given)
        for name in given:
            value = getattr(config, name)
            if specs.request_param(name).dtype == "int32" and not _INT32[0] <= value <= _INT32[1]:
                raise ValueError(
                    f"`{name}` must fit in int32 (a request carries it as one). "
                    f"Received: {name}={value!r}"
                )
        names = tuple(name for name in specs.REQUEST_PARAMS if name in given)
        return cls(mode, config, names, prefix, constraints)

    @property
    def signature(self) -> str:
        """The served signature this request goes to (`specs.route`)."""
        return specs.route(self.mode, self.given + self.strings)

    @property
    def strings(self) -> tuple[str, ...]:
        """The string inputs given besides the texts: `prefix`, `constraints`."""
        return tuple(
            name
            for name, value in (("prefix", self.prefix), ("constraints", self.constraints))
            if value is not None
        )

    def values(self, signature: str | None = None) -> dict[str, Any]:
        """`{name: value}` of every request parameter of `signature` (default: the routed
        one): the config's values (checked when the request was built), the served default
        for the seed the caller left out (a request carries a number)."""
        signature = signature or self.signature
        return {
            name: specs.request_param(name).default
            if getattr(self.config, name) is None
            else getattr(self.config, name)
            for name in specs.SIGNATURES[signature]
        }

    def replace(
        self, params: Mapping[str, Any] = (), prefix: Any = None, constraints: Any = None
    ) -> SearchRequest:
        """A request with the parameters of `params` given too (checked again as `build`)."""
        given = {name: getattr(self.config, name) for name in self.given}
        given.update(dict(params))
        return SearchRequest.build(
            self.mode,
            given,
            self.prefix if prefix is None else prefix,
            self.constraints if constraints is None else constraints,
        )


# The settings an export keeps in `SETTINGS_FILE`: those a request starts from (what
# `serving_default` searches with) and the largest `beam_size` and `max_length` it may ask for.
SETTINGS_NAMES = specs.SEARCH_SETTINGS + ("beam_size_limit", "max_length_limit")


def search_settings(settings: Any) -> dict:
    """`{name: number}` of a `ServingSettings`' `SETTINGS_NAMES`: what the exporter writes to
    `SETTINGS_FILE` (`keras_attn.serving.writer.write_savedmodel(..., settings=)`)."""
    return {name: getattr(settings, name) for name in SETTINGS_NAMES}


def written_settings(version_dir: str | os.PathLike) -> dict | None:
    """The search settings an export wrote beside its graph (`SETTINGS_FILE`), or None for an
    export written without them. Plain Python: no TensorFlow runs."""
    try:
        with open(os.path.join(os.fspath(version_dir), SETTINGS_FILE), encoding="utf-8") as f:
            return dict(json.load(f))
    except FileNotFoundError:
        return None


def export_settings(version_dir: str | os.PathLike) -> dict:
    """`{name: number}`: the search settings an export wrote (`written_settings`). An export
    written without them gives the values its `beam_search` warm-up request sends (the same
    settings, `ServingSignatures.request_params`; read with TensorFlow); `{}` when it has
    neither."""
    written = written_settings(version_dir)
    if written is not None:
        return written
    from keras_attn.serving.harness import read_warmup_records

    for record in read_warmup_records(os.fspath(version_dir), missing_ok=True):
        sent = record.request
        if sent is not None and sent.signature_name == "beam_search":
            return {
                name: value.item()
                for name, value in sent.inputs.items()
                if name in specs.SEARCH_SETTINGS
            }
    return {}
