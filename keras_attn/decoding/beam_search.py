"""Beam search over a step function (docs/decoding.md), one strategy of the decoding engine.

The loop, the buffers, finishing and reordering live in `engine.decode`; how candidates are
ranked and how finished hypotheses are kept in `strategies.Beam`; the controls in
`processors.Controls`. Conventions (the searches' public API):

- The beam is one `[B, K]` set of hypotheses; live candidates are ranked by the GNMT score
  they would have if they ended now, so the ranking and the returned scores are the same
  number; a finished hypothesis is frozen and may only be pushed out by K better candidates.
- When fewer than K hypotheses exist at all, the surplus rows are empty: `scores` and
  `log_probs` `-inf`, `lengths` 0, `sequences` all `end_token`, `alignments` 0.
- Impossible candidates score `NEG = -1e9` (finite) so no NaN can appear; a token whose
  logit is `-inf` is never chosen over a possible one.
- `sequences` always have `T = max_length` columns (XLA needs static shapes).
- `beam_size`, `max_length` and the real knobs may be Python numbers or scalar tensors;
  under `jit_compile=True` `beam_size` and `max_length` must be known when tracing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keras_attn.decoding import backend as kb
from keras_attn.decoding import call, engine
from keras_attn.decoding.call import Constraints
from keras_attn.decoding.config import DecodingConfig

if TYPE_CHECKING:
    from typing_extensions import Unpack

NEG = engine.NEG


@kb.do_not_convert
def beam_search(
    step_fn: engine.StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    *,
    config: DecodingConfig | None = None,
    constraints: Constraints | None = None,
    source_mask: Any = None,
    **keywords: Unpack[call.BeamKeywords],
) -> dict[str, Any]:
    """Beam search with GNMT length, coverage and end-of-sentence penalties.

    Args:
      step_fn: `step_fn(tokens [N] int32, state, step) -> (logits [N, V],
        state, attention [N, S] or None)` with `N = B * beam_size`; `state`
        is any nest of tensors with leading dimension N; `step` is the
        0-based int32 index of the token being produced. It must return the
        state with the shapes it receives and either always or never attention.
      initial_state: nest of tensors with leading dimension B (tiled to
        `B * beam_size` here; row `b * beam_size + k` is beam k of example b).
      start_tokens: `[B]` int32, fed at step 0.
      end_token: int32 scalar (-1: no end token, every hypothesis runs to max_length).
      config: a `DecodingConfig` holding the knobs below (None: their defaults).
      constraints: a `Constraints` holding the constraints below (None: none).
      source_mask: optional bool `[B, S]`; masked source positions are left
        out of the coverage penalty and of `|X|`. Without it `|X| = S` (the
        width of the attention), or 0 when the step returns no attention.
      **keywords: overrides from the one table `call.KEYWORDS`; a keyword given wins over
        `config` and `constraints` (its default and None too). The beam reads:
      beam_size: K >= 1 (Python int or int scalar tensor).
      max_length: most tokens generated, >= 1 (Python int or int scalar tensor).
      length_penalty: alpha in [0, 10], `lp = ((5 + |Y|) / 6) ** alpha`.
      coverage_penalty: beta in [0, 10], `cp = beta * sum_s log(clip(sum_t a_ts, 1e-10, 1))`.
      eos_penalty: gamma in [-10, 10], `ep = gamma * |X| / |Y|`.
      min_length: no hypothesis ends (with the end token) before it holds this many tokens.
      no_repeat_ngram_size: n > 0: no n-gram occurs twice in a hypothesis.
      repetition_penalty: in [0.01, 100]; CTRL's penalty on already generated tokens.
      bad_token_ids: optional list of ids never generated.
      report_invalid: when traced for XLA (`jit_compile=True`, which drops assertions), also
        return `"invalid"`, a bool scalar that is True where the check on the step's logits
        (NaN, `+inf`, a row of only `-inf`) would have raised; ignored outside XLA, where the
        check raises `InvalidArgumentError`.
      prefix_ids: int32 `[B, P]`, right-padded with -1: every sequence starts with its row's.
      constraint_ids: int32 `[B, C, L]`, right-padded with -1: phrases that must appear.
      suppress_ids: int32 `[S, L]`, right-padded with -1: token sequences that never occur.
      constraint_alt_ids: int32 `[B, C, L]` (with `constraint_ids`), -1 for none: a second id
        each phrase position accepts (another spelling of the phrase, e.g. its first subword
        without the word-start mark).
      budget_ids, budget_costs, budgets: a token budget, all three or none: token
        `budget_ids[u]` (int32 `[U]`, distinct ids, -1 an unused entry) costs
        `budget_costs[u, r]` (int32 `[U, R]`, >= 0) of resource r, every other token nothing;
        a hypothesis of example b spends at most `budgets[b, r]` (int32 `[B, R]`, >= 0).

    Returns:
      A dict with `sequences` int32 `[B, K, T]` (T = max_length, the start
      token excluded), `lengths` int32 `[B, K]` (the end token counted),
      `scores` float32 `[B, K]` sorted best first, `log_probs` float32
      `[B, K]`, `token_log_probs` float32 `[B, K, T]` (summing to `log_probs`),
      `alignments` float32 `[B, K, T, S]` when the step returns attention, and
      `constraints_met` bool `[B, K]` with `constraint_ids`.
      `scores = log_probs / lp + cp + ep` (see `penalties`).
    """
    inputs = engine.Inputs(step_fn, initial_state, start_tokens, end_token, source_mask)
    return engine.mode_search("beam", inputs, config, constraints, keywords)
