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
the other modes. `log_probs` and `scores` are those of the distribution before temperature,
top-k and top-p (the model's own, after the repetition penalty if any), so they compare
with greedy and beam search.
"""

import tensorflow as tf

from keras_attn.decoding import engine, strategies


def _run(strategy, step_fn, initial_state, start_tokens, end_token, settings):
    """`engine.decode` without the K axis (the strategies here have one hypothesis per row)."""
    out = engine.decode(step_fn, initial_state, start_tokens, end_token, strategy, settings)
    return {key: value if key == "invalid" else value[:, 0] for key, value in out.items()}


@tf.autograph.experimental.do_not_convert
def greedy_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length=50,
    length_penalty=0.0,
    coverage_penalty=0.0,
    eos_penalty=0.0,
    source_mask=None,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    bad_token_ids=None,
    report_invalid=False,
):
    """Picks the most likely allowed token at every step (ties: the lowest id).

    Arguments as in `beam_search` (there is no beam: `N = B`; `report_invalid` too). Returns a
    dict with `sequences` int32 `[B, T]`, `lengths` int32 `[B]`, `scores`
    and `log_probs` float32 `[B]`, and `alignments` float32 `[B, T, S]` when
    the step returns attention.
    """
    settings = engine.Settings.of(locals())
    return _run(strategies.Greedy(), step_fn, initial_state, start_tokens, end_token, settings)


@tf.autograph.experimental.do_not_convert
def sample_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length=50,
    temperature=1.0,
    top_k=0,
    seed=None,
    length_penalty=0.0,
    coverage_penalty=0.0,
    eos_penalty=0.0,
    source_mask=None,
    top_p=1.0,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    bad_token_ids=None,
    report_invalid=False,
):
    """Samples every token from the (temperature-scaled, top-k, top-p) distribution.

    Args (besides those of `greedy_search`):
      temperature: in [0.01, 100]; < 1 sharpens, > 1 flattens the distribution.
      top_k: sample among the `top_k` most likely tokens; 0 means all.
      top_p: in (0, 1]; then among the smallest set whose probability reaches `top_p`.
      seed: an int, an int32 `[]` or `[2]` tensor, or None (a fresh random seed per call).
        Step t uses `stateless_fold_in(seed, t)`.
    Returns the same dict as `greedy_search`.
    """
    strategy = strategies.Sampling(temperature, top_k, top_p, seed)
    settings = engine.Settings.of(locals())
    return _run(strategy, step_fn, initial_state, start_tokens, end_token, settings)
