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

from typing import TYPE_CHECKING, Any

from keras_attn.decoding import backend as kb
from keras_attn.decoding import call, engine, strategies
from keras_attn.decoding.call import Constraints
from keras_attn.decoding.config import DecodingConfig

if TYPE_CHECKING:
    from typing_extensions import Unpack


@kb.do_not_convert
def greedy_search(
    step_fn: engine.StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    *,
    config: DecodingConfig | None = None,
    constraints: Constraints | None = None,
    source_mask: Any = None,
    **keywords: Unpack[call.EngineKeywords],
) -> dict[str, Any]:
    """Picks the most likely allowed token at every step (ties: the lowest id).

    Arguments as in `beam_search` (there is no beam: `N = B`; every keyword of `call.KEYWORDS`
    but `beam_size` and the sampling knobs; a started phrase is forced to its end). Returns a
    dict with `sequences` int32 `[B, T]`, `lengths` int32 `[B]`, `scores` and `log_probs`
    float32 `[B]`, `token_log_probs` float32 `[B, T]`, `alignments` float32 `[B, T, S]` when
    the step returns attention, and `constraints_met` bool `[B]` with `constraint_ids`.
    """
    inputs = engine.Inputs(step_fn, initial_state, start_tokens, end_token, source_mask)
    return engine.mode_search("greedy", inputs, config, constraints, keywords)


@kb.do_not_convert
def forced_search(
    step_fn: engine.StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    *,
    targets: Any,
    config: DecodingConfig | None = None,
    source_mask: Any = None,
    **keywords: Unpack[call.ForcedKeywords],
) -> dict[str, Any]:
    """The model's log-probability of given sequences: each row is made to choose its
    `targets` and then the end token (teacher forcing through the step function), with the
    model's own log-probabilities (`log_probs` sums them, end token included).

    Arguments as in `greedy_search`, with no constraints, and:
      targets: int32 `[B, L]` ids right-padded with -1, without the end token (the search
        needs one: `end_token` -1 is refused). A row longer
        than `max_length - 1` tokens is cut at `max_length` tokens without its end (its
        `lengths` is then below its length + 1).
    Returns the same dict as `greedy_search` (`scores` by the same formula, so a given sequence
    compares with the searches' answers).
    """
    given = [n for n in keywords if n in call.KEYWORDS and call.KEYWORDS[n].holder == "constraints"]
    if given:
        raise ValueError(
            f"`forced_search` takes no constraints (its rows are given). Received: {given}"
        )
    config, _ = call.resolve("forced_search", "greedy", config, None, keywords)
    inputs = engine.Inputs(step_fn, initial_state, start_tokens, end_token, source_mask)
    return engine.search(inputs, strategies.Forced(targets), config, None, k_axis=False)


@kb.do_not_convert
def sample_search(
    step_fn: engine.StepFunction,
    initial_state: Any,
    start_tokens: Any,
    end_token: Any,
    *,
    config: DecodingConfig | None = None,
    constraints: Constraints | None = None,
    source_mask: Any = None,
    **keywords: Unpack[call.SampleKeywords],
) -> dict[str, Any]:
    """Samples every token from the (temperature-scaled, top-k, top-p) distribution.

    Arguments as in `greedy_search`; the keywords also take the sampling knobs:
      temperature: in [0.01, 100]; < 1 sharpens, > 1 flattens the distribution (0 is refused:
        `greedy_search` is that).
      top_k: sample among the `top_k` most likely tokens; 0 means all.
      top_p: in (0, 1]; then among the smallest set whose probability reaches `top_p`.
      seed: an int, an int32 `[]` or `[2]` tensor, or None (a fresh random seed per call).
        Step t uses `stateless_fold_in(seed, t)`.
    Returns the same dict as `greedy_search`.
    """
    inputs = engine.Inputs(step_fn, initial_state, start_tokens, end_token, source_mask)
    return engine.mode_search("sample", inputs, config, constraints, keywords)
