"""The model's two halves as a LiteRT (`.tflite`) file, and the client that runs the search loop
over it on a device (docs/serving.md, "On device").

    from keras_attn.serving.litert import LiteRTModel, export_litert
    from keras_attn.serving.streaming import stream

    export_litert(model, "dates.tflite", tokenizer=tokenizer, max_length=20)
    export_litert(model, "dates_int8.tflite", "dynamic_int8", tokenizer=tokenizer, max_length=20)
    device = LiteRTModel("dates.tflite")
    for event in stream(device, ["3 May 1999"], "beam", beam_size=4, max_length=20):
        print(event.pieces[0], end="")

`export_litert` converts the step signatures (`keras_attn.serving.steps`) with TensorFlow's
`tf.lite.TFLiteConverter` (TFLite builtin ops only): `encode` takes `source_ids` int32 `[1, S]`
(one input; the device tokenizes) and answers the decoder's state with `max_length`
self-attention slots, `decode_step` takes `tokens` `[N]`, `step` and the state and answers
`logits` `[N, V]`, `attention` and the state leaves it changed, with the same names as the
SavedModel's step signatures. Beside the `.tflite` file go the tokenizers' files (the
SentencePiece model, or the character vocabulary) and `<name>.json`, what a client needs to
know (the ids of the reserved tokens, `max_length`, the source settings). `quantize=
"dynamic_int8"` stores the weights in int8 (dynamic-range quantization: activations stay
float32).

`LiteRTModel(path)` runs the file with the LiteRT interpreter (`ai_edge_litert` when installed,
else `tf.lite.Interpreter`), tokenizing with the `sentencepiece` package or the vocabulary (no
TensorFlow Text); it has the step client's methods (`tokenize` too, for the text
constraints), so `keras_attn.serving.streaming.stream` and `search` run over it as over a
server. The `.tflite` `encode` answers the state only: `export_litert` refuses the settings
that act around the model in the SavedModel's graph (`keep_placeholders`, `word_rules`,
`copy_source`), naming them; what the model itself does in `decode_step` (such as the dates
model's grammar, `keras_attn.data.date_grammar.ValidDates`) is in the file. `decode_step`
checks the state it is handed before the interpreter runs (the SavedModel's checks, a
`ValueError` naming the input; `<name>.json` holds the state's layout).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from keras_attn.serving.steps import (
    IDS,
    SOURCE_IDS,
    SPELLED,
    STATE_PREFIX,
    StateLeaf,
    StepSignatures,
    check_state_request,
)

QUANTIZATIONS = (None, "dynamic_int8")
RESERVED = ("<pad>", "<s>", "</s>", "<unk>")


def _check_quantize(quantize):
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"`quantize` must be one of {QUANTIZATIONS}. Received: quantize={quantize!r}"
        )
    return quantize


# The settings that act in the SavedModel's graph around the model (its `encode` answers what
# they read): a `.tflite` file holds the model's two halves only, so they cannot reach it.
GRAPH_ONLY_SETTINGS = ("keep_placeholders", "word_rules", "copy_source")


def check_device_settings(settings):
    """`settings` (a `ServingSettings`), refused when it turns on what a `.tflite` file cannot
    carry (`GRAPH_ONLY_SETTINGS`): its n-best would differ from the SavedModel's. The error
    names each such setting."""
    on = [name for name in GRAPH_ONLY_SETTINGS if getattr(settings, name)]
    if on:
        raise ValueError(
            "A .tflite file holds the model's two halves only: "
            f"{', '.join(on)} act in the SavedModel's graph and cannot reach a device (its "
            "n-best would differ from the SavedModel's); export for the device without them. "
            f"Received: {', '.join(f'{name}=True' for name in on)}"
        )
    return settings


def _tokenizer_kind(tokenizer):
    if hasattr(tokenizer, "model_proto"):
        return "sentencepiece"
    if hasattr(tokenizer, "characters"):
        return "characters"
    raise ValueError(
        "`tokenizer` must be a keras_attn.text SentencePieceTokenizer or CharTokenizer (the "
        f"kinds a device client can tokenize without TensorFlow). Received: tokenizer={tokenizer!r}"
    )


def _save_tokenizer(tokenizer, directory, stem):
    """The tokenizer's file beside the `.tflite` file: `(file name, kind)`."""
    kind = _tokenizer_kind(tokenizer)
    name = stem + (".model" if kind == "sentencepiece" else "_vocab.txt")
    if kind == "sentencepiece":
        with open(os.path.join(directory, name), "wb") as f:
            f.write(tokenizer.model_proto)
    else:
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write("".join(piece + "\n" for piece in tokenizer.vocabulary))
    return name, kind


