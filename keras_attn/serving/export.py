"""Export a text model as a TensorFlow Serving SavedModel (API.md section 4).

`export_text_model(model, tokenizer, "export/models/dates")` writes `export/models/dates/1/`:

    saved_model.pb, variables/         the graph and the model's weights
    assets/                            the tokenizer files (vocabulary / SentencePiece model)
    assets.extra/tf_serving_warmup_requests
                                       one PredictionLog (a Predict request) per signature

with three signatures, each one `tf.function` running tokenizer -> `model.encode` ->
search over `model.decode_step` -> detokenizer:

- `serving_default`: `inputs` string [B] -> `outputs` string [B], `scores` float32 [B]
  (beam search with the export-time settings; every input and output has the batch dimension,
  so it is safe under `--enable_batching`);
- `beam_search`: `inputs` string [B], `beam_size` int32 [], `max_length` int32 [],
  `length_penalty` float32 [], `coverage_penalty` float32 [] -> `outputs` string [B, K],
  `scores` float32 [B, K], `log_probs` float32 [B, K], `lengths` int32 [B, K],
  `alignments` float32 [B, K, T, S] (scalar knobs: not batchable; REST needs the columnar form);
- `greedy`: `inputs` string [B] -> `outputs` string [B], `scores` float32 [B],
  `alignments` float32 [B, T, S].

`export_image_model(model, tokenizer, export_dir, image_shape=(H, W, C))` does the same for a
captioner: the signatures take `images` float32 `[B, H, W, C]` in place of `inputs`.

What a model must provide (the only things the exporter knows about it):

    model.encode(source_ids [B, S] int32) -> dict with "source_mask" [B, S] bool (and anything else)
    model.initial_decode_state(encoder_outputs, max_length) -> nest of tensors with batch B
    model.decode_step(tokens [N] int32, state, step) -> (logits [N, V], state, attention [N, S] or None)

Input handling (documented limits):
- broken UTF-8 is replaced by U+FFFD before tokenizing (never an error);
- a source is cut to `max_input_length` ids (start/end markers included), never rejected;
- an empty string gives a source of only padding (plus markers if asked): the model sees a
  fully masked source and answers with whatever it decodes from nothing;
- an empty batch gives empty outputs;
- `beam_size` must be in `[1, beam_size_limit]` and `max_length` in `[1, max_length_limit]`,
  and the penalties finite: otherwise `InvalidArgumentError` naming the argument.
- `T` is the longest hypothesis of the batch (`1 <= T <= max_length`), `S` the longest source after
  truncation (at least 1). Alignments past a hypothesis' length, or on padded source
  positions, are 0. Rows of a beam that has fewer than K distinct hypotheses have score
  and log-prob `-inf`, length 0 and an empty string.

The SavedModel holds only TensorFlow ops and the TF Text ops stock TensorFlow Serving links
(checked at export with `ops_check.disallowed_ops`); it loads with `tensorflow` and
`tensorflow_text` alone: no `keras_attn`, no custom objects.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from keras_attn._checks import check_finite as _check_float, check_int as _check_int

WARMUP_RELPATH = os.path.join("assets.extra", "tf_serving_warmup_requests")
SIGNATURE_NAMES = ("serving_default", "beam_search", "greedy")
DEFAULT_WARMUP_INPUTS = ("hello world",)


def _check_model(model):
    for method in ("encode", "initial_decode_state", "decode_step"):
        if not callable(getattr(model, method, None)):
            raise ValueError(
                "`model` must implement encode(source_ids), initial_decode_state(encoder_outputs, "
                f"max_length) and decode_step(tokens, state, step). Received: model={model!r} "
                f"without `{method}`"
            )


def _check_tokenizer(name, tokenizer):
    for attr in ("tokenize", "detokenize", "start_id", "end_id", "pad_id", "save"):
        if not hasattr(tokenizer, attr):
            raise ValueError(
                f"`{name}` must be a keras_attn.text tokenizer (tokenize, detokenize, save, "
                f"start/end/pad ids). Received: {name}={tokenizer!r} without `{attr}`"
            )


def _tf_variables(model):
    """The model's `tf.Variable`s (for a Keras 3 model: the TF variables under its Keras variables).

    A Keras variable exports as a second `tf.Variable` copied from the first: a TF2 loader
    restores both, but a TF1 `Session` (the way TensorFlow Serving loads) restores only the copy
    while the functions read the original, uninitialized. Tracking the underlying variables
    avoids the copy.
    """
    import tensorflow as tf

    out = []
    for variable in getattr(model, "variables", []):
        inner = getattr(variable, "value", variable)
        out.append(inner if isinstance(inner, tf.Variable) else variable)
    return out


def _tokenizer_asset(tokenizer, directory, stem):
    """Save the tokenizer's file under `directory` and return the path (a SavedModel asset)."""
    is_sentencepiece = hasattr(tokenizer, "model_proto")
    path = os.path.join(directory, stem + (".model" if is_sentencepiece else "_vocab.txt"))
    # `save` records the path on the tokenizer; keep the user's own record instead.
    remembered = {a: getattr(tokenizer, a) for a in ("vocab_file", "model_file") if hasattr(tokenizer, a)}
    tokenizer.save(path)
    for attr, value in remembered.items():
        setattr(tokenizer, attr, value)
    return path


