"""Beam search over a step function (API.md section 3), in one `tf.while_loop`.

Design (one line each):
- The beam is one `[B, K]` set of hypotheses. Every step, each live
  hypothesis offers its V extensions and each finished one offers only
  itself (with the end token appended for padding and its score unchanged);
  the K best of those `K * V` candidates by the GNMT score survive. A
  finished hypothesis is therefore frozen: never extended, its length,
  log-prob, score and alignments never change; it may only be pushed out by
  K better candidates (as in OpenNMT / tfa.seq2seq).
- Live candidates are ranked by the score they would have if they ended
  now (the documented score with `|Y| = step + 1`), so the ranking and the
  returned scores are the same number.
- At step 0 all K beams are identical, so only beam 0 is expanded (the
  others offer nothing); when fewer than K hypotheses exist at all, the
  surplus rows are empty: `scores` and `log_probs` `-inf`, `lengths` 0,
  `sequences` all `end_token`, `alignments` 0.
- Impossible candidates score `NEG = -1e9` (finite) so no NaN can appear;
  a chosen candidate at or below `NEG / 2` marks an empty row. A token whose
  logit is `-inf` is therefore never chosen over a possible one.
- `sequences` always have `T = max_length` columns (a data-dependent trim
  would not compile under XLA); columns past `lengths` hold `end_token` and
  alignments there are 0.
- The search stops when every hypothesis is finished or after `max_length`
  steps; a hypothesis that reaches `max_length` without the end token is
  finished there.
- The first step is peeled out of the loop: it tells the search the
  vocabulary size and whether (and how wide) the step returns attention,
  so the buffers can be preallocated; `step_fn` is always called with
  `N = B * K` rows.
- Every state leaf (any nest, e.g. key/value caches `[N, ...]`) is gathered
  along the surviving beams after every step.
- The searches are not converted by AutoGraph (tracing stays fast), so
  neither is the step function called inside: write its tensor-dependent
  control flow with `tf.cond` / `tf.where` (Keras layers need nothing), or
  convert it yourself with `tf.autograph.to_graph(step_fn)`.
- `beam_size`, `max_length` and the penalties may be Python numbers or
  scalar tensors; under `jit_compile=True` `beam_size` and `max_length`
  must be known when tracing (XLA needs static shapes).
"""

import tensorflow as tf

from keras_attn.decoding import _common
from keras_attn.decoding import penalties

NEG = _common.NEG