def export_litert(
    model: Any,
    path: str | os.PathLike,
    quantize: str | None = None,
    *,
    tokenizer: Any,
    target_tokenizer: Any = None,
    settings: Any = None,
    **setting_keywords: Any,
) -> str:
    """Write `path` (a `.tflite` file with `encode` and `decode_step`), the tokenizer files and
    `<stem>.json` beside it (module docstring); returns `path`.

    Args:
        model: implements `encode`, `initial_decode_state`, `decode_step` (as for
            `export_text_model`), built, on the TensorFlow backend.
        path: the `.tflite` file to write.
        quantize: None (float32 weights) or `"dynamic_int8"` (int8 weights).
        tokenizer: the source tokenizer (and the target's, unless `target_tokenizer`): a
            `SentencePieceTokenizer` or a `CharTokenizer`.
        settings, **setting_keywords: a `ServingSettings` and its fields, as for
            `export_text_model`: `max_length` is the number of self-attention slots of the
            state (the longest answer), `max_input_length` and the source markers how the
            device tokenizes, `eos_penalty` the searches' end-of-sentence penalty.
    """
    import tensorflow as tf

    from keras_attn.decoding import check_model
    from keras_attn.serving.export import build_settings, check_backend
    from keras_attn.serving.signatures import position_limit

    quantize = _check_quantize(quantize)
    check_backend()
    check_model(model)
    settings = build_settings(settings, setting_keywords, "export_litert")
    settings = check_device_settings(settings.for_model(position_limit(model)))
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    path, directory, stem = _tflite_path(path)
    steps = StepSignatures(
        model,
        settings,
        tf.TensorSpec([None], tf.string, name="inputs"),
        tokenizer,
        target_tokenizer,
    )
    functions = steps.lite_functions(settings.max_length)
    state_specs = functions["decode_step"].structured_input_signature[0][2:]
    layout = steps.state_layout([(spec.name, spec) for spec in state_specs])
    with open(path, "wb") as f:
        f.write(_converted(model, functions, quantize))
    manifest = {
        "model": os.path.basename(path),
        **_manifest(settings, tokenizer, target_tokenizer, directory, stem),
        "quantize": quantize,
        "state": [leaf.to_json() for leaf in layout],
    }
    with open(os.path.join(directory, stem + ".json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return path


def _tflite_path(path):
    """`(path, directory, stem)` of the `.tflite` file to write (its directory made); a path
    that names no `.tflite` file is a `ValueError`."""
    path = os.fspath(path)
    if not path.endswith(".tflite"):
        raise ValueError(f"`path` must name a .tflite file. Received: path={path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    return path, directory, os.path.basename(path)[: -len(".tflite")]


def _converted(model, functions, quantize):
    """The `.tflite` bytes of the step functions `encode` and `decode_step`, converted (TFLite
    builtin ops only; int8 weights with `quantize="dynamic_int8"`) from a SavedModel that holds
    them beside the model's variables."""
    import tensorflow as tf

    from keras_attn.serving.writer import tf_variables

    with tempfile.TemporaryDirectory() as tmp:
        root = tf.Module()
        root.tracked = tf_variables(model)
        root.step_functions = dict(functions)
        tf.saved_model.save(root, tmp, signatures=dict(functions))
        converter = tf.lite.TFLiteConverter.from_saved_model(
            tmp, signature_keys=["encode", "decode_step"]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize == "dynamic_int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        return converter.convert()


def _manifest(settings, tokenizer, target_tokenizer, directory, stem):
    """What a device client reads besides the file and its state's layout: how it tokenizes
    (the source settings, the tokenizer files, written beside the file here), the reserved ids
    and the searches' `eos_penalty`."""
    source_file, source_kind = _save_tokenizer(tokenizer, directory, stem + ".source")
    if target_tokenizer is tokenizer:
        target_file, target_kind = source_file, source_kind
    else:
        target_file, target_kind = _save_tokenizer(target_tokenizer, directory, stem + ".target")
    return {
        "max_length": settings.max_length,
        "max_input_length": settings.max_input_length,
        "source_add_start": settings.source_add_start,
        "source_add_end": settings.source_add_end,
        "eos_penalty": settings.eos_penalty,
        "pad_id": int(target_tokenizer.pad_id),
        "start_id": int(target_tokenizer.start_id),
        "end_id": int(target_tokenizer.end_id),
        "unk_id": int(target_tokenizer.unk_id),
        "source_tokenizer": {"file": source_file, "kind": source_kind},
        "target_tokenizer": {"file": target_file, "kind": target_kind},
    }


# ---- on the device ---------------------------------------------------------------------------


class DeviceTokenizer:
    """Tokenizes and detokenizes like the exported graph, without TensorFlow: SentencePiece
    through the `sentencepiece` package, a character vocabulary in Python (code points; a
    character outside it reads as the unknown id)."""

    def __init__(self, path, kind, unk_id=3):
        self.kind = kind
        self.unk_id = unk_id
        if kind == "sentencepiece":
            import sentencepiece

            self.processor = sentencepiece.SentencePieceProcessor(model_file=path)
            self.vocabulary = [
                self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())
            ]
        else:
            with open(path, encoding="utf-8") as f:
                self.vocabulary = f.read().split("\n")[:-1]
            self.index = {piece: i for i, piece in enumerate(self.vocabulary)}
            for i in range(len(RESERVED)):  # reserved pieces are not characters of the text
                self.index.pop(self.vocabulary[i], None)

    def tokenize(self, text):
        text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        if self.kind == "sentencepiece":
            return list(self.processor.encode(text))
        return [self.index.get(ch, self.unk_id) for ch in text]

    def detokenize(self, ids):
        """Ids of one text: reading stops at the end or pad id (2, 0); start ids are skipped."""
        content = []
        for i in ids:
            i = int(i)
            if i in (0, 2):
                break
            if i == 1:
                continue
            content.append(i if 0 <= i < len(self.vocabulary) else self.unk_id)
        if self.kind == "sentencepiece":
            return self.processor.decode(content)
        return "".join("\ufffd" if i == self.unk_id else self.vocabulary[i] for i in content)


def _interpreter(path):
    """The LiteRT interpreter: `ai_edge_litert` when installed, else TensorFlow's."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import warnings

        import tensorflow as tf

        with warnings.catch_warnings():  # its notice points to ai_edge_litert, tried first
            warnings.simplefilter("ignore")
            return tf.lite.Interpreter(model_path=path)
    return Interpreter(model_path=path)


class LiteRTModel:
    """A `.tflite` file written by `export_litert`, with the step client's methods
    (`encode(texts, max_length)`, `decode_step(request)`, `detokenize(ids)`), tokenizing on
    this side. `encode` runs one text at a time and pads the per-text states along the source
    axis (zeros, masked) into one batch.

    Args:
        path: the `.tflite` file; its `.json` and tokenizer files beside it.
    """

    def __init__(self, path):
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        stem = os.path.basename(path)[: -len(".tflite")]
        with open(os.path.join(directory, stem + ".json"), encoding="utf-8") as f:
            self.manifest = json.load(f)
        m = self.manifest
        self.source_tokenizer = DeviceTokenizer(
            os.path.join(directory, m["source_tokenizer"]["file"]),
            m["source_tokenizer"]["kind"],
            m["unk_id"],
        )
        self.target_tokenizer = DeviceTokenizer(
            os.path.join(directory, m["target_tokenizer"]["file"]),
            m["target_tokenizer"]["kind"],
            m["unk_id"],
        )
        self.interpreter = _interpreter(path)
        self._encode = self.interpreter.get_signature_runner("encode")
        self._decode_step = self.interpreter.get_signature_runner("decode_step")
        self.layout = tuple(StateLeaf.from_json(row) for row in m["state"])
        self.path = path

    @property
    def max_length(self):
        return self.manifest["max_length"]

    def source_ids(self, text):
        """One text's ids, as the exported graph tokenizes (markers, cut to
        `max_input_length`), at least one id."""
        m = self.manifest
        ids = self.source_tokenizer.tokenize(text)
        budget = m["max_input_length"] - int(m["source_add_start"]) - int(m["source_add_end"])
        ids = ids[:budget]
        ids = [m["start_id"]] * m["source_add_start"] + ids + [m["end_id"]] * m["source_add_end"]
        return ids or [m["pad_id"]]

    def encode(self, texts, max_length):
        if isinstance(texts, (str, bytes)):
            raise ValueError(
                f"`inputs` must be a list of strings, not a single string. Received: inputs={texts!r}"
            )
        if not 1 <= int(max_length) <= self.max_length:
            raise ValueError(
                f"`max_length` must be an integer in [1, {self.max_length}] (the state's "
                f"self-attention slots in {self.path}). Received: max_length={max_length!r}"
            )
        rows = [
            self._encode(**{SOURCE_IDS: np.array([self.source_ids(t)], np.int32)}) for t in texts
        ]
        out = {}
        for name in rows[0] if rows else []:
            values = [np.asarray(r[name]) for r in rows]
            shape = np.max([v.shape for v in values], axis=0)
            padded = [np.pad(v, [(0, s - d) for s, d in zip(shape, v.shape)]) for v in values]
            out[name] = np.concatenate(padded, axis=0)
        m = self.manifest
        out["start_tokens"] = np.full([len(texts)], m["start_id"], np.int32)
        out["end_token"] = np.int32(m["end_id"])
        out["eos_penalty"] = np.float32(m["eos_penalty"])
        if not rows:
            out["source_mask"] = np.zeros([0, 1], bool)
        return out

    def decode_step(self, request):
        """One step: `request` holds `tokens`, `step` and the state; checked first as the
        SavedModel's `decode_step` checks it (`keras_attn.serving.steps.check_state_request`:
        a `ValueError` naming the first wrong input; the interpreter itself checks nothing)."""
        state = {n: v for n, v in request.items() if n.startswith(STATE_PREFIX)}
        check_state_request(
            self.layout, request.get("tokens"), request.get("step"), state, self.max_length
        )
        inputs = {n: np.ascontiguousarray(v) for n, v in state.items()}
        inputs["tokens"] = np.asarray(request["tokens"], np.int32)
        inputs["step"] = np.asarray(request["step"], np.int32)
        return {k: np.array(v) for k, v in self._decode_step(**inputs).items()}

    def detokenize(self, ids):
        return [self.target_tokenizer.detokenize(row) for row in np.asarray(ids)]

    def tokenize(self, texts):
        """Strings `[B][C]` -> `{"ids": int32 [B, C, L] (-1 padded), "spelled": bool [B, C]}`:
        each text tokenized alone with the target tokenizer (the `sentencepiece` package or the
        vocabulary), as the SavedModel's `tokenize` signature does; `spelled` is False where a
        text holds the unknown id."""
        rows = [[self.target_tokenizer.tokenize(t) for t in row] for row in texts]
        count = max([len(row) for row in rows] + [0])
        width = max([len(ids) for row in rows for ids in row] + [0])
        out = np.full([len(rows), count, width], -1, np.int32)
        for b, row in enumerate(rows):
            for c, ids in enumerate(row):
                out[b, c, : len(ids)] = ids
        unk = self.manifest["unk_id"]
        return {IDS: out, SPELLED: ~np.any(out == unk, axis=-1)}
