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
initial_decode_state -> a search, for one call in Python.
"""

import typing

from keras import ops

from keras_attn.decoding import backend as kb

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


@kb.do_not_convert
def generate(model, source_ids, start_token, end_token, search="greedy", max_length=50, **kwargs):
    """Decodes `source_ids` `[B, S]` with `model` (the protocol above) and a search.

    Args:
      model: follows `DecodingModel` (checked).
      source_ids: `[B, S]` int ids (0 = padding, as the models' `encode` expects).
      start_token, end_token: ids of the target vocabulary.
      search: `"greedy"`, `"beam"` or `"sample"`.
      max_length: most tokens generated.
      **kwargs: the search's own arguments (`beam_size`, `temperature`, `top_p`, `seed`,
        the penalties and the controls of docs/decoding.md).
    Returns the search's dict (`source_mask` comes from `encode`).
    """
    from keras_attn.decoding.beam_search import beam_search
    from keras_attn.decoding.greedy import greedy_search, sample_search

    searches = {"greedy": greedy_search, "beam": beam_search, "sample": sample_search}
    if search not in searches:
        raise ValueError(f"`search` must be one of {sorted(searches)}. Received: search={search!r}")
    check_model(model)
    encoded = model.encode(source_ids)
    if not isinstance(encoded, dict) or "source_mask" not in encoded:
        raise ValueError(
            "`model.encode` must return a dict of tensors that includes 'source_mask' [B, S]. "
            f"Received: {type(encoded).__name__}"
        )
    state = model.initial_decode_state(encoded, max_length)
    source_mask = ops.cast(encoded["source_mask"], "bool")
    start = kb.full(kb.shape_of(kb.dim(source_mask, 0)), start_token, "int32")
    return searches[search](
        model.decode_step,
        state,
        start,
        end_token,
        max_length=max_length,
        source_mask=source_mask,
        **kwargs,
    )
