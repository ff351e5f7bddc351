"""Training hard attention with REINFORCE inside plain `model.fit`.

The mechanism: a model base class, `HardAttentionModel`, whose
`compute_loss` adds the REINFORCE term of every `HardAttention` layer it
holds to the compiled loss. Nothing else is needed: `compile` then `fit`.

    inputs = ...
    context = HardAttention(seed=0)(query, value)
    outputs = keras.layers.Dense(n, activation="softmax")(context)
    model = HardAttentionModel(inputs, outputs, entropy_weight=0.01)
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y)

How one training step goes (Xu et al. 2015, section 4.2):

1. Every forward pass of the model (`__call__`, and `stateless_call` on
   JAX) tells each `HardAttention` layer of the model to record its samples,
   sets its soft-mix probability and clears its old records.
2. The forward pass (`training=True`) draws one source position per query;
   with probability `soft_mix_probability` a query uses the expected context
   instead (and then draws nothing). Each layer records `log alpha_s` of the
   drawn positions and the entropy of `alpha`, `[B, Tq]`.
3. `compute_loss` computes the usual loss `L` (the compiled loss), the
   per-example reward `r_b = log p(y_b | s, x_b)` (`example_log_likelihood`,
   by default minus the compiled loss per example) and, per layer,

       L += reinforce_weight * reinforce_surrogate(r, sum_t log alpha_s,
                                                   baseline)
            - entropy_weight * mean_b sum_t H(alpha_bt)

   (`keras_attn.losses.reinforce_surrogate`; reward and baseline carry no
   gradient), then moves the layer's baseline `b <- d*b + (1-d)*mean(r)`.
   The baseline used in the step is the value before the update. The term
   is added as `t - stop_gradient(t)`: its value is 0 and its gradient that
   of `t`, so the loss `fit` reports is still the compiled (task) loss;
   `reinforce_loss` gives the value of `t`.

This works with `jit_compile=True` on TensorFlow and on JAX: the records are
tensors of the same trace as `compute_loss` (TF `train_step`, JAX
`compute_loss_and_updates`), they are cleared at every forward pass, and
the baseline is a non-trainable variable assigned inside `compute_loss`,
which both trainers carry over. Evaluation and prediction run the layer
deterministically (argmax) and add nothing.

Use it as a functional model (`HardAttentionModel(inputs, outputs, ...)`,
saved and loaded like any functional model) or subclass it (call
`super().__init__(reinforce_weight=..., ...)`; as for `Dropout`, a
subclass's `call` must take `training` and pass it to the layer, or the
layer stays deterministic during `fit`). Limits: the model that is
fitted must be the `HardAttentionModel` (layers inside a nested model are
found, a nested `HardAttentionModel`'s own settings are not used), and the
layer must be called in the model's own graph, not inside a symbolic loop
such as `keras.layers.RNN` (a tensor made inside a loop cannot be read
outside it). For a recurrent decoder, return the `log_prob` from the loop
and override `hard_attention_samples`.
"""

import keras
from keras import ops

from keras_attn import losses as attn_losses
from keras_attn._checks import check_bool, check_non_negative, check_probability
from keras_attn._keras_compat import Functional as _Functional
from keras_attn._keras_compat import functional_init_arguments as _functional_init_arguments
from keras_attn._keras_compat import get_keras_mask as _get_keras_mask
from keras_attn.layers.base import config_of, walk_layers
from keras_attn.layers.hard import HardAttention


