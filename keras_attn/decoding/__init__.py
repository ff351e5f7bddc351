"""Decoding over a step function: `beam_search`, `greedy_search`, `sample_search`.

A step function is `step_fn(tokens [N] int32, state, step) -> (logits [N, V],
state, attention [N, S] or None)`; see API.md section 3. Each search is a
single `tf.while_loop` that runs eagerly, in `tf.function`, under XLA and in
an exported SavedModel, and returns a dict of tensors.
"""

from keras_attn.decoding import penalties
from keras_attn.decoding.beam_search import beam_search
from keras_attn.decoding.greedy import greedy_search
from keras_attn.decoding.greedy import sample_search
from keras_attn.decoding.steps import rnn_step
from keras_attn.decoding.steps import transformer_step

__all__ = [
    "beam_search",
    "greedy_search",
    "sample_search",
    "penalties",
    "rnn_step",
    "transformer_step",
]
