"""Greedy search and sampling over a step function, in one `tf.while_loop`.

Same step-function contract, buffers and conventions as `beam_search`
(without the beam axis): `sequences [B, T]` with `T = max_length`,
`lengths [B]` counting the end token, columns past the end holding
`end_token`, `alignments [B, T, S]` zero past the end, finished rows frozen.
`scores` use the same GNMT formula (`penalties.score`) as beam search, so
`greedy_search` equals `beam_search(..., beam_size=1)` in every output.

`sample_search` draws each token from `softmax(log_probs / temperature)`
restricted to the `top_k` most likely tokens (0 = all; ties at the k-th
value are all kept). It uses stateless random ops: the same `seed` gives
the same samples eagerly, in `tf.function` and in a SavedModel. Under XLA
(`jit_compile=True`) it draws by Gumbel-max from `keras_attn.layers.rng`'s
fused generator: the same seed again gives the same samples, from the same
distribution, but not those of the other modes.
`log_probs` and `scores` are those of the model's own distribution
(temperature 1, no top-k), so they compare with greedy and beam search.
"""

import tensorflow as tf

from keras_attn.decoding import _common
from keras_attn.decoding import penalties
from keras_attn.layers import rng


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
):
    """Picks the most likely token at every step (ties: the lowest id).

    Arguments as in `beam_search` (there is no beam: `N = B`). Returns a
    dict with `sequences` int32 `[B, T]`, `lengths` int32 `[B]`, `scores`
    and `log_probs` float32 `[B]`, and `alignments` float32 `[B, T, S]` when
    the step returns attention.
    """

    def choose(log_probs, step):
        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)

    return _search(
        step_fn,
        initial_state,
        start_tokens,
        end_token,
        max_length,
        length_penalty,
        coverage_penalty,
        eos_penalty,
        source_mask,
        choose,
    )


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
):
    """Samples every token from the (temperature-scaled, top-k) distribution.

    Args (besides those of `greedy_search`):
      temperature: > 0; < 1 sharpens, > 1 flattens the distribution.
      top_k: sample among the `top_k` most likely tokens; 0 means all.
      seed: an int, an int32 `[2]` tensor, or None (a fresh random seed per call).
        Step t uses `stateless_fold_in(seed, t)`.
    Returns the same dict as `greedy_search`.
    """
    temperature = _common.check_float("temperature", temperature, positive=True)
    top_k = _common.check_int("top_k", top_k, 0)
    if seed is None:
        seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    elif isinstance(seed, int):
        seed = tf.constant([0, seed % (2**31 - 1)], tf.int32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
    if seed.shape.rank == 0:
        seed = tf.stack([tf.zeros([], tf.int32), seed])
    seed = tf.reshape(seed, [2])

    def choose(log_probs, step):
        logits = log_probs / temperature
        if not (isinstance(top_k, int) and top_k == 0):
            vocab = tf.shape(logits)[-1]
            kth = tf.clip_by_value(top_k, 1, vocab) - 1
            threshold = tf.gather(tf.sort(logits, axis=-1, direction="DESCENDING"), kth, axis=-1)
            keep = logits >= threshold[:, None]
            if not isinstance(top_k, int):  # top_k == 0 at run time keeps all
                keep = keep | tf.equal(top_k, 0)
            logits = tf.where(keep, logits, _common.NEG)
        step_seed = tf.random.experimental.stateless_fold_in(seed, step)
        if rng._in_xla():
            # XLA:CPU compiles stateless_categorical's generator into slow code (7x TF's
            # kernel at [32, 8000]); Gumbel-max over keras_attn's fused draws samples the same
            # distribution: argmax(logits + G), G = -log(-log(U)).
            uniform = rng.uniform(tf.shape(logits), minval=1e-20, maxval=1.0, seed=step_seed)
            gumbel = -tf.math.log(-tf.math.log(uniform))
            return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)
        sample = tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int32)
        return sample[:, 0]

    return _search(
        step_fn,
        initial_state,
        start_tokens,
        end_token,
        max_length,
        length_penalty,
        coverage_penalty,
        eos_penalty,
        source_mask,
        choose,
    )


