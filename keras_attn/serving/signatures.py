"""The search signatures of an exported model (TensorFlow only).

`ServingSignatures(model, settings, input_spec, ...)` builds one `tf.function` per row of the
served table (`keras_attn.serving.specs.SPECS`): tokenizer -> `model.encode` -> the row's search
over `model.decode_step` -> detokenizer, by one body builder (`body`) that reads from the row
which search runs, which request parameters it takes, which values it takes from the export's
`ServingSettings`, and whether phrases (a request's, or the source's placeholders and unknown
words) constrain it.
A `<name>_xla` signature is the same body with its numeric core compiled (`compiled_decode`,
over the buckets of `keras_attn.serving.buckets`). The phrase tensors come from
`keras_attn.serving.constraints`; the signatures another module adds beside these (the
`extra_signatures` setting) are built by that module.

The signatures, their inputs and outputs and the documented limits are described in
docs/serving.md; `keras_attn.serving.export` writes them to disk.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from keras_attn.decoding import (
    DecodingConfig,
    encode_for_search,
    engine,
    forced_search,
)
from keras_attn.decoding.modes import MODES
from keras_attn.decoding.words import MAX_WORD, sentencepiece_word_starts, word_rules_step
from keras_attn.layers.positional import PositionalEncoding
from keras_attn.serving import buckets, specs
from keras_attn.serving.checks import assert_in_range, assert_rank
from keras_attn.serving.constraints import (
    PhraseConstraints,
    concat_phrases,
    first_exact,
    first_true,
)
from keras_attn.serving.known_words import KnownWords, holds_words
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.specs import XLA_SUFFIX
from keras_attn.text.placeholders import (
    OPEN_ENDED_PATTERN,
    glue_pieces,
    graph_placeholders,
    graph_placeholders_kept,
)

SIGNATURE_NAMES = tuple(specs.SIGNATURES)
# The longest open-ended placeholder (in target tokens) the `word_rules` keep unglued.
GLUE_PHRASE_TOKENS = 16


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
        self.word_start, self.glue, self.known = None, None, None
        if settings.word_rules:
            self.word_start, self.glue = word_rule_tables(source_tokenizer, target_tokenizer)
        if settings.known_words is not None:
            if self.word_start is None:
                raise ValueError(
                    "`known_words` needs a SentencePiece vocabulary (the word rules read a "
                    "source word off its pieces). Received: known_words with a "
                    f"{type(target_tokenizer).__name__}"
                )
            self.known = KnownWords(
                settings.known_words, target_tokenizer.vocabulary, self.word_start
            )

    # ---- the table of this export ------------------------------------------------------
    @property
    def exported(self):
        """`{signature name: (spec, xla)}`: every search signature of this export, in the
        table's order (text exports: all; image exports: those without string inputs), then
        the XLA twins the settings name."""
        rows = {s.name: (s, False) for s in specs.SPECS if self.settings.text_input or not s.texts}
        for name in self.settings.xla:
            rows[name + XLA_SUFFIX] = (specs.SPEC[name], True)
        return rows

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
        `beam_size` and `max_length` against the export's limits, at run time. The decoding
        functions check the rest against their documented ranges (docs/decoding.md)."""
        s = self.settings
        limits = {"beam_size": s.beam_size_limit, "max_length": s.max_length_limit}
        checked = {}
        for name, value in params.items():
            value = assert_rank(name, value, 0, "a scalar")
            if name in limits:
                value = assert_in_range(name, value, 1, limits[name])
            checked[name] = value
        return checked

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
    def decode(self, search, inputs, max_length, xla=False, constraints=None, rules=None, **params):
        """`search` (a `keras_attn.decoding` function) over the model for text or images `[B]`;
        returns `(result, source_mask)`. `xla`: run the numeric core compiled (`compiled_decode`).
        `constraints`: the search's constraint tensors (`prefix_ids`, `constraint_ids`, ...).
        `rules`: the word rules' phrase tensors (`rule_phrases`), or None: no word rules."""
        constraints = dict(constraints or {})
        if xla:
            return self.compiled_decode(search, inputs, max_length, constraints, rules, **params)
        model_inputs = self.model_inputs(inputs)
        state, start_tokens, source_mask = self.encode_model_inputs(model_inputs, max_length)
        if rules is not None:
            rules = self.source_rules(rules, model_inputs)
        return self.search(
            search, state, start_tokens, source_mask, max_length, rules, **constraints, **params
        )

    def rule_phrases(self, inputs):
        """The phrases `glue_ban` reads for text `[B]`: the source's placeholders
        (`phrase_ids`, `phrase_alt_ids`, as `keep_placeholders` requires them) and whether each
        is open-ended (`open_end`, `keras_attn.text.placeholders.OPEN_ENDED_PATTERN`) and not
        glued to the text after it by the source itself (`%8U`, `$a$b`: an answer may glue
        what its source glues)."""
        ids, alts = self.phrases.placeholder_ids(inputs)
        found, glued = graph_placeholders(inputs, glued=True)
        found, glued = found.to_tensor(default_value=""), glued.to_tensor(default_value=False)
        open_end = tf.strings.regex_full_match(found, OPEN_ENDED_PATTERN) & ~glued
        # `glue_ban` reads the phrases at a fixed width: a longer one is left out
        width = GLUE_PHRASE_TOKENS
        open_end = open_end & ~tf.reduce_any(ids[:, :, width:] >= 0, axis=-1)
        pad = tf.maximum(width - tf.shape(ids)[2], 0)
        ids, alts = (
            tf.pad(x, [[0, 0], [0, 0], [0, pad]], constant_values=-1)[:, :, :width]
            for x in (ids, alts)
        )
        # the alternative spelling of each phrase's first piece
        return {"phrase_ids": ids, "phrase_alt_ids": alts[:, :, 0], "open_end": open_end}

    def source_rules(self, rules, source_ids):
        """`rules` with the source ids (`source`) and, with `known_words`, the pieces of the
        source words the model never saw (`fixed`, `KnownWords.unknown_pieces`)."""
        rules = dict(rules, source=source_ids)
        if self.known is not None:
            rules["fixed"] = self.known.unknown_pieces(source_ids)
        return rules

    def ruled_step(self, state, rules):
        """`(step, state)`: the model's step wrapped with the word rules
        (`keras_attn.decoding.words.word_rules_step`), or as it is where `rules` is None."""
        if rules is None:
            return self.model.decode_step, state
        return word_rules_step(
            self.model.decode_step,
            state,
            rules["source"],
            self.word_start,
            self.target_tokenizer.end_id,
            self.settings.max_length_limit,  # no request's max_length is above it
            phrase_ids=tf.ensure_shape(rules["phrase_ids"], [None, None, GLUE_PHRASE_TOKENS]),
            open_end=rules["open_end"],
            phrase_alt_ids=rules["phrase_alt_ids"],
            fixed=rules.get("fixed"),
            glue=self.glue,
        )

    def search(self, search, state, start_tokens, source_mask, max_length, rules=None, **kwargs):
        step, state = self.ruled_step(state, rules)
        result = search(
            step,
            state,
            start_tokens,
            self.target_tokenizer.end_id,
            max_length=max_length,
            eos_penalty=self.settings.eos_penalty,
            source_mask=source_mask,
            **kwargs,
        )
        return result, source_mask

    @staticmethod
    def checked_search_params(max_length, params):
        """The request parameters checked against their documented ranges by the decoding
        package's own checks (`DecodingConfig`), run here, outside XLA: XLA drops
        `tf.debugging` assertions."""
        config = DecodingConfig(max_length=max_length, **params)
        return config.max_length, {name: getattr(config, name) for name in params}

    def compiled_decode(self, search, inputs, max_length, constraints=None, rules=None, **params):
        """`decode` with tokenizing and detokenizing left outside and the rest (encode and the
        search loop) in a nested `tf.function(jit_compile=True)` over bucket-padded inputs
        (`keras_attn.serving.buckets`); the result is cut back to the request's batch and
        source width."""
        max_length, params = self.checked_search_params(max_length, params)
        model_inputs = self.model_inputs(inputs)

        def core(padded, max_length, params, constraints, rules):
            state, start_tokens, source_mask = self.encode_model_inputs(padded, max_length)
            return self.search(
                search,
                state,
                start_tokens,
                source_mask,
                max_length,
                rules,
                report_invalid=True,
                **constraints,
                **params,
            )

        text = self.source_tokenizer is not None
        pad_id = self.source_tokenizer.pad_id if text else None
        padded = buckets.padded_model_inputs(model_inputs, self.settings, pad_id)
        constraints = buckets.padded_constraints(constraints or {}, tf.shape(padded)[0])
        if rules is not None:  # the padding rows have no phrases
            rows = tf.shape(padded)[0]
            open_end = buckets.padded_ids(tf.cast(rules["open_end"], tf.int32), rows) > 0
            rules = {
                "phrase_ids": buckets.padded_ids(rules["phrase_ids"], rows),
                "phrase_alt_ids": buckets.padded_ids(rules["phrase_alt_ids"], rows),
                "open_end": open_end,
            }
            # outside the compiled core: the source's words are read with string ops
            rules = self.source_rules(rules, padded)
        compiled = tf.function(core, jit_compile=True, autograph=False)
        result, source_mask = compiled(padded, max_length, params, constraints, rules)
        result = dict(result)
        # XLA drops Assert ops: the engine returns its NaN check as a flag (engine.py).
        check = tf.debugging.Assert(tf.logical_not(result.pop("invalid")), [engine.INVALID_LOGITS])
        batch = tf.shape(model_inputs)[0]
        width = tf.shape(model_inputs)[1] if text else None
        with tf.control_dependencies([check]):
            return buckets.cut_to_request(result, source_mask, batch, width)

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

    def best_outputs(self, inputs, outputs, placeholders):
        """Beam outputs -> the best answer per input (`[B]`); with `placeholders`, the best one
        that holds exactly the source's placeholders (the best one where none does)."""
        pick = tf.zeros(tf.shape(inputs)[:1], tf.int32)
        if placeholders:
            pick, _ = first_exact(inputs, outputs["outputs"])
        return {
            name: tf.gather(outputs[name], pick, batch_dims=1) for name in ("outputs", "scores")
        }

    def kept_best(self, search, inputs, max_length, xla, values):
        """`serving_default` with `keep_placeholders` or `keep_unknown_words`: the beam (under
        the placeholder budget alone with `keep_placeholders`: no answer holds a placeholder its
        source lacks), its best hypothesis that holds exactly the source's placeholders; only
        the rows where none of its K does, or whose answer lacks a source word the model never
        saw (`unknown_words`), are searched again with those placeholders and words required
        (the budget of the placeholders' and the words' characters alone), and answer the best
        hypothesis that holds them all (docs/serving.md, "Placeholders", "Unknown words kept").
        A row searched again for its words alone keeps its first answer where no hypothesis
        holds them. Requiring them of every row would make the beam share its K places among
        the requirements' progress (dynamic beam allocation), a worse search where the model
        keeps them anyway."""
        s = self.settings
        placeholders = s.keep_placeholders
        rules = self.rule_phrases(inputs) if s.word_rules else None
        budget = self.phrases.placeholder_budget(inputs) if placeholders else {}
        result = self.decode(search, inputs, max_length, xla, budget, rules, **values)
        plain = self.beam_outputs(*result)
        batch = tf.shape(inputs)[:1]
        pick, found = tf.zeros(batch, tf.int32), tf.ones(batch, tf.bool)
        if placeholders:
            pick, found = first_exact(inputs, plain["outputs"])
        best = {name: tf.gather(plain[name], pick, batch_dims=1) for name in ("outputs", "scores")}
        held = tf.ones(batch, tf.bool)
        if s.keep_unknown_words:
            words = self.unknown_words(inputs)
            held = holds_words(words[2], best["outputs"][:, None])[:, 0]
        rows = tf.cast(tf.where(~found | ~held)[:, 0], tf.int32)  # the rows searched again

        def required():
            again = tf.gather(inputs, rows)
            constraints, extra = {}, ()
            if s.keep_unknown_words:
                ids, alts, texts = (tf.gather(x, rows) for x in words)
                constraints = {"constraint_ids": ids, "constraint_alt_ids": alts}
                extra = (texts,)
            if placeholders:
                # the source's other text pays for nothing: a hypothesis that holds the
                # required placeholders (and words) holds no other
                kept = self.phrases.placeholder_constraints(
                    again, within_placeholders=True, extra=extra
                )
                for name in constraints:
                    kept[name] = concat_phrases(kept[name], constraints[name])
                constraints = kept
            rules = self.rule_phrases(again) if s.word_rules else None
            result = self.decode(search, again, max_length, xla, constraints, rules, **values)
            outputs = self.beam_outputs(*result)
            exact = tf.ones(tf.shape(outputs["outputs"]), tf.bool)
            if placeholders:
                exact = graph_placeholders_kept(again, outputs["outputs"])
            whole = exact
            if s.keep_unknown_words:
                whole = exact & holds_words(texts, outputs["outputs"])

            # the first hypothesis that holds everything; else, where the placeholders sent
            # the row here, the first that holds them (the first where none does)
            first_whole, has_whole = first_true(whole)
            pick = tf.where(has_whole, first_whole, first_true(exact)[0])
            use = has_whole | ~tf.gather(found, rows)
            answer = {n: tf.gather(outputs[n], pick, batch_dims=1) for n in ("outputs", "scores")}
            return answer["outputs"], answer["scores"], use

        def none():
            return tf.zeros([0], tf.string), tf.zeros([0], tf.float32), tf.zeros([0], tf.bool)

        texts, scores, use = tf.cond(tf.size(rows) > 0, required, none)
        rows, texts, scores = (tf.boolean_mask(x, use) for x in (rows, texts, scores))
        return {
            "outputs": tf.tensor_scatter_nd_update(best["outputs"], rows[:, None], texts),
            "scores": tf.tensor_scatter_nd_update(best["scores"], rows[:, None], scores),
        }

    def unknown_words(self, inputs):
        """`keep_unknown_words`' phrases of text `[B]`: `(constraint_ids, constraint_alt_ids,
        words)` of the source words the model never saw (`KnownWords.unknown_words`), as the
        source writes them and within the source as the model reads it (cut to
        `max_input_length`, its unknown pieces lost); those that the target vocabulary cannot
        spell or that take more than the word rules' `MAX_WORD` pieces left out
        (`PhraseConstraints.word_phrases`)."""
        read = self.source_tokenizer.detokenize(self.source_ids(inputs))
        words = self.known.unknown_words(inputs, within=read)
        return self.phrases.word_phrases(words, MAX_WORD)

    def source_or_best(self, inputs, best, max_length, xla, values):
        """`serving_default` with `copy_source`: each answer of `best` (`{"outputs",
        "scores"}`), or the source text itself where the model gives the source, tokenized as
        a target, at least the answer's log-probability per token (end token included). Both
        are scored again by the model alone (`forced_search`: no word rule, placeholder budget
        or control), so the search's own renormalised scores do not decide. A source that does
        not fit in `max_length` tokens is never the answer. Its score is the search formula's
        for the source (docs/serving.md, "Copying the source")."""
        tok = self.target_tokenizer
        ragged = tf.cast(tok.tokenize(tf.concat([best["outputs"], inputs], 0)), tf.int32)
        targets = ragged.to_tensor(default_value=-1)
        targets = targets[:, : tf.maximum(tf.cast(max_length, tf.int32) - 1, 0)]
        needed = tf.cast(ragged.row_lengths(), tf.int32) + 1
        knobs = {k: v for k, v in values.items() if k != "beam_size"}
        result, _ = self.decode(
            forced_search,
            tf.concat([inputs, inputs], 0),
            max_length,
            xla,
            constraints={"targets": targets},
            **knobs,
        )
        lengths = tf.cast(result["lengths"], tf.int32)
        per_token = tf.cast(result["log_probs"], tf.float32) / tf.cast(
            tf.maximum(lengths, 1), tf.float32
        )
        answer, source = tf.split(per_token, 2)
        _, whole = tf.split(tf.equal(lengths, needed), 2)  # the source scored to its end token
        _, source_scores = tf.split(tf.cast(result["scores"], tf.float32), 2)
        copy = whole & (source >= answer)
        return {
            "outputs": tf.where(copy, inputs, best["outputs"]),
            "scores": tf.where(copy, source_scores, best["scores"]),
        }

    # ---- the signatures --------------------------------------------------------------
    def body(self, spec, xla=False):
        """The body of the signature of `spec` (a `keras_attn.serving.specs.SignatureSpec`):
        `body(inputs, *texts, **params) -> outputs`, the request parameters checked. `xla`: its
        numeric core compiled (the `<name>_xla` twin)."""
        s = self.settings
        search = MODES[spec.search].function()
        placeholders = spec.placeholders and s.keep_placeholders
        fixed = {name: getattr(s, name) for name in spec.settings}

        def body(inputs, *texts, **params):
            values = dict(fixed, **params)
            max_length = values.pop("max_length")
            if "max_length" in fixed and not xla:  # Python numbers stay constants under XLA
                max_length = tf.constant(max_length, tf.int32)
            outputs = searched(inputs, texts, max_length, values)
            if spec.best_only and s.copy_source:
                return self.source_or_best(inputs, outputs, max_length, xla, values)
            return outputs

        def searched(inputs, texts, max_length, values):
            if spec.best_only and (placeholders or s.keep_unknown_words):
                return self.kept_best(search, inputs, max_length, xla, values)
            spelled, constraints = None, None
            if spec.texts:
                constraints, spelled = self.phrases.request_constraints(
                    inputs, *texts, max_length, values["beam_size"], placeholders
                )
            elif placeholders:
                constraints = self.phrases.placeholder_constraints(inputs)
            ruled = s.word_rules and spec.search in specs.RULED_SEARCHES
            rules = self.rule_phrases(inputs) if ruled else None
            result = self.decode(
                search, inputs, max_length, xla=xla, constraints=constraints, rules=rules, **values
            )
            if spec.search != "beam":
                return self.single_outputs(*result)
            outputs = self.beam_outputs(*result)
            if spec.best_only:
                return self.best_outputs(inputs, outputs, placeholders)
            if spelled is not None:  # a phrase that cannot be spelled is not met
                outputs["constraints_met"] = outputs["constraints_met"] & spelled[:, None]
            return {name: outputs[name] for name in spec.outputs}

        return body

    def function(self, spec, xla=False):
        """The concrete function of `spec`'s signature: inputs named as the request names
        them (`inputs` or `images`, the string inputs, the request parameters)."""
        body = self.body(spec, xla)
        strings = len(spec.texts)

        def signature(inputs, *values):
            params = self.checked_params(dict(zip(spec.params, values[strings:])))
            return body(self.checked_inputs(inputs), *values[:strings], **params)

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
        those of the `extra_signatures` setting. A model that branches in Python on a tensor
        value (traced without AutoGraph, docs/serving.md "Export") gets a `TypeError` that
        says what to write instead."""
        try:
            functions = {
                name: self.function(spec, xla) for name, (spec, xla) in self.exported.items()
            }
            for extra in self.settings.extra_signatures:
                functions.update(extra.functions(self))
        except tf.errors.OperatorNotAllowedInGraphError as error:
            raise TypeError(
                "The model's `encode`, `initial_decode_state` or `decode_step` uses a tensor "
                "as a Python bool (an `if`, `while`, `and` or `assert` on a tensor value), which "
                "an exported graph cannot hold: branch with `keras.ops.cond` or "
                "`keras.ops.where`, loop with `keras.ops.while_loop` (docs/serving.md, "
                f'"Export"). TensorFlow: {str(error).split(". ")[0]}.'
            ) from error
        return functions


def word_rule_tables(source_tokenizer, target_tokenizer):
    """`(word_start, glue)` (NumPy `[V]` bool) of the `word_rules` setting: the word-start
    pieces of a SentencePiece vocabulary (None for other tokenizers: the loop ban only) and the
    pieces that glue to an open-ended placeholder. The rules read the source's ids as target
    ids, so source and target must share one vocabulary (`ValueError` otherwise)."""
    if source_tokenizer is None:
        raise ValueError(
            "`word_rules` applies to text inputs only (it reads the source's tokens). "
            "Received: word_rules=True for a model without a source tokenizer"
        )
    vocabulary = list(target_tokenizer.vocabulary)
    if source_tokenizer is not target_tokenizer and list(source_tokenizer.vocabulary) != vocabulary:
        raise ValueError(
            "`word_rules` needs a source and target that share one vocabulary (the rules "
            "compare the answer's tokens with the source's). Received: word_rules=True with "
            f"source and target vocabularies of {source_tokenizer.vocab_size} and "
            f"{len(vocabulary)} pieces that differ"
        )
    word_start = None
    if hasattr(target_tokenizer, "model_proto"):  # SentencePiece: `▁` starts a word
        word_start = sentencepiece_word_starts(vocabulary)
    return word_start, np.asarray(glue_pieces(vocabulary), bool)


def _alignments(result, t, leading, width):
    """The search's alignments cut to `t` steps, or zeros when the step gives no attention."""
    if "alignments" in result:
        return tf.cast(result["alignments"][..., :t, :], tf.float32)
    return tf.zeros(tf.concat([leading, tf.stack([t, width])], 0), tf.float32)
