"""Write a model's serving signatures as a TensorFlow Serving SavedModel (docs/serving.md).

`export_text_model(model, tokenizer, "export/models/dates")` writes `export/models/dates/1/`:

    saved_model.pb, variables/         the graph and the model's weights
    assets/                            the tokenizer files (vocabulary / SentencePiece model)
    assets.extra/tf_serving_warmup_requests
                                       one PredictionLog (a Predict request) per signature

`export_image_model(model, tokenizer, export_dir, image_shape=(H, W, C))` does the same for a
captioner (`images` float32 `[B, H, W, C]` in place of `inputs`).

This module does the writing: argument checks, the op allow-list check
(`ops_check.disallowed_ops`), the SavedModel with its assets, the warm-up records, and the
rename into place. The signatures themselves (what each computes, the settings they are built
from, their run-time checks) are in `keras_attn.serving.signatures`.

What a model must provide (the only things the exporter knows about it):

    model.encode(source_ids [B, S] int32) -> dict with "source_mask" [B, S] bool (and anything else)
    model.initial_decode_state(encoder_outputs, max_length) -> nest of tensors with batch B
    model.decode_step(tokens [N] int32, state, step) -> (logits [N, V], state, attention [N, S] or None)

The SavedModel loads with `tensorflow` and `tensorflow_text` alone: no `keras_attn`, no
custom objects.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from keras_attn import _checks
from keras_attn.decoding.protocol import check_model
from keras_attn.serving.harness import WARMUP_FILE
from keras_attn.serving.signatures import (  # noqa: F401
    DEFAULT_XLA_BATCH_SIZES,
    SIGNATURE_NAMES,
    XLA_SIGNATURE_NAMES,
    XLA_SUFFIX,
    ServingSettings,
    ServingSignatures,
    position_limit,
)

# The warm-up file, where the server looks for it (written here, read by harness.read_warmup_records)
WARMUP_RELPATH = WARMUP_FILE
DEFAULT_WARMUP_INPUTS = ("hello world",)


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
    remembered = {
        a: getattr(tokenizer, a) for a in ("vocab_file", "model_file") if hasattr(tokenizer, a)
    }
    tokenizer.save(path)
    for attr, value in remembered.items():
        setattr(tokenizer, attr, value)
    return path


def warmup_requests(model_name, warmup_inputs, signatures):
    """One `PredictionLog` per signature (the records of `tf_serving_warmup_requests`).

    `warmup_inputs`: a list of strings (text models) or a numpy array (the images);
    `signatures`: the `ServingSignatures`, whose `knobs` give each request's other inputs."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    if isinstance(warmup_inputs, np.ndarray):
        texts = warmup_inputs
    else:
        texts = np.array(
            [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in warmup_inputs],
            dtype=object,
        )
    xla_batches = _xla_warmup_batches(texts, signatures)
    logs = []
    for name, knobs in signatures.knobs.items():
        # An XLA signature compiles once per shape: one request per (batch, source length)
        # bucket, so the server has compiled them all before it answers (docs/serving.md, "XLA").
        batches = xla_batches if name.endswith(XLA_SUFFIX) else [texts]
        for batch in batches:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=name)
            )
            request.inputs[signatures.input_spec.name].CopyFrom(tf.make_tensor_proto(batch))
            for alias, dtype, value in knobs:
                request.inputs[alias].CopyFrom(tf.make_tensor_proto(np.asarray(value, dtype)))
            logs.append(
                prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request)
                )
            )
    return logs


def _token_count(signatures, text):
    """Source ids the signatures make of one text (markers included, after the cut)."""
    import tensorflow as tf

    return int(signatures.source_ids(tf.constant([text])).shape[1])


