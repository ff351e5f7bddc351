"""The model-side decoding protocol, declared once and checked once (docs/decoding.md).

A model the searches, `keras_attn.training`'s greedy metric and the exporter can decode
implements three methods:

    encode(source_ids [B, S] int32) -> dict with "source_mask" [B, S] bool (and anything else)
    initial_decode_state(encoder_outputs, max_length) -> nest of tensors with batch B
    decode_step(tokens [N] int32, state, step) -> (logits [N, V], state, attention [N, S] or None)

`decode_step` is a step function of the searches (`N = B * beam_size` rows; `step` is the
0-based index of the token being produced). A dict state's `"per_example"` part keeps B rows:
`decode_step` reads it for the `beam_size` hypotheses of each example (docs/decoding.md,
"Per-example state"). Nothing else is asked of the model: no base
class, no registration. `check_model` is the one check; `generate` is encode ->
initial_decode_state -> a search in one call (eagerly, in `tf.function`, in `jax.jit`), the
one copy of that glue; `encode_for_search` is its first half.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, NamedTuple

from keras import ops

from keras_attn.decoding import backend as kb

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from keras_attn.decoding.call import GenerateKeywords

METHODS = ("encode", "initial_decode_state", "decode_step")


@typing.runtime_checkable
class DecodingModel(typing.Protocol):
    """What a decodable model provides (see the module docstring)."""

    def encode(self, source_ids): ...

    def initial_decode_state(self, encoder_outputs, max_length): ...

    def decode_step(self, tokens, state, step): ...


def check_model(model, name="model"):
    """Raises `ValueError` naming the first missing method unless `model` follows the protocol."""
    for method in METHODS:
        if not callable(getattr(model, method, None)):
            raise ValueError(
                f"`{name}` must implement encode(source_ids), initial_decode_state(encoder_outputs, "
                f"max_length) and decode_step(tokens, state, step). Received: {name}={model!r} "
                f"without `{method}`"
            )
    return model


class SearchInputs(NamedTuple):
    """What a search needs from a model and its inputs (`encode_for_search`).

    Attributes:
      state: `model.initial_decode_state(encoded, max_length)`, batch B.
      start_tokens: `[B]` int32, the start token in every row.
      source_mask: `[B, S]` bool, from `encode`.
      encoded: the dict `model.encode` returned.
    """

    state: Any
    start_tokens: Any
    source_mask: Any
    encoded: dict


def encode_for_search(model, inputs, start_token, max_length) -> SearchInputs:
    """`model.encode(inputs)` -> `initial_decode_state` -> the start tokens and the source
    mask (the first half of `generate`, for a caller that runs the search itself, e.g. in
    another compiled function). Works eagerly, in `tf.function` (a batch unknown while
    tracing too) and in `jax.jit`; `max_length` may be a scalar tensor."""
    check_model(model)
    encoded = model.encode(inputs)
    if not isinstance(encoded, dict) or "source_mask" not in encoded:
        keys = f" with keys {sorted(encoded)}" if isinstance(encoded, dict) else ""
        raise ValueError(
            "`model.encode` must return a dict of tensors that includes 'source_mask' [B, S]. "
            f"Received: {type(encoded).__name__}{keys}"
        )
    state = model.initial_decode_state(encoded, max_length)
    source_mask = ops.cast(encoded["source_mask"], "bool")
    start = kb.full(kb.shape_of(kb.dim(source_mask, 0)), start_token, "int32")
    return SearchInputs(state, start, source_mask, encoded)


@kb.do_not_convert
def generate(
    model,
    inputs,
    start_token,
    end_token,
    search="greedy",
    max_length=None,
    *,
    config=None,
    constraints=None,
    **keywords: Unpack[GenerateKeywords],
):
    """Decodes `inputs` with `model`: encode -> initial decode state -> a search, in one call.

    The one glue between a model of the protocol and the searches: the training metric, the
    serving signatures, the examples and the benchmarks call it (or `encode_for_search`, its
    first half). It runs eagerly, inside `tf.function` (an unknown batch too) and `jax.jit`;
    called eagerly on JAX it is one compiled program per (model, static settings, padded
    shapes), kept and reused, the model's variables among its arguments (`compiled.py`).

    Args:
      model: follows `DecodingModel` (checked).
      inputs: what `model.encode` takes: source ids `[B, S]` (0 = padding), or images.
      start_token, end_token: ids of the target vocabulary (Python ints or int32 scalars).
      search: a mode of the table `modes.MODES` (`"greedy"`, `"beam"`, `"sample"`), or a
        `Strategy` (answered with the K axis, as by `engine.decode`).
      max_length: most tokens generated (a Python int or an int32 scalar); None: the
        config's (default 50). Given, it wins over `config.max_length`.
      config: a `DecodingConfig` (None: the defaults).
      constraints: a `Constraints` (None: none).
      **keywords: overrides from the one table `KEYWORDS` that the search reads
        (`beam_size`, `temperature`, the penalties, the controls, `prefix_ids`, ...); a
        keyword given wins over `config` and `constraints`.

    Returns the search's dict (`sequences`, `lengths`, `scores`, `log_probs`,
    `token_log_probs`, `alignments` when the step returns attention, ...).
    """
    from keras_attn.decoding import call, compiled, engine, modes, strategies

    strategy = search if isinstance(search, strategies.Strategy) else None
    if strategy is None:
        modes.mode(search, "search", " or a Strategy")
    if max_length is not None:
        keywords = {"max_length": max_length, **keywords}
    config, constraints = call.resolve(
        "generate", None if strategy else search, config, constraints, keywords
    )
    if not kb.is_tf():
        # JAX, called eagerly: encode, state and search as one program, the model's variables
        # as arguments (compiled.py)
        out = compiled.generate(model, inputs, start_token, end_token, search, config, constraints)
        if out is not None:
            return out
    encoded = encode_for_search(model, inputs, start_token, config.max_length)
    inputs = engine.Inputs(
        model.decode_step, encoded.state, encoded.start_tokens, end_token, encoded.source_mask
    )
    return engine.search(inputs, search, config, constraints)
