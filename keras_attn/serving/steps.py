"""The step signatures: the model's two halves, so the search loop can live in a client.

Beside the search signatures, an export can hold these small ones (docs/serving.md,
"Streaming"):

- `encode`: `inputs` string `[B]` (or `images`) and `max_length` int32 scalar -> the decoder's
  state as named tensors (`state_<path>`), `source_mask` bool `[B, S]`, `start_tokens` int32
  `[B]`, `end_token` and `eos_penalty` (scalars). The text is tokenized in the graph by the
  tokenizer the search signatures use, with the same settings (`max_input_length`, markers).
- `decode_step`: `tokens` int32 `[N]` (the previous token of each hypothesis), `step` int32
  scalar and the state -> `logits` float32 `[N, V]` (the model's next-token scores:
  `log_softmax(logits)` are the log-probabilities; the searches' controls, such as the
  repetition penalty, act on the scores themselves, so the client gets what the in-graph
  searches see),
  `attention` float32 `[N, S]` and the state tensors the step changed (the others, such as the
  encoder memory, the client keeps as they are).
- `decode_steps`: `decode_step`'s inputs and `count` (int32 scalar) -> up to `count` steps in
  one call, each fed the most likely token of the one before (the end token once a row has
  ended; ties: the lowest id), stopping after the step where every row chose the end token
  or where the state's slots end: `logits` `[N, C, V]`, `attention` `[N, C, S]` and `chosen`
  int32 `[N, C]` of the C steps run, and the state after the last. A greedy client reads C
  steps per request from it (what a plain greedy search would have chosen; the client checks
  that its search did).
- `decode_step_packed` and `decode_steps_packed`: the same steps with the state packed, for a
  client over the network: in place of the leaves, `parents` int32 `[N]` and `state_bytes`
  string `[L]` (every leaf `tf.io.serialize_tensor`d, in the sorted order of their names:
  `packed_names`; `encode` answers the first as `packed_state_bytes`); the hypotheses' leaves are gathered along `parents` before
  the step (the search's reordering, and on the first step its tiling: `parents[n]` is the row
  hypothesis n comes from), and the answer holds the whole state after the step as
  `state_bytes` in place of the changed leaves. The client hands the bytes back unread: a
  step's state crosses the network as one binary tensor (REST: base64), not as numbers.
- `beam_search_steps` and `greedy_steps`: the export's own beam and greedy searches run to at
  most `steps` steps, for a client across a network (`keras_attn.serving.search_steps`).
- `detokenize`: `ids` int32 `[B, T]` -> `outputs` string `[B]` (reading stops at the end id).
- `tokenize`: `texts` string `[B, C]` -> `ids` int32 `[B, C, L]` (each text tokenized alone
  with the target tokenizer, right-padded with -1: how `beam_search_constrained` spells its
  prefix and phrases) and `spelled` bool `[B, C]` (False where a text holds the unknown id).

With `keep_placeholders`, `encode` also answers the source's placeholders as the searches'
constraints (`constraint_ids`, `constraint_alt_ids` `[B, C, L]`, `budget_ids` `[U]`,
`budget_costs` `[U, R]`, `budgets` `[B, R]`: what `beam_search` gives its search); with
`word_rules`, what the word rules read (`word_rules_source_ids` `[B, S]`,
`word_rules_phrase_ids` `[B, C, 16]`, `word_rules_phrase_alt_ids`, `word_rules_open_end`
and `word_rules_marker` `[B, C]`, `word_rules_glue` and, for SentencePiece, `word_rules_word_start` bool `[V]` and
the word loop ban's tables `word_rules_word_text_hashes` `[2, V]`, `word_rules_word_text_lengths`
`[V]`, `word_rules_word_text_powers` (`keras_attn.decoding.words.word_text_tables`); with
`known_words`, `word_rules_fixed` bool `[B, S]`: the source words copied whole once begun).

The state is the model's `initial_decode_state` flattened: one tensor per leaf, named by its
path (`state_self_cache_0_0` is layer 0's self-attention key cache, `[N, max_length, heads,
head_dim]`: the cache has a fixed number of slots, written at row `step`). The leaves under
`state_per_example` have one row per input (B); the others one row per hypothesis (N = B * K),
row `b * K + k` being hypothesis k of input b: the client tiles them after `encode` and
reorders them along the beam's parents (the search engine does both).

An export carries them with the setting `extra_signatures=[STEP_SIGNATURES]`
(`export_text_model(model, tokenizer, export_dir, extra_signatures=[STEP_SIGNATURES])`).
`StepSignatures(model, settings, input_spec, source_tokenizer, target_tokenizer)` builds them
(`functions()`, `warmup_requests(texts)`) from the same pieces as
`keras_attn.serving.signatures.ServingSignatures`; `StepSignatures.of(signatures)` from one.
Every `decode_step` and `decode_steps` request is checked in the graph before the model runs,
one check after the other, so the error names the first wrong input: ranks, each leaf's static
sizes, rows (N for the hypotheses' leaves, one B for all the per-input ones), the source
positions of every leaf that has them (memory, cross-attention caches) equal to the source mask's, the
slots of every self-attention cache leaf (keys and values, every layer) equal, and `step`
against those slots and `max_length_limit` (`StepSignatures.state_layout()` says which axis of
which leaf is what; `check_state_request` is the same check on the host, in NumPy). A state
tensor of another dtype is refused by the server before the graph runs. Only stock
TensorFlow ops are used.
`lite_functions(max_length)` gives the same two halves without tokenizer and checks, for the
LiteRT converter (`keras_attn.serving.litert`).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from keras_attn.serving import specs as _specs

STEP_SIGNATURE_NAMES = (
    "encode",
    "decode_step",
    "detokenize",
    "tokenize",
    "decode_steps",
    "decode_step_packed",
    "decode_steps_packed",
    "beam_search_steps",
    "greedy_steps",
)
# The searches run to a step limit (`keras_attn.serving.search_steps`): the signature of each
# mode, its input besides the search's, and its outputs besides the search's.
SEARCH_STEPS = {"beam": "beam_search_steps", "greedy": "greedy_steps"}
# their request parameters: those of the served table's `beam_search`, and for greedy the
# same but `beam_size`
SEARCH_STEPS_PARAMS = {
    "beam": _specs.SPEC["beam_search"].params,
    "greedy": tuple(p for p in _specs.SPEC["beam_search"].params if p != "beam_size"),
}
STEPS = "steps"
SEQUENCES, LENGTHS, SETTLED, DONE = "sequences", "lengths", "settled", "done"
# What a streaming client needs in every case (`tokenize` only for text constraints; exports
# made before it existed lack it).
REQUIRED_STEP_SIGNATURES = STEP_SIGNATURE_NAMES[:3]
STATE_PREFIX = "state_"
PER_EXAMPLE_PREFIX = STATE_PREFIX + "per_example_"
# The inputs and outputs of the step signatures besides the state.
TOKENS, STEP, IDS = "tokens", "step", "ids"
LOGITS, ATTENTION = "logits", "attention"
# `decode_steps`: how many steps to run, and the token each step chose.
COUNT, CHOSEN = "count", "chosen"
# the packed state's inputs and output (REST answers an output named `*_bytes` in base64)
PARENTS, STATE_BYTES = "parents", "packed_state_bytes"
ENCODE_OUTPUTS = ("source_mask", "start_tokens", "end_token", "eos_penalty")
# The encoder inputs of the LiteRT `encode` (text: ids, tokenized on the device).
SOURCE_IDS = "source_ids"
# `tokenize`: its input and outputs.
TEXTS, SPELLED = "texts", "spelled"
# `encode`'s outputs with `keep_placeholders`: the source's placeholders as the searches'
# constraints (the keywords of `keras_attn.decoding.beam_search`).
PLACEHOLDER_OUTPUTS = (
    "constraint_ids",
    "constraint_alt_ids",
    "budget_ids",
    "budget_costs",
    "budgets",
)
# `encode`'s outputs with `word_rules` (`keras_attn.decoding.words.word_rules_step`'s inputs).
WORD_RULES_PREFIX = "word_rules_"
# the names `encode` gives `keras_attn.decoding.words.word_text_tables`' three arrays
WORD_TEXT_TABLES = ("word_text_hashes", "word_text_lengths", "word_text_powers")


def state_paths(nest, prefix=STATE_PREFIX):
    """`[(name, leaf)]` of a nest of dicts, lists and tuples, in `tf.nest.flatten` order (dict
    keys sorted); each name is `prefix` and the path's keys and indices joined by `_` (names
    a TensorFlow Serving request, a TF2 loader and a LiteRT signature all keep as they are)."""
    if isinstance(nest, dict):
        out = []
        for key in sorted(nest):
            out += state_paths(nest[key], f"{prefix}{key}_")
        return out
    if isinstance(nest, (list, tuple)):
        out = []
        for i, value in enumerate(nest):
            out += state_paths(value, f"{prefix}{i}_")
        return out
    return [(prefix[:-1], nest)]


def packed_names(names):
    """The state leaves' order in a packed state (`state_bytes`): their names, sorted."""
    return sorted(names)


