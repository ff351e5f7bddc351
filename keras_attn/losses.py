"""Losses for attention models: REINFORCE surrogate, doubly stochastic penalty,
masked sequence cross-entropy (with label smoothing), sampled softmax over a log-uniform
candidate sampler. `keras.ops` only (every Keras backend).

Sign convention: every function here returns something to MINIMISE (add it to
the model's loss). `reinforce_surrogate` is therefore the *negative* of the
REINFORCE objective: its gradient is minus the REINFORCE estimate of the
gradient of the expected reward (plus the entropy bonus), so a gradient
*descent* step on it is an ascent step on the expected reward.
"""

import math

import keras
from keras import ops

from keras_attn import _checks


def _float(x):
    x = ops.convert_to_tensor(x)
    return x if x.dtype == "float32" else ops.cast(x, "float32")


def _sum_per_example(x):
    """`[B, ...]` to `[B]` (sum over every axis but the first)."""
    if len(x.shape) == 0:
        raise ValueError(
            f"Expected a tensor with a batch axis first. Received: shape={tuple(x.shape)}"
        )
    if len(x.shape) == 1:
        return x
    return ops.sum(x, axis=tuple(range(1, len(x.shape))))


def _expand_to(x, rank):
    while len(x.shape) < rank and len(x.shape) > 0:
        x = ops.expand_dims(x, -1)
    return x


def reinforce_surrogate(reward, log_prob, baseline=0.0, entropy=None, entropy_weight=0.0):
    """The REINFORCE (score-function) surrogate loss, to MINIMISE.

    Returns the scalar

        L = -mean_b [ sum_j (r_b - baseline) * log_prob_bj
                      + entropy_weight * sum_j entropy_bj ]

    with `r - baseline` under `stop_gradient`, so that

        grad L = -( E[(r - baseline) grad log p(s)] + entropy_weight grad H ),

    the negative of the REINFORCE estimator of the gradient of
    `E[reward] + entropy_weight * H` (Williams 1992; Xu et al. 2015).

    Args:
        reward: `[B]` (one reward per example, broadcast over the other axes
            of `log_prob`), or the shape of `log_prob`. No gradient flows.
        log_prob: `[B]` or `[B, ...]` log-probabilities of the drawn samples
            (e.g. `HardAttention(...)(..., return_sample=True)[-1]`). The
            samples of one example are summed (their joint log-probability).
        baseline: a scalar or a tensor broadcastable to `reward`. No gradient.
        entropy: optional `[B]` or `[B, ...]` entropies of the distributions
            sampled from, summed per example.
        entropy_weight: weight of the entropy bonus (needs `entropy`).
    """
    _checks.check_finite("entropy_weight", entropy_weight)
    log_prob = _float(log_prob)
    if len(log_prob.shape) == 0:
        raise ValueError(
            "`log_prob` must have a batch axis ([B] or [B, ...]). "
            f"Received: log_prob.shape={tuple(log_prob.shape)}"
        )
    advantage = ops.stop_gradient(_float(reward) - _float(baseline))
    advantage = _expand_to(advantage, len(log_prob.shape))
    objective = _sum_per_example(advantage * log_prob)
    if entropy_weight != 0.0:
        if entropy is None:
            raise ValueError(
                "`entropy` must be given when `entropy_weight` is not 0. "
                f"Received: entropy=None, entropy_weight={entropy_weight!r}"
            )
        objective = objective + float(entropy_weight) * _sum_per_example(_float(entropy))
    return -ops.mean(objective)


def doubly_stochastic_penalty(weights, mask=None, query_mask=None):
    """`sum_i (1 - sum_t alpha_ti)^2`, averaged over the batch (Xu et al. eq. 14).

    `weights` `[B, Tq, Tv]`: `t` runs over the query (decoder) steps, `i`
    over the source positions; the penalty pushes every source position to
    receive a total attention of 1 over the decoding.

    Args:
        weights: attention weights `[B, Tq, Tv]`.
        mask: optional source mask `[B, Tv]` (True = real position). Padded
            source positions are left out of the sum over `i` (otherwise each
            would add 1 to the penalty).
        query_mask: optional target mask `[B, Tq]` (True = real step). Padded
            decoder steps are left out of the sum over `t`.
    """
    weights = _float(weights)
    if len(weights.shape) != 3:
        raise ValueError(
            "`weights` must have shape [batch, Tq, Tv]. "
            f"Received: weights.shape={tuple(weights.shape)}"
        )
    if query_mask is not None:
        weights = weights * ops.expand_dims(ops.cast(_bool(query_mask), "float32"), -1)
    per_source = ops.square(1.0 - ops.sum(weights, axis=1))  # [B, Tv]
    if mask is not None:
        per_source = per_source * ops.cast(_bool(mask), "float32")
    return ops.mean(ops.sum(per_source, axis=-1))


