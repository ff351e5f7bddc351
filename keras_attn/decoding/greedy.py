"""Greedy search and sampling over a step function: strategies of the decoding engine.

Same step-function contract, buffers and conventions as `beam_search` (without the beam
axis): `sequences [B, T]` with `T = max_length`, `lengths [B]` counting the end token,
columns past the end holding `end_token`, `alignments [B, T, S]` zero past the end,
finished rows frozen. `scores` use the same GNMT formula (`penalties.score`) as beam
search, so `greedy_search` equals `beam_search(..., beam_size=1)` in every output, with the
same controls too.

`sample_search` draws each token from `softmax(log_probs / temperature)` restricted to the
`top_k` most likely tokens (0 = all) and then to the smallest set whose probability reaches
`top_p` (nucleus; ties at either boundary are all kept). It uses stateless random ops: the
same `seed` gives the same samples eagerly, in `tf.function` and in a SavedModel. Under XLA
(`jit_compile=True`) it draws by Gumbel-max from `keras_attn.layers.rng`'s fused generator:
the same seed again gives the same samples, from the same distribution, but not those of
the other modes. On JAX it draws with `jax.random` (`fold_in` of the seed and the step, then
`categorical`): the same seed gives the same samples eagerly and under `jax.jit`, from the
same distribution as on TensorFlow but not the same numbers. `log_probs` and `scores` are those of the distribution before temperature,
top-k and top-p (the model's own, after the repetition penalty if any), so they compare
with greedy and beam search.
"""

from __future__ import annotations

from typing import Any

from keras_attn.decoding import backend as kb
from keras_attn.decoding import engine, strategies
from keras_attn.decoding.config import DecodingConfig


def _run(strategy, step_fn, initial_state, start_tokens, end_token, config, constraints):
    """`engine.decode` without the K axis (these strategies have one hypothesis per row)."""
    out = engine.decode(
        step_fn, initial_state, start_tokens, end_token, strategy, config, **constraints
    )
    return {key: value if key == "invalid" else value[:, 0] for key, value in out.items()}


@kb.do_not_convert
def greedy_search(
    step_fn: engine.StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    max_length: Any = 50,
    length_penalty: Any = 0.0,
    coverage_penalty: Any = 0.0,
    eos_penalty: Any = 0.0,
    source_mask: Any = None,
    min_length: Any = 0,
    no_repeat_ngram_size: Any = 0,
    repetition_penalty: Any = 1.0,
    bad_token_ids: Any = None,
    report_invalid: bool = False,
    *,
    config: DecodingConfig | None = None,
    prefix_ids: Any = None,
    constraint_ids: Any = None,
    suppress_ids: Any = None,
    constraint_alt_ids: Any = None,
    budget_ids: Any = None,
    budget_costs: Any = None,
    budgets: Any = None,
) -> dict[str, Any]:
    """Picks the most likely allowed token at every step (ties: the lowest id).

    Arguments as in `beam_search` (there is no beam: `N = B`; `report_invalid`, `config` and
    the constraints too; a started phrase is forced to its end). Returns a dict with
    `sequences` int32 `[B, T]`, `lengths` int32 `[B]`, `scores` and `log_probs` float32 `[B]`,
    `token_log_probs` float32 `[B, T]`, `alignments` float32 `[B, T, S]` when the step returns
    attention, and `constraints_met` bool `[B]` with `constraint_ids`.
    """
    config = DecodingConfig.build(
        config,
        max_length=max_length,
        length_penalty=length_penalty,
        coverage_penalty=coverage_penalty,
        eos_penalty=eos_penalty,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty,
        bad_token_ids=bad_token_ids,
        report_invalid=report_invalid,
    )
    constraints = dict(
        source_mask=source_mask,
        prefix_ids=prefix_ids,
        constraint_ids=constraint_ids,
        suppress_ids=suppress_ids,
        constraint_alt_ids=constraint_alt_ids,
        budget_ids=budget_ids,
        budget_costs=budget_costs,
        budgets=budgets,
    )
    return _run(
        strategies.Greedy(), step_fn, initial_state, start_tokens, end_token, config, constraints
    )


@kb.do_not_convert
def sample_search(
    step_fn: engine.StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    max_length: Any = 50,
    temperature: Any = 1.0,
    top_k: Any = 0,
    seed: Any = None,
    length_penalty: Any = 0.0,
    coverage_penalty: Any = 0.0,
    eos_penalty: Any = 0.0,
    source_mask: Any = None,
    top_p: Any = 1.0,
    min_length: Any = 0,
    no_repeat_ngram_size: Any = 0,
    repetition_penalty: Any = 1.0,
    bad_token_ids: Any = None,
    report_invalid: bool = False,
    *,
    config: DecodingConfig | None = None,
    prefix_ids: Any = None,
    constraint_ids: Any = None,
    suppress_ids: Any = None,
    constraint_alt_ids: Any = None,
    budget_ids: Any = None,
    budget_costs: Any = None,
    budgets: Any = None,
) -> dict[str, Any]:
    """Samples every token from the (temperature-scaled, top-k, top-p) distribution.

    Args (besides those of `greedy_search`):
      temperature: in [0.01, 100]; < 1 sharpens, > 1 flattens the distribution (0 is refused:
        `greedy_search` is that).
      top_k: sample among the `top_k` most likely tokens; 0 means all.
      top_p: in (0, 1]; then among the smallest set whose probability reaches `top_p`.
      seed: an int, an int32 `[]` or `[2]` tensor, or None (a fresh random seed per call).
        Step t uses `stateless_fold_in(seed, t)`.
    Returns the same dict as `greedy_search`.
    """
    config = DecodingConfig.build(
        config,
        max_length=max_length,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
        length_penalty=length_penalty,
        coverage_penalty=coverage_penalty,
        eos_penalty=eos_penalty,
        top_p=top_p,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty,
        bad_token_ids=bad_token_ids,
        report_invalid=report_invalid,
    )
    strategy = strategies.Sampling(config.temperature, config.top_k, config.top_p, config.seed)
    constraints = dict(
        source_mask=source_mask,
        prefix_ids=prefix_ids,
        constraint_ids=constraint_ids,
        suppress_ids=suppress_ids,
        constraint_alt_ids=constraint_alt_ids,
        budget_ids=budget_ids,
        budget_costs=budget_costs,
        budgets=budgets,
    )
    return _run(strategy, step_fn, initial_state, start_tokens, end_token, config, constraints)
