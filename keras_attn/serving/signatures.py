"""The search signatures of an exported model (TensorFlow only).

`ServingSignatures(model, settings, input_spec, ...)` builds one `tf.function` per row of the
served table (`keras_attn.serving.specs.SPECS`): tokenizer -> `model.encode` -> the row's search
over `model.decode_step` -> detokenizer, by one body builder (`body`) that reads from the row
which search runs, which request parameters it takes, which values it takes from the export's
`ServingSettings`, and whether a request's phrases constrain it (`keras_attn.serving.
constraints`).

What the settings add around that search is a served behaviour, a unit of its own module
(`keras_attn.serving.behaviours`), listed once here, in `BEHAVIOURS`, in the order their hooks
run: the placeholders and unknown words kept, the word rules, the unknown words copied whole,
the source copied, the XLA twins (`<name>_xla`: the same body with its numeric core compiled
over the buckets of `keras_attn.serving.buckets`), the signatures other modules add (the step
signatures).

The signatures, their inputs and outputs and the documented limits are described in
docs/serving.md; `keras_attn.serving.export` writes them to disk.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_attn.decoding import Constraints, DecodingConfig, encode_for_search
from keras_attn.decoding.modes import MODES
from keras_attn.layers.positional import PositionalEncoding
from keras_attn.serving import buckets, specs, word_rules
from keras_attn.serving.checks import assert_rank, assert_within_limit
from keras_attn.serving.constraints import PhraseConstraints
from keras_attn.serving.copy_source import COPY_SOURCE
from keras_attn.serving.extra import EXTRA_SIGNATURES
from keras_attn.serving.kept_answers import KEEP
from keras_attn.serving.known_words import UNKNOWN_WORDS
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.word_rules import WORD_RULES, word_rule_tables  # noqa: F401

SIGNATURE_NAMES = tuple(specs.SIGNATURES)
# The served behaviours, in the order their hooks run (`keras_attn.serving.behaviours`): the
# unknown words read the word rules' tables; `copy_source` weighs the source against the
# answer `serving_default` kept.
BEHAVIOURS = (KEEP, WORD_RULES, UNKNOWN_WORDS, COPY_SOURCE, buckets.XLA_TWINS, EXTRA_SIGNATURES)


def position_limit(model):
    """Rows of the smallest learned position table in `model` (a `keras_attn.layers.
    PositionalEncoding` with `mode="learned"`), or None when it has none: sources and outputs
    longer than that cannot be encoded."""
    sizes = [
        layer.max_length
        for layer in _keras_layers(model)
        if isinstance(layer, PositionalEncoding) and layer.mode == "learned"
    ]
    return min(sizes) if sizes else None


def _keras_layers(root):
    """`root` and every Keras layer it holds, through attributes, lists and dicts (nothing
    when `root` is not a Keras layer)."""
    stack, seen = [root], set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, keras.layers.Layer):
            yield obj
            stack.extend(vars(obj).values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())


class ServingSignatures:
    """The signature functions over a model and its tokenizers.

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step` (docs/serving.md).
        settings: a `ServingSettings`.
        input_spec: a named `tf.TensorSpec`: string `[B]` text, or float32 images.
        source_tokenizer: tokenizes the text input; None when the input is not text.
        target_tokenizer: detokenizes the outputs (and spells the phrase constraints).
    """

    def __init__(self, model, settings, input_spec, source_tokenizer, target_tokenizer):
        if not isinstance(settings, ServingSettings):
            raise ValueError(
                f"`settings` must be a ServingSettings. Received: settings={settings!r}"
            )
        self.model = model
        self.settings = settings
        self.input_spec = input_spec
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.phrases = PhraseConstraints(target_tokenizer)
        # the behaviours' tables, set by their `prepare`
        self.word_start, self.glue, self.word_text, self.known = None, None, None, None
        # the served behaviours these settings turn on, in the list's order
        self.behaviours = tuple(unit for unit in BEHAVIOURS if unit.enabled(settings))
        for unit in self.behaviours:
            unit.prepare(self)

    # ---- the table of this export ------------------------------------------------------
    @property
    def exported(self):
        """`{signature name: (spec, xla)}`: every search signature of this export, in the
        table's order (text exports: all; image exports: those without string inputs), then
        the rows the behaviours add (`Behaviour.signatures`: the XLA twins the settings
        name)."""
        rows = {s.name: (s, False) for s in specs.SPECS if self.settings.text_input or not s.texts}
        for unit in self.behaviours:
            rows.update(unit.signatures(self))
        return rows

    def tracked(self):
        """The objects the SavedModel keeps for the behaviours (`Behaviour.tracked`)."""
        return [obj for unit in self.behaviours for obj in unit.tracked(self)]

    @property
    def request_params(self):
        """`{signature: [(name, dtype name, warm-up value), ...]}`: each signature's request
        parameters in the table's order, with the value its warm-up request sends (the export's
        setting of that name where it has one, else the table's default: the neutral value of
        each control)."""
        return {
            name: [
                (param, specs.request_param(param).dtype, self._warmup_value(param))
                for param in spec.params
            ]
            for name, (spec, _) in self.exported.items()
        }

    def _warmup_value(self, name):
        if name in specs.SEARCH_SETTINGS:
            return getattr(self.settings, name)
        return specs.request_param(name).default

    # ---- shared pieces ---------------------------------------------------------------
    def source_ids(self, inputs):
        """`string [B]` -> int32 `[B, S]` padded with `pad_id`, `S >= 1`, `S <= max_input_length`."""
        tok = self.source_tokenizer
        ragged = tok.tokenize(
            inputs,
            add_start=self.settings.source_add_start,
            add_end=self.settings.source_add_end,
            max_length=self.settings.max_input_length,
        )
        ragged = tf.cast(ragged, tf.int32)
        batch = tf.shape(inputs, out_type=tf.int64)[0]
        width = tf.maximum(tf.reduce_max(tf.concat([ragged.row_lengths(), [0]], 0)), 1)
        return ragged.to_tensor(default_value=tok.pad_id, shape=tf.stack([batch, width]))

    def model_inputs(self, inputs):
        """What `model.encode` takes: source ids for text, the float32 images as they are."""
        if self.source_tokenizer is None:
            return inputs
        return self.source_ids(inputs)

    def checked_inputs(self, inputs):
        """The request's `inputs` (or `images`), its rank checked at run time."""
        rank = self.input_spec.shape.rank
        what = (
            "a vector [B] of strings"
            if rank == 1
            else f"a batch of images of rank {rank} [B, H, W, C]"
        )
        return assert_rank(self.input_spec.name, inputs, rank, what)

    def checked_params(self, params):
        """A request's parameters (`{name: tensor}`), each checked to be a scalar, and
        `beam_size` and `max_length` against the export's limits, at run time. Their documented
        ranges are checked once, where the request's config is built (`request_config`)."""
        s = self.settings
        limits = {"beam_size": s.beam_size_limit, "max_length": s.max_length_limit}
        checked = {}
        for name, value in params.items():
            value = assert_rank(name, value, 0, "a scalar")
            if name in limits:
                value = assert_within_limit(name, value, 1, limits[name])
            checked[name] = value
        return checked

    def request_config(self, values, xla=False):
        """The one `DecodingConfig` of a request: its parameters and the export's settings
        (`values`, `{name: tensor or number}`) with the export's `eos_penalty`, each range
        checked here, once (the decoding table's, docs/decoding.md); under XLA, which drops
        assertions, it is built outside the compiled core, and the engine also returns its NaN
        check (`report_invalid`)."""
        return DecodingConfig(eos_penalty=self.settings.eos_penalty, report_invalid=xla, **values)

    def encode(self, inputs, max_length):
        """The request's text (or images) -> `(decoder state, start tokens, source mask)`."""
        return self.encode_model_inputs(self.model_inputs(inputs), max_length)

    def encode_model_inputs(self, inputs, max_length):
        """`encode` on what the model takes (source ids or images): the first half of
        `keras_attn.decoding.generate`. The signatures run the search themselves, as its second
        half does: they need the source mask (the width of the alignments), and the XLA twins
        pad the inputs before the encoder and cut the answer after the search."""
        encoded = encode_for_search(self.model, inputs, self.target_tokenizer.start_id, max_length)
        return encoded.state, encoded.start_tokens, encoded.source_mask

    # ---- the search --------------------------------------------------------------------
    def decode(self, search, inputs, config, rows=None, rules=None, xla=False):
        """`search` (a `keras_attn.decoding` function) over the model for text or images `[B]`
        with the request's `config` (`request_config`); returns `(result, source_mask)`.
        `rows`: the search's per-row tensors (`{name: [B, ...]}`: the fields of its
        `Constraints`, or `forced_search`'s `targets`). `rules`: the word rules' phrase tensors
        (`step_rows`), or None: the step as it is. `xla`: run the numeric core compiled
        (`compiled_decode`)."""
        rows = dict(rows or {})
        if xla:
            return buckets.compiled_decode(self, search, inputs, config, rows, rules)
        model_inputs = self.model_inputs(inputs)
        state, start_tokens, source_mask = self.encode_model_inputs(model_inputs, config.max_length)
        if rules is not None:
            rules = self.source_rules(rules, model_inputs)
        return self.search(search, state, start_tokens, source_mask, config, rows, rules)

    def rule_phrases(self, inputs):
        """The word rules' phrases of text `[B]` (`word_rules.rule_phrases`)."""
        return word_rules.rule_phrases(self, inputs)

    def request_rows(self, spec, inputs, texts, rows):
        """The search's per-row constraint tensors `rows` of a request to `spec`, as the
        behaviours change them (`Behaviour.request`: the source's placeholders required)."""
        for unit in self.behaviours:
            rows = unit.request(self, spec, inputs, texts, rows)
        return rows

    def step_rows(self, spec, inputs):
        """The step's per-row tensors of a request to `spec` (`Behaviour.step_rows`: the word
        rules' phrases), or None where no behaviour changes its step."""
        rules = None
        for unit in self.behaviours:
            rows = unit.step_rows(self, spec, inputs)
            if rows is not None:
                rules = dict(rules or {}, **rows)
        return rules

    def source_rules(self, rules, source_ids):
        """The step's per-row tensors `rules` with what the behaviours read of the source ids
        (`Behaviour.source_rows`: the word rules' source, the unknown words' pieces)."""
        for unit in self.behaviours:
            rules = unit.source_rows(self, rules, source_ids)
        return rules

    def search(self, search, state, start_tokens, source_mask, config, rows, rules=None):
        """`search` over the model's step as the behaviours change it (`Behaviour.step`: the
        word rules, where `rules` is given) with `config` and the per-row tensors `rows`
        (`decode`); `(result, source_mask)`."""
        step = self.model.decode_step
        for unit in self.behaviours:
            step, state = unit.step(self, step, state, rules)
        if "targets" in rows:  # forced_search: the sequences it scores
            per_row = {"targets": rows["targets"]}
        else:
            per_row = {"constraints": Constraints(**rows) if rows else None}
        end = self.target_tokenizer.end_id
        result = search(
            step, state, start_tokens, end, config=config, source_mask=source_mask, **per_row
        )
        return result, source_mask

    # ---- outputs -----------------------------------------------------------------------
    def beam_outputs(self, result, source_mask):
        """A beam search's result -> the `beam_search` signature's outputs (and
        `constraints_met` when the search had phrases)."""
        # At least one column, so an empty batch still detokenizes to an empty [B, K].
        t = tf.reduce_max(tf.concat([tf.reshape(result["lengths"], [-1]), [1]], 0))
        sequences = result["sequences"][:, :, :t]
        extra = {"token_log_probs": tf.cast(result["token_log_probs"][:, :, :t], tf.float32)}
        if "constraints_met" in result:
            extra["constraints_met"] = tf.cast(result["constraints_met"], tf.bool)
        return extra | {
            "outputs": self.target_tokenizer.detokenize(sequences),
            "scores": tf.cast(result["scores"], tf.float32),
            "log_probs": tf.cast(result["log_probs"], tf.float32),
            "lengths": tf.cast(result["lengths"], tf.int32),
            "alignments": _alignments(result, t, tf.shape(sequences)[:2], tf.shape(source_mask)[1]),
        }

    def single_outputs(self, result, source_mask):
        """A greedy or sampling result -> the `greedy` signature's outputs."""
        t = tf.reduce_max(tf.concat([result["lengths"], [1]], 0))
        sequences = result["sequences"][:, :t]
        return {
            "outputs": self.target_tokenizer.detokenize(sequences),
            "scores": tf.cast(result["scores"], tf.float32),
            "alignments": _alignments(result, t, tf.shape(sequences)[:1], tf.shape(source_mask)[1]),
        }

    def best_outputs(self, outputs):
        """Beam outputs -> the best answer per input (`[B]`)."""
        return {name: outputs[name][:, 0] for name in ("outputs", "scores")}

    # ---- the signatures --------------------------------------------------------------
    def body(self, spec, xla=False):
        """The body of the signature of `spec` (a `keras_attn.serving.specs.SignatureSpec`):
        `body(inputs, texts, params) -> outputs` (`params`: the request parameters, checked
        once, in `request_config`): the row's answer (`answer`) as each behaviour changes it
        (`Behaviour.answer`), in the list's order. `xla`: its numeric core compiled (the
        `<name>_xla` twin)."""
        search = MODES[spec.search].function()
        fixed = {name: getattr(self.settings, name) for name in spec.settings}

        def answer(inputs, texts, config):
            return self.answer(spec, search, inputs, texts, config, xla)

        for unit in self.behaviours:
            answer = unit.answer(self, spec, search, answer, xla)

        def body(inputs, texts=(), params=None):
            values = dict(fixed, **(params or {}))
            if "max_length" in fixed and not xla:  # Python numbers stay constants under XLA
                values["max_length"] = tf.constant(values["max_length"], tf.int32)
            return answer(inputs, texts, self.request_config(values, xla))

        return body

    def searched(self, spec, search, inputs, texts, config, xla=False):
        """`spec`'s search over a request: the request's phrases (`texts`) and the
        behaviours' per-row tensors (`request_rows`, `step_rows`), `search` with `config`;
        `(result, source_mask, spelled)` (`spelled`: bool `[B, C]`, whether each phrase could
        be spelled, or None without phrases)."""
        rows, spelled = {}, None
        if spec.texts:
            rows, spelled = self.phrases.request_constraints(
                inputs, *texts, config.max_length, config.beam_size
            )
        rows = self.request_rows(spec, inputs, texts, rows)
        result = self.decode(search, inputs, config, rows, self.step_rows(spec, inputs), xla)
        return (*result, spelled)

    def answer(self, spec, search, inputs, texts, config, xla=False):
        """The outputs of `spec`'s signature before the behaviours' answers: its search
        (`searched`), the result as the row's outputs."""
        *result, spelled = self.searched(spec, search, inputs, texts, config, xla)
        if spec.search != "beam":
            return self.single_outputs(*result)
        outputs = self.beam_outputs(*result)
        if spec.best_only:
            return self.best_outputs(outputs)
        if spelled is not None:  # a phrase that cannot be spelled is not met
            outputs["constraints_met"] = outputs["constraints_met"] & spelled[:, None]
        return {name: outputs[name] for name in spec.outputs}

    def function(self, spec, xla=False):
        """The concrete function of `spec`'s signature: inputs named as the request names
        them (`inputs` or `images`, the string inputs, the request parameters)."""
        body = self.body(spec, xla)
        strings = len(spec.texts)

        def signature(inputs, *values):
            params = self.checked_params(dict(zip(spec.params, values[strings:])))
            return body(self.checked_inputs(inputs), values[:strings], params)

        input_specs = (
            [self.input_spec]
            + [
                tf.TensorSpec([None] * len(a.shape.split(",")), tf.string, name=a.name)
                for a in spec.texts
            ]
            + [
                tf.TensorSpec([], getattr(tf, specs.request_param(name).dtype), name=name)
                for name in spec.params
            ]
        )
        return tf.function(signature, autograph=False).get_concrete_function(*input_specs)

    def functions(self):
        """`{signature name: concrete function}`: the search signatures of this export, then
        those the behaviours build (`Behaviour.functions`: the `extra_signatures` setting's).
        A model that branches in Python on a tensor
        value (traced without AutoGraph, docs/serving.md "Export") gets a `TypeError` that
        says what to write instead."""
        try:
            functions = {
                name: self.function(spec, xla) for name, (spec, xla) in self.exported.items()
            }
            for unit in self.behaviours:
                functions.update(unit.functions(self))
        except tf.errors.OperatorNotAllowedInGraphError as error:
            raise TypeError(
                "The model's `encode`, `initial_decode_state` or `decode_step` uses a tensor "
                "as a Python bool (an `if`, `while`, `and` or `assert` on a tensor value), which "
                "an exported graph cannot hold: branch with `keras.ops.cond` or "
                "`keras.ops.where`, loop with `keras.ops.while_loop` (docs/serving.md, "
                f'"Export"). TensorFlow: {str(error).split(". ")[0]}.'
            ) from error
        return functions


def _alignments(result, t, leading, width):
    """The search's alignments cut to `t` steps, or zeros when the step gives no attention."""
    if "alignments" in result:
        return tf.cast(result["alignments"][..., :t, :], tf.float32)
    return tf.zeros(tf.concat([leading, tf.stack([t, width])], 0), tf.float32)