@tf.autograph.experimental.do_not_convert
def beam_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    beam_size=4,
    max_length=50,
    length_penalty=0.0,
    coverage_penalty=0.0,
    eos_penalty=0.0,
    source_mask=None,
):
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
      end_token: int32 scalar.
      beam_size: K >= 1 (Python int or int scalar tensor).
      max_length: most tokens generated, >= 1 (Python int or int scalar tensor).
      length_penalty: alpha in `lp = ((5 + |Y|) / 6) ** alpha`.
      coverage_penalty: beta in `cp = beta * sum_s log(clip(sum_t a_ts, 1e-10, 1))`.
      eos_penalty: gamma in `ep = gamma * |X| / |Y|`.
      source_mask: optional bool `[B, S]`; masked source positions are left
        out of the coverage penalty and of `|X|`. Without it `|X| = S` (the
        width of the attention), or 0 when the step returns no attention.

    Returns:
      A dict with `sequences` int32 `[B, K, T]` (T = max_length, the start
      token excluded), `lengths` int32 `[B, K]` (the end token counted),
      `scores` float32 `[B, K]` sorted best first, `log_probs` float32
      `[B, K]`, and `alignments` float32 `[B, K, T, S]` when the step returns
      attention. `scores = log_probs / lp + cp + ep` (see `penalties`).
    """
    beam_size = _common.check_int("beam_size", beam_size, 1)
    max_length, alpha, beta, gamma, start_tokens, end_token = _common.check_search_args(
        max_length, length_penalty, coverage_penalty, eos_penalty, start_tokens, end_token
    )

    batch = _common.dim(start_tokens, 0)
    k = beam_size
    n_rows = _common.mul(batch, k)
    length = max_length

    state = _common.tile_nest(_common.as_tensor_nest(initial_state), k)
    tokens = tf.repeat(start_tokens, k, axis=0)

    def call_step(tokens, state, step):
        return _common.step_outputs(step_fn(tokens, state, step), n_rows)

    step0 = tf.constant(0, tf.int32)
    log_probs0, state0, attention0 = call_step(tokens, state, step0)
    state = _common.check_state_shapes(state0, state)
    vocab = _common.dim(log_probs0, 1)
    end_token = _common.check_end_token(end_token, vocab)
    has_attention = attention0 is not None
    mask, source_lengths = _common.source_info(source_mask, attention0, batch)
    if mask is not None:
        mask = mask[:, None, :]  # [B, 1, S]
    source_lengths = source_lengths[:, None, None]  # [B, 1, 1]

    beam = {
        "sequences": tf.fill(tf.stack([batch, k, length]), end_token),
        "log_probs": tf.zeros(tf.stack([batch, k]), tf.float32),
        "scores": tf.zeros(tf.stack([batch, k]), tf.float32),
        "lengths": tf.zeros(tf.stack([batch, k]), tf.int32),
        "finished": tf.zeros(tf.stack([batch, k]), tf.bool),
    }
    if has_attention:
        width = _common.dim(attention0, 1)
        beam["coverage"] = tf.zeros(tf.stack([batch, k, width]), tf.float32)
        beam["alignments"] = tf.zeros(tf.stack([batch, k, length, width]), tf.float32)

    def gather_beams(x, parents):
        """`x` `[B, K, ...]` (or `[N, ...]`) reordered along the surviving beams."""
        shape = tf.shape(x)
        split = tf.concat([tf.stack([batch, k]), shape[1:]], axis=0)
        out = tf.reshape(tf.gather(tf.reshape(x, split), parents, batch_dims=1), shape)
        if not tf.executing_eagerly():
            out.set_shape(x.shape)
        return out

    def advance(step, log_probs, attention, state, beam, first):
        step_float = tf.cast(step, tf.float32) + 1.0  # |Y| of every candidate
        log_probs = tf.reshape(log_probs, tf.stack([batch, k, vocab]))
        finished = beam["finished"]
        cand_log_probs = beam["log_probs"][:, :, None] + log_probs  # [B, K, V]
        if has_attention:
            attention = tf.reshape(attention, tf.stack([batch, k, width]))
            coverage = beam["coverage"] + attention
            cp = penalties.coverage_penalty(coverage, beta, mask)[:, :, None]
        else:
            cp = 0.0
        cand = penalties.score(cand_log_probs, step_float, alpha, cp, source_lengths, gamma)
        cand = tf.maximum(cand, NEG)  # -inf logits -> impossible, finite
        # a finished hypothesis offers itself once, in the end token's slot
        # (an end token outside the vocabulary, e.g. -1, finishes only at
        # max_length, after which nothing is offered any more)
        is_end = tf.equal(tf.range(vocab), end_token)[None, None, :]
        frozen = tf.where(is_end, beam["scores"][:, :, None], NEG)
        cand = tf.where(finished[:, :, None], frozen, cand)
        if first:
            cand = tf.where(tf.equal(tf.range(k), 0)[None, :, None], cand, NEG)

        flat = tf.reshape(cand, tf.stack([batch, -1]))
        values, indices = tf.math.top_k(flat, k=k, sorted=True)
        parents = indices // vocab
        chosen = indices % vocab
        valid = values > NEG / 2

        def g(x):
            return tf.gather(x, parents, batch_dims=1)

        parent_finished = g(finished)
        chosen_log_probs = tf.gather(
            tf.reshape(cand_log_probs, tf.stack([batch, -1])), indices, batch_dims=1
        )
        new_tokens = tf.where(parent_finished | ~valid, end_token, chosen)
        new = {
            "log_probs": tf.where(parent_finished, g(beam["log_probs"]), chosen_log_probs),
            "scores": values,
            "lengths": tf.where(parent_finished, g(beam["lengths"]), step + 1),
            "finished": parent_finished
            | ~valid
            | tf.equal(new_tokens, end_token)
            | (step + 1 >= length),
            "sequences": _common.write_column(g(beam["sequences"]), step, new_tokens[:, :, None], 2),
        }
        if has_attention:
            step_attention = g(attention)
            new["coverage"] = tf.where(
                parent_finished[:, :, None], g(beam["coverage"]), g(coverage)
            )
            active = (~parent_finished & valid)[:, :, None]
            new["alignments"] = _common.write_column(
                g(beam["alignments"]),
                step,
                tf.where(active, step_attention, 0.0)[:, :, None, :],
                2,
            )
        state = tf.nest.map_structure(lambda x: gather_beams(x, parents), state)
        return tf.reshape(new_tokens, tf.reshape(n_rows, [1])), state, new

    tokens, state, beam = advance(step0, log_probs0, attention0, state, beam, first=True)

    def cond(step, tokens, state, beam):
        return tf.logical_and(step < length, tf.logical_not(tf.reduce_all(beam["finished"])))

    def body(step, tokens, state, beam):
        log_probs, new_state, attention = call_step(tokens, state, step)
        if (attention is not None) != has_attention:
            raise ValueError(
                "`step_fn` must return attention at every step or at none "
                "(it returned it at step 0: %s)." % has_attention
            )
        new_state = _common.keep_shapes(new_state, state)
        new_tokens, new_state, new_beam = advance(
            step, log_probs, attention, new_state, beam, first=False
        )
        loop_out = (new_tokens, new_state, new_beam)
        loop_out = _common.keep_shapes(loop_out, (tokens, state, beam))
        return (step + 1,) + tuple(loop_out)

    _, _, _, beam = tf.while_loop(
        cond,
        body,
        (tf.constant(1, tf.int32), tokens, state, beam),
        maximum_iterations=length - 1,
    )

    # Already best first by construction; a stable sort keeps that honest.
    order = tf.argsort(beam["scores"], axis=1, direction="DESCENDING", stable=True)
    beam = {key: tf.gather(value, order, batch_dims=1) for key, value in beam.items()}
    real = beam["scores"] > NEG / 2
    neg_inf = tf.fill(tf.shape(beam["scores"]), float("-inf"))
    out = {
        "sequences": tf.where(real[:, :, None], beam["sequences"], end_token),
        "lengths": tf.where(real, beam["lengths"], 0),
        "scores": tf.where(real, beam["scores"], neg_inf),
        "log_probs": tf.where(real, beam["log_probs"], neg_inf),
    }
    if has_attention:
        out["alignments"] = tf.where(real[:, :, None, None], beam["alignments"], 0.0)
    return out
