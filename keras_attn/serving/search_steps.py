"""`beam_search_steps` and `greedy_steps`: a search of the export run to a step limit, for a
streaming client over the network (docs/serving.md, "Streaming").

Inputs: those of `beam_search` (`inputs` or `images`, `beam_size`, `max_length`,
`length_penalty`, `coverage_penalty`; `greedy_steps` the same but `beam_size`) and `steps`, an
int32 scalar >= 1. The signature runs the very search of `beam_search` (the export's
placeholders kept and word rules included) or of `greedy_controls` without controls for at
most `steps` steps (`keras_attn.decoding.DecodingConfig.stop_after`) and answers that
signature's outputs for the hypotheses so far (best first, each scored as if it ended there),
and:

- `sequences` int32 `[B, K, T]` (greedy `[B, T]`): their ids (the end id after each one's
  last token), and `lengths` (greedy too);
- `settled` string `[B]`: the text of the tokens every hypothesis of an input shares (the
  start of that input's final answer, whatever the later steps choose; greedy: its answer
  so far);
- `done` bool scalar: the search ended by itself (every hypothesis finished, or
  `max_length` reached): the outputs are the whole search's answer;
- `steps` int32 scalar: the steps it ran.

A search is deterministic, so the same request with more `steps` runs the same steps first:
a client streams an answer by asking again with more steps until `done`, and no state
crosses the network (each request encodes the source again and runs the search from its
start). Asking with steps that double (`keras_attn.serving.streaming` asks 2, 4, 8, ...)
costs at most about twice the search's steps, in a handful of requests, where the step
signatures (`decode_step_packed`) cost a request per step.
"""

from __future__ import annotations

import tensorflow as tf

from keras_attn import _checks
from keras_attn.decoding.modes import MODES
from keras_attn.serving.checks import assert_rank
from keras_attn.serving.specs import SINGLE_OUTPUTS, SPEC, SignatureSpec, request_param
from keras_attn.serving.steps import (
    DONE,
    LENGTHS,
    SEARCH_STEPS,
    SEARCH_STEPS_PARAMS,
    SEQUENCES,
    SETTLED,
    STEPS,
)

# The served rows whose search each signature runs: `beam_search`'s, and `greedy` with the
# request's `max_length` and penalties (the parameters a streamed greedy search may set).
ROWS = {
    "beam": SPEC["beam_search"],
    "greedy": SignatureSpec(
        SEARCH_STEPS["greedy"], "greedy", SEARCH_STEPS_PARAMS["greedy"], SINGLE_OUTPUTS
    ),
}


def settled_ids(sequences, steps, end_token):
    """int32 `[B, T]`: per input, the tokens all its hypotheses (`sequences` `[B, K, T]`)
    share among the first `steps`, up to the first end token, then `end_token`."""
    width = tf.shape(sequences)[2]
    columns = tf.range(width)[None, :]
    first = sequences[:, 0]
    shared = tf.reduce_all(tf.equal(sequences, first[:, None]), axis=1)
    shared &= tf.not_equal(first, end_token) & (columns < steps)
    # the first column not shared (the width where every one is)
    padded = tf.concat([tf.cast(shared, tf.int32), tf.zeros_like(first[:, :1])], axis=1)
    length = tf.argmin(padded, axis=1, output_type=tf.int32)
    return tf.where(columns < length[:, None], first, end_token)


def function(signatures, mode):
    """The concrete function of the search of `mode` (`"beam"`, `"greedy"`) run to a step
    limit, for a `keras_attn.serving.signatures.ServingSignatures` (its model, settings,
    tokenizers and behaviours)."""
    row = ROWS[mode]
    search = MODES[mode].function()
    end_token = signatures.target_tokenizer.end_id

    def search_steps(inputs, *values):
        *params, steps = values
        params = signatures.checked_params(dict(zip(row.params, params)))
        steps = _checks.check_scalar_int(STEPS, assert_rank(STEPS, steps, 0, "a scalar"), 1)
        config = signatures.request_config({**params, "stop_after": steps})
        inputs = signatures.checked_inputs(inputs)
        result, source_mask, _ = signatures.searched(row, search, inputs, (), config)
        if mode == "beam":
            outputs = signatures.beam_outputs(result, source_mask)
            sequences = result[SEQUENCES]
        else:  # one hypothesis an input
            outputs = signatures.single_outputs(result, source_mask)
            sequences = result[SEQUENCES][:, None]
        t = tf.shape(outputs["alignments"])[-2]
        sequences = tf.cast(sequences[:, :, :t], tf.int32)
        ids = settled_ids(sequences, result["steps"], end_token)
        return {name: outputs[name] for name in row.outputs} | {
            SEQUENCES: sequences if mode == "beam" else sequences[:, 0],
            LENGTHS: tf.cast(result[LENGTHS], tf.int32),
            SETTLED: signatures.target_tokenizer.detokenize(ids),
            DONE: tf.reshape(tf.cast(result["done"], tf.bool), []),
            STEPS: tf.reshape(tf.cast(result["steps"], tf.int32), []),
        }

    input_specs = [signatures.input_spec] + [
        tf.TensorSpec([], getattr(tf, request_param(name).dtype), name=name) for name in row.params
    ]
    input_specs.append(tf.TensorSpec([], tf.int32, name=STEPS))
    return tf.function(search_steps, autograph=False).get_concrete_function(*input_specs)


def functions(signatures):
    """`{signature name: concrete function}` of every search run to a step limit."""
    return {SEARCH_STEPS[mode]: function(signatures, mode) for mode in ROWS}


def warmup_inputs(signatures, inputs):
    """`{signature name: request}`: each one's warm-up request given the export's warm-up
    batch: its parameters as `beam_search`'s warm-up sends them
    (`ServingSignatures.request_params`), and two steps."""
    import numpy as np

    values = {
        name: np.asarray(value, dtype)
        for name, dtype, value in signatures.request_params[ROWS["beam"].name]
    }
    return {
        SEARCH_STEPS[mode]: {
            signatures.input_spec.name: inputs,
            **{name: values[name] for name in row.params},
            STEPS: np.int32(2),
        }
        for mode, row in ROWS.items()
    }
