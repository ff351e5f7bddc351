"""The one writer of every export: `write_savedmodel(functions, export_dir, ...)`.

The translators' and captioners' exports (`keras_attn.serving.export`) and the document models'
raw-text exports (`keras_attn.models.raw_text_export`) all write through it: the version and
backend checks, the op allow-list check (`ops_check.disallowed_ops`), the SavedModel with its
assets, the warm-up records (`assets.extra/tf_serving_warmup_requests`, one `PredictionLog` per
request), the export's search settings (`assets.extra/search_settings.json`: what a client
starts a request from, read back by `keras_attn.serving.request.export_settings`), and the
rename of the finished version directory into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_attn import _checks
from keras_attn.serving.harness import WARMUP_FILE
from keras_attn.serving.request import SETTINGS_FILE, search_settings

# The warm-up file, where the server looks for it (read back by harness.read_warmup_records)
WARMUP_RELPATH = WARMUP_FILE

# One warm-up request: (signature name, {input alias: numpy value}).
WarmupRequest = tuple[str, Mapping[str, Any]]


def tf_variables(model: Any) -> list:
    """The model's `tf.Variable`s (for a Keras 3 model: the TF variables under its Keras variables).

    A Keras variable exports as a second `tf.Variable` copied from the first: a TF2 loader
    restores both, but a TF1 `Session` (the way TensorFlow Serving loads) restores only the copy
    while the functions read the original, uninitialized. Tracking the underlying variables
    avoids the copy.
    """
    out = []
    for variable in getattr(model, "variables", []):
        inner = getattr(variable, "value", variable)
        out.append(inner if isinstance(inner, tf.Variable) else variable)
    return out


def check_backend() -> None:
    """Export writes TensorFlow graphs: the Keras backend must be TensorFlow."""
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


def check_ops(functions: Mapping[str, Any]) -> None:
    """Every function may use only ops stock TensorFlow Serving links, else a `ValueError`."""
    from keras_attn.serving import ops_check

    for name, function in functions.items():
        bad = ops_check.disallowed_ops(function)
        if bad:
            raise ValueError(
                f"The `{name}` signature uses ops TensorFlow Serving does not have: {bad}. "
                "Use TensorFlow ops and the TF Text ops in ops_check.TF_TEXT_SERVING_OPS only."
            )


def warmup_records(model_name: str, requests: Iterable[WarmupRequest]) -> list:
    """One `PredictionLog` per `(signature name, {alias: numpy value})` request: the records of
    `assets.extra/tf_serving_warmup_requests`."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    logs = []
    for signature, inputs in requests:
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
        )
        for alias, value in inputs.items():
            request.inputs[alias].CopyFrom(tf.make_tensor_proto(np.asarray(value)))
        logs.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
    return logs


def write_savedmodel(
    functions: Mapping[str, Any],
    export_dir: str | os.PathLike,
    version: int = 1,
    track: Sequence[Any] = (),
    assets: Sequence[str] = (),
    warmup: Sequence[WarmupRequest] = (),
    model_name: str | None = None,
    overwrite: bool = False,
    settings: Any = None,
) -> str:
    """Write `export_dir/<version>/`: the one writer of every export.

    Args:
        functions: `{signature name: concrete function}`; the functions' input names are the
            signatures' input aliases.
        export_dir: the model's base directory, the one TF Serving's `base_path` points at.
        version: positive integer, the version subdirectory.
        track: what the functions read and the SavedModel must hold (the model's variables,
            see `tf_variables`; lookup tables; tokenizers).
        assets: paths of files kept beside the graph (vocabularies), as SavedModel assets.
        warmup: the warm-up requests, `(signature name, {alias: numpy value})` each.
        model_name: the `model_spec.name` of the warm-up requests (default: the base name of
            `export_dir`).
        overwrite: replace an existing version directory.
        settings: the export's `ServingSettings`: its search settings (what a client's request
            starts from, `keras_attn.serving.request.search_settings`) are written as JSON to
            `assets.extra/search_settings.json`; None: no file.

    Checks the version, the backend and every op first; writes into a hidden directory beside
    the version and renames it into place at the end (TF Serving watches `export_dir` and must
    never see half a model). Returns the path of the version directory.
    """
    _checks.check_int("version", version)
    check_backend()
    export_dir = os.fspath(export_dir)
    final_dir = os.path.join(export_dir, str(version))
    if os.path.exists(final_dir) and not overwrite:
        raise ValueError(
            f"The version directory already exists; pass overwrite=True or a new version. "
            f"Received: export_dir={export_dir!r}, version={version}"
        )
    if model_name is None:
        model_name = os.path.basename(os.path.normpath(os.path.abspath(export_dir)))
    check_ops(functions)
    os.makedirs(export_dir, exist_ok=True)
    # Non-numeric names are ignored by the server.
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_dir)
    try:
        root = tf.Module()
        root.tracked = list(track)
        root.tokenizer_assets = [tf.saved_model.Asset(path) for path in assets]
        root.signature_functions = dict(functions)
        saved = os.path.join(staging, "model")
        tf.saved_model.save(root, saved, signatures=dict(functions))
        os.makedirs(os.path.join(saved, "assets.extra"), exist_ok=True)
        with tf.io.TFRecordWriter(os.path.join(saved, WARMUP_RELPATH)) as writer:
            for log in warmup_records(model_name, warmup):
                writer.write(log.SerializeToString())
        if settings is not None:
            with open(os.path.join(saved, SETTINGS_FILE), "w", encoding="utf-8") as f:
                json.dump(search_settings(settings), f, indent=2, sort_keys=True)
        if os.path.exists(final_dir):
            shutil.rmtree(final_dir)
        os.replace(saved, final_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final_dir