def _xla_warmup_batches(warmup, signatures):
    """The warm-up inputs of the XLA signatures: for every batch bucket, one batch per
    source-length bucket (text: the warm-up texts repeated until their ids fall in that bucket;
    images: the first warm-up image), so that every bucketed shape is compiled once."""
    import numpy as np

    settings = signatures.settings
    if not settings.xla:
        return []
    if signatures.source_tokenizer is None:
        rows = [warmup[:1]]
    else:
        base = b" ".join(warmup) or b"a"
        rows, low = [], 0
        for high in settings.xla_source_lengths:
            markers = int(settings.source_add_start) + int(settings.source_add_end)
            text = (warmup[0] or base)[: max(1, high - markers)]
            count = _token_count(signatures, text)
            while count > high and len(text) > 1:  # more ids than bytes (rare)
                text = text[:-1]
                count = _token_count(signatures, text)
            # A byte adds at most one id: growing by the ids missing never passes `low + 1`.
            while count <= low and len(text) < 8 * high + len(base):
                for _ in range(low + 1 - count):
                    text = text + base[len(text) % len(base) :][:1]
                count = _token_count(signatures, text)
            rows.append(np.array([text], dtype=object))
            low = high
    return [
        np.concatenate([row] * size, axis=0) for size in settings.xla_batch_sizes for row in rows
    ]


def _check_export(model, version):
    """The checks that do not depend on the settings: the model's interface, the version, the backend."""
    check_model(model)
    _checks.check_int("version", version)
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


def _write(signatures, export_dir, version, model_name, overwrite, warmup_inputs, tokenizers):
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

    functions = signatures.functions()
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
        root.model_variables = _tf_variables(signatures.model)
        root.tokenizers = [t for t in tokenizers.values()]
        # The tokenizer files as SavedModel assets (copied to assets/; the graph holds its own copy).
        root.tokenizer_assets = [
            tf.saved_model.Asset(_tokenizer_asset(t, asset_dir, stem))
            for stem, t in tokenizers.items()
        ]
        root.signature_functions = dict(functions)
        saved = os.path.join(staging, "model")
        tf.saved_model.save(root, saved, signatures=functions)
        os.makedirs(os.path.join(saved, "assets.extra"), exist_ok=True)
        with tf.io.TFRecordWriter(os.path.join(saved, WARMUP_RELPATH)) as writer:
            for log in warmup_requests(model_name, warmup_inputs, signatures):
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
    max_length=None,
    max_input_length=None,
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
    xla=False,
    xla_batch_sizes=None,
    xla_source_lengths=None,
):
    """Write `export_dir/<version>/`, a SavedModel for TensorFlow Serving (see module docstring).

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step` (module docstring);
            built (its variables exist) and running on the TensorFlow backend.
        tokenizer: a `keras_attn.text` tokenizer for the source (and the target, unless
            `target_tokenizer` is given).
        export_dir: the model's base directory, the one TF Serving's `base_path` points at.
        version: positive integer, the version subdirectory.
        beam_size, max_length, max_input_length, length_penalty, coverage_penalty, eos_penalty,
            beam_size_limit, max_length_limit, source_add_start, source_add_end: the
            `ServingSettings` (keras_attn.serving.signatures), checked once. Defaults:
            `max_length` 64, `max_length_limit` 4 x `max_length`, `max_input_length` 256, each
            lowered to the model's learned position table if it has one (then inputs are cut
            to the table, never rejected); a value given above the table is a `ValueError`.
        target_tokenizer: tokenizer of the output text; defaults to `tokenizer`.
        warmup_inputs: the strings of the warm-up requests (one request per signature).
        model_name: the `model_spec.name` of the warm-up requests (default: the base name of
            `export_dir`).
        overwrite: replace an existing version directory.
        xla, xla_batch_sizes, xla_source_lengths: also export XLA-compiled variants
            `<name>_xla` of the search signatures (True: all of `XLA_SIGNATURE_NAMES`, or a
            list of names), padded to these batch and source-length buckets (defaults: batch
            1, 8, 32; lengths 16, 32, ... up to `max_input_length`); docs/serving.md, "XLA".

    Returns:
        The path of the version directory. Assets: `tokenizer_vocab.txt` / `tokenizer.model`
        for one shared tokenizer, else `source_*` and `target_*`.
    """
    import tensorflow as tf

    _check_export(model, version)
    settings = ServingSettings(
        beam_size=beam_size,
        max_length=max_length,
        length_penalty=length_penalty,
        coverage_penalty=coverage_penalty,
        eos_penalty=eos_penalty,
        beam_size_limit=beam_size_limit,
        max_length_limit=max_length_limit,
        max_input_length=max_input_length,
        source_add_start=bool(source_add_start),
        source_add_end=bool(source_add_end),
        position_limit=position_limit(model),
        xla=xla,
        xla_batch_sizes=DEFAULT_XLA_BATCH_SIZES if xla_batch_sizes is None else xla_batch_sizes,
        xla_source_lengths=xla_source_lengths,
    )
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    _check_tokenizer("tokenizer", tokenizer)
    _check_tokenizer("target_tokenizer", target_tokenizer)
    if isinstance(warmup_inputs, (str, bytes)) or not list(warmup_inputs):
        raise ValueError(
            f"`warmup_inputs` must be a non-empty list of strings. Received: warmup_inputs={warmup_inputs!r}"
        )
    signatures = ServingSignatures(
        model,
        settings,
        tf.TensorSpec([None], tf.string, name="inputs"),
        tokenizer,
        target_tokenizer,
    )
    if target_tokenizer is tokenizer:
        tokenizers = {"tokenizer": tokenizer}
    else:
        tokenizers = {"source": tokenizer, "target": target_tokenizer}
    return _write(
        signatures, export_dir, version, model_name, overwrite, list(warmup_inputs), tokenizers
    )


