"""The XLA buckets of the `<name>_xla` signatures (docs/serving.md, "XLA").

A compiled program has fixed shapes, so a request runs padded to a bucket: its batch to the
smallest of `ServingSettings.xla_batch_sizes` that holds it (padding rows are empty sources or
zero images), its source ids to the smallest of `xla_source_lengths`, and the inner axes of its
constraint tensors (prefix length, phrases, phrase length) to `CONSTRAINT_BUCKETS`; requests of
nearby sizes share one compiled program. The answer is cut back to the request's batch and
source width (`cut_to_request`). `compiled_decode` runs a signature's search so: the XLA
twins, a served behaviour of their own (`XLA_TWINS`, the `xla` setting).
"""

from __future__ import annotations

import tensorflow as tf

from keras_attn.decoding import engine
from keras_attn.serving import specs
from keras_attn.serving.behaviours import Behaviour

# The buckets of the constraint tensors' inner axes under XLA.
CONSTRAINT_BUCKETS = (4, 8, 16, 32)
# The constraint tensors that are constants of the export, the same for every row.
_EXPORT_CONSTANTS = ("budget_ids", "budget_costs")


def bucket(size, buckets):
    """The smallest of `buckets` (sorted Python ints) >= `size` (an int32 scalar tensor);
    above the largest, the next multiple of the largest."""
    table = tf.constant(buckets, tf.int32)
    largest = buckets[-1]
    first_fit = tf.gather(table, tf.argmax(tf.cast(table >= size, tf.int32), output_type=tf.int32))
    multiple = (size + largest - 1) // largest * largest
    return tf.where(size <= largest, first_fit, multiple)


def padded_model_inputs(model_inputs, settings, pad_id=None):
    """The model inputs padded to the buckets of `settings`: the batch to `xla_batch_sizes`
    (with zeros: empty sources or zero images) and, for source ids (`pad_id` not None), the
    width to `xla_source_lengths` with `pad_id`."""
    shape = tf.shape(model_inputs)
    rows = bucket(shape[0], settings.xla_batch_sizes) - shape[0]
    paddings = [[0, rows]] + [[0, 0]] * (model_inputs.shape.rank - 1)
    value = 0
    if pad_id is not None:
        paddings[1] = [0, bucket(shape[1], settings.xla_source_lengths) - shape[1]]
        value = pad_id
    return tf.pad(model_inputs, paddings, constant_values=tf.cast(value, model_inputs.dtype))


def padded_ids(ids, batch):
    """`[B, ...]` ids padded with -1 to `batch` rows and each inner axis to a bucket."""
    shape = tf.shape(ids)
    paddings = [[0, batch - shape[0]]] + [
        [0, bucket(shape[i], CONSTRAINT_BUCKETS) - shape[i]] for i in range(1, ids.shape.rank)
    ]
    return tf.pad(ids, paddings, constant_values=-1)


def padded_constraints(constraints, batch):
    """A search's constraint tensors (`prefix_ids`, `constraint_ids`, `budgets`, ...) for a
    batch padded to `batch` rows: ids padded with -1 to the buckets, the padding rows' budgets
    zero, the export's constants as they are."""

    def pad(name, value):
        if name in _EXPORT_CONSTANTS:
            return value
        if name == "budgets":  # the padding rows (empty sources) get none
            return tf.pad(value, [[0, batch - tf.shape(value)[0]], [0, 0]])
        return padded_ids(value, batch)

    return {name: pad(name, value) for name, value in constraints.items()}


def padded_step_rows(value, batch):
    """A step's per-row tensor (`[B, ...]` ids, or bool flags) padded as `padded_ids` pads
    ids; flags are False in the padding."""
    if value.dtype == tf.bool:
        return padded_ids(tf.cast(value, tf.int32), batch) > 0
    return padded_ids(value, batch)


def cut_to_request(result, source_mask, batch, width=None):
    """A search's result and source mask over padded inputs, cut back to the request's `batch`
    rows and (source ids: `width` not None) its source width."""
    result = {key: tf.identity(value[:batch]) for key, value in result.items()}
    if width is not None:
        if "alignments" in result:
            result["alignments"] = result["alignments"][..., :width]
        source_mask = source_mask[:, :width]
    return result, source_mask[:batch]


def compiled_decode(signatures, search, inputs, config, rows, rules=None):
    """`decode` with tokenizing and detokenizing left outside and the rest (encode and the
    search loop) in a nested `tf.function(jit_compile=True)` over bucket-padded inputs
    (`keras_attn.serving.buckets`); the result is cut back to the request's batch and
    source width. The request's `config` was checked outside (XLA drops assertions): the
    core reads it as it is. `signatures`: the export's `ServingSignatures`."""
    model_inputs = signatures.model_inputs(inputs)

    def core(padded, rows, rules):
        state, start_tokens, source_mask = signatures.encode_model_inputs(padded, config.max_length)
        return signatures.search(search, state, start_tokens, source_mask, config, rows, rules)

    text = signatures.source_tokenizer is not None
    pad_id = signatures.source_tokenizer.pad_id if text else None
    padded = padded_model_inputs(model_inputs, signatures.settings, pad_id)
    rows = padded_constraints(rows, tf.shape(padded)[0])
    if rules is not None:  # the padding rows have none (ids -1, flags False)
        batch = tf.shape(padded)[0]
        rules = {name: padded_step_rows(value, batch) for name, value in rules.items()}
        # outside the compiled core: the source's words are read with string ops
        rules = signatures.source_rules(rules, padded)
    compiled = tf.function(core, jit_compile=True, autograph=False)
    result, source_mask = compiled(padded, rows, rules)
    result = dict(result)
    # XLA drops Assert ops: the engine returns its NaN check as a flag (engine.py).
    check = tf.debugging.Assert(tf.logical_not(result.pop("invalid")), [engine.INVALID_LOGITS])
    batch = tf.shape(model_inputs)[0]
    width = tf.shape(model_inputs)[1] if text else None
    with tf.control_dependencies([check]):
        return cut_to_request(result, source_mask, batch, width)


class XlaTwins(Behaviour):
    """The `xla` setting: a `<name>_xla` twin of each signature it names, the same body with
    its numeric core compiled (`compiled_decode`) over the buckets of `xla_batch_sizes` and
    `xla_source_lengths`."""

    name = "XLA twins"
    settings = ("xla", "xla_batch_sizes", "xla_source_lengths")

    def enabled(self, settings):
        return bool(settings.xla)  # the buckets alone add nothing

    def signatures(self, signatures):
        return {
            name + specs.XLA_SUFFIX: (specs.SPEC[name], True) for name in signatures.settings.xla
        }


XLA_TWINS = XlaTwins()