def _search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    length_penalty,
    coverage_penalty,
    eos_penalty,
    source_mask,
    choose,
):
    """One hypothesis per row; `choose(log_probs [B, V], step) -> tokens [B]`."""
    max_length, alpha, beta, gamma, start_tokens, end_token = _common.check_search_args(
        max_length, length_penalty, coverage_penalty, eos_penalty, start_tokens, end_token
    )
    batch = _common.dim(start_tokens, 0)
    length = max_length

    state = _common.as_tensor_nest(initial_state)
    step0 = tf.constant(0, tf.int32)
    log_probs0, state0, attention0 = _common.step_outputs(
        step_fn(start_tokens, state, step0), batch
    )
    state = _common.check_state_shapes(state0, state)
    end_token = _common.check_end_token(end_token, _common.dim(log_probs0, 1))
    has_attention = attention0 is not None
    mask, source_lengths = _common.source_info(source_mask, attention0, batch)

    hyp = {
        "sequences": tf.fill(tf.stack([batch, length]), end_token),
        "log_probs": tf.zeros(tf.reshape(batch, [1]), tf.float32),
        "lengths": tf.zeros(tf.reshape(batch, [1]), tf.int32),
        "finished": tf.zeros(tf.reshape(batch, [1]), tf.bool),
    }
    if has_attention:
        width = _common.dim(attention0, 1)
        hyp["coverage"] = tf.zeros(tf.stack([batch, width]), tf.float32)
        hyp["alignments"] = tf.zeros(tf.stack([batch, length, width]), tf.float32)

    def advance(step, log_probs, attention, hyp):
        finished = hyp["finished"]
        tokens = tf.where(finished, end_token, choose(log_probs, step))
        chosen = tf.gather(log_probs, tokens, batch_dims=1)
        new = {
            "log_probs": tf.where(finished, hyp["log_probs"], hyp["log_probs"] + chosen),
            "lengths": tf.where(finished, hyp["lengths"], step + 1),
            "finished": finished | tf.equal(tokens, end_token) | (step + 1 >= length),
            "sequences": _common.write_column(hyp["sequences"], step, tokens[:, None], 1),
        }
        if has_attention:
            new["coverage"] = tf.where(
                finished[:, None], hyp["coverage"], hyp["coverage"] + attention
            )
            new["alignments"] = _common.write_column(
                hyp["alignments"],
                step,
                tf.where(finished[:, None], 0.0, attention)[:, None, :],
                1,
            )
        return tokens, new

    tokens, hyp = advance(step0, log_probs0, attention0, hyp)

    def cond(step, tokens, state, hyp):
        return tf.logical_and(step < length, tf.logical_not(tf.reduce_all(hyp["finished"])))

    def body(step, tokens, state, hyp):
        log_probs, new_state, attention = _common.step_outputs(
            step_fn(tokens, state, step), batch
        )
        if (attention is not None) != has_attention:
            raise ValueError(
                "`step_fn` must return attention at every step or at none "
                "(it returned it at step 0: %s)." % has_attention
            )
        new_state = _common.keep_shapes(new_state, state)
        new_tokens, new_hyp = advance(step, log_probs, attention, hyp)
        new_tokens, new_hyp = _common.keep_shapes((new_tokens, new_hyp), (tokens, hyp))
        return step + 1, new_tokens, new_state, new_hyp

    _, _, _, hyp = tf.while_loop(
        cond,
        body,
        (tf.constant(1, tf.int32), tokens, state, hyp),
        maximum_iterations=length - 1,
    )

    if has_attention:
        cp = penalties.coverage_penalty(hyp["coverage"], beta, mask)
    else:
        cp = 0.0
    out = {
        "sequences": hyp["sequences"],
        "lengths": hyp["lengths"],
        "scores": penalties.score(
            hyp["log_probs"], hyp["lengths"], alpha, cp, source_lengths, gamma
        ),
        "log_probs": hyp["log_probs"],
    }
    if has_attention:
        out["alignments"] = hyp["alignments"]
    return out
