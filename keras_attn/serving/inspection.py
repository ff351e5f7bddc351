"""What an exported SavedModel holds, read from its files: `inspect_export(export_dir)`.

No model code runs: the SavedModel proto gives the signatures (dtypes and shapes by alias) and
the ops of the graph (the TF Text ops it uses, the ops stock TensorFlow Serving lacks), the
directory its assets, and the warm-up file its requests. `keras-attn inspect` prints it.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from keras_attn.serving.client import resolve_version_dir, unreadable_message


def _shape(info):
    if info.tensor_shape.unknown_rank:
        return "<unknown>"
    return "[" + ", ".join("?" if d.size < 0 else str(d.size) for d in info.tensor_shape.dim) + "]"


def _summarize_value(array):
    if array.dtype == object:
        items = [
            v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)
            for v in array.reshape(-1)
        ]
        text = json.dumps(items[:3], ensure_ascii=False) + (" ..." if len(items) > 3 else "")
        return (
            f"{array.dtype.name if array.dtype != object else 'string'}{list(array.shape)} {text}"
        )
    return f"{array.dtype.name}{list(array.shape)} {array.tolist() if array.size <= 4 else '...'}"


def _meta_graph_report(meta_graph):
    """Tags, signatures (dtypes and shapes by alias) and ops of one MetaGraph."""
    from keras_attn.serving import ops_check

    signatures = {}
    for name, sig in sorted(meta_graph.signature_def.items()):
        if name.startswith("__"):
            continue
        signatures[name] = {
            kind: {
                alias: {"dtype": tf.dtypes.as_dtype(info.dtype).name, "shape": _shape(info)}
                for alias, info in sorted(getattr(sig, kind).items())
            }
            for kind in ("inputs", "outputs")
        }
    ops = ops_check.graph_ops(meta_graph)
    return {
        "tags": list(meta_graph.meta_info_def.tags),
        "signatures": signatures,
        "num_ops": len(ops),
        "tf_text_ops": sorted(ops & ops_check.TF_TEXT_SERVING_OPS),
        "disallowed_ops": ops_check.disallowed_ops(meta_graph),
    }


def _warmup_report(path):
    """One entry per warm-up record: its kind and, for a Predict log, what it asks."""
    from keras_attn.serving.harness import read_warmup_records

    entries = []
    for record in read_warmup_records(path, missing_ok=True):
        entry = {"kind": record.kind}
        if record.request is not None:
            entry["model_name"] = record.model_name
            entry["signature_name"] = record.request.signature_name
            entry["inputs"] = {
                alias: _summarize_value(value)
                for alias, value in sorted(record.request.inputs.items())
            }
        entries.append(entry)
    return entries


def inspect_export(export_dir):
    """A dict describing an exported SavedModel (no model code runs; only its protos are read)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = resolve_version_dir(export_dir)
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        content = f.read()
    try:
        saved.ParseFromString(content)
    except Exception as err:  # google.protobuf's DecodeError (its module differs by backend)
        raise ValueError(unreadable_message(path, err)) from None
    assets_dir = os.path.join(path, "assets")
    return {
        "path": path,
        "meta_graphs": [_meta_graph_report(meta_graph) for meta_graph in saved.meta_graphs],
        "assets": sorted(os.listdir(assets_dir)) if os.path.isdir(assets_dir) else [],
        "warmup": _warmup_report(path),
    }