def export_image_model(
    model,
    tokenizer,
    export_dir,
    image_shape,
    version=1,
    beam_size=4,
    max_length=None,
    length_penalty=0.0,
    coverage_penalty=0.0,
    eos_penalty=0.0,
    beam_size_limit=64,
    max_length_limit=None,
    warmup_images=None,
    model_name=None,
    overwrite=False,
    xla=False,
    xla_batch_sizes=None,
):
    """Like `export_text_model` for a captioner: the input is `images` float32 `[B, H, W, C]`.

    The signatures are those of text models with `images` in place of `inputs` (and `S` the
    number of image positions the model attends over). `model.encode(images)` gets the
    float32 images as sent; `tokenizer` detokenizes the captions.

    Args:
        image_shape: `(H, W, C)`; a dimension may be None (any size).
        warmup_images: float32 array `[n, H, W, C]` for the warm-up requests (default: one
            zero image, size 32 for unknown dimensions).
        xla, xla_batch_sizes: as for `export_text_model` (images are padded along the batch
            only; an image shape with None dimensions compiles once per image size).
        Others: as for `export_text_model`.
    """
    import numpy as np
    import tensorflow as tf

    _check_export(model, version)
    settings = ServingSettings(
        beam_size=beam_size,
        max_length=max_length,
        length_penalty=length_penalty,
        coverage_penalty=coverage_penalty,
        eos_penalty=eos_penalty,
        beam_size_limit=beam_size_limit,
        max_length_limit=max_length_limit,
        text_input=False,
        position_limit=position_limit(model),
        xla=xla,
        xla_batch_sizes=DEFAULT_XLA_BATCH_SIZES if xla_batch_sizes is None else xla_batch_sizes,
    )
    _check_tokenizer("tokenizer", tokenizer)
    image_shape = tuple(image_shape) if isinstance(image_shape, (tuple, list)) else image_shape
    if (
        not isinstance(image_shape, tuple)
        or len(image_shape) != 3
        or not all(
            d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0)
            for d in image_shape
        )
    ):
        raise ValueError(
            "`image_shape` must be (height, width, channels), each a positive int or None. "
            f"Received: image_shape={image_shape!r}"
        )
    if warmup_images is None:
        warmup_images = np.zeros(
            (1,) + tuple(32 if d is None else d for d in image_shape), np.float32
        )
    warmup_images = np.asarray(warmup_images, np.float32)
    if (
        warmup_images.ndim != 4
        or not warmup_images.shape[0]
        or not all(d is None or d == w for d, w in zip(image_shape, warmup_images.shape[1:]))
    ):
        raise ValueError(
            f"`warmup_images` must be a non-empty [n, H, W, C] array matching image_shape={image_shape}. "
            f"Received: warmup_images with shape {warmup_images.shape}"
        )
    signatures = ServingSignatures(
        model,
        settings,
        tf.TensorSpec((None,) + image_shape, tf.float32, name="images"),
        None,
        tokenizer,
    )
    return _write(
        signatures,
        export_dir,
        version,
        model_name,
        overwrite,
        warmup_images,
        {"tokenizer": tokenizer},
    )
