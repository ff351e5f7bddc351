"""Luong (multiplicative) attention: dot, general and concat scores; global and local alignments."""

import keras
from keras import ops

from keras_attn import _checks
from keras_attn.layers import scoring
from keras_attn.layers.base import CrossAttention, check_choice, check_positive_int, config_of

LUONG_SCORES = ("dot", "general", "concat")
ALIGNMENTS = ("global", "local-m", "local-p")


@keras.saving.register_keras_serializable(package="keras_attn")
class LuongAttention(CrossAttention):
    """Attention of Luong et al. (2015), "Effective Approaches to Attention-based NMT".

    Scores between a query `q` (`Dq`) and a key `k` (`Dk`):
    - `"dot"`: `q . k` (needs `Dq == Dk`);
    - `"general"`: `q . (k W)`, `W [Dk, Dq]` (keys projected once per source);
    - `"concat"`: `v . tanh([q; k] W)`, `W [Dq + Dk, units]`, `v [units]`.
    `scale=True` multiplies the score by a learned scalar `g` (initialised to 1).

    Alignments (`s` are 0-based source positions, `D = window`):
    - `"global"`: softmax over every unmasked source position.
    - `"local-m"`: `p_t = t` (plus `position`, see below); softmax over the
      unmasked positions of the window `[p_t - D, p_t + D]`, zero outside.
    - `"local-p"`: `p_t = S sigmoid(v_p . tanh(W_p h_t))`, `S` the number of
      unmasked source positions of the example; softmax over the window, then
      multiplied (not renormalised) by `exp(-(s - p_t)^2 / (2 sigma^2))`,
      `sigma = sigma or D / 2`.
    The local alignments gather the `2D + 1` keys and values of each window
    and score only those, so their cost grows with the window, not with the
    source length. The full `[B, Tq, Tv]` weight matrix is only built when
    `return_attention_scores=True`. A window with no unmasked position gives
    zero weights and a zero context.

    Args:
        score: `"dot"`, `"general"` or `"concat"`.
        alignment: `"global"`, `"local-m"` or `"local-p"`.
        window: the half-width `D` of the local window (positive int).
        sigma: standard deviation of the local-p Gaussian (default `D / 2`).
        scale: learn a scalar `g` multiplying the score.
        units: hidden size of the concat score (default `Dq`); unused otherwise.
        dropout: dropout rate on the attention weights (training only).

    Call arguments: those of every cross-attention layer,
    `layer(query, value, key=None, value_mask=None,
    return_attention_scores=False, training=None)`, plus `position` for
    local-m: the source position of the first query step (int, or an int
    tensor scalar or `[B]`). For a `[B, Tq, Dq]` query `p_t = position + t`
    (`position` defaults to 0, so chunked decoding works); for a one-step
    `[B, Dq]` query `p_t = position`, which is then required. Other
    alignments ignore it.

    Weights, in order: the score's (`general`: `W`; `concat`: `W`, `v`),
    then `g` if `scale`, then `W_p [Dq, Dq]`, `v_p [Dq]` for local-p.
    """

    def __init__(
        self,
        score="general",
        alignment="global",
        window=10,
        sigma=None,
        scale=False,
        units=None,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(dropout=dropout, **kwargs)
        if score == "additive":
            raise ValueError(
                "'additive' is not a Luong score: use BahdanauAttention for additive attention, "
                f"or one of {', '.join(repr(s) for s in LUONG_SCORES)}. Received: score={score!r}"
            )
        self.score = check_choice("score", score, LUONG_SCORES)
        self.alignment = check_choice("alignment", alignment, ALIGNMENTS)
        self.window = check_positive_int("window", window)
        self.sigma = _checks.check_positive("sigma", sigma, allow_none=True)
        self.scale = _checks.check_bool("scale", scale)
        self.units = units
        self.scorer = scoring.Score(score, units=units)

    @property
    def score_name(self):
        """The score's name, as `score` (the older name of that attribute)."""
        return self.score

    @property
    def projects_keys_in_attend(self):
        # Local attention scores a window only: project the gathered keys, not all
        # of them. The general score projects the query instead of the keys,
        # q . (k W) = (q W^T) . k, never more work (Tq <= Tv) and much less for
        # one decoder step.
        return self.alignment != "global" or self.score == "general"

    def build_extra(self, query_dim, key_dim):
        if self.scale:
            self.attention_g = self.add_weight(
                name="attention_g", shape=(), initializer="ones", autocast=False
            )
        if self.alignment == "local-p":
            self.position_kernel = self.add_weight(
                name="position_kernel",
                shape=(query_dim, query_dim),
                initializer="glorot_uniform",
                autocast=False,
            )
            self.position_v = self.add_weight(
                name="position_v", shape=(query_dim,), initializer="glorot_uniform", autocast=False
            )

    def call_options(self, query, value, query_mask, projected_key, position=None):
        """`position` checked; `attend` gets it and whether the keys are projected."""
        if self.alignment == "local-m" and position is None and len(query.shape) == 2:
            raise ValueError(
                "A one-step query ([batch, dim]) with alignment='local-m' needs the source "
                "position p_t: pass `position=` (int, or int tensor scalar or [batch]). "
                "Received: position=None"
            )
        if position is not None:
            self._check_position(position, query)
        if self.alignment != "global" and len(value.shape) == 3 and value.shape[1] == 0:
            raise ValueError(
                f"`value` must have at least one position for alignment={self.alignment!r} "
                f"(a window needs a source to sit in). Received: value.shape={tuple(value.shape)}"
            )
        return {
            "position": position,
            "keys_projected": projected_key is not None or not self.projects_keys_in_attend,
        }

    @staticmethod
    def _check_position(position, query):
        """`position` is an int or an int tensor, scalar or `[batch]`."""
        if isinstance(position, bool):
            raise ValueError(f"`position` must be an integer. Received: position={position!r}")
        if isinstance(position, int):
            return
        if isinstance(position, float):
            raise ValueError(
                "`position` must be an integer (a source position), not a float. "
                f"Received: position={position!r}"
            )
        dtype = getattr(position, "dtype", None)
        if dtype is None:
            position = ops.convert_to_tensor(position)
            dtype = position.dtype
        dtype = keras.backend.standardize_dtype(dtype)
        if "int" not in dtype:
            raise ValueError(
                f"`position` must be an integer or an int tensor. Received: position.dtype={dtype}"
            )
        shape = tuple(position.shape)
        batch = query.shape[0]
        if len(shape) > 1 or (
            len(shape) == 1 and shape[0] is not None and batch is not None and shape[0] != batch
        ):
            raise ValueError(
                "`position` must be a scalar or have shape [batch] = "
                f"({batch},). Received: position.shape={shape}, query.shape={tuple(query.shape)}"
            )

    def _scores(self, query, keys, raw_keys=False):
        scores = self.scorer(query, keys, raw_keys=raw_keys)  # float32 (float64)
        if self.scale:
            scores = scores * ops.cast(self.attention_g, scores.dtype)
        return scores

    def attend(
        self,
        query,
        keys,
        value,
        value_mask,
        return_weights,
        training,
        position=None,
        keys_projected=True,
    ):
        if self.alignment == "global":
            if self.projects_keys_in_attend:  # raw or caller-projected: zero the padding
                keys = scoring.zero_masked(keys, value_mask)
            scores = self._scores(query, keys, raw_keys=not keys_projected)
            mask = None if value_mask is None else ops.expand_dims(value_mask, 1)
            weights = ops.cast(scoring.masked_softmax(scores, mask), value.dtype)
            value = scoring.zero_masked(value, value_mask)
            context = scoring.weighted_sum(self.apply_dropout(weights, training), value)
            return context, weights
        return self._attend_local(
            query, keys, value, value_mask, return_weights, training, position, keys_projected
        )

    def _centers(self, query, value_mask, length, position):
        """`p_t [B, Tq]` in float32."""
        zeros = ops.zeros_like(ops.cast(query[..., 0], "float32"))  # [B, Tq]
        if self.alignment == "local-m":
            steps = ops.cast(ops.arange(ops.shape(query)[1]), "float32")
            center = zeros + ops.expand_dims(steps, 0)
            if position is not None:
                position = ops.cast(ops.convert_to_tensor(position), "float32")
                center = center + ops.reshape(position, (-1, 1))
            return center
        # local-p, computed in float32 whatever the compute dtype.
        h = ops.cast(query, "float32")
        w_p = ops.cast(self.position_kernel, "float32")
        v_p = ops.cast(self.position_v, "float32")
        hidden = ops.tanh(scoring.project(h, w_p))
        fraction = ops.sigmoid(ops.einsum("bqd,d->bq", hidden, v_p))
        if value_mask is None:
            size = ops.cast(length, "float32")
        else:
            size = ops.sum(ops.cast(value_mask, "float32"), axis=1, keepdims=True)  # [B, 1]
        return fraction * size

    def _attend_local(
        self, query, keys, value, value_mask, return_weights, training, position, keys_projected
    ):
        length = ops.shape(value)[1]
        center = self._centers(query, value_mask, length, position)
        positions, inside, start = scoring.window_positions(center, self.window, length)
        if value_mask is not None:
            inside = ops.logical_and(inside, scoring.gather_rows(value_mask, positions))
        # Only the window is gathered (and, for unprojected keys, projected), so
        # the cost follows the window, not the source length. Positions outside
        # the window or masked are selected away before they are used.
        window_keys = scoring.zero_masked(scoring.gather_rows(keys, positions), inside)
        window_values = scoring.zero_masked(scoring.gather_rows(value, positions), inside)
        scores = self._scores(query, window_keys, raw_keys=not keys_projected)  # [B, Tq, W]
        weights = scoring.masked_softmax(scores, inside)  # float32
        if self.alignment == "local-p":
            sigma = self.sigma if self.sigma is not None else self.window / 2.0
            true_positions = ops.expand_dims(start, -1) + ops.arange(
                2 * self.window + 1, dtype="int32"
            )
            bump = scoring.gaussian(true_positions, center, sigma)
            weights = weights * ops.cast(bump, weights.dtype)
        weights = ops.cast(weights, value.dtype)
        context = scoring.weighted_sum(self.apply_dropout(weights, training), window_values)
        full = scoring.window_to_full(weights, start, length) if return_weights else None
        return context, full

    def get_config(self):
        return {**super().get_config(), **config_of(self, LuongAttention.__init__)}
