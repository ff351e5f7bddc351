"""The serving signatures of an exported model, and the settings they are built from.

`ServingSettings` holds every export-time setting (checked once, when it is created; frozen).
`ServingSignatures(model, settings, input_spec, ...)` builds one `tf.function` per signature:
tokenizer -> `model.encode` -> search over `model.decode_step` -> detokenizer. Each signature's
request parameters (the scalar inputs beside the text) come from the served table
(`keras_attn.serving.specs`); `ServingSignatures.request_params` adds their warm-up values, and the
signature specs and the warm-up requests are both made from it.
The signatures, their inputs and outputs and the documented limits are described in
docs/serving.md; `keras_attn.serving.export` writes them to disk.
"""

from __future__ import annotations

from keras_attn.serving import specs
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.specs import TEXT_ONLY_NAMES, XLA_SUFFIX

SIGNATURE_NAMES = tuple(specs.SIGNATURES)


def _bucket(size, buckets):
    """The smallest of `buckets` (sorted Python ints) >= `size` (an int32 scalar tensor);
    above the largest, the next multiple of the largest."""
    import tensorflow as tf

    table = tf.constant(buckets, tf.int32)
    largest = buckets[-1]
    first_fit = tf.gather(table, tf.argmax(tf.cast(table >= size, tf.int32), output_type=tf.int32))
    multiple = (size + largest - 1) // largest * largest
    return tf.where(size <= largest, first_fit, multiple)


# The buckets of the constraint tensors' inner axes under XLA (prefix length, phrases, phrase
# length): nearby shapes share one compiled program.
_CONSTRAINT_BUCKETS = (4, 8, 16, 32)


def _first_exact(inputs, outputs):
    """`[B]` int32: per row the first of the K answers (best first) that holds exactly the
    placeholders of its source, each as many times and none besides; 0 where none does."""
    import tensorflow as tf

    from keras_attn.text.placeholders import graph_placeholders_kept

    exact = graph_placeholders_kept(inputs, outputs)  # [B, K]
    first = tf.argmax(tf.cast(exact, tf.int32), axis=1, output_type=tf.int32)
    return tf.where(tf.reduce_any(exact, axis=1), first, 0)


def _concat_phrases(a, b):
    """Two `[B, C, L]` phrase tensors (-1 padded) as one `[B, Ca + Cb, max(La, Lb)]`."""
    import tensorflow as tf

    width = tf.maximum(tf.shape(a)[2], tf.shape(b)[2])
    a, b = (
        tf.pad(x, [[0, 0], [0, 0], [0, width - tf.shape(x)[2]]], constant_values=-1) for x in (a, b)
    )
    return tf.concat([a, b], axis=1)


# The most `B * beam_size * (C * L) ** 2` a constrained request may need (C phrases of up to
# L tokens each, after the cut to `max_length + 1` tokens): the search compares every phrase
# token with every phrase position of every hypothesis, each step. A request above it is
# refused (INVALID_ARGUMENT naming `constraints`) instead of exhausting the server's memory.
CONSTRAINT_CELLS = 2**26


def _bounded_phrases(phrases, max_length, beam_size):
    """A request's `[B, C, L]` phrase ids with each phrase cut to `max_length + 1` tokens (a
    longer one can no more fit than that: the answer stays "not met"), checked against
    `CONSTRAINT_CELLS`."""
    import tensorflow as tf

    keep = tf.minimum(tf.shape(phrases)[2], tf.cast(max_length, tf.int32) + 1)
    phrases = phrases[:, :, :keep]
    shape = tf.cast(tf.shape(phrases), tf.float64)
    cells = shape[0] * tf.cast(beam_size, tf.float64) * tf.square(shape[1] * shape[2])
    check = tf.debugging.Assert(
        cells <= CONSTRAINT_CELLS,
        [
            "`constraints` must be smaller: batch x beam_size x (phrases x tokens of the "
            f"longest phrase)^2 must be at most {CONSTRAINT_CELLS} (send fewer inputs, "
            "fewer or shorter phrases). Received: batch, beam_size, phrases, tokens =",
            tf.shape(phrases)[0],
            beam_size,
            tf.shape(phrases)[1],
            tf.shape(phrases)[2],
        ],
    )
    with tf.control_dependencies([check]):
        return tf.identity(phrases)