def _bool(mask):
    mask = ops.convert_to_tensor(mask)
    if mask.dtype == "bool":
        return mask
    return ops.not_equal(mask, ops.zeros((), dtype=mask.dtype))


def token_log_likelihood(y_true, y_pred, from_logits=True):
    """`log p(y_true)` per token: `y_true [B, T]` ids, `y_pred [B, T, V]`; float32 `[B, T]`."""
    y_pred = _float(y_pred)
    if from_logits:
        log_p = ops.log_softmax(y_pred, axis=-1)
    else:
        log_p = ops.log(ops.clip(y_pred, 1e-7, 1.0))
    ids = ops.expand_dims(ops.cast(y_true, "int32"), -1)
    return ops.squeeze(ops.take_along_axis(log_p, ids, axis=-1), -1)


def sequence_log_likelihood(y_true, y_pred, mask=None, from_logits=True):
    """Per-example `sum_t log p(y_t)` over the unmasked tokens; float32 `[B]`.

    The natural REINFORCE reward of a sequence model (see
    `keras_attn.models.HardAttentionModel`).
    """
    ll = token_log_likelihood(y_true, y_pred, from_logits=from_logits)
    if mask is not None:
        ll = ll * ops.cast(_bool(mask), "float32")
    return ops.sum(ll, axis=-1)


def masked_sequence_loss(y_true, y_pred, mask=None, from_logits=True, label_smoothing=0.0):
    """Sparse cross-entropy over `[B, T]` tokens, averaged over the unmasked ones.

    With `label_smoothing = eps > 0` the target of each token is `(1 - eps) * onehot(y) + eps / V`
    (Szegedy et al. 2016; the Transformer paper trains with eps = 0.1), so the per-token loss is

        (1 - eps) * (-log p(y)) + eps * mean_v (-log p(v)).

    Args:
        y_true: int token ids `[B, T]`.
        y_pred: logits (or probabilities if `from_logits=False`) `[B, T, V]`. A model whose
            step already returns log-probabilities (copy attention) passes them as logits:
            `log_softmax` leaves normalised log-probabilities unchanged.
        mask: optional `[B, T]` (True/nonzero = a real token). With no
            unmasked token at all the loss is 0 (never NaN). Masked positions are
            selected out (`where`), so whatever they hold never reaches the loss.
        label_smoothing: `eps` in [0, 1).
    """
    _checks.check_rate("label_smoothing", label_smoothing)
    y_pred = _float(y_pred)
    if (
        mask is not None
    ):  # masked rows become constants: no NaN/inf there reaches the loss or its gradient
        y_pred = ops.where(ops.expand_dims(_bool(mask), -1), y_pred, 1.0)
    if from_logits:
        log_p = ops.log_softmax(y_pred, axis=-1)
    else:
        log_p = ops.log(ops.clip(y_pred, 1e-7, 1.0))
    # The value is the gathered target log-probability (an id outside the vocabulary fails as
    # a gather does); the gradient flows through the same number selected by comparing ids,
    # element-wise: a gather's own gradient scatters into `[B, T, V]`, which on CPU took the
    # largest share of a training step (benchmarks/train_step_profile.py). `where`, not a
    # product with a one-hot: a -inf elsewhere in the row never makes a NaN.
    ids = ops.expand_dims(ops.cast(y_true, "int32"), -1)
    gathered = ops.squeeze(ops.take_along_axis(ops.stop_gradient(log_p), ids, axis=-1), -1)
    vocab = log_p.shape[-1] if log_p.shape[-1] is not None else ops.shape(log_p)[-1]
    selected = ops.sum(ops.where(ops.equal(ids, ops.arange(vocab, dtype="int32")), log_p, 0.0), -1)
    nll = -(selected + ops.stop_gradient(gathered - selected))
    if label_smoothing:
        eps = float(label_smoothing)
        nll = (1.0 - eps) * nll - eps * ops.mean(log_p, axis=-1)
    if mask is None:
        return ops.mean(nll)
    keep = _bool(mask)
    m = ops.cast(keep, "float32")
    return ops.sum(ops.where(keep, nll, 0.0)) / ops.maximum(ops.sum(m), 1.0)


# ------------------------------------------------------------------------- sampled softmax
def log_uniform_probabilities(ids, num_classes):
    """`Q(k) = (log(k + 2) - log(k + 1)) / log(V + 1)`: the log-uniform (Zipf) distribution over
    ids `0..V-1`, frequent-first (a vocabulary sorted by frequency, as SentencePiece's is)."""
    k = ops.cast(ids, "float32")
    return (ops.log(k + 2.0) - ops.log(k + 1.0)) / math.log(float(num_classes) + 1.0)