class _ServingModule:
    """Builds the three signature functions over a model and its tokenizers (TF only)."""

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        input_spec,
        beam_size,
        max_length,
        max_input_length,
        length_penalty,
        coverage_penalty,
        eos_penalty,
        beam_size_limit,
        max_length_limit,
        source_add_start,
        source_add_end,
    ):
        self.model = model
        self.input_spec = input_spec  # a named TensorSpec: string [B] text, or float32 images
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.beam_size = beam_size
        self.max_length = max_length
        self.max_input_length = max_input_length
        self.length_penalty = length_penalty
        self.coverage_penalty = coverage_penalty
        self.eos_penalty = eos_penalty
        self.beam_size_limit = beam_size_limit
        self.max_length_limit = max_length_limit
        self.source_add_start = source_add_start
        self.source_add_end = source_add_end

    # ---- shared pieces ---------------------------------------------------------------
    def source_ids(self, inputs):
        """`string [B]` -> int32 `[B, S]` padded with `pad_id`, `S >= 1`, `S <= max_input_length`."""
        import tensorflow as tf

        tok = self.source_tokenizer
        ragged = tok.tokenize(
            inputs,
            add_start=self.source_add_start,
            add_end=self.source_add_end,
            max_length=self.max_input_length,
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

    def checked_knobs(self, beam_size, max_length, length_penalty, coverage_penalty):
        """Run-time checks of the request's knobs; every later op depends on them."""
        import tensorflow as tf

        checks = [
            tf.debugging.assert_greater_equal(
                beam_size, 1, message="`beam_size` must be >= 1. Received an invalid beam_size"
            ),
            tf.debugging.assert_less_equal(
                beam_size,
                self.beam_size_limit,
                message=f"`beam_size` must be <= {self.beam_size_limit}. Received an invalid beam_size",
            ),
            tf.debugging.assert_greater_equal(
                max_length, 1, message="`max_length` must be >= 1. Received an invalid max_length"
            ),
            tf.debugging.assert_less_equal(
                max_length,
                self.max_length_limit,
                message=f"`max_length` must be <= {self.max_length_limit}. Received an invalid max_length",
            ),
            tf.debugging.assert_all_finite(length_penalty, "`length_penalty` must be finite"),
            tf.debugging.assert_all_finite(coverage_penalty, "`coverage_penalty` must be finite"),
        ]
        with tf.control_dependencies(checks):
            return tuple(tf.identity(x) for x in (beam_size, max_length, length_penalty, coverage_penalty))

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
            eos_penalty=self.eos_penalty,
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

        max_length = tf.constant(self.max_length, tf.int32)
        state, start_tokens, source_mask = self.encode(inputs, max_length)
        result = greedy_search(
            self.model.decode_step,
            state,
            start_tokens,
            self.target_tokenizer.end_id,
            max_length=max_length,
            length_penalty=self.length_penalty,
            coverage_penalty=self.coverage_penalty,
            eos_penalty=self.eos_penalty,
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
        """`{signature name: concrete function}`."""
        import tensorflow as tf

        strings = self.input_spec  # the signature's input alias is the spec's name

        def serving_default(inputs):
            result = self.run_beam_search(
                inputs,
                tf.constant(self.beam_size, tf.int32),
                tf.constant(self.max_length, tf.int32),
                tf.constant(self.length_penalty, tf.float32),
                tf.constant(self.coverage_penalty, tf.float32),
            )
            return {"outputs": result["outputs"][:, 0], "scores": result["scores"][:, 0]}

        def beam_search_signature(inputs, beam_size, max_length, length_penalty, coverage_penalty):
            knobs = self.checked_knobs(beam_size, max_length, length_penalty, coverage_penalty)
            return self.run_beam_search(inputs, *knobs)

        def greedy(inputs):
            return self.run_greedy(inputs)

        return {
            "serving_default": tf.function(serving_default).get_concrete_function(strings),
            "beam_search": tf.function(beam_search_signature).get_concrete_function(
                strings,
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.int32, name="max_length"),
                tf.TensorSpec([], tf.float32, name="length_penalty"),
                tf.TensorSpec([], tf.float32, name="coverage_penalty"),
            ),
            "greedy": tf.function(greedy).get_concrete_function(strings),
        }


def warmup_requests(
    model_name, warmup_inputs, beam_size, max_length, length_penalty, coverage_penalty, input_name="inputs"
):
    """One `PredictionLog` per signature (the records of `tf_serving_warmup_requests`).

    `warmup_inputs`: a list of strings (text models) or a numpy array (the images)."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    if isinstance(warmup_inputs, np.ndarray):
        texts = warmup_inputs
    else:
        texts = np.array([t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in warmup_inputs], dtype=object)
    per_signature = {
        "serving_default": {input_name: texts},
        "beam_search": {
            input_name: texts,
            "beam_size": np.int32(beam_size),
            "max_length": np.int32(max_length),
            "length_penalty": np.float32(length_penalty),
            "coverage_penalty": np.float32(coverage_penalty),
        },
        "greedy": {input_name: texts},
    }
    logs = []
    for name in SIGNATURE_NAMES:
        request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model_name, signature_name=name))
        for alias, value in per_signature[name].items():
            request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
        logs.append(prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request)))
    return logs


def _common_checks(model, version, beam_size, max_length, length_penalty, coverage_penalty, eos_penalty,
                   beam_size_limit, max_length_limit):
    _check_model(model)
    settings = dict(
        version=_check_int("version", version, 1),
        beam_size=_check_int("beam_size", beam_size, 1),
        max_length=_check_int("max_length", max_length, 1),
        length_penalty=_check_float("length_penalty", length_penalty),
        coverage_penalty=_check_float("coverage_penalty", coverage_penalty),
        eos_penalty=_check_float("eos_penalty", eos_penalty),
    )
    settings["beam_size_limit"] = _check_int("beam_size_limit", beam_size_limit, settings["beam_size"])
    if max_length_limit is None:
        max_length_limit = 4 * settings["max_length"]
    settings["max_length_limit"] = _check_int("max_length_limit", max_length_limit, settings["max_length"])
    try:
        import keras

        backend = keras.backend.backend()
    except ImportError:  # a plain tf.Module model
        backend = "tensorflow"
    if backend != "tensorflow":
        raise ValueError(
            "Export needs the TensorFlow backend (set KERAS_BACKEND=tensorflow). "
            f"Received: backend={backend!r}"
        )
    return settings


def _write(serving, export_dir, version, model_name, overwrite, warmup_inputs, tokenizers):
    """Check the ops, save the SavedModel with its assets and warm-up file, return the version dir."""
    import tensorflow as tf

    from keras_attn.serving import ops_check

    export_dir = os.fspath(export_dir)
    final_dir = os.path.join(export_dir, str(version))
    if os.path.exists(final_dir) and not overwrite:
        raise ValueError(
            f"The version directory already exists; pass overwrite=True or a new version. "
            f"Received: export_dir={export_dir!r}, version={version}"
        )
    if model_name is None:
        model_name = os.path.basename(os.path.normpath(os.path.abspath(export_dir)))

    functions = serving.functions()
    for name, function in functions.items():
        bad = ops_check.disallowed_ops(function)
        if bad:
            raise ValueError(
                f"The `{name}` signature uses ops TensorFlow Serving does not have: {bad}. "
                "Use TensorFlow ops and the TF Text ops in ops_check.TF_TEXT_SERVING_OPS only."
            )

    os.makedirs(export_dir, exist_ok=True)
    # Written next to the final directory and renamed at the end: TF Serving watches
    # `export_dir` and must never see a half-written version (non-numeric names are ignored).
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_dir)
    try:
        asset_dir = os.path.join(staging, "tokenizer_files")
        os.makedirs(asset_dir)
        root = tf.Module()
        root.model_variables = _tf_variables(serving.model)
        root.tokenizers = [t for t in tokenizers.values()]
        # The tokenizer files as SavedModel assets (copied to assets/; the graph holds its own copy).
        root.tokenizer_assets = [
            tf.saved_model.Asset(_tokenizer_asset(t, asset_dir, stem)) for stem, t in tokenizers.items()
        ]
        root.signature_functions = dict(functions)
        saved = os.path.join(staging, "model")
        tf.saved_model.save(root, saved, signatures=functions)
        os.makedirs(os.path.join(saved, "assets.extra"), exist_ok=True)
        with tf.io.TFRecordWriter(os.path.join(saved, WARMUP_RELPATH)) as writer:
            for log in warmup_requests(
                model_name,
                warmup_inputs,
                serving.beam_size,
                serving.max_length,
                serving.length_penalty,
                serving.coverage_penalty,
                input_name=serving.input_spec.name,
            ):
                writer.write(log.SerializeToString())
        if os.path.exists(final_dir):
            shutil.rmtree(final_dir)
        os.replace(saved, final_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final_dir


def export_text_model(
    model,
    tokenizer,
    export_dir,
    version=1,
    beam_size=4,
    max_length=64,
    max_input_length=256,
    length_penalty=0.0,
    coverage_penalty=0.0,
    eos_penalty=0.0,
    target_tokenizer=None,
    beam_size_limit=64,
    max_length_limit=None,
    source_add_start=False,
    source_add_end=False,
    warmup_inputs=DEFAULT_WARMUP_INPUTS,
    model_name=None,
    overwrite=False,
):
    """Write `export_dir/<version>/`, a SavedModel for TensorFlow Serving (see module docstring).

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step` (module docstring);
            built (its variables exist) and running on the TensorFlow backend.
        tokenizer: a `keras_attn.text` tokenizer for the source (and the target, unless
            `target_tokenizer` is given).
        export_dir: the model's base directory, the one TF Serving's `base_path` points at.
        version: positive integer, the version subdirectory.
        beam_size, max_length, length_penalty, coverage_penalty: the settings of
            `serving_default` (and `max_length`, penalties of `greedy`).
        max_input_length: source ids kept per input (markers included); longer inputs are cut.
        eos_penalty: the GNMT end-of-sentence penalty `gamma`, fixed at export for all signatures.
        target_tokenizer: tokenizer of the output text; defaults to `tokenizer`.
        beam_size_limit: largest `beam_size` the `beam_search` signature accepts.
        max_length_limit: largest `max_length` it accepts (default `4 * max_length`).
        source_add_start, source_add_end: put the start / end id around the source ids, as
            the model was trained.
        warmup_inputs: the strings of the warm-up requests (one request per signature).
        model_name: the `model_spec.name` of the warm-up requests (default: the base name of
            `export_dir`).
        overwrite: replace an existing version directory.

    Returns:
        The path of the version directory. Assets: `tokenizer_vocab.txt` / `tokenizer.model`
        for one shared tokenizer, else `source_*` and `target_*`.
    """
    import tensorflow as tf

    settings = _common_checks(
        model, version, beam_size, max_length, length_penalty, coverage_penalty, eos_penalty,
        beam_size_limit, max_length_limit,
    )
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    _check_tokenizer("tokenizer", tokenizer)
    _check_tokenizer("target_tokenizer", target_tokenizer)
    max_input_length = _check_int(
        "max_input_length", max_input_length, 1 + int(bool(source_add_start)) + int(bool(source_add_end))
    )
    if isinstance(warmup_inputs, (str, bytes)) or not list(warmup_inputs):
        raise ValueError(
            f"`warmup_inputs` must be a non-empty list of strings. Received: warmup_inputs={warmup_inputs!r}"
        )
    version = settings.pop("version")
    serving = _ServingModule(
        model,
        tokenizer,
        target_tokenizer,
        tf.TensorSpec([None], tf.string, name="inputs"),
        max_input_length=max_input_length,
        source_add_start=bool(source_add_start),
        source_add_end=bool(source_add_end),
        **settings,
    )
    if target_tokenizer is tokenizer:
        tokenizers = {"tokenizer": tokenizer}
    else:
        tokenizers = {"source": tokenizer, "target": target_tokenizer}
    return _write(serving, export_dir, version, model_name, overwrite, list(warmup_inputs), tokenizers)


def export_image_model(
    model,
    tokenizer,
    export_dir,
    image_shape,
    version=1,
    beam_size=4,
    max_length=64,
    length_penalty=0.0,
    coverage_penalty=0.0,
    eos_penalty=0.0,
    beam_size_limit=64,
    max_length_limit=None,
    warmup_images=None,
    model_name=None,
    overwrite=False,
):
    """Like `export_text_model` for a captioner: the input is `images` float32 `[B, H, W, C]`.

    The signatures are those of text models with `images` in place of `inputs` (and `S` the
    number of image positions the model attends over). `model.encode(images)` gets the
    float32 images as sent; `tokenizer` detokenizes the captions.

    Args:
        image_shape: `(H, W, C)`; a dimension may be None (any size).
        warmup_images: float32 array `[n, H, W, C]` for the warm-up requests (default: one
            zero image, size 32 for unknown dimensions).
        Others: as for `export_text_model`.
    """
    import numpy as np
    import tensorflow as tf

    settings = _common_checks(
        model, version, beam_size, max_length, length_penalty, coverage_penalty, eos_penalty,
        beam_size_limit, max_length_limit,
    )
    _check_tokenizer("tokenizer", tokenizer)
    image_shape = tuple(image_shape) if isinstance(image_shape, (tuple, list)) else image_shape
    if (
        not isinstance(image_shape, tuple)
        or len(image_shape) != 3
        or not all(d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0) for d in image_shape)
    ):
        raise ValueError(
            "`image_shape` must be (height, width, channels), each a positive int or None. "
            f"Received: image_shape={image_shape!r}"
        )
    if warmup_images is None:
        warmup_images = np.zeros((1,) + tuple(32 if d is None else d for d in image_shape), np.float32)
    warmup_images = np.asarray(warmup_images, np.float32)
    if warmup_images.ndim != 4 or not warmup_images.shape[0] or not all(
        d is None or d == w for d, w in zip(image_shape, warmup_images.shape[1:])
    ):
        raise ValueError(
            f"`warmup_images` must be a non-empty [n, H, W, C] array matching image_shape={image_shape}. "
            f"Received: warmup_images with shape {warmup_images.shape}"
        )
    version = settings.pop("version")
    serving = _ServingModule(
        model,
        None,
        tokenizer,
        tf.TensorSpec((None,) + image_shape, tf.float32, name="images"),
        max_input_length=None,
        source_add_start=False,
        source_add_end=False,
        **settings,
    )
    return _write(serving, export_dir, version, model_name, overwrite, warmup_images, {"tokenizer": tokenizer})