def pack_leaves(leaves):
    """`{name: tensor}` -> the packed state, string `[L]` (in the graph)."""
    import tensorflow as tf

    return tf.stack([tf.io.serialize_tensor(leaves[n]) for n in packed_names(leaves)])


def is_per_example(name):
    """A state leaf with one row per input (not tiled to the hypotheses)."""
    return name.startswith(PER_EXAMPLE_PREFIX)


def _hidden_shape(value):
    """`tf.shape(value)` with what the signature says of it hidden from Grappler (a request
    may hold any shape: the server does not check it against the signature, so sizes the
    graph knows must not be folded into the checks), through a serialize/parse round trip
    (core ops): of the shape vector where the graph knows only part of the shape (a state
    leaf: the tensor itself is not copied), of the value where it knows all of it (a scalar
    input, whose shape Grappler would fold into a constant)."""
    import tensorflow as tf

    def hidden(tensor):
        serialized = tf.raw_ops.SerializeTensor(tensor=tensor)
        return tf.raw_ops.ParseTensor(serialized=serialized, out_type=tensor.dtype)

    if value.shape.is_fully_defined():
        return tf.shape(hidden(value))
    return hidden(tf.shape(value))


def _shape_text(spec_shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in spec_shape) + "]"


# ---- the state's layout: what a consistent state is ----------------------------------------

ROWS_PER_EXAMPLE = (
    "B rows (one per input, as many as every per-input leaf; N = tokens' rows a multiple of B)"
)
ROWS_PER_HYPOTHESIS = "N rows (one per hypothesis, as many as `tokens`)"


@dataclasses.dataclass(frozen=True)
class StateLeaf:
    """One state tensor of `decode_step`: its name, dtype (a NumPy name), static sizes (None:
    any; axis 0 is the rows), whether it has one row per input (else one per hypothesis), the
    axes that count source positions and those that count the self-attention cache's slots."""

    name: str
    dtype: str
    shape: tuple
    per_example: bool
    source_axes: tuple = ()
    slot_axes: tuple = ()

    def to_json(self):
        return {**dataclasses.asdict(self), "shape": list(self.shape)}

    @classmethod
    def from_json(cls, row):
        return cls(
            row["name"],
            row["dtype"],
            tuple(row["shape"]),
            bool(row["per_example"]),
            tuple(row["source_axes"]),
            tuple(row["slot_axes"]),
        )