def log_uniform_candidates(num_sampled, num_classes, seed=None):
    """`num_sampled` int32 ids drawn with replacement from the log-uniform distribution, by its
    inverse CDF: `k = floor(exp(u * log(V + 1))) - 1`, `u ~ U[0, 1)` (CDF(k) = log(k+2)/log(V+1))."""
    u = keras.random.uniform((int(num_sampled),), seed=seed)
    k = ops.floor(ops.exp(u * math.log(float(num_classes) + 1.0))) - 1.0
    return ops.cast(ops.clip(k, 0, num_classes - 1), "int32")


def sampled_softmax_loss(
    labels, inputs, kernel, bias=None, num_sampled=64, mask=None, seed=None, sampled=None
):
    """Sampled softmax cross-entropy (Jean et al. 2015), to MINIMISE; averaged over real tokens.

    Instead of the `V` logits `inputs @ kernel + bias`, each position scores its true class and
    `num_sampled` candidates `s_1..s_n` drawn (with replacement, shared by the batch) from the
    log-uniform distribution `Q` (`log_uniform_candidates`). Each logit is corrected by the log
    of its expected count, `o_k - log(n Q(k))`, and a candidate equal to the position's true
    class is removed (its logit set to -1e9), so that the softmax over `[true, candidates]` is an
    estimate of the full softmax whose gradient approaches the full one as `n` grows. Train with
    it; score and decode with the full `inputs @ kernel + bias` (the same weights: the model's
    output `Dense` layer, exported unchanged).

    Args:
        labels: int `[...]` true class ids.
        inputs: `[..., D]` the hidden states the output projection reads.
        kernel: `[D, V]` the output projection (`Dense(V).kernel`).
        bias: optional `[V]`.
        num_sampled: number of candidates `n` per step (>= 1, < V).
        mask: optional `[...]` (True = a real token); masked positions never reach the loss.
        seed: seed of the candidate draw (an int, or a `keras.random.SeedGenerator`).
        sampled: optional int `[n]` candidates to use instead of drawing (tests).
    """
    num_classes = int(kernel.shape[-1])
    _checks.check_int("num_sampled", num_sampled, minimum=1, maximum=num_classes - 1)
    if sampled is None:
        sampled = log_uniform_candidates(num_sampled, num_classes, seed=seed)
    sampled = ops.stop_gradient(ops.cast(sampled, "int32"))
    n = int(sampled.shape[0])
    labels = ops.cast(labels, "int32")
    inputs = _float(inputs)
    kernel = _float(kernel)
    if mask is not None:  # masked rows become constants: nothing they hold reaches the gradient
        inputs = ops.where(ops.expand_dims(_bool(mask), -1), inputs, 0.0)
    true_w = ops.take(ops.transpose(kernel), labels, axis=0)  # [..., D]
    true_logit = ops.sum(inputs * true_w, axis=-1)  # [...]
    sampled_logit = ops.matmul(inputs, ops.take(kernel, sampled, axis=1))  # [..., n]
    if bias is not None:
        bias = _float(bias)
        true_logit = true_logit + ops.take(bias, labels, axis=0)
        sampled_logit = sampled_logit + ops.take(bias, sampled, axis=0)
    true_logit = true_logit - ops.log(float(n) * log_uniform_probabilities(labels, num_classes))
    sampled_logit = sampled_logit - ops.log(
        float(n) * log_uniform_probabilities(sampled, num_classes)
    )
    hit = ops.equal(ops.expand_dims(labels, -1), sampled)
    sampled_logit = ops.where(hit, -1e9, sampled_logit)
    logits = ops.concatenate([ops.expand_dims(true_logit, -1), sampled_logit], axis=-1)
    nll = -ops.log_softmax(logits, axis=-1)[..., 0]
    if mask is None:
        return ops.mean(nll)
    keep = _bool(mask)
    return ops.sum(ops.where(keep, nll, 0.0)) / ops.maximum(ops.sum(ops.cast(keep, "float32")), 1.0)


def coverage_penalty(attention, target_mask=None):
    """Coverage loss of See et al. (2017): `sum_t sum_i min(a_ti, c_ti)`, `c_t = sum_{t'<t} a_t'`
    (the attention already paid to each source position), averaged over the real target steps.

    Args:
        attention: `[B, T, S]` attention weights of the decoder steps.
        target_mask: optional `[B, T]` (True = a real step). Masked steps neither pay nor add
            coverage, whatever they hold.
    """
    attention = _float(attention)
    if len(attention.shape) != 3:
        raise ValueError(
            f"`attention` must have shape [batch, Tq, Tv]. Received: attention.shape={tuple(attention.shape)}"
        )
    if target_mask is not None:
        keep = ops.expand_dims(_bool(target_mask), -1)
        attention = ops.where(keep, attention, 0.0)
        steps = ops.sum(ops.cast(_bool(target_mask), "float32"))
    else:
        steps = ops.cast(ops.shape(attention)[0] * ops.shape(attention)[1], "float32")
    coverage = ops.cumsum(attention, axis=1) - attention  # c_t: the sum over earlier steps
    return ops.sum(ops.minimum(attention, coverage)) / ops.maximum(steps, 1.0)
