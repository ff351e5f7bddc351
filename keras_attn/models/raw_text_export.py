"""SavedModels with raw-text signatures for the document models (HAN classifier, cloze reader).

The translators' exporter (`keras_attn.serving.export`) wraps a search; a classifier or a
reader answers in one pass, so its signatures are plain functions: strings in, the model's
answer and attention out. What they share with the translators' export, reused from there: the
model's variables are tracked the way a TF1 `Session` restores them (TensorFlow Serving's
way), the graph may hold only ops stock TF Serving links (`ops_check.disallowed_ops`), the
version directory appears atomically, and `assets.extra/tf_serving_warmup_requests` holds a
warm-up request per signature.
"""

from __future__ import annotations

import os
import shutil
import tempfile


def write_savedmodel(
    model,
    functions,
    export_dir,
    version=1,
    warmup=None,
    assets=(),
    resources=(),
    model_name=None,
    overwrite=False,
):
    """Write `export_dir/<version>/` with `functions` (`{signature name: concrete function}`).

    Args:
        model: the Keras model whose variables the functions read.
        functions: concrete `tf.function`s whose input names are the signature's input aliases.
        warmup: `{signature name: {alias: numpy value}}`, one warm-up request each.
        assets: paths of files to keep next to the graph (vocabularies), as SavedModel assets.
        resources: what else the functions capture and the SavedModel must track (lookup tables).
        overwrite: replace an existing version directory.
    Returns the version directory.
    """
    import tensorflow as tf

    from keras_attn._checks import check_int
    from keras_attn.serving import ops_check
    from keras_attn.serving.export import WARMUP_RELPATH, _tf_variables

    check_int("version", version)
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"Export needs the TensorFlow backend. Received: backend={keras.backend.backend()!r}"
        )
    export_dir = os.fspath(export_dir)
    final_dir = os.path.join(export_dir, str(version))
    if os.path.exists(final_dir) and not overwrite:
        raise ValueError(
            "The version directory already exists; pass overwrite=True or a new version. "
            f"Received: export_dir={export_dir!r}, version={version}"
        )
    for name, function in functions.items():
        bad = ops_check.disallowed_ops(function)
        if bad:
            raise ValueError(
                f"The `{name}` signature uses ops TensorFlow Serving does not have: {bad}."
            )
    model_name = model_name or os.path.basename(os.path.normpath(os.path.abspath(export_dir)))
    os.makedirs(export_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_dir)
    try:
        root = tf.Module()
        root.model_variables = _tf_variables(model)
        root.assets = [tf.saved_model.Asset(p) for p in assets]
        root.resources = list(resources)
        root.signature_functions = dict(functions)
        saved = os.path.join(staging, "model")
        tf.saved_model.save(root, saved, signatures=functions)
        if warmup:
            from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

            os.makedirs(os.path.join(saved, "assets.extra"), exist_ok=True)
            with tf.io.TFRecordWriter(os.path.join(saved, WARMUP_RELPATH)) as writer:
                for signature, inputs in warmup.items():
                    request = predict_pb2.PredictRequest(
                        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
                    )
                    for alias, value in inputs.items():
                        request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
                    log = prediction_log_pb2.PredictionLog(
                        predict_log=prediction_log_pb2.PredictLog(request=request)
                    )
                    writer.write(log.SerializeToString())
        if os.path.exists(final_dir):
            shutil.rmtree(final_dir)
        os.replace(saved, final_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final_dir