@keras.saving.register_keras_serializable(package="keras_attn")
class HardAttentionModel(keras.Model):
    """A `keras.Model` that trains its `HardAttention` layers with REINFORCE in `fit`.

    Args:
        reinforce_weight: weight of the REINFORCE term (`lambda_r`, default 1).
        entropy_weight: weight of the entropy bonus (`lambda_e`, default 0).
        soft_mix_probability: probability that a query uses the expected
            context instead of its sample during training (default 0.5, as
            in Xu et al.); 0 trains pure hard attention.
        normalize_reward: use the batch-whitened reward
            `(r_b - mean(r)) / (std(r) + 1e-6)` as the advantage in the
            REINFORCE term instead of `r_b - baseline` (the moving baseline
            is still updated), so the term's scale does not depend on the
            reward's (a caption's log-likelihood is ~ -15 at the start of
            training, far from a baseline that starts at 0). Default False.
        Other arguments: those of `keras.Model` (`inputs, outputs, name` for
        a functional model).

    Override `example_log_likelihood` when the compiled loss is not a
    per-example negative log-likelihood (multi-output models, masks), and
    `hard_attention_samples` to supply samples made inside a loop.
    """

    def __new__(cls, *args, **kwargs):
        # Functional use, `HardAttentionModel(inputs, outputs)`: build an
        # instance of a class that has `Functional` among its bases from the
        # start. Left to itself, keras.Model would rewrite the bases of
        # HardAttentionModel in place (inject_functional_model_class), after
        # which every subclassed model (RNNSeq2Seq, ShowAttendTell) created
        # in the same process fails in `Functional.__init__`.
        if cls is HardAttentionModel and _functional_init_arguments(args, kwargs):
            return keras.Model.__new__(FunctionalHardAttentionModel)
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        *args,
        reinforce_weight=1.0,
        entropy_weight=0.0,
        soft_mix_probability=0.5,
        normalize_reward=False,
        **kwargs,
    ):
        normalize_reward = check_bool("normalize_reward", normalize_reward)
        reinforce_weight = check_non_negative("reinforce_weight", reinforce_weight)
        entropy_weight = check_non_negative("entropy_weight", entropy_weight)
        soft_mix_probability = check_probability("soft_mix_probability", soft_mix_probability)
        super().__init__(*args, **kwargs)
        self.reinforce_weight = reinforce_weight
        self.entropy_weight = entropy_weight
        self.soft_mix_probability = soft_mix_probability
        self.normalize_reward = normalize_reward

    # ----------------------------------------------------------------- layers
    def hard_attention_layers(self):
        """Every `HardAttention` layer of the model (nested ones too)."""
        return [
            layer
            for layer in walk_layers(self, include_self=False)
            if isinstance(layer, HardAttention)
        ]

    def _prepare_layers(self):
        for layer in self.hard_attention_layers():
            layer.record_samples = True
            layer.soft_mix_probability = self.soft_mix_probability
            layer.clear_sample_records()

    # Both entry points of a forward pass, `__call__` (TF trainer, eager
    # calls) and `stateless_call` (JAX trainer), set the layers up and start
    # from no records.
    def __call__(self, *args, **kwargs):
        self._prepare_layers()
        return super().__call__(*args, **kwargs)

    def stateless_call(self, *args, **kwargs):
        self._prepare_layers()
        return super().stateless_call(*args, **kwargs)

    # ------------------------------------------------------------------ loss
    def hard_attention_samples(self, x, y, y_pred):
        """`[(layer, log_prob [B, ...], entropy [B, ...]), ...]` of this step.

        Default: what the layers recorded in the forward pass (and cleared).
        """
        samples = []
        for layer in self.hard_attention_layers():
            for log_prob, entropy in layer.pop_sample_records():
                samples.append((layer, log_prob, entropy))
        return samples

    def example_log_likelihood(self, x, y, y_pred, sample_weight=None):
        """The REINFORCE reward: `log p(y_b | x_b, s)` per example, `[B]` float32.

        Default: minus the compiled loss computed per example (unreduced,
        then averaged over every axis but the batch, weighted by
        `sample_weight` and the Keras mask of `y_pred` when present).
        """
        loss = self.loss
        if isinstance(loss, (list, tuple)) and len(loss) == 1:
            loss = loss[0]
        if isinstance(loss, dict) and len(loss) == 1:
            loss = next(iter(loss.values()))
        if isinstance(y, (list, tuple)) and len(y) == 1:
            y = y[0]
        if isinstance(y_pred, (list, tuple)) and len(y_pred) == 1:
            y_pred = y_pred[0]
        if isinstance(y, dict) and len(y) == 1:
            y = next(iter(y.values()))
        if isinstance(y_pred, dict) and len(y_pred) == 1:
            y_pred = next(iter(y_pred.values()))
        if isinstance(loss, str):
            loss = keras.losses.get(loss)
        if isinstance(loss, keras.losses.Loss):
            values = loss.call(y, y_pred)
        elif callable(loss):
            values = loss(y, y_pred)
        else:
            raise ValueError(
                "HardAttentionModel needs a single compiled loss to compute the per-example "
                "reward; override `example_log_likelihood` for this model. "
                f"Received: loss={self.loss!r}"
            )
        values = ops.cast(values, "float32")
        weight = None
        mask = _get_keras_mask(y_pred)
        if mask is not None and len(mask.shape) == len(values.shape):
            weight = ops.cast(mask, "float32")
        if sample_weight is not None:
            sw = ops.cast(sample_weight, "float32")
            while len(sw.shape) < len(values.shape):
                sw = ops.expand_dims(sw, -1)
            weight = sw if weight is None else weight * sw
        if len(values.shape) == 1:
            return -values if weight is None else -values * weight
        axes = tuple(range(1, len(values.shape)))
        if weight is None:
            return -ops.mean(values, axis=axes)
        weight = ops.broadcast_to(weight, ops.shape(values))
        return -ops.sum(values * weight, axis=axes) / ops.maximum(ops.sum(weight, axis=axes), 1e-12)

    def reinforce_loss(self, reward, samples):
        """The REINFORCE + entropy terms for `samples`; updates the baselines."""
        reward = ops.stop_gradient(ops.cast(reward, "float32"))
        scale = 1.0
        if self.normalize_reward:
            scale = 1.0 / (ops.std(reward) + 1e-6)
        total = ops.zeros((), dtype="float32")
        for layer, log_prob, entropy in samples:
            if self.normalize_reward:
                baseline = ops.mean(reward)
            else:
                baseline = ops.convert_to_tensor(layer.baseline)
            # reward and baseline scaled by reinforce_weight: same gradient as
            # reinforce_weight * REINFORCE, entropy weighted on its own.
            total = total + attn_losses.reinforce_surrogate(
                self.reinforce_weight * scale * reward,
                log_prob,
                baseline=self.reinforce_weight * scale * baseline,
                entropy=entropy,
                entropy_weight=self.entropy_weight,
            )
        for layer in {id(s[0]): s[0] for s in samples}.values():
            layer.update_baseline(reward)
        return total

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        samples = self.hard_attention_samples(x, y, y_pred) if training else []
        if not training:
            for layer in self.hard_attention_layers():
                layer.clear_sample_records()
        if not samples:
            return loss
        reward = self.example_log_likelihood(x, y, y_pred, sample_weight)
        extra = self.reinforce_loss(reward, samples)
        # Added as `t - stop_gradient(t)`: value 0, gradient that of `t`, so the
        # loss `fit` reports stays the task loss.
        return loss + ops.cast(extra - ops.stop_gradient(extra), loss.dtype)

    def get_config(self):
        return {**super().get_config(), **config_of(self, HardAttentionModel.__init__)}


@keras.saving.register_keras_serializable(package="keras_attn")
class FunctionalHardAttentionModel(HardAttentionModel, _Functional):
    """What `HardAttentionModel(inputs, outputs, ...)` builds (see `HardAttentionModel.__new__`)."""