def layout_references(layout):
    """`(source, slots)`: the leaf every other leaf's source positions are read against (the
    source mask where the state has one) and the one their slots are read against (the first
    self-attention cache leaf); None where no leaf has such an axis."""
    sources = [leaf for leaf in layout if leaf.source_axes]
    masks = [leaf for leaf in sources if leaf.name.endswith("source_mask")]
    source = (masks or sources or [None])[0]
    slots = next((leaf for leaf in layout if leaf.slot_axes), None)
    return source, slots


def layout_pairs(layout):
    """`(leaf, axis, reference, reference_axis, what)` for every axis that must equal its
    reference's: the source positions (`what="source"`) and the cache slots (`"slots"`)."""
    source, slots = layout_references(layout)
    for reference, what in ((source, "source"), (slots, "slots")):
        if reference is None:
            continue
        ref_axis = (reference.source_axes if what == "source" else reference.slot_axes)[0]
        for leaf in layout:
            for axis in leaf.source_axes if what == "source" else leaf.slot_axes:
                yield leaf, axis, reference, ref_axis, what


def shape_message(leaf):
    """The start of the error of a leaf whose rank, static sizes or rows are wrong."""
    rows = ROWS_PER_EXAMPLE if leaf.per_example else ROWS_PER_HYPOTHESIS
    return (
        f"`{leaf.name}` must have shape {_shape_text(leaf.shape)} with {rows}. "
        f"Received: {leaf.name} of shape"
    )


def group_message(leaf, axis, reference, reference_axis, what):
    """The start of the error of a leaf whose source positions (`what="source"`) or cache
    slots (`"slots"`) differ from the reference leaf's."""
    if what == "source":
        told = (
            f"as many source positions (axis {axis}) as `{reference.name}` (axis {reference_axis})"
        )
    else:
        told = (
            f"as many self-attention cache slots (axis {axis}) as `{reference.name}` "
            f"(axis {reference_axis}): every cache holds max_length slots"
        )
    return f"`{leaf.name}` must have {told}. Received: {leaf.name} of shape"


def step_message(max_length_limit):
    return (
        "`step` must be an integer in [0, max_length) (the state's self-attention cache slots, "
        f"at most max_length_limit={max_length_limit}). Received: step="
    )


def dtype_message(leaf, received):
    return f"`{leaf.name}` must be {leaf.dtype}. Received: {leaf.name} of dtype {received}"


def check_state_request(layout, tokens, step, state, max_length_limit):
    """The host's twin of the `decode_step` signature's run-time checks (`StepSignatures.
    checked_state`), on NumPy values: a `ValueError` naming the first input that is wrong
    (dtype too: a `.tflite` interpreter casts nothing), with the signature's words."""
    import numpy as np

    tokens, step = np.asarray(tokens), np.asarray(step)
    if tokens.ndim != 1:
        raise ValueError(
            f"`tokens` must be a vector [N] of int32 ids. Received: tokens of shape {list(tokens.shape)}"
        )
    if step.ndim != 0:
        raise ValueError(f"`step` must be a scalar. Received: step of shape {list(step.shape)}")
    missing = [leaf.name for leaf in layout if leaf.name not in state]
    if missing:
        raise ValueError(
            f"`{missing[0]}` is a state input of `decode_step`. Received: no {missing[0]}"
        )
    values = {leaf.name: np.asarray(state[leaf.name]) for leaf in layout}
    for name, value in (("tokens", tokens), ("step", step)):
        if value.dtype != np.int32:
            raise ValueError(f"`{name}` must be int32. Received: {name} of dtype {value.dtype}")
    rows, batch = tokens.shape[0], None
    for leaf in layout:
        value = values[leaf.name]
        if value.dtype != np.dtype(leaf.dtype):
            raise ValueError(dtype_message(leaf, value.dtype))
        ok = value.ndim == len(leaf.shape) and all(
            want is None or want == got for want, got in zip(leaf.shape, value.shape)
        )
        if ok and leaf.per_example:
            batch = value.shape[0] if batch is None else batch
            ok = value.shape[0] == batch and batch > 0 and rows % batch == 0
        elif ok:
            ok = value.shape[0] == rows
        if not ok:
            raise ValueError(
                f"{shape_message(leaf)} {list(value.shape)} with tokens of shape {[rows]}"
            )
    for leaf, axis, reference, ref_axis, what in layout_pairs(layout):
        got, ref = values[leaf.name].shape, values[reference.name].shape
        if got[axis] != ref[ref_axis]:
            raise ValueError(
                f"{group_message(leaf, axis, reference, ref_axis, what)} {list(got)} with "
                f"{reference.name} of shape {list(ref)}"
            )
    slots = layout_references(layout)[1]
    limit = max_length_limit
    if slots is not None:
        limit = min(limit, values[slots.name].shape[slots.slot_axes[0]])
    if not 0 <= int(step) < limit:
        raise ValueError(f"{step_message(max_length_limit)}{int(step)} with max_length {limit}")


