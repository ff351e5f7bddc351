"""Run an exported SavedModel the way `tensorflow_model_server` does, in a fresh process.

A public tool (docs/serving.md, "Check an export without a server"; `keras-attn check` runs
it): where the server is not installed (a laptop, CI), it shows whether an export would load
and answer in the server, before it is deployed. It reproduces what the server does with a
SavedModel, using only `tensorflow` and `tensorflow_text` (plus the `tensorflow_serving.apis`
protos to read the warm-up file):

1. load the MetaGraph tagged `serve` into a `tf.compat.v1.Session`
   (`tf.compat.v1.saved_model.loader.load`: variables restored, assets fed, init op run);
2. for a Predict request, check it like the server (every signature input given, no unknown
   input, dtypes as in the SignatureDef, `output_filter` names known), convert the inputs
   through `TensorProto` and `session.run` the SignatureDef's output tensor names fed by its
   input tensor names;
3. read `assets.extra/tf_serving_warmup_requests` (a TFRecord of `PredictionLog`) and replay each
   `predict_log.request` the same way, as the server does before it marks a model available.

The child process is this very file run as a script (`python harness.py IN OUT`), so it never
imports `keras_attn` or `keras_attn`'s dependencies itself: a SavedModel that needs
our Python code to load fails here as it would in the server. The parent side
(`run_server_way`) pickles the requests to a temporary file and reads the results back.

    results = run_server_way(
        "export/models/dates/1",
        [ServingRequest("beam_search", {"inputs": np.array([b"3 May 1999"], object),
                                        "beam_size": np.int32(4), "max_length": np.int32(20),
                                        "length_penalty": np.float32(0.6),
                                        "coverage_penalty": np.float32(0.0)})],
        replay_warmup=True,
    )
    results.responses[0].outputs["outputs"]   # numpy array of bytes, [1, 4]

It checks an export; it is not a server (no network, no batching, one process per call).
The serving tests use it for every served request.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
SERVE_TAG = "serve"
DEFAULT_SIGNATURE = "serving_default"


@dataclasses.dataclass
class ServingRequest:
    """One Predict request: a signature name, its inputs by alias, an optional output filter."""

    signature_name: str = DEFAULT_SIGNATURE
    inputs: dict = dataclasses.field(default_factory=dict)
    output_filter: tuple = ()


@dataclasses.dataclass
class ServingResponse:
    """The answer to one request: `outputs` by alias, or `error_type`/`error_message`."""

    signature_name: str
    outputs: dict | None = None
    error_type: str | None = None
    error_message: str | None = None

    @property
    def ok(self):
        return self.error_type is None


@dataclasses.dataclass
class ServerWayResult:
    """What the child process reports back."""

    signatures: dict  # name -> {"inputs": {alias: (tensor_name, dtype, shape)}, "outputs": ...}
    responses: list  # ServingResponse per request, in order
    warmup: list  # ServingResponse per warm-up record, in order (empty unless replay_warmup)
    warmup_requests: list  # the ServingRequest read from the warm-up file
    modules: list  # top-level module names imported by the child process


class ServerWayError(RuntimeError):
    """The child process died (could not load the SavedModel, crashed, timed out)."""


def run_server_way(export_dir, requests=(), replay_warmup=False, timeout=300):
    """Load `export_dir` in a fresh process like tensorflow_model_server and run `requests`.

    Args:
        export_dir: a SavedModel directory (`EXPORT_DIR/<version>`).
        requests: `ServingRequest`s (or `(signature_name, inputs)` pairs); inputs are numpy
            arrays or scalars (strings as `bytes`/object arrays).
        replay_warmup: also read `assets.extra/tf_serving_warmup_requests` and replay it.
        timeout: seconds before the child process is killed.

    Returns:
        A `ServerWayResult`. Per-request errors (for example `InvalidArgumentError` from an
        assertion in the graph) come back as responses with `error_type` set; a failure to
        load the model raises `ServerWayError`.
    """
    export_dir, normalized = _job(export_dir, requests)
    with tempfile.TemporaryDirectory(prefix="keras_attn_server_way_") as tmp:
        in_path = os.path.join(tmp, "requests.pkl")
        out_path = os.path.join(tmp, "responses.pkl")
        with open(in_path, "wb") as f:
            pickle.dump(
                {
                    "export_dir": os.path.abspath(export_dir),
                    "requests": normalized,
                    "replay_warmup": replay_warmup,
                },
                f,
            )
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # Run this file as a script, from a neutral directory: the child must not find keras_attn.
        env.pop("PYTHONPATH", None)
        try:
            proc = subprocess.run(
                [sys.executable, "-I", os.path.abspath(__file__), in_path, out_path],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            raise ServerWayError(f"The server-way process timed out after {timeout} s.") from e
        if proc.returncode != 0 or not os.path.exists(out_path):
            raise ServerWayError(
                f"The server-way process failed (exit code {proc.returncode}) on {export_dir!r}:\n"
                f"{proc.stderr[-4000:]}"
            )
        with open(out_path, "rb") as f:
            raw = pickle.load(f)
    return _result(raw)


def run_in_process(export_dir, requests=(), replay_warmup=False):
    """`run_server_way` in this process: the same loader (a fresh `tf.Graph` and session) and
    the same answers, without the cost of starting TensorFlow again. It cannot show which
    modules the served graph needs (`modules` lists this process's); use `run_server_way` for
    that."""
    export_dir, normalized = _job(export_dir, requests)
    return _result(
        _serve(
            {
                "export_dir": os.path.abspath(export_dir),
                "requests": normalized,
                "replay_warmup": replay_warmup,
            }
        )
    )


@dataclasses.dataclass
class WarmupRecord:
    """One record of the warm-up file: its `PredictionLog` kind and, for a Predict log, the
    model name and the request (inputs as numpy arrays)."""

    kind: str
    model_name: str = ""
    request: ServingRequest | None = None


def read_warmup_records(export_dir, missing_ok=False):
    """Every record of `export_dir`'s `assets.extra/tf_serving_warmup_requests`, in order, as
    `WarmupRecord`s (the one reader of that file: the harness's replay, `keras-attn inspect` and
    `translate`'s default request parameters use it). No file: `FileNotFoundError`, or `[]` with `missing_ok`.
    Only `tensorflow` and the `tensorflow_serving.apis` protos are imported (the child process
    reads the file with it too). Reads eagerly (`tf.data`): call it outside a graph context."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(os.fspath(export_dir), WARMUP_FILE)
    if not os.path.exists(path):
        if missing_ok:
            return []
        raise FileNotFoundError(f"No warm-up file at {path}")
    records = []
    for data in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(data)
        kind = log.WhichOneof("log_type")
        if kind != "predict_log":
            records.append(WarmupRecord(kind))
            continue
        request = log.predict_log.request
        records.append(
            WarmupRecord(
                kind,
                request.model_spec.name,
                ServingRequest(
                    request.model_spec.signature_name or DEFAULT_SIGNATURE,
                    {alias: tf.make_ndarray(proto) for alias, proto in request.inputs.items()},
                    tuple(request.output_filter),
                ),
            )
        )
    return records


def read_warmup_requests(export_dir):
    """The requests of `export_dir`'s warm-up file, as `ServingRequest`s of numpy arrays,
    without running them. A record other than a Predict log is a `ValueError` (the server
    replays Predict logs; this harness replays nothing else)."""
    requests = []
    for record in read_warmup_records(export_dir):
        if record.request is None:
            raise ValueError(
                f"Unsupported warm-up record kind {record.kind!r} (only predict_log is replayed)"
            )
        requests.append(record.request)
    return requests


def _job(export_dir, requests):
    export_dir = os.fspath(export_dir)
    if not os.path.isdir(export_dir):
        raise ValueError(
            f"`export_dir` must be a SavedModel directory. Received: export_dir={export_dir!r}"
        )
    normalized = []
    for request in requests:
        if not isinstance(request, ServingRequest):
            signature_name, inputs = request
            request = ServingRequest(signature_name, dict(inputs))
        normalized.append(
            {
                "signature_name": request.signature_name,
                "inputs": dict(request.inputs),
                "output_filter": list(request.output_filter),
            }
        )
    return export_dir, normalized


def _result(raw):
    def response(d):
        return ServingResponse(**d)

    return ServerWayResult(
        signatures=raw["signatures"],
        responses=[response(d) for d in raw["responses"]],
        warmup=[response(d) for d in raw["warmup"]],
        warmup_requests=[ServingRequest(**d) for d in raw["warmup_requests"]],
        modules=raw["modules"],
    )


# --------------------------------------------------------------------------------------------
# The child process: tensorflow, tensorflow_text and the tensorflow_serving protos only.
# --------------------------------------------------------------------------------------------


class _RequestError(Exception):
    """A request the server would reject before running anything (its INVALID_ARGUMENT)."""


def _signature_table(meta_graph):
    import tensorflow as tf

    table = {}
    for name, sig in meta_graph.signature_def.items():
        if name.startswith("__"):  # __saved_model_init_op: an init op, not a serving signature
            continue
        entry = {"method_name": sig.method_name, "inputs": {}, "outputs": {}}
        for kind in ("inputs", "outputs"):
            for alias, info in getattr(sig, kind).items():
                shape = None
                if not info.tensor_shape.unknown_rank:
                    shape = tuple(d.size if d.size >= 0 else None for d in info.tensor_shape.dim)
                entry[kind][alias] = (info.name, tf.dtypes.as_dtype(info.dtype).name, shape)
        table[name] = entry
    return table


def _run_request(sess, meta_graph, request):
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2

    name = request["signature_name"] or DEFAULT_SIGNATURE
    if name not in meta_graph.signature_def:
        raise _RequestError(f'Serving signature name: "{name}" not found in signature def')
    sig = meta_graph.signature_def[name]
    given = dict(request["inputs"])
    if set(given) != set(sig.inputs):
        raise _RequestError(
            f"input size does not match signature: {len(given)}!={len(sig.inputs)} "
            f"len({{{','.join(sorted(given))}}}) != len({{{','.join(sorted(sig.inputs))}}})"
        )
    feed = {}
    for alias, value in given.items():
        info = sig.inputs[alias]
        expected = tf.dtypes.as_dtype(info.dtype)
        # The server receives TensorProtos: go through one, as a client would send it.
        proto = value if isinstance(value, tensor_pb2.TensorProto) else tf.make_tensor_proto(value)
        if tf.dtypes.as_dtype(proto.dtype) != expected:
            raise _RequestError(
                f"Expects arg[{alias}] to be {expected.name} but "
                f"{tf.dtypes.as_dtype(proto.dtype).name} is provided"
            )
        feed[info.name] = tf.make_ndarray(proto)
    wanted = list(request.get("output_filter") or []) or sorted(sig.outputs)
    for alias in wanted:
        if alias not in sig.outputs:
            raise _RequestError(f"output tensor alias not found in signature: {alias}")
    values = _session_run(sess, [sig.outputs[alias].name for alias in wanted], feed)
    values = dict(zip(wanted, values))
    # The server answers with TensorProtos: go back through one too.
    return {
        alias: tf.make_ndarray(tf.make_tensor_proto(np.asarray(v))) for alias, v in values.items()
    }


def _session_run(sess, fetch_names, feed):
    """`session.run` as the server's C++ code calls it: the fed arrays go in as they are.

    Python's `Session.run` refuses a value whose shape does not match the placeholder's static
    shape before anything runs; the server does no such check, so a `[1, 1]` string tensor fed
    to an `inputs [?]` signature reaches the graph. Feeding through the session's C API
    wrapper keeps the server's behaviour (the graph must check what it is given)."""
    import numpy as np

    graph = sess.graph
    feeds = {
        graph.get_tensor_by_name(name)._as_tf_output(): np.asarray(value)
        for name, value in feed.items()
    }
    fetches = [graph.get_tensor_by_name(name)._as_tf_output() for name in fetch_names]
    sess._extend_graph()
    return sess._call_tf_sessionrun(None, feeds, fetches, [], None)


def _answer(sess, meta_graph, request):
    import tensorflow as tf

    name = request["signature_name"] or DEFAULT_SIGNATURE
    try:
        return {"signature_name": name, "outputs": _run_request(sess, meta_graph, request)}
    except _RequestError as e:
        return {
            "signature_name": name,
            "error_type": "InvalidArgumentError",
            "error_message": str(e),
        }
    except tf.errors.OpError as e:
        return {"signature_name": name, "error_type": type(e).__name__, "error_message": e.message}


def _child_main(in_path, out_path):
    with open(in_path, "rb") as f:
        job = pickle.load(f)
    result = _serve(job)
    with open(out_path, "wb") as f:
        pickle.dump(result, f)


def _load_serve_graph(sess, export_dir):
    """The MetaGraph tagged `serve`, loaded into `sess` by TensorFlow's TF1 SavedModel loader:
    the Python twin of the C++ loader TensorFlow Serving runs (variables restored, assets fed,
    init op run). `tf.saved_model.load`, which TensorFlow's deprecation notice on this loader
    points to, is the TF2 object loader: not what the server runs, so not what this harness
    checks. The notice says nothing about the export and is kept off the log."""
    import tensorflow as tf

    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        return tf.compat.v1.saved_model.loader.load(sess, [SERVE_TAG], export_dir)
    finally:
        logger.setLevel(level)


def _serve(job):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the TF Text ops, as the server links them)

    export_dir = job["export_dir"]
    # Read eagerly, before the session's graph becomes the default one.
    replayed = read_warmup_requests(export_dir) if job["replay_warmup"] else []
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        meta_graph = _load_serve_graph(sess, export_dir)
        responses = [_answer(sess, meta_graph, r) for r in job["requests"]]
        warmup, warmup_requests = [], []
        for r in replayed:
            request = dataclasses.asdict(r)
            warmup.append(_answer(sess, meta_graph, request))
            warmup_requests.append(request)
        result = {
            "signatures": _signature_table(meta_graph),
            "responses": responses,
            "warmup": warmup,
            "warmup_requests": warmup_requests,
            "modules": sorted({m.split(".")[0] for m in sys.modules}),
        }
    return result


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
