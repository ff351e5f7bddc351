"""Write a model's serving signatures as a TensorFlow Serving SavedModel (docs/serving.md).

`export_text_model(model, tokenizer, "export/models/dates")` writes `export/models/dates/1/`:

    saved_model.pb, variables/         the graph and the model's weights
    assets/                            the tokenizer files (vocabulary / SentencePiece model)
    assets.extra/tf_serving_warmup_requests
                                       one PredictionLog (a Predict request) per signature

`export_image_model(model, tokenizer, export_dir, image_shape=(H, W, C))` does the same for a
captioner (`images` float32 `[B, H, W, C]` in place of `inputs`). Both take their settings as one
`ServingSettings` (`settings=`), or as its fields by keyword (`beam_size=4, max_length=40`).

Both write through the one writer of every export, `keras_attn.serving.writer.write_savedmodel`
(also used by the document models' raw-text exports): the version and backend checks, the op
allow-list check, the SavedModel with its assets, the warm-up records, the rename into place. The signatures themselves (what each computes,
their run-time checks) are in `keras_attn.serving.signatures`, their inputs and request parameters in
`keras_attn.serving.specs`.

What a model must provide (the only things the exporter knows about it):

    model.encode(source_ids [B, S] int32) -> dict with "source_mask" [B, S] bool (and anything else)
    model.initial_decode_state(encoder_outputs, max_length) -> nest of tensors with batch B
    model.decode_step(tokens [N] int32, state, step) -> (logits [N, V], state, attention [N, S] or None)

The SavedModel loads with `tensorflow` and `tensorflow_text` alone: no `keras_attn`, no
custom objects.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_attn import _checks
from keras_attn.decoding import check_model
from keras_attn.serving.settings import ServingSettings
from keras_attn.serving.signatures import ServingSignatures, position_limit
from keras_attn.serving.specs import TEXT_ARGUMENTS, TEXT_INPUT, XLA_SUFFIX
from keras_attn.serving.writer import (  # noqa: F401
    WARMUP_RELPATH,
    WarmupRequest,
    check_backend,
    tf_variables,
    write_savedmodel,
)

DEFAULT_WARMUP_INPUTS = ("hello world",)


def _check_tokenizer(name, tokenizer):
    for attr in ("tokenize", "detokenize", "start_id", "end_id", "pad_id", "save"):
        if not hasattr(tokenizer, attr):
            raise ValueError(
                f"`{name}` must be a keras_attn.text tokenizer (tokenize, detokenize, save, "
                f"start/end/pad ids). Received: {name}={tokenizer!r} without `{attr}`"
            )


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


# ---- warm-up requests of the search signatures ---------------------------------------------


def warmup_requests(signatures: ServingSignatures, warmup_inputs: Any) -> list[WarmupRequest]:
    """One request per signature (per bucket for the XLA ones): `warmup_inputs` (strings, or
    a numpy array of images) with every request parameter at its warm-up value
    (`signatures.request_params`)."""
    if isinstance(warmup_inputs, np.ndarray):
        texts = warmup_inputs
    else:
        texts = np.array(
            [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in warmup_inputs],
            dtype=object,
        )
    xla_batches = _xla_warmup_batches(texts, signatures)
    requests = []
    for name, params in signatures.request_params.items():
        # An XLA signature compiles once per shape: one request per (batch, source length)
        # bucket, so the server has compiled them all before it answers (docs/serving.md, "XLA").
        for batch in xla_batches if name.endswith(XLA_SUFFIX) else [texts]:
            inputs = {signatures.input_spec.name: batch}
            if name.removesuffix(XLA_SUFFIX) in TEXT_ARGUMENTS:
                inputs.update(_constrained_warmup(batch))
            inputs.update({alias: np.asarray(value, dtype) for alias, dtype, value in params})
            requests.append((name, inputs))
    for unit in signatures.behaviours:  # the signatures the behaviours build themselves
        requests.extend(unit.warmup(signatures, texts))
    return requests


def _constrained_warmup(texts):
    """The string inputs of a warm-up request to the constrained signature: per text, no
    prefix and one phrase (the text's first word), so the constraint path is compiled."""
    words = [(bytes(t).split() or [b""])[0] for t in texts.tolist()]
    return {
        "prefix": np.array([b""] * len(words), dtype=object),
        "constraints": np.array([[w] for w in words], dtype=object).reshape(len(words), 1),
    }


def _token_count(signatures, text):
    """Source ids the signatures make of one text (markers included, after the cut)."""
    return int(signatures.source_ids(tf.constant([text])).shape[1])


def _text_of_length(signatures, text, base, low, high):
    """`text` cut or grown (with bytes of `base`) until its ids fall in `(low, high]`."""
    count = _token_count(signatures, text)
    while count > high and len(text) > 1:  # more ids than bytes (rare)
        text = text[:-1]
        count = _token_count(signatures, text)
    # A byte adds at most one id: growing by the ids missing never passes `low + 1`.
    while count <= low and len(text) < 8 * high + len(base):
        for _ in range(low + 1 - count):
            text = text + base[len(text) % len(base) :][:1]
        count = _token_count(signatures, text)
    return text


def _xla_warmup_batches(warmup, signatures):
    """The warm-up inputs of the XLA signatures: for every batch bucket, one batch per
    source-length bucket (text: the warm-up texts repeated until their ids fall in that bucket;
    images: the first warm-up image), so that every bucketed shape is compiled once."""
    settings = signatures.settings
    if not settings.xla:
        return []
    if signatures.source_tokenizer is None:
        rows = [warmup[:1]]
    else:
        base = b" ".join(warmup) or b"a"
        markers = int(settings.source_add_start) + int(settings.source_add_end)
        rows, low = [], 0
        for high in settings.xla_source_lengths:
            text = (warmup[0] or base)[: max(1, high - markers)]
            rows.append(np.array([_text_of_length(signatures, text, base, low, high)], object))
            low = high
    return [
        np.concatenate([row] * size, axis=0) for size in settings.xla_batch_sizes for row in rows
    ]


# ---- the exports ---------------------------------------------------------------------------


def build_settings(
    settings: ServingSettings | None, keywords: Mapping[str, Any], caller: str
) -> ServingSettings:
    """`settings` (or the defaults) with the keywords that name its fields put in.

    A keyword that is not a field is a `TypeError` listing the fields; a non-settings value in
    the settings slot (an old positional call, `export_text_model(m, t, d, 2)`) is a
    `ValueError` that says what to write."""
    fields = [f.name for f in dataclasses.fields(ServingSettings) if f.init]
    unknown = sorted(set(keywords) - set(fields))
    if unknown:
        raise TypeError(
            f"{caller}() got an unexpected keyword argument {unknown[0]!r}; its settings are "
            f"the fields of ServingSettings: {', '.join(fields)}"
        )
    if settings is None:
        return ServingSettings(**keywords)
    if not isinstance(settings, ServingSettings):
        hint = (
            f" (the version goes by keyword: {caller}(model, tokenizer, export_dir, "
            f"version={settings!r}))"
            if isinstance(settings, int) and not isinstance(settings, bool)
            else ""
        )
        raise ValueError(
            f"`settings` must be a ServingSettings or None{hint}. Received: settings={settings!r}"
        )
    return settings.replace(**keywords) if keywords else settings


def _check_warmup_inputs(warmup_inputs):
    if isinstance(warmup_inputs, (str, bytes)) or not list(warmup_inputs):
        raise ValueError(
            "`warmup_inputs` must be a non-empty list of strings. "
            f"Received: warmup_inputs={warmup_inputs!r}"
        )
    return list(warmup_inputs)


def export_text_model(
    model: Any,
    tokenizer: Any,
    export_dir: str | os.PathLike,
    settings: ServingSettings | None = None,
    *,
    version: int = 1,
    target_tokenizer: Any = None,
    warmup_inputs: Sequence[str] = DEFAULT_WARMUP_INPUTS,
    model_name: str | None = None,
    overwrite: bool = False,
    **setting_keywords: Any,
) -> str:
    """Write `export_dir/<version>/`, a SavedModel for TensorFlow Serving (see module docstring).

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step` (module docstring);
            built (its variables exist) and running on the TensorFlow backend.
        tokenizer: a `keras_attn.text` tokenizer for the source (and the target, unless
            `target_tokenizer` is given).
        export_dir: the model's base directory, the one TF Serving's `base_path` points at.
        settings: a `ServingSettings` (the search settings, limits and XLA buckets, checked
            when it is built); None: the defaults.
        version: positive integer, the version subdirectory.
        target_tokenizer: tokenizer of the output text; defaults to `tokenizer`.
        warmup_inputs: the strings of the warm-up requests (one request per signature).
        model_name: the `model_spec.name` of the warm-up requests (default: the base name of
            `export_dir`).
        overwrite: replace an existing version directory.
        **setting_keywords: fields of `ServingSettings` (`beam_size=4, max_length=40, xla=True`),
            put into `settings`. Defaults that depend on the model (`max_length`,
            `max_length_limit`, `max_input_length`) are lowered to its learned position table if
            it has one; a value given above the table is a `ValueError`.

    Returns:
        The path of the version directory. Assets: `tokenizer_vocab.txt` / `tokenizer.model`
        for one shared tokenizer, else `source_*` and `target_*`.
    """
    settings = build_settings(settings, setting_keywords, "export_text_model")
    _checks.check_int("version", version)
    check_backend()
    check_model(model)
    settings = settings.for_model(position_limit(model))
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    _check_tokenizer("tokenizer", tokenizer)
    _check_tokenizer("target_tokenizer", target_tokenizer)
    warmup_inputs = _check_warmup_inputs(warmup_inputs)
    signatures = ServingSignatures(
        model,
        settings,
        tf.TensorSpec([None], tf.string, name=TEXT_INPUT),
        tokenizer,
        target_tokenizer,
    )
    if target_tokenizer is tokenizer:
        tokenizers = {"tokenizer": tokenizer}
    else:
        tokenizers = {"source": tokenizer, "target": target_tokenizer}
    return _write_signatures(
        signatures, export_dir, tokenizers, warmup_inputs, version, model_name, overwrite
    )


def _write_signatures(signatures, export_dir, tokenizers, warmup, version, model_name, overwrite):
    """The search signatures through the one writer, the tokenizer files as assets."""
    with tempfile.TemporaryDirectory() as tmp:
        assets = [_tokenizer_asset(t, tmp, stem) for stem, t in tokenizers.items()]
        return write_savedmodel(
            signatures.functions(),
            export_dir,
            version=version,
            track=tf_variables(signatures.model) + list(tokenizers.values()) + signatures.tracked(),
            assets=assets,
            warmup=warmup_requests(signatures, warmup),
            model_name=model_name,
            overwrite=overwrite,
            settings=signatures.settings,
        )


def _check_image_shape(image_shape):
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
    return image_shape


def _check_warmup_images(warmup_images, image_shape):
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
    return warmup_images


def export_image_model(
    model: Any,
    tokenizer: Any,
    export_dir: str | os.PathLike,
    image_shape: Sequence[int | None],
    settings: ServingSettings | None = None,
    *,
    version: int = 1,
    warmup_images: Any = None,
    model_name: str | None = None,
    overwrite: bool = False,
    **setting_keywords: Any,
) -> str:
    """Like `export_text_model` for a captioner: the input is `images` float32 `[B, H, W, C]`.

    The signatures are those of text models with `images` in place of `inputs` (and `S` the
    number of image positions the model attends over). `model.encode(images)` gets the
    float32 images as sent; `tokenizer` detokenizes the captions.

    Args:
        image_shape: `(H, W, C)`; a dimension may be None (any size).
        settings, **setting_keywords: as for `export_text_model`, without the text-only fields
            (`max_input_length`, `source_add_start`, `source_add_end`, `xla_source_lengths`);
            images are padded along the batch only under XLA, and an image shape with None
            dimensions compiles once per image size.
        warmup_images: float32 array `[n, H, W, C]` for the warm-up requests (default: one
            zero image, size 32 for unknown dimensions).
        Others: as for `export_text_model`.
    """
    setting_keywords["text_input"] = False
    settings = build_settings(settings, setting_keywords, "export_image_model")
    _checks.check_int("version", version)
    check_backend()
    check_model(model)
    settings = settings.for_model(position_limit(model))
    _check_tokenizer("tokenizer", tokenizer)
    image_shape = _check_image_shape(image_shape)
    warmup_images = _check_warmup_images(warmup_images, image_shape)
    signatures = ServingSignatures(
        model,
        settings,
        tf.TensorSpec((None,) + image_shape, tf.float32, name="images"),
        None,
        tokenizer,
    )
    return _write_signatures(
        signatures,
        export_dir,
        {"tokenizer": tokenizer},
        warmup_images,
        version,
        model_name,
        overwrite,
    )
