"""Stochastic hard attention (Xu et al. 2015, "Show, Attend and Tell").

In training the layer draws one source position per query from the attention
distribution and returns exactly that row of `value`; at inference it returns
the row of the most probable position. The draw is not differentiable, so the
score weights are trained with REINFORCE: see `keras_attn.losses` for the
surrogate loss and `keras_attn.models.HardAttentionModel` for the way a model
adds it to its loss inside plain `model.fit`.
"""

import keras
from keras import ops

from keras_attn._checks import check_probability, check_rate, check_seed
from keras_attn.layers import rng, scoring
from keras_attn.layers.base import CrossAttention, check_choice, config_of

# log(0) at masked positions (finite, so that nothing downstream can become NaN).
_NEVER = scoring.LOG_ZERO


# One implementation for every layer: exact masking by selection, in float32.
masked_log_softmax = scoring.masked_log_softmax


@keras.saving.register_keras_serializable(package="keras_attn")
class HardAttention(CrossAttention):
    """Stochastic hard attention (Xu et al. 2015).

    The distribution `alpha = softmax(e)` over the unmasked source positions
    uses any score of docs/layers.md (`"additive"`, `"dot"`, `"general"`, `"concat"`).

    - `training=True`: one position `s ~ Categorical(alpha)` per query
      (Gumbel-max with the layer's seeded `SeedGenerator`, so it works under
      `jit_compile=True` and on JAX); the context is exactly `value[s]`
      (a gather, no one-hot product).
    - inference (`training` False or None): the argmax position.
    - soft mix (Xu et al. section 4.2): with probability
      `soft_mix_probability` per query (training only; default 0, set by
      `HardAttentionModel`, or per call) the context is the expected context
      `sum_s alpha_s value[s]` instead of the sample. Such a query still
      reports its drawn position and log-probability, but is left out of the
      REINFORCE term the layer records (its gradient flows through `alpha`).

    Args:
        score: `"additive"` (default), `"dot"`, `"general"` or `"concat"`.
        units: score units (`additive`/`concat`; defaults to the query dim).
        baseline_decay: `d` of the moving-average reward baseline
            `b <- d * b + (1 - d) * mean(reward)`, in `[0, 1)`.
        seed: integer seed of the position draws (None: unseeded).

    Call arguments: those of every cross-attention layer
    (`query, value, key=None, value_mask=None,
    return_attention_scores=False, training=None`) plus
    `return_sample=False`: also return `positions` (int32) and `log_prob`
    (`log alpha_s`, float32), shaped `[B, Tq]` (or `[B]` for a `[B, Dq]`
    query); and `soft_mix_probability=None` (overrides the attribute).

    Returns `context`, then `weights` (`alpha`, in training and at
    inference) if `return_attention_scores`, then `positions, log_prob` if
    `return_sample`.

    Masks: a masked source position is never drawn. A query whose every
    source position is masked gets a zero context, zero weights, position 0
    and log-probability 0. A masked query (Keras mask of `query`) gets a zero
    context, position 0 and log-probability 0.

    Weights, in order: the score's weights (`additive`: `W_q`, `W_k`, `v`;
    `general`: `W`; `concat`: `W`, `v`), then the non-trainable scalar
    `baseline` (initialised to 0), updated with `update_baseline(reward)`.
    """

    def __init__(self, score="additive", units=None, baseline_decay=0.9, seed=None, **kwargs):
        if "dropout" in kwargs:
            raise ValueError(
                "`dropout` is not an argument of HardAttention: its context is one row of "
                "`value`, not a weighted sum, so there are no attention weights to drop out "
                "(put a Dropout layer on the context or the memory instead). "
                f"Received: dropout={kwargs['dropout']!r}"
            )
        super().__init__(dropout=0.0, **kwargs)
        self.score = check_choice("score", score, scoring.SCORES)
        self.scorer = scoring.Score(score, units=units)
        self.units = units
        self.baseline_decay = check_rate("baseline_decay", baseline_decay)
        self.seed = check_seed("seed", seed)
        self.seed_generator = keras.random.SeedGenerator(seed)
        # Training-time state, set by `HardAttentionModel.compile` (not saved
        # in the config: it belongs to the training procedure).
        self.soft_mix_probability = 0.0
        self.record_samples = False
        self._sample_records = []

    @property
    def score_name(self):
        """The score's name, as `score` (the older name of that attribute)."""
        return self.score

    def build_extra(self, query_dim, key_dim):
        self.baseline = self.add_weight(
            name="baseline", shape=(), initializer="zeros", trainable=False, dtype="float32"
        )

    # --------------------------------------------------------------- baseline
    def update_baseline(self, reward):
        """`b <- decay * b + (1 - decay) * mean(reward)`; returns the new `b`.

        `reward` is any float tensor (its mean over all entries is used) and
        carries no gradient. Works inside `fit` on every backend (the JAX
        trainer picks up non-trainable updates made in `compute_loss`).
        """
        reward = ops.mean(ops.stop_gradient(ops.cast(reward, "float32")))
        new = self.baseline_decay * self.baseline + (1.0 - self.baseline_decay) * reward
        self.baseline.assign(new)
        return new

    def pop_sample_records(self):
        """The `(log_prob, entropy)` pairs recorded since the last pop.

        Recorded only while `record_samples` is True, by calls with
        `training=True`: `log_prob [B, Tq]` float32 with 0 for queries that
        drew nothing (masked, fully masked or soft-mixed) and the entropy
        `-sum_s alpha_s log alpha_s` `[B, Tq]` (0 for masked queries).
        """
        records, self._sample_records = self._sample_records, []
        return records

    def clear_sample_records(self):
        self._sample_records = []

    def call_options(
        self,
        query,
        value,
        query_mask,
        projected_key,
        return_sample=False,
        soft_mix_probability=None,
    ):
        """`return_sample` and `soft_mix_probability` checked, for `attend`; the query's
        mask also keeps masked queries out of the recorded samples."""
        if soft_mix_probability is not None:
            soft_mix_probability = check_probability("soft_mix_probability", soft_mix_probability)
        if len(value.shape) == 3 and value.shape[1] == 0:
            raise ValueError(
                "`value` must have at least one position: hard attention picks one. "
                f"Received: value.shape={tuple(value.shape)}"
            )
        return {
            "return_sample": bool(return_sample),
            "soft_mix_probability": soft_mix_probability,
            "sample_query_mask": query_mask if len(query.shape) == 3 else None,
        }

    def attend(
        self,
        query,
        keys,
        value,
        value_mask,
        return_weights,
        training,
        return_sample=False,
        soft_mix_probability=None,
        sample_query_mask=None,
    ):
        value = scoring.zero_masked(value, value_mask)  # padding may hold anything
        scores = self.scorer(query, keys)  # [B, Tq, Tv], float32
        mask = None if value_mask is None else ops.expand_dims(value_mask, 1)
        log_alpha = masked_log_softmax(scores, mask)  # float32, finite, finite gradient
        if mask is None:
            valid = ops.ones(ops.shape(log_alpha)[:2], dtype="bool")
            alpha32 = ops.exp(log_alpha)
        else:
            valid = ops.logical_and(
                ops.any(mask, axis=-1), ops.ones(ops.shape(log_alpha)[:2], dtype="bool")
            )
            alpha32 = ops.where(mask, ops.exp(log_alpha), 0.0)
        if sample_query_mask is not None:
            valid = ops.logical_and(valid, scoring.to_bool_mask(sample_query_mask))
        weights = ops.cast(alpha32, value.dtype)

        if training:
            shape = ops.shape(log_alpha)
            uniform = rng.uniform(
                shape, minval=1e-20, maxval=1.0, dtype="float32", seed=self.seed_generator
            )
            gumbel = -ops.log(-ops.log(uniform))
            perturbed = log_alpha + gumbel
            if mask is not None:
                perturbed = ops.where(mask, perturbed, _NEVER)
            positions = ops.argmax(perturbed, axis=-1)
        else:
            positions = ops.argmax(log_alpha, axis=-1)
        positions = ops.where(valid, ops.cast(positions, "int32"), 0)

        # log alpha at the drawn position as a one-hot select-and-sum, not
        # take_along_axis (a broadcast_to whose gradient XLA cannot compile
        # inside a decoder's while loop when log_prob is used in the loss).
        source = ops.arange(ops.shape(log_alpha)[-1], dtype="int32")
        hit = ops.equal(ops.expand_dims(positions, -1), source)
        picked = ops.sum(ops.where(hit, log_alpha, ops.zeros_like(log_alpha)), axis=-1)
        log_prob = ops.where(valid, picked, 0.0)

        context = scoring.gather_rows(value, positions)  # exactly value[s]
        keep = ops.expand_dims(valid, -1)
        context = ops.where(keep, context, ops.zeros_like(context))

        drew = valid
        if training:
            p = self.soft_mix_probability if soft_mix_probability is None else soft_mix_probability
            if p > 0.0:
                coin = rng.uniform(ops.shape(log_prob), dtype="float32", seed=self.seed_generator)
                soft = coin < p
                expected = scoring.weighted_sum(weights, value)
                context = ops.where(ops.expand_dims(soft, -1), expected, context)
                drew = ops.logical_and(drew, ops.logical_not(soft))
            if self.record_samples:
                plogp = ops.where(alpha32 > 0.0, alpha32 * log_alpha, 0.0)
                entropy = ops.where(valid, -ops.sum(plogp, axis=-1), 0.0)
                self._sample_records.append((ops.where(drew, log_prob, 0.0), entropy))

        extras = (positions, log_prob) if return_sample else ()
        return (context, weights if return_weights else None) + extras

    def get_config(self):
        config = {**super().get_config(), **config_of(self, HardAttention.__init__)}
        config.pop("dropout")  # not an argument: its context is one row of `value`
        return config
