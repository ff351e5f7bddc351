"""The serving signatures of an exported model, and the settings they are built from.

`ServingSettings` holds every export-time setting (checked once, when it is created; frozen).
`ServingSignatures(model, settings, input_spec, ...)` builds one `tf.function` per signature:
tokenizer -> `model.encode` -> search over `model.decode_step` -> detokenizer. Each signature's
request knobs (the scalar inputs beside the text) and their warm-up values are listed once, in
`ServingSignatures.knobs`: the signature specs and the warm-up requests are both made from it.
The signatures, their inputs and outputs and the documented limits are described in
docs/serving.md; `keras_attn.serving.export` writes them to disk.
"""

from __future__ import annotations

import dataclasses
import math

SIGNATURE_NAMES = ("serving_default", "beam_search", "greedy")


def _check_int(name, value, minimum, maximum=None):
    ok = not isinstance(value, bool) and isinstance(value, int) and value >= minimum
    ok = ok and (maximum is None or value <= maximum)
    if not ok:
        bounds = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ValueError(f"`{name}` must be an integer {bounds}. Received: {name}={value!r}")
    return value


def _check_float(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number. Received: {name}={value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class ServingSettings:
    """The export-time settings of the signatures (see docs/serving.md).

    Args:
        beam_size, max_length, length_penalty, coverage_penalty: `serving_default`'s search
            (and `max_length` and the penalties of `greedy`); also the values of the warm-up
            requests.
        eos_penalty: the GNMT end-of-sentence penalty `gamma`, fixed for every signature.
        beam_size_limit: largest `beam_size` a request may ask for (>= `beam_size`).
        max_length_limit: largest `max_length` a request may ask for (>= `max_length`);
            None: `4 * max_length`.
        max_input_length: source ids kept per text input (start/end markers included); longer
            inputs are cut. None for image models (no tokenizer).
        source_add_start, source_add_end: put the start / end id around the source ids.

    Every value is checked when the object is created (`ValueError` naming the argument);
    the object is frozen, so what the signatures and the warm-up writer read is what was checked.
    """

    beam_size: int = 4
    max_length: int = 64
    length_penalty: float = 0.0
    coverage_penalty: float = 0.0
    eos_penalty: float = 0.0
    beam_size_limit: int = 64
    max_length_limit: int | None = None
    max_input_length: int | None = 256
    source_add_start: bool = False
    source_add_end: bool = False

    def __post_init__(self):
        set_ = object.__setattr__
        beam_size = _check_int("beam_size", self.beam_size, 1)
        max_length = _check_int("max_length", self.max_length, 1)
        for name in ("length_penalty", "coverage_penalty", "eos_penalty"):
            set_(self, name, _check_float(name, getattr(self, name)))
        _check_int("beam_size_limit", self.beam_size_limit, beam_size)
        if self.max_length_limit is None:
            set_(self, "max_length_limit", 4 * max_length)
        _check_int("max_length_limit", self.max_length_limit, max_length)
        for name in ("source_add_start", "source_add_end"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False. Received: {name}={getattr(self, name)!r}")
        if self.max_input_length is not None:
            markers = int(self.source_add_start) + int(self.source_add_end)
            _check_int("max_input_length", self.max_input_length, 1 + markers)


def _assert_in_range(name, value, low, high):
    """A run-time check of an integer request knob; the returned value depends on it."""
    import tensorflow as tf

    ok = tf.logical_and(value >= low, value <= high)
    check = tf.debugging.Assert(
        ok, [f"`{name}` must be an integer in [{low}, {high}]. Received: {name}=", value]
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def _assert_finite(name, value):
    import tensorflow as tf

    return tf.debugging.check_numerics(value, f"`{name}` must be a finite number")


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
            raise ValueError(f"`settings` must be a ServingSettings. Received: settings={settings!r}")
        self.model = model
        self.settings = settings
        self.input_spec = input_spec
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer

    @property
    def knobs(self):
        """`{signature: [(alias, dtype name, warm-up value), ...]}`: each signature's scalar
        inputs besides the text, in order, with the value its warm-up request sends."""
        s = self.settings
        return {
            "serving_default": [],
            "beam_search": [
                ("beam_size", "int32", s.beam_size),
                ("max_length", "int32", s.max_length),
                ("length_penalty", "float32", s.length_penalty),
                ("coverage_penalty", "float32", s.coverage_penalty),
            ],
            "greedy": [],
        }

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

    def encode(self, inputs, max_length):
        import tensorflow as tf

        encoder_outputs = self.model.encode(self.model_inputs(inputs))
        if not isinstance(encoder_outputs, dict) or "source_mask" not in encoder_outputs:
            raise ValueError(
                "`model.encode` must return a dict of tensors that includes 'source_mask' [B, S]. "
                f"Received: {type(encoder_outputs).__name__}"
                + (f" with keys {sorted(encoder_outputs)}" if isinstance(encoder_outputs, dict) else "")
            )
        state = self.model.initial_decode_state(encoder_outputs, max_length)
        source_mask = tf.cast(encoder_outputs["source_mask"], tf.bool)
        start_tokens = tf.fill(tf.shape(inputs)[:1], tf.constant(self.target_tokenizer.start_id, tf.int32))
        return state, start_tokens, source_mask

    def checked_beam_knobs(self, beam_size, max_length, length_penalty, coverage_penalty):
        """The `beam_search` request's knobs, checked against the export's limits at run time."""
        s = self.settings
        return (
            _assert_in_range("beam_size", beam_size, 1, s.beam_size_limit),
            _assert_in_range("max_length", max_length, 1, s.max_length_limit),
            _assert_finite("length_penalty", length_penalty),
            _assert_finite("coverage_penalty", coverage_penalty),
        )

    def run_beam_search(self, inputs, beam_size, max_length, length_penalty, coverage_penalty):
        """Strings [B] -> dict of the `beam_search` signature's outputs."""
        import tensorflow as tf

        from keras_attn.decoding import beam_search

        state, start_tokens, source_mask = self.encode(inputs, max_length)
        result = beam_search(
            self.model.decode_step,
            state,
            start_tokens,
            self.target_tokenizer.end_id,
            beam_size=beam_size,
            max_length=max_length,
            length_penalty=length_penalty,
            coverage_penalty=coverage_penalty,
            eos_penalty=self.settings.eos_penalty,
            source_mask=source_mask,
        )
        # At least one column, so an empty batch still detokenizes to an empty [B, K].
        t = tf.reduce_max(tf.concat([tf.reshape(result["lengths"], [-1]), [1]], 0))
        sequences = result["sequences"][:, :, :t]
        out = {
            "outputs": self.target_tokenizer.detokenize(sequences),
            "scores": tf.cast(result["scores"], tf.float32),
            "log_probs": tf.cast(result["log_probs"], tf.float32),
            "lengths": tf.cast(result["lengths"], tf.int32),
        }
        out["alignments"] = self._alignments(result, t, tf.shape(sequences)[:2], tf.shape(source_mask)[1])
        return out

    def run_greedy(self, inputs):
        import tensorflow as tf

        from keras_attn.decoding import greedy_search

        s = self.settings
        max_length = tf.constant(s.max_length, tf.int32)
        state, start_tokens, source_mask = self.encode(inputs, max_length)
        result = greedy_search(
            self.model.decode_step,
            state,
            start_tokens,
            self.target_tokenizer.end_id,
            max_length=max_length,
            length_penalty=s.length_penalty,
            coverage_penalty=s.coverage_penalty,
            eos_penalty=s.eos_penalty,
            source_mask=source_mask,
        )
        t = tf.reduce_max(tf.concat([result["lengths"], [1]], 0))
        sequences = result["sequences"][:, :t]
        return {
            "outputs": self.target_tokenizer.detokenize(sequences),
            "scores": tf.cast(result["scores"], tf.float32),
            "alignments": self._alignments(result, t, tf.shape(sequences)[:1], tf.shape(source_mask)[1]),
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
    def functions(self):
        """`{signature name: concrete function}`, inputs named as in `knobs`."""
        import tensorflow as tf

        s = self.settings

        def serving_default(inputs):
            result = self.run_beam_search(
                inputs,
                tf.constant(s.beam_size, tf.int32),
                tf.constant(s.max_length, tf.int32),
                tf.constant(s.length_penalty, tf.float32),
                tf.constant(s.coverage_penalty, tf.float32),
            )
            return {"outputs": result["outputs"][:, 0], "scores": result["scores"][:, 0]}

        def beam_search_signature(inputs, beam_size, max_length, length_penalty, coverage_penalty):
            knobs = self.checked_beam_knobs(beam_size, max_length, length_penalty, coverage_penalty)
            return self.run_beam_search(inputs, *knobs)

        def greedy(inputs):
            return self.run_greedy(inputs)

        bodies = {"serving_default": serving_default, "beam_search": beam_search_signature, "greedy": greedy}
        functions = {}
        for name in SIGNATURE_NAMES:
            specs = [self.input_spec] + [
                tf.TensorSpec([], getattr(tf, dtype), name=alias) for alias, dtype, _ in self.knobs[name]
            ]
            functions[name] = tf.function(bodies[name]).get_concrete_function(*specs)
        return functions
