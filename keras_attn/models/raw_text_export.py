"""SavedModels with raw-text signatures for the document models (HAN classifier, cloze reader).

The translators' exporter (`keras_attn.serving.export`) wraps a search; a classifier or a
reader answers in one pass, so its signatures are plain functions: strings in, the model's
answer and attention out. They are written by the translators' writer,
`keras_attn.serving.writer.write_savedmodel`: the version and backend checks, the model's
variables tracked the way a TF1 `Session` restores them (TensorFlow Serving's way), only ops
stock TF Serving links (`ops_check.disallowed_ops`), the version directory appearing
atomically, and `assets.extra/tf_serving_warmup_requests` with a warm-up request per signature.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any


def write_savedmodel(
    model: Any,
    functions: Mapping[str, Any],
    export_dir: str | os.PathLike,
    version: int = 1,
    warmup: Mapping[str, Mapping[str, Any]] | None = None,
    assets: Sequence[str] = (),
    resources: Sequence[Any] = (),
    **options: Any,
) -> str:
    """Write `export_dir/<version>/` with `functions` (`{signature name: concrete function}`).

    Args:
        model: the Keras model whose variables the functions read.
        functions: concrete `tf.function`s whose input names are the signature's input aliases.
        warmup: `{signature name: {alias: numpy value}}`, one warm-up request each.
        assets: paths of files to keep next to the graph (vocabularies), as SavedModel assets.
        resources: what else the functions capture and the SavedModel must track (lookup tables).
        **options: `model_name`, `overwrite`, as for `keras_attn.serving.writer.write_savedmodel`.
    Returns the version directory.
    """
    from keras_attn.serving.writer import tf_variables
    from keras_attn.serving.writer import write_savedmodel as write

    return write(
        functions,
        export_dir,
        version=version,
        track=tf_variables(model) + list(resources),
        assets=assets,
        warmup=list((warmup or {}).items()),
        **options,
    )