class StepSignatures:
    """The `encode`, `decode_step`, `detokenize` and `tokenize` signatures of a model (module
    docstring).

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step`.
        settings: a `keras_attn.serving.ServingSettings` (`max_length` for the warm-up,
            `max_length_limit`, `max_input_length`, the source markers, `eos_penalty`).
        input_spec: the named `tf.TensorSpec` of the input (`inputs` strings or `images`).
        source_tokenizer: tokenizes the text input; None for images.
        target_tokenizer: gives the start and end ids, and detokenizes.
    """

    def __init__(self, model, settings, input_spec, source_tokenizer, target_tokenizer):
        self.model = model
        self.settings = settings
        self.input_spec = input_spec
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self._encode = None
        self._state_layout = None  # `state_layout()`, traced once for all the step signatures

    @classmethod
    def of(cls, signatures):
        """The step signatures of the model, settings and tokenizers of a `ServingSignatures`."""
        steps = cls(
            signatures.model,
            signatures.settings,
            signatures.input_spec,
            signatures.source_tokenizer,
            signatures.target_tokenizer,
        )
        steps._serving = signatures
        return steps

    @property
    def serving(self):
        """The export's `ServingSignatures` (made here when not given): its phrase constraints
        and word rules are those `encode` and `tokenize` answer, so the client's search gets
        the very tensors the in-graph searches get."""
        if getattr(self, "_serving", None) is None:
            from keras_attn.serving.signatures import ServingSignatures

            self._serving = ServingSignatures(
                self.model,
                self.settings,
                self.input_spec,
                self.source_tokenizer,
                self.target_tokenizer,
            )
        return self._serving

    # ---- the two halves ------------------------------------------------------------------
    def source_ids(self, inputs):
        """`string [B]` -> int32 `[B, S]` (`S >= 1`), as the search signatures tokenize."""
        import tensorflow as tf

        tok, s = self.source_tokenizer, self.settings
        ragged = tf.cast(
            tok.tokenize(
                inputs,
                add_start=s.source_add_start,
                add_end=s.source_add_end,
                max_length=s.max_input_length,
            ),
            tf.int32,
        )
        batch = tf.shape(inputs, out_type=tf.int64)[0]
        width = tf.maximum(tf.reduce_max(tf.concat([ragged.row_lengths(), [0]], 0)), 1)
        return ragged.to_tensor(default_value=tok.pad_id, shape=tf.stack([batch, width]))

    def encode_model_inputs(self, model_inputs, max_length):
        """Source ids (or images) -> `{name: tensor}`: the state leaves and `source_mask`."""
        import tensorflow as tf

        encoder_outputs = self.model.encode(model_inputs)
        state = self.model.initial_decode_state(encoder_outputs, max_length)
        paths = state_paths(state)
        out = dict(paths)
        if len(out) < len(paths):
            raise ValueError(
                "The model's decoder state must name its leaves distinctly when the path's keys "
                f"are joined by `_`. Received: leaves named {[n for n, _ in paths]}"
            )
        out["source_mask"] = tf.cast(encoder_outputs["source_mask"], tf.bool)
        return out

    def step(self, tokens, step, state_leaves, template):
        """One `model.decode_step` on named leaves: `(logits, attention, {name: new leaf})`
        with only the leaves the step changed (not the very tensor it was given)."""
        import tensorflow as tf

        names = [name for name, _ in state_paths(template)]
        state = tf.nest.pack_sequence_as(template, [state_leaves[name] for name in names])
        logits, new_state, attention = self.model.decode_step(tokens, state, step)
        logits = tf.cast(logits, tf.float32)
        changed = {
            name: leaf for name, leaf in state_paths(new_state) if leaf is not state_leaves[name]
        }
        if attention is None:
            attention = tf.zeros([tf.shape(tokens)[0], 0], tf.float32)
        return logits, tf.cast(attention, tf.float32), changed

    # ---- the served signatures -----------------------------------------------------------
    def _check_rank(self, name, value, rank, what):
        import tensorflow as tf

        shape = _hidden_shape(value)
        check = tf.debugging.Assert(
            tf.equal(tf.size(shape), rank),
            [f"`{name}` must be {what}. Received: {name} of shape", shape],
        )
        with tf.control_dependencies([check]):
            return tf.identity(value), shape

    def encode_function(self):
        """The `encode` concrete function (traced once)."""
        import tensorflow as tf

        if self._encode is not None:
            return self._encode
        s = self.settings
        text = self.source_tokenizer is not None
        rank = self.input_spec.shape.rank
        what = "a vector [B] of strings" if text else f"a batch of images of rank {rank}"

        def encode(inputs, max_length):
            inputs, _ = self._check_rank(self.input_spec.name, inputs, rank, what)
            max_length, _ = self._check_rank("max_length", max_length, 0, "a scalar")
            ok = (max_length >= 1) & (max_length <= s.max_length_limit)
            check = tf.debugging.Assert(
                ok,
                [
                    f"`max_length` must be an integer in [1, {s.max_length_limit}]. "
                    "Received: max_length=",
                    max_length,
                ],
            )
            with tf.control_dependencies([check]):
                max_length = tf.identity(max_length)
            model_inputs = self.source_ids(inputs) if text else inputs
            out = self.encode_model_inputs(model_inputs, max_length)
            out[STATE_BYTES] = pack_leaves(
                {n: v for n, v in out.items() if n.startswith(STATE_PREFIX)}
            )
            batch = tf.shape(out["source_mask"])[0]
            tok = self.target_tokenizer
            out["start_tokens"] = tf.fill([batch], tf.constant(tok.start_id, tf.int32))
            out["end_token"] = tf.constant(tok.end_id, tf.int32)
            out["eos_penalty"] = tf.constant(s.eos_penalty, tf.float32)
            if text and s.keep_placeholders:
                out.update(self.serving.phrases.placeholder_constraints(inputs))
            if text and s.word_rules:
                out.update(self.word_rules_outputs(inputs, model_inputs))
            return out

        self._encode = tf.function(encode, autograph=False).get_concrete_function(
            self.input_spec, tf.TensorSpec([], tf.int32, name="max_length")
        )
        return self._encode

    def word_rules_outputs(self, inputs, source_ids):
        """`{word_rules_*: tensor}`: what the searches' word rules read (the `word_rules`
        setting): the source ids, the source's placeholders as `glue_ban` reads them, and the
        vocabulary's tables (`word_start` only for SentencePiece)."""
        import tensorflow as tf

        serving = self.serving
        rules = serving.rule_phrases(inputs)
        out = {
            "source_ids": source_ids,
            "phrase_ids": rules["phrase_ids"],
            "phrase_alt_ids": rules["phrase_alt_ids"],
            "open_end": rules["open_end"],
            "marker": rules["marker"],
            "glue": tf.constant(serving.glue, tf.bool),
        }
        if serving.word_start is not None:
            out["word_start"] = tf.constant(serving.word_start, tf.bool)
        word_text = getattr(serving, "word_text", None)
        if word_text is not None:  # the loop ban's tables (`word_text_tables`)
            for name, table in zip(WORD_TEXT_TABLES, word_text):
                out[name] = tf.constant(table, tf.int32)
        if serving.known is not None:
            out["fixed"] = serving.source_rules({}, source_ids)["fixed"]
        return {WORD_RULES_PREFIX + name: value for name, value in out.items()}

    def tokenize_function(self):
        """The `tokenize` concrete function: `texts` string `[B, C]` -> `ids` int32
        `[B, C, L]` (each text tokenized alone with the target tokenizer, as the constrained
        signature spells its prefix and phrases; right-padded with -1) and `spelled` bool
        `[B, C]` (False where a text holds a piece the vocabulary lacks: the unknown id)."""
        import tensorflow as tf

        phrases = self.serving.phrases
        unk = self.target_tokenizer.unk_id

        def tokenize(texts):
            texts, _ = self._check_rank(TEXTS, texts, 2, "a matrix [B, C] of strings")
            ids = phrases.phrase_ids(texts)
            return {IDS: ids, SPELLED: ~tf.reduce_any(tf.equal(ids, unk), axis=-1)}

        return tf.function(tokenize, autograph=False).get_concrete_function(
            tf.TensorSpec([None, None], tf.string, name=TEXTS)
        )

    def state_specs(self):
        """`[(name, tf.TensorSpec)]` of the state leaves, in flatten order: the dtypes and
        static sizes `encode` gives (batch, source and slot axes unknown)."""
        import tensorflow as tf

        outputs = self.encode_function().structured_outputs
        specs = []
        for name, value in outputs.items():
            if name.startswith(STATE_PREFIX):
                shape = [None] + list(value.shape[1:])
                specs.append((name, tf.TensorSpec(shape, value.dtype, name=name)))
        order = [n for n, _ in state_paths(self._template())]
        table = dict(specs)
        return [(n, table[n]) for n in order]

    def _template(self):
        """The nest structure of the state (for packing named leaves)."""
        import tensorflow as tf

        if getattr(self, "_state_template", None) is None:
            spec = tf.TensorSpec([None, None], tf.int32)
            if self.source_tokenizer is None:
                spec = tf.TensorSpec([None] + list(self.input_spec.shape[1:]), tf.float32)
            holder = {}

            def trace(model_inputs):
                encoder_outputs = self.model.encode(model_inputs)
                state = self.model.initial_decode_state(encoder_outputs, 2)
                holder["template"] = tf.nest.map_structure(lambda _: 0, state)
                return tf.constant(0)

            tf.function(trace, autograph=False).get_concrete_function(spec)
            self._state_template = holder["template"]
        return self._state_template

    def _traced_state(self, batch, length, max_length):
        """`({name: static shape}, S)`: the state's leaves of a concrete trace (no run) on
        `batch` inputs of `length` source ids (images: unknown sides of `8 * length`), with
        `max_length` slots, and the source positions S the encoder answered."""
        import tensorflow as tf

        if self.source_tokenizer is not None:
            spec = tf.TensorSpec([batch, length], tf.int32)
        else:
            dims = [8 * length if d is None else d for d in self.input_spec.shape[1:]]
            spec = tf.TensorSpec([batch] + dims, tf.float32)
        holder = {}

        def trace(model_inputs):
            out = self.encode_model_inputs(model_inputs, max_length)
            holder["shapes"] = {name: tuple(value.shape) for name, value in out.items()}
            return tf.constant(0)

        tf.function(trace, autograph=False).get_concrete_function(spec)
        shapes = holder["shapes"]
        return shapes, shapes.pop("source_mask")[1]

    def state_layout(self, specs=None):
        """The state's `StateLeaf`s in flatten order: `specs` (default `state_specs()`) with
        the axes that count source positions and cache slots, read from two traces of the
        model's `encode` and `initial_decode_state` with other sizes (an axis that follows
        the source length, or `max_length`, in both)."""
        import numpy as np

        if specs is None:
            if self._state_layout is None:
                self._state_layout = self.state_layout(self.state_specs())
            return self._state_layout
        first, s1 = self._traced_state(2, 5, 6)
        second, s2 = self._traced_state(3, 7, 9)
        layout = []
        for name, spec in specs:
            a, b = first[name], second[name]
            axes = range(1, len(a))
            source = tuple(i for i in axes if s1 != s2 and a[i] == s1 and b[i] == s2)
            slots = tuple(i for i in axes if a[i] == 6 and b[i] == 9)
            layout.append(
                StateLeaf(
                    name,
                    np.dtype(spec.dtype.as_numpy_dtype).name,
                    tuple(spec.shape.as_list()),
                    is_per_example(name),
                    source,
                    slots,
                )
            )
        return tuple(layout)

    def checked_state(self, tokens, step, leaves, layout):
        """The request's tokens, step and state leaves, checked at run time (`layout`: the
        `state_layout()`): ranks, static sizes, rows (N for the hypotheses' leaves, B with N a
        multiple of B for the per-input ones), the source positions of every leaf that has
        them equal to the source mask's, the slots of every self-attention cache leaf (keys
        and values, every layer) equal, and `step` in `[0, min(slots, max_length_limit))`.
        The checks run one after the other: the error names the first input that is wrong
        (`check_state_request` is the host's twin)."""
        import tensorflow as tf

        limit = self.settings.max_length_limit
        tokens, tokens_shape = self._check_rank(TOKENS, tokens, 1, "a vector [N] of int32 ids")
        step, _ = self._check_rank(STEP, step, 0, "a scalar")
        rows = tokens_shape[0]
        conditions, padded, batch = [], {}, None
        for leaf in layout:
            shape = _hidden_shape(leaves[leaf.name])
            rank = len(leaf.shape)
            ok = tf.equal(tf.size(shape), rank)
            sizes = tf.concat([shape, tf.zeros([rank], tf.int32)], 0)[:rank]
            padded[leaf.name] = (shape, sizes)
            for axis, size in enumerate(leaf.shape):
                if size is not None:
                    ok = ok & tf.equal(sizes[axis], size)
            if leaf.per_example:
                batch = sizes[0] if batch is None else batch
                ok = ok & tf.equal(sizes[0], batch) & (batch > 0)
                ok = ok & tf.equal(tf.math.floormod(rows, tf.maximum(batch, 1)), 0)
            else:
                ok = ok & tf.equal(sizes[0], rows)
            conditions.append(
                (ok, [shape_message(leaf), shape, "with tokens of shape", tokens_shape])
            )
        for leaf, axis, reference, ref_axis, what in layout_pairs(layout):
            shape, sizes = padded[leaf.name]
            ref_shape, ref_sizes = padded[reference.name]
            conditions.append(
                (
                    tf.equal(sizes[axis], ref_sizes[ref_axis]),
                    [
                        group_message(leaf, axis, reference, ref_axis, what),
                        shape,
                        f"with {reference.name} of shape",
                        ref_shape,
                    ],
                )
            )
        slots = layout_references(layout)[1]
        slot_count = tf.constant(limit, tf.int32)
        if slots is not None:
            slot_count = tf.minimum(slot_count, padded[slots.name][1][slots.slot_axes[0]])
        conditions.append(
            (
                (step >= 0) & (step < slot_count),
                [step_message(limit), step, "with max_length", slot_count],
            )
        )
        checks = []
        for ok, data in conditions:  # one after the other: the first wrong input is named
            with tf.control_dependencies(checks[-1:]):
                checks.append(tf.debugging.Assert(ok, data, summarize=16))
        with tf.control_dependencies(checks[-1:]):
            tokens = tf.identity(tokens)
            step = tf.identity(step)
            checked = {leaf.name: tf.identity(leaves[leaf.name]) for leaf in layout}
        return tokens, step, checked, slot_count

    def _decode_step(self):
        """`(fn(tokens, step, leaves) -> outputs, specs)`: one checked step on named leaves,
        answering `logits`, `attention` and the leaves the step changed."""
        specs = self.state_specs()
        template = self._template()
        layout = self.state_layout()

        def decode_step(tokens, step, leaves):
            tokens, step, leaves, _ = self.checked_state(tokens, step, leaves, layout)
            logits, attention, changed = self.step(tokens, step, leaves, template)
            return {LOGITS: logits, ATTENTION: attention, **changed}

        return decode_step, specs

    def _decode_steps(self):
        """`(fn(tokens, step, count, leaves) -> outputs, specs)`: `decode_steps` (module
        docstring) on named leaves: up to `count` steps from `step`, each fed the most likely
        token of the step before (the end token once a row has ended), stopping after the
        step where every row chose the end token."""
        import tensorflow as tf

        specs = self.state_specs()
        template = self._template()
        layout = self.state_layout()
        end_id = tf.constant(self.target_tokenizer.end_id, tf.int32)

        def choose(tokens, logits):
            best = tf.argmax(logits, axis=-1, output_type=tf.int32)  # ties: the lowest id
            return tf.where(tf.equal(tokens, end_id), end_id, best)

        def decode_steps(tokens, step, count, leaves):
            tokens, step, leaves, slots = self.checked_state(tokens, step, leaves, layout)
            count, _ = self._check_rank(COUNT, count, 0, "a scalar")
            check = tf.debugging.Assert(
                count >= 1, ["`count` must be at least 1. Received: count=", count]
            )
            with tf.control_dependencies([check]):
                count = tf.minimum(count, slots - step)  # no step past the state's slots
            # the first step outside the loop: it tells which leaves a step changes
            logits, attention, changed = self.step(tokens, step, leaves, template)
            chosen = choose(tokens, logits)
            arrays = [
                tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=value.shape).write(
                    0, value
                )
                for dtype, value in (
                    (tf.float32, logits),
                    (tf.float32, attention),
                    (tf.int32, chosen),
                )
            ]
            keys = sorted(changed)

            def cond(i, tokens, state, arrays):
                return (i < count) & ~tf.reduce_all(tf.equal(tokens, end_id))

            def body(i, tokens, state, arrays):
                given = {**leaves, **dict(zip(keys, state))}
                logits, attention, new = self.step(tokens, step + i, given, template)
                chosen = choose(tokens, logits)
                arrays = [a.write(i, v) for a, v in zip(arrays, (logits, attention, chosen))]
                return i + 1, chosen, [new.get(k, given[k]) for k in keys], arrays

            _, _, state, arrays = tf.while_loop(
                cond,
                body,
                (tf.constant(1), chosen, [changed[k] for k in keys], arrays),
                maximum_iterations=tf.maximum(count - 1, 0),
            )
            return {
                LOGITS: tf.transpose(arrays[0].stack(), [1, 0, 2]),
                ATTENTION: tf.transpose(arrays[1].stack(), [1, 0, 2]),
                CHOSEN: tf.transpose(arrays[2].stack()),
                **dict(zip(keys, state)),
            }

        return decode_steps, specs

    def decode_step_function(self):
        """The `decode_step` concrete function: the state as one input per leaf."""
        import tensorflow as tf

        inner, specs = self._decode_step()
        names = [name for name, _ in specs]

        def decode_step(tokens, step, *values):
            return inner(tokens, step, dict(zip(names, values)))

        return tf.function(decode_step, autograph=False).get_concrete_function(
            tf.TensorSpec([None], tf.int32, name=TOKENS),
            tf.TensorSpec([], tf.int32, name=STEP),
            *[spec for _, spec in specs],
        )

    def decode_steps_function(self):
        """The `decode_steps` concrete function: the state as one input per leaf."""
        import tensorflow as tf

        inner, specs = self._decode_steps()
        names = [name for name, _ in specs]

        def decode_steps(tokens, step, count, *values):
            return inner(tokens, step, count, dict(zip(names, values)))

        return tf.function(decode_steps, autograph=False).get_concrete_function(
            tf.TensorSpec([None], tf.int32, name=TOKENS),
            tf.TensorSpec([], tf.int32, name=STEP),
            tf.TensorSpec([], tf.int32, name=COUNT),
            *[spec for _, spec in specs],
        )

    def packed_function(self, inner, specs, counted):
        """The packed twin of a step signature (module docstring): `tokens`, `step`,
        (`count`,) `parents` int32 `[N]` and `state_bytes` string `[L]` (each leaf
        `tf.io.serialize_tensor`d, in the order of `packed_names`) -> the step's outputs
        with the whole state after it as `state_bytes` in place of the changed leaves. The
        hypotheses' leaves are first gathered along `parents` (the search's reordering and,
        on the first step, its tiling), the per-input ones kept."""
        import tensorflow as tf

        table = dict(specs)
        names = packed_names(table)

        def unpack(parents, state_bytes):
            parents, _ = self._check_rank(PARENTS, parents, 1, "a vector [N] of int32 rows")
            state_bytes, shape = self._check_rank(STATE_BYTES, state_bytes, 1, "a vector")
            check = tf.debugging.Assert(
                tf.equal(shape[0], len(names)),
                [
                    f"`{STATE_BYTES}` must hold the {len(names)} state leaves {names}. "
                    f"Received: {STATE_BYTES} of shape",
                    shape,
                ],
            )
            leaves, rows = {}, None
            with tf.control_dependencies([check]):
                for i, name in enumerate(names):
                    spec = table[name]
                    leaf = tf.ensure_shape(
                        tf.io.parse_tensor(state_bytes[i], spec.dtype), spec.shape
                    )
                    if not is_per_example(name):
                        rows = tf.shape(leaf)[0] if rows is None else rows
                    leaves[name] = leaf
            if rows is not None:
                ok = tf.reduce_all((parents >= 0) & (parents < rows))
                check = tf.debugging.Assert(
                    ok,
                    [
                        f"`{PARENTS}` must be rows of the state's hypotheses, in [0, N) with N",
                        rows,
                        f". Received: {PARENTS}=",
                        parents,
                    ],
                    summarize=16,
                )
                with tf.control_dependencies([check]):
                    leaves = {
                        n: leaf if is_per_example(n) else tf.gather(leaf, parents)
                        for n, leaf in leaves.items()
                    }
            return leaves

        def pack(leaves, outputs):
            state = {**leaves, **{n: v for n, v in outputs.items() if n in table}}
            rest = {n: v for n, v in outputs.items() if n not in table}
            return {**rest, STATE_BYTES: pack_leaves(state)}

        if counted:

            def packed(tokens, step, count, parents, state_bytes):
                leaves = unpack(parents, state_bytes)
                return pack(leaves, inner(tokens, step, count, leaves))

            counts = [tf.TensorSpec([], tf.int32, name=COUNT)]
        else:

            def packed(tokens, step, parents, state_bytes):
                leaves = unpack(parents, state_bytes)
                return pack(leaves, inner(tokens, step, leaves))

            counts = []
        return tf.function(packed, autograph=False).get_concrete_function(
            tf.TensorSpec([None], tf.int32, name=TOKENS),
            tf.TensorSpec([], tf.int32, name=STEP),
            *counts,
            tf.TensorSpec([None], tf.int32, name=PARENTS),
            tf.TensorSpec([None], tf.string, name=STATE_BYTES),
        )

    def detokenize_function(self):
        import tensorflow as tf

        def detokenize(ids):
            ids, _ = self._check_rank(IDS, ids, 2, "a matrix [B, T] of int32 ids")
            return {"outputs": self.target_tokenizer.detokenize(ids)}

        return tf.function(detokenize, autograph=False).get_concrete_function(
            tf.TensorSpec([None, None], tf.int32, name=IDS)
        )

    def functions(self):
        """`{signature name: concrete function}` of `STEP_SIGNATURE_NAMES`."""
        from keras_attn.serving import search_steps

        return {
            "encode": self.encode_function(),
            "decode_step": self.decode_step_function(),
            "detokenize": self.detokenize_function(),
            "tokenize": self.tokenize_function(),
            "decode_steps": self.decode_steps_function(),
            "decode_step_packed": self.packed_function(*self._decode_step(), counted=False),
            "decode_steps_packed": self.packed_function(*self._decode_steps(), counted=True),
            **search_steps.functions(self.serving),
        }

    def warmup_inputs(self, warmup_inputs):
        """`{signature: {input: numpy}}`, one warm-up request per step signature: `encode` of
        the warm-up inputs (strings, or a numpy array of images) at the export's `max_length`,
        `decode_step` at step 0 on the state it answers (`decode_steps` two steps from there;
        the packed twins the same, packed), `detokenize` of the start tokens."""
        import numpy as np
        import tensorflow as tf

        from keras_attn.serving import search_steps

        if isinstance(warmup_inputs, np.ndarray) and warmup_inputs.dtype != object:
            inputs = warmup_inputs
        else:
            inputs = np.array(
                [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in warmup_inputs],
                dtype=object,
            )
        max_length = np.int32(self.settings.max_length)
        encoded = self.encode_function()(tf.constant(inputs), tf.constant(max_length))
        state = {k: v.numpy() for k, v in encoded.items() if k.startswith(STATE_PREFIX)}
        start = encoded["start_tokens"].numpy()
        packed = {
            PARENTS: np.arange(len(start), dtype=np.int32),
            STATE_BYTES: encoded[STATE_BYTES].numpy(),
        }
        blank = np.array([[b""]], dtype=object)  # an image export's `tokenize` warm-up
        return {
            "encode": {self.input_spec.name: inputs, "max_length": max_length},
            "decode_step": {TOKENS: start, STEP: np.int32(0), **state},
            "detokenize": {IDS: start[:, None]},
            "tokenize": {TEXTS: inputs[:1, None] if inputs.dtype == object else blank},
            "decode_steps": {TOKENS: start, STEP: np.int32(0), COUNT: np.int32(2), **state},
            "decode_step_packed": {TOKENS: start, STEP: np.int32(0), **packed},
            "decode_steps_packed": {TOKENS: start, STEP: np.int32(0), COUNT: np.int32(2), **packed},
            **search_steps.warmup_inputs(self.serving, inputs),
        }

    def warmup_requests(self, warmup_inputs):
        """`[(signature, {input: numpy})]`: `warmup_inputs`' requests as the writer takes them."""
        return list(self.warmup_inputs(warmup_inputs).items())

    # ---- LiteRT --------------------------------------------------------------------------
    def lite_functions(self, max_length):
        """`{"encode", "decode_step"}` concrete functions for the LiteRT converter: `encode`
        takes one input (`source_ids` int32 `[1, S]`, tokenized on the device, or one image;
        a static batch lets the converter lower the RNN encoders' loops) and fixes
        `max_length` slots; `decode_step` takes any number of hypotheses. No run-time
        checks (the client checks)."""
        import tensorflow as tf

        text = self.source_tokenizer is not None
        max_length = int(max_length)

        def encode(model_inputs):
            out = self.encode_model_inputs(model_inputs, max_length)
            return out

        if text:
            spec = tf.TensorSpec([1, None], tf.int32, name=SOURCE_IDS)
        else:
            spec = tf.TensorSpec([1] + list(self.input_spec.shape[1:]), tf.float32, name="images")
        encode_fn = tf.function(encode, autograph=False).get_concrete_function(spec)
        outputs = encode_fn.structured_outputs
        template = self._template()
        names = [n for n, _ in state_paths(template)]
        specs = [
            tf.TensorSpec([None] + list(outputs[n].shape[1:]), outputs[n].dtype, name=n)
            for n in names
        ]

        def decode_step(tokens, step, *values):
            leaves = dict(zip(names, values))
            logits, attention, changed = self.step(tokens, step, leaves, template)
            return {LOGITS: logits, ATTENTION: attention, **changed}

        step_fn = tf.function(decode_step, autograph=False).get_concrete_function(
            tf.TensorSpec([None], tf.int32, name=TOKENS),
            tf.TensorSpec([], tf.int32, name=STEP),
            *specs,
        )
        return {"encode": encode_fn, "decode_step": step_fn}


_OF = weakref.WeakKeyDictionary()  # one StepSignatures per ServingSignatures (traced once)


def steps_of(signatures: Any) -> StepSignatures:
    """The `StepSignatures` of a `ServingSignatures` (made once per object)."""
    if signatures not in _OF:
        _OF[signatures] = StepSignatures.of(signatures)
    return _OF[signatures]


def step_functions(signatures: Any) -> dict:
    """The step signatures' concrete functions for a `ServingSignatures`."""
    return steps_of(signatures).functions()


def step_warmup_requests(signatures: Any, warmup_inputs: Any) -> list:
    """The step signatures' warm-up requests for a `ServingSignatures`."""
    return steps_of(signatures).warmup_requests(warmup_inputs)


def _rows():
    from keras_attn.serving.specs import ExtraSignatures

    return ExtraSignatures(
        names=STEP_SIGNATURE_NAMES, functions=step_functions, warmup=step_warmup_requests
    )


# The step signatures as an export's extra signatures: `export_text_model(model, tokenizer,
# export_dir, extra_signatures=[STEP_SIGNATURES])` (`keras_attn.serving.specs.ExtraSignatures`).
STEP_SIGNATURES = _rows()
