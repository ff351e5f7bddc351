"""The private Keras names this package needs, imported in this one module (private).

Keras 3 has no public API for these. Every other module imports them from here,
so a Keras upgrade that moves or renames one breaks this file only. Tested with
the Keras pinned in requirements.lock.

- `get_keras_mask(x)` / `set_keras_mask(x, mask)`: the Keras mask attached to a
  tensor (kept outside the array on JAX). The Transformer and multi-head layers
  detach the mask while they call a sublayer with an explicit mask.
- `global_seed_generator()`: the generator behind `keras.random` calls without a
  seed (`keras_attn.layers.rng` draws an unseeded seed from it).
- `Functional` and `functional_init_arguments(args, kwargs)`: what `keras.Model`
  uses to turn `Model(inputs, outputs)` into a functional model;
  `HardAttentionModel` needs them to support that form without Keras rewriting
  its class (see `keras_attn.models.hard_attention`).
"""

# decoding.compiled: whether a caller's StatelessScope is open; the variables a first trace
# created, initialized before they become a compiled program's arguments
from keras.src.backend.common.stateless_scope import in_stateless_scope  # noqa: F401
from keras.src.backend.common.variables import initialize_all_variables  # noqa: F401
from keras.src.models.functional import Functional  # noqa: F401
from keras.src.models.model import functional_init_arguments  # noqa: F401
from keras.src.random.seed_generator import global_seed_generator  # noqa: F401

try:  # Keras keeps masks of JAX arrays outside the array.
    from keras.src.backend.common.masking import get_keras_mask, set_keras_mask
except ImportError:  # pragma: no cover - a Keras that moved the helpers

    def get_keras_mask(x):
        return getattr(x, "_keras_mask", None)

    def set_keras_mask(x, mask):
        x._keras_mask = mask