def _padded_ids(ids, batch):
    """`[B, ...]` ids padded with -1 to `batch` rows and each inner axis to a bucket."""
    import tensorflow as tf

    shape = tf.shape(ids)
    paddings = [[0, batch - shape[0]]] + [
        [0, _bucket(shape[i], _CONSTRAINT_BUCKETS) - shape[i]] for i in range(1, ids.shape.rank)
    ]
    return tf.pad(ids, paddings, constant_values=-1)


def position_limit(model):
    """Rows of the smallest learned position table in `model` (a `keras_attn.layers.
    PositionalEncoding` with `mode="learned"`), or None when it has none: sources and outputs
    longer than that cannot be encoded."""
    from keras_attn.layers.positional import PositionalEncoding

    sizes = [
        layer.max_length
        for layer in _keras_layers(model)
        if isinstance(layer, PositionalEncoding) and layer.mode == "learned"
    ]
    return min(sizes) if sizes else None


def _keras_layers(root):
    """`root` and every Keras layer it holds, through attributes, lists and dicts (nothing
    when `root` is not a Keras layer)."""
    import keras

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


def _assert_in_range(name, value, low, high):
    """A run-time check of an integer request parameter; the returned value depends on it."""
    import tensorflow as tf

    ok = tf.logical_and(value >= low, value <= high)
    check = tf.debugging.Assert(
        ok, [f"`{name}` must be an integer in [{low}, {high}]. Received: {name}=", value]
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def _assert_rank(name, value, rank, what):
    """A run-time check of a request input's rank (the server feeds any shape it is sent: the
    signature's static shape is not checked), naming the input and the shape received."""
    import tensorflow as tf

    # The graph knows the signature's static rank, so Grappler folds Shape(value) to it; a
    # round trip through SerializeTensor/ParseTensor (core ops, a copy of the request) hides it.
    unknown = tf.raw_ops.ParseTensor(
        serialized=tf.raw_ops.SerializeTensor(tensor=value), out_type=value.dtype
    )
    shape = tf.shape(unknown)
    check = tf.debugging.Assert(
        tf.equal(tf.size(shape), rank),
        [f"`{name}` must be {what}. Received: {name} of shape", shape],
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


class ServingSignatures:
    """The signature functions over a model and its tokenizers (TensorFlow only).

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step` (docs/serving.md).
        settings: a `ServingSettings`.
        input_spec: a named `tf.TensorSpec`: string `[B]` text, or float32 images.
        source_tokenizer: tokenizes the text input; None when the input is not text.
        target_tokenizer: detokenizes the outputs.
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

    @property
    def request_params(self):
        """`{signature: [(alias, dtype name, warm-up value), ...]}`: each signature's scalar
        inputs besides the text, in the served table's order (`keras_attn.serving.specs`), with
        the value its warm-up request sends (the export's settings where it has them, else the
        table's default: the neutral value of each control)."""
        s = self.settings
        settings = {
            "beam_size": s.beam_size,
            "max_length": s.max_length,
            "length_penalty": s.length_penalty,
            "coverage_penalty": s.coverage_penalty,
        }
        params = {}
        for name, aliases in specs.SIGNATURES.items():
            if name in TEXT_ONLY_NAMES and not s.text_input:
                continue
            rows = []
            for alias in aliases:
                spec = specs.request_param(alias)
                rows.append((alias, spec.dtype, settings.get(alias, spec.default)))
            params[name] = rows
        for name in s.xla:
            params[name + XLA_SUFFIX] = params[name]
        return params

    # ---- shared pieces ---------------------------------------------------------------
    def source_ids(self, inputs):
        """`string [B]` -> int32 `[B, S]` padded with `pad_id`, `S >= 1`, `S <= max_input_length`."""
        import tensorflow as tf

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
        return _assert_rank(self.input_spec.name, inputs, rank, what)

    def encode(self, inputs, max_length):
        """The request's text (or images) -> `(decoder state, start tokens, source mask)`."""
        return self.encode_model_inputs(self.model_inputs(inputs), max_length)

    def encode_model_inputs(self, inputs, max_length):
        """`encode` on what the model takes (source ids or images)."""
        import tensorflow as tf

        encoder_outputs = self.model.encode(inputs)
        if not isinstance(encoder_outputs, dict) or "source_mask" not in encoder_outputs:
            raise ValueError(
                "`model.encode` must return a dict of tensors that includes 'source_mask' [B, S]. "
                f"Received: {type(encoder_outputs).__name__}"
                + (
                    f" with keys {sorted(encoder_outputs)}"
                    if isinstance(encoder_outputs, dict)
                    else ""
                )
            )
        state = self.model.initial_decode_state(encoder_outputs, max_length)
        source_mask = tf.cast(encoder_outputs["source_mask"], tf.bool)
        start_tokens = tf.fill(
            tf.shape(inputs)[:1], tf.constant(self.target_tokenizer.start_id, tf.int32)
        )
        return state, start_tokens, source_mask

    # ---- constraints: prefix, phrases, placeholders ------------------------------------
    def phrase_ids(self, texts):
        """`string [...]` -> int32 `[..., L]` right-padded with -1: each string tokenized alone
        with the target tokenizer (the subword rule, docs/serving.md: a phrase is spelled as
        the tokenizer spells it at the start of a text, i.e. as a word start), `L >= 0`;
        `''` gives a row of only padding (no phrase)."""
        import tensorflow as tf

        shape = tf.shape(texts)
        ragged = tf.cast(self.target_tokenizer.tokenize(tf.reshape(texts, [-1])), tf.int32)
        dense = ragged.to_tensor(default_value=-1)
        return tf.reshape(dense, tf.concat([shape, tf.shape(dense)[1:]], 0))

    def placeholder_ids(self, inputs):
        """Text `[B]` -> `(constraint_ids, constraint_alt_ids)` int32 `[B, C, L]`: every
        placeholder and markup tag of each source (`keras_attn.text.placeholders.
        PLACEHOLDER_PATTERN`, run in the graph by RE2), once per occurrence, tokenized alone,
        and its first piece's spelling inside a word as the alternative (a placeholder glued to
        the text before it, `=%s`, is spelled without the word-start mark; a leading bare mark
        piece is dropped). A placeholder whose pieces hold the unknown id (the target vocabulary
        cannot spell it) is left out: no output could hold it."""
        import tensorflow as tf

        from keras_attn.text.placeholders import graph_placeholders

        found = graph_placeholders(inputs)
        ids = self.phrase_ids(found.to_tensor(default_value=""))  # [B, C, L]
        spelled = ~tf.reduce_any(tf.equal(ids, self.target_tokenizer.unk_id), axis=-1)
        ids = tf.where(spelled[..., None], ids, -1)
        inside, bare = self.inside_word_ids()
        if bare >= 0:  # a phrase spelled "<mark> X ...": X ... is its spelling in both places
            width = tf.shape(ids)[-1]
            padded = tf.pad(ids, [[0, 0], [0, 0], [0, 2]], constant_values=-1)
            lead = tf.equal(padded[..., :1], bare) & tf.not_equal(padded[..., 1:2], -1)
            ids = tf.where(lead, padded[..., 1 : width + 1], ids)
        first = tf.equal(tf.range(tf.shape(ids)[-1]), 0)
        alts = tf.gather(tf.constant(inside), tf.maximum(ids, 0))
        alts = tf.where(first & (ids >= 0), alts, -1)
        return ids, alts

    def inside_word_ids(self):
        """`(inside [V], bare)` (NumPy int32, int): for each target id whose piece starts with
        SentencePiece's word-start mark, the id of the same piece without it (-1: none), and
        the id of the mark alone (-1: none). All -1 for a vocabulary without the mark."""
        import numpy as np

        if getattr(self, "_inside_word_ids", None) is None:
            vocabulary = list(self.target_tokenizer.vocabulary)
            index = {piece: i for i, piece in enumerate(vocabulary)}
            mark = "\u2581"
            inside = np.full([len(vocabulary)], -1, np.int32)
            for i, piece in enumerate(vocabulary):
                if len(piece) > 1 and piece.startswith(mark):
                    inside[i] = index.get(piece[1:], -1)
            self._inside_word_ids = (inside, index.get(mark, -1))
        return self._inside_word_ids

    def placeholder_costs(self):
        """`(ids [U], costs [U, R])` int32 NumPy: the target ids whose text (each id
        detokenized alone) holds `keras_attn.text.placeholders.PLACEHOLDER_CHARACTERS`, and how
        many of each (one unused entry, id -1, where no piece holds any). Computed once."""
        import numpy as np
        import tensorflow as tf

        from keras_attn.text.placeholders import PLACEHOLDER_CHARACTERS, character_counts

        if getattr(self, "_placeholder_costs", None) is None:
            tokenizer = self.target_tokenizer
            with tf.init_scope():  # eagerly, also while a signature is traced
                texts = tokenizer.detokenize(tf.range(tokenizer.vocab_size)[:, None]).numpy()
            counts = character_counts(texts)
            ids = np.flatnonzero(counts.sum(axis=1) > 0).astype(np.int32)
            costs = counts[ids]
            if not len(ids):
                ids = np.array([-1], np.int32)
                costs = np.zeros([1, len(PLACEHOLDER_CHARACTERS)], np.int32)
            self._placeholder_costs = (ids, costs)
        return self._placeholder_costs

    def placeholder_budget(self, inputs, *extra):
        """Text `[B]` -> the search's token budget: no answer holds a placeholder character
        (`%`, `{`, `}`, `<`, `>`) more often than its source, so none holds a placeholder or
        tag the source lacks (`budget_ids` `[U]`, `budget_costs` `[U, R]`, `budgets` `[B, R]`).
        `extra`: string tensors `[B, ...]` (a request's prefix and phrases) whose characters
        are allowed too."""
        import tensorflow as tf

        from keras_attn.text.placeholders import graph_character_counts

        ids, costs = self.placeholder_costs()
        budgets = graph_character_counts(inputs)
        for texts in extra:
            counts = graph_character_counts(tf.reshape(texts, [-1]))  # [B * C, R]
            budgets += tf.reduce_sum(
                tf.reshape(counts, [tf.shape(inputs)[0], -1, counts.shape[-1]]), axis=1
            )
        return {
            "budget_ids": tf.constant(ids),
            "budget_costs": tf.constant(costs),
            "budgets": budgets,
        }

    def constraint_inputs(self, inputs, prefix, constraints):
        """The constrained signature's string inputs, checked (ranks and batch, at run time,
        naming the input) -> `{"prefix_ids": [B, P], "constraint_ids": [B, C, L]}`."""
        import tensorflow as tf

        prefix = _assert_rank("prefix", prefix, 1, "a vector [B] of strings ('' = none)")
        constraints = _assert_rank(
            "constraints", constraints, 2, "a matrix [B, C] of strings ('' = none)"
        )
        batch = tf.shape(inputs)[0]
        checks = [
            tf.debugging.Assert(
                tf.equal(tf.shape(value)[0], batch),
                [
                    f"`{name}` must have one row per input. Received: {name} with rows",
                    tf.shape(value)[0],
                    "for inputs of",
                    batch,
                ],
            )
            for name, value in (("prefix", prefix), ("constraints", constraints))
        ]
        with tf.control_dependencies(checks):
            return {
                "prefix_ids": self.phrase_ids(tf.identity(prefix)),
                "constraint_ids": self.phrase_ids(tf.identity(constraints)),
            }

    def checked_params(self, params):
        """A request's parameters (`{alias: tensor}`), each checked to be a scalar, and `beam_size`
        and `max_length` against the export's limits, at run time. The decoding functions check
        the rest against their documented ranges (docs/decoding.md)."""
        s = self.settings
        limits = {"beam_size": s.beam_size_limit, "max_length": s.max_length_limit}
        checked = {}
        for alias, value in params.items():
            value = _assert_rank(alias, value, 0, "a scalar")
            if alias in limits:
                value = _assert_in_range(alias, value, 1, limits[alias])
            checked[alias] = value
        return checked

    def decode(self, search, inputs, max_length, xla=False, constraints=None, **kwargs):
        """`search` (a `keras_attn.decoding` function) over the model for text or images `[B]`;
        returns `(result, source_mask)`. `xla`: run the numeric core compiled (`compiled_decode`).
        `constraints`: `{"prefix_ids": ..., "constraint_ids": ...}` (tensors with batch B)."""
        constraints = dict(constraints or {})
        if xla:
            return self.compiled_decode(search, inputs, max_length, constraints, **kwargs)
        state, start_tokens, source_mask = self.encode(inputs, max_length)
        return self.search(
            search, state, start_tokens, source_mask, max_length, **constraints, **kwargs
        )

    def search(self, search, state, start_tokens, source_mask, max_length, **kwargs):
        result = search(
            self.model.decode_step,
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
        """The request params checked against their documented ranges by the decoding package's
        own checks (`DecodingConfig`), run here, outside XLA: XLA drops `tf.debugging`
        assertions."""
        from keras_attn.decoding import DecodingConfig

        config = DecodingConfig(max_length=max_length, **params)
        return config.max_length, {name: getattr(config, name) for name in params}

    def padded_inputs(self, model_inputs):
        """The model inputs padded to the XLA buckets: the batch to `xla_batch_sizes` (padding
        rows are empty sources or zero images), the source ids to `xla_source_lengths`, so
        requests of nearby sizes share one compiled program."""
        import tensorflow as tf

        s = self.settings
        shape = tf.shape(model_inputs)
        rows = _bucket(shape[0], s.xla_batch_sizes) - shape[0]
        paddings = [[0, rows]] + [[0, 0]] * (model_inputs.shape.rank - 1)
        value = 0
        if self.source_tokenizer is not None:
            paddings[1] = [0, _bucket(shape[1], s.xla_source_lengths) - shape[1]]
            value = self.source_tokenizer.pad_id
        return tf.pad(model_inputs, paddings, constant_values=tf.cast(value, model_inputs.dtype))

    def compiled_decode(self, search, inputs, max_length, constraints=None, **params):
        """`decode` with tokenizing and detokenizing left outside and the rest (encode and the
        search loop) in a nested `tf.function(jit_compile=True)` over bucket-padded inputs;
        the result is cut back to the request's batch and source width."""
        import tensorflow as tf

        from keras_attn.decoding import engine

        max_length, params = self.checked_search_params(max_length, params)
        model_inputs = self.model_inputs(inputs)

        def core(padded, max_length, params, constraints):
            state, start_tokens, source_mask = self.encode_model_inputs(padded, max_length)
            return self.search(
                search,
                state,
                start_tokens,
                source_mask,
                max_length,
                report_invalid=True,
                **constraints,
                **params,
            )

        padded = self.padded_inputs(model_inputs)
        rows = tf.shape(padded)[0]

        def pad(name, value):
            if name in ("budget_ids", "budget_costs"):  # constants of the export
                return value
            if name == "budgets":  # the padding rows (empty sources) get none
                return tf.pad(value, [[0, rows - tf.shape(value)[0]], [0, 0]])
            return _padded_ids(value, rows)

        constraints = {name: pad(name, value) for name, value in (constraints or {}).items()}
        compiled = tf.function(core, jit_compile=True, autograph=False)
        result, source_mask = compiled(padded, max_length, params, constraints)
        result = dict(result)
        # XLA drops Assert ops: the engine returns its NaN check as a flag (engine.py).
        check = tf.debugging.Assert(tf.logical_not(result.pop("invalid")), [engine.INVALID_LOGITS])
        batch = tf.shape(model_inputs)[0]
        with tf.control_dependencies([check]):
            result = {key: tf.identity(value[:batch]) for key, value in result.items()}
        if self.source_tokenizer is not None:
            width = tf.shape(model_inputs)[1]
            if "alignments" in result:
                result["alignments"] = result["alignments"][..., :width]
            source_mask = source_mask[:, :width]
        return result, source_mask[:batch]

    def beam_outputs(self, result, source_mask):
        """A beam search's result -> the `beam_search` signature's outputs (and
        `constraints_met` when the search had phrases)."""
        import tensorflow as tf

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
            "alignments": self._alignments(
                result, t, tf.shape(sequences)[:2], tf.shape(source_mask)[1]
            ),
        }

    def single_outputs(self, result, source_mask):
        """A greedy or sampling result -> the `greedy` signature's outputs."""
        import tensorflow as tf

        t = tf.reduce_max(tf.concat([result["lengths"], [1]], 0))
        sequences = result["sequences"][:, :t]
        return {
            "outputs": self.target_tokenizer.detokenize(sequences),
            "scores": tf.cast(result["scores"], tf.float32),
            "alignments": self._alignments(
                result, t, tf.shape(sequences)[:1], tf.shape(source_mask)[1]
            ),
        }

    @staticmethod
    def _alignments(result, t, leading, width):
        """The search's alignments cut to `t` steps, or zeros when the step gives no attention."""
        import tensorflow as tf

        if "alignments" in result:
            alignments = result["alignments"]
            return tf.cast(alignments[..., :t, :], tf.float32)
        return tf.zeros(tf.concat([leading, tf.stack([t, width])], 0), tf.float32)

    # ---- the signatures --------------------------------------------------------------
    def bodies(self):
        """`{signature: body(inputs, **params) -> outputs}`; the params arrive checked. The
        `<name>_xla` bodies are those of `<name>` with the numeric core compiled."""
        bodies = self._bodies(xla=False)
        compiled = self._bodies(xla=True)
        for name in self.settings.xla:
            bodies[name + XLA_SUFFIX] = compiled[name]
        return bodies

    def _bodies(self, xla):
        import tensorflow as tf

        from keras_attn.decoding import beam_search, greedy_search, sample_search

        s = self.settings
        penalties = {"length_penalty": s.length_penalty, "coverage_penalty": s.coverage_penalty}

        def placeholders(inputs):
            if not s.keep_placeholders:
                return None
            ids, alts = self.placeholder_ids(inputs)
            return {
                "constraint_ids": ids,
                "constraint_alt_ids": alts,
                **self.placeholder_budget(inputs),
            }

        def serving_default(inputs):
            # Python numbers: constants of the compiled program (XLA needs the beam and the
            # buffers' length when it compiles)
            max_length = s.max_length if xla else tf.constant(s.max_length, tf.int32)
            result = self.decode(
                beam_search,
                inputs,
                max_length,
                xla=xla,
                constraints=placeholders(inputs),
                beam_size=s.beam_size,
                **penalties,
            )
            out = self.beam_outputs(*result)
            pick = tf.zeros(tf.shape(inputs)[:1], tf.int32)
            if s.keep_placeholders:  # the best answer with exactly the source's placeholders
                pick = _first_exact(inputs, out["outputs"])
            return {
                "outputs": tf.gather(out["outputs"], pick, batch_dims=1),
                "scores": tf.gather(out["scores"], pick, batch_dims=1),
            }

        def beam(inputs, max_length, **params):  # beam_search
            out = self.beam_outputs(
                *self.decode(
                    beam_search,
                    inputs,
                    max_length,
                    xla=xla,
                    constraints=placeholders(inputs),
                    **params,
                )
            )
            return {name: out[name] for name in specs.OUTPUTS["beam_search"]}

        def beam_controls(inputs, max_length, **params):
            return self.beam_outputs(
                *self.decode(beam_search, inputs, max_length, xla=xla, **params)
            )

        def beam_constrained(inputs, prefix, constraints, max_length, **params):
            texts = (prefix, constraints)
            constraints = self.constraint_inputs(inputs, prefix, constraints)
            unk = self.target_tokenizer.unk_id
            # A phrase the target vocabulary cannot spell cannot be met: it is not searched
            # for (no unknown token forced into the output) and the row's answers say
            # `constraints_met` False.
            phrases = _bounded_phrases(
                constraints["constraint_ids"], max_length, params.get("beam_size", s.beam_size)
            )
            unspelled = tf.reduce_any(tf.equal(phrases, unk), axis=-1)  # [B, C]
            constraints["constraint_ids"] = tf.where(unspelled[..., None], -1, phrases)
            if s.keep_placeholders:  # the request's phrases and the source's placeholders
                ids, alts = self.placeholder_ids(inputs)
                requested = constraints["constraint_ids"]
                constraints["constraint_ids"] = _concat_phrases(requested, ids)
                constraints["constraint_alt_ids"] = _concat_phrases(
                    tf.fill(tf.shape(requested), -1), alts
                )
                # after the checks of the request's prefix and phrases (their clear errors)
                with tf.control_dependencies(list(constraints.values())):
                    constraints.update(self.placeholder_budget(inputs, *texts))
            outputs = self.beam_outputs(
                *self.decode(
                    beam_search, inputs, max_length, xla=xla, constraints=constraints, **params
                )
            )
            spelled = ~tf.reduce_any(unspelled, axis=1)  # [B]
            outputs["constraints_met"] = outputs["constraints_met"] & spelled[:, None]
            return outputs

        def greedy(inputs, max_length=None, **controls):  # greedy and greedy_controls
            if max_length is None:
                max_length = s.max_length if xla else tf.constant(s.max_length, tf.int32)
            return self.single_outputs(
                *self.decode(greedy_search, inputs, max_length, xla=xla, **penalties, **controls)
            )

        def sample(inputs, max_length, **params):
            return self.single_outputs(
                *self.decode(sample_search, inputs, max_length, xla=xla, **penalties, **params)
            )

        bodies = {
            "serving_default": serving_default,
            "beam_search": beam,
            "greedy": greedy,
            "beam_search_controls": beam_controls,
            "greedy_controls": greedy,
            "sample": sample,
        }
        if self.source_tokenizer is not None:
            bodies["beam_search_constrained"] = beam_constrained
        return bodies

    def functions(self):
        """`{signature name: concrete function}`, inputs named as in `params`."""
        import tensorflow as tf

        def signature_of(body, strings, aliases):
            def signature(inputs, *values):
                texts = dict(zip(strings, values))
                params = self.checked_params(dict(zip(aliases, values[len(strings) :])))
                return body(self.checked_inputs(inputs), **texts, **params)

            return signature

        functions = {}
        for name, body in self.bodies().items():
            aliases = [alias for alias, _, _ in self.request_params[name]]
            strings = specs.TEXT_ARGUMENTS.get(name.removesuffix(XLA_SUFFIX), ())
            input_specs = (
                [self.input_spec]
                + [
                    tf.TensorSpec([None] * len(a.shape.split(",")), tf.string, name=a.name)
                    for a in strings
                ]
                + [
                    tf.TensorSpec([], getattr(tf, dtype), name=alias)
                    for alias, dtype, _ in self.request_params[name]
                ]
            )
            functions[name] = tf.function(
                signature_of(body, [a.name for a in strings], aliases)
            ).get_concrete_function(*input_specs)
        return functions
