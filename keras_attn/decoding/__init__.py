"""Decoding over a step function: `beam_search`, `greedy_search`, `sample_search`, and
`forced_search` (the log-probability of given sequences).

One engine (docs/decoding.md): `decode` is the single `while_loop` driver; a `Strategy`
(`Beam`, `Greedy`, `Sampling`, `Forced`, or one of your own) chooses the tokens; `DecodingConfig`
holds the knobs, checked against the one table `KNOBS`; `call` the call surface (`config=`, a
`Constraints` object and keyword overrides from the one table `KEYWORDS`: a keyword given
explicitly wins); `processors.Controls` applies the
controls (repetition penalty, min_length, bad tokens, n-gram blocking) in one fixed order and
`constraints.ConstraintState` the forced prefix, required phrases and suppressed sequences; `steps`
holds one step per decoder family and `protocol` declares what a decodable model provides. A
step function is `step_fn(tokens [N] int32, state, step) -> (logits [N, V], state, attention
[N, S] or None)`. Each search runs eagerly, in `tf.function`, under XLA and in an exported
SavedModel on TensorFlow, eagerly and in `jax.jit` on JAX (written with `keras.ops`; `backend`
holds what `keras.ops` lacks), and returns a dict of tensors.
"""

from keras_attn.decoding import call, config, modes, penalties
from keras_attn.decoding.beam_search import beam_search
from keras_attn.decoding.call import KEYWORDS, Constraints
from keras_attn.decoding.config import KNOBS, DecodingConfig, Knob, check_knob
from keras_attn.decoding.engine import decode
from keras_attn.decoding.greedy import forced_search, greedy_search, sample_search
from keras_attn.decoding.protocol import (
    DecodingModel,
    SearchInputs,
    check_model,
    encode_for_search,
    generate,
)
from keras_attn.decoding.steps import rnn_step, transformer_step
from keras_attn.decoding.strategies import (
    Banks,
    Beam,
    Forced,
    Greedy,
    Sampling,
    Selection,
    Setup,
    StepInputs,
    Strategy,
)

__all__ = [
    "KEYWORDS",
    "KNOBS",
    "Banks",
    "Beam",
    "Constraints",
    "DecodingConfig",
    "DecodingModel",
    "Forced",
    "Greedy",
    "Knob",
    "Sampling",
    "SearchInputs",
    "Selection",
    "Setup",
    "StepInputs",
    "Strategy",
    "beam_search",
    "call",
    "check_knob",
    "check_model",
    "config",
    "decode",
    "encode_for_search",
    "forced_search",
    "generate",
    "greedy_search",
    "modes",
    "penalties",
    "rnn_step",
    "sample_search",
    "transformer_step",
]
