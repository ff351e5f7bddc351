"""Clients for a text model served by TensorFlow Serving (gRPC and REST).

Both clients talk to the signatures written by `keras_attn.serving.export` and share one
high-level interface:

    client = GrpcClient("localhost:8500", "dates")           # or RestClient("http://localhost:8501", "dates")
    client.translate(["3 May 1999"])                         # serving_default -> [(text, score)]
    client.beam_search(["3 May 1999"], beam_size=4)          # n-best lists, scores, log_probs, lengths
    client.beam_search([...], alignments=True)               # ... and the attention [B, K, T, S]
    client.greedy(["3 May 1999"])
    client.beam_search([...], min_length=3, no_repeat_ngram_size=2)   # beam_search_controls
    client.sample(["3 May 1999"], temperature=0.7, top_p=0.9, seed=1)  # sample
    client.predict("beam_search", {...})                     # any signature, raw numpy arrays
    SavedModelClient("export/models/dates").greedy([...])   # the same calls, no server

gRPC (`tensorflow-serving-api`): a `PredictRequest` through `PredictionServiceStub.Predict`,
with a per-call deadline (`timeout`) and `output_filter`, so the alignments tensor (the
largest output, `[B, K, T, S]`) is only computed into the response when asked for.

REST: `POST /v1/models/<name>[/versions/<v> | /labels/<l>]:predict`. The row form
(`{"instances": [...]}`) needs every input to have the batch dimension, so it serves
`serving_default` and `greedy`; the other signatures have scalar request parameters
(`beam_size`, ...) and need the columnar form (`{"inputs": {...}}`), which `predict` picks automatically. The REST API has no
output filter: the alignments always travel and are dropped unless asked for. Strings that are
not valid UTF-8 are sent as `{"b64": ...}`.

Errors: `ValueError` (a request parameter outside its documented range, e.g. `beam_size=0`, with
the Python API's message: checked against the served table before anything is sent),
`ServingUnavailableError` (nothing answers at the address), `ServingTimeoutError` (the deadline
passed), `ServingError` (the server answered with an error, e.g. `INVALID_ARGUMENT` for a
`beam_size` above the export's `beam_size_limit`; `.code` holds the status name).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import numpy as np

from keras_attn import _checks
from keras_attn.serving import specs
from keras_attn.serving.request import SearchRequest

DEFAULT_TIMEOUT = 30.0


class ServingError(RuntimeError):
    """The server answered with an error status."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class ServingUnavailableError(ServingError, ConnectionError):
    """No server answered at the given address."""


class ServingTimeoutError(ServingError, TimeoutError):
    """The request's deadline passed before the server answered."""


class MissingSignatureError(ServingError, ValueError):
    """The export has no signature of the requested name (an export made before it existed)."""


# TensorFlow Serving's answer, gRPC and REST alike, to a request naming no signature it has.
_NO_SIGNATURE = "not found in signature def"


def _serving_error(message, code=None):
    """The error for a server's error answer: `MissingSignatureError` where it names no
    such signature, `ServingError` otherwise."""
    cls = MissingSignatureError if _NO_SIGNATURE in message else ServingError
    return cls(message, code=code)


def _as_bytes_array(texts):
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            f"`texts` must be a list of strings, not a single string. Received: texts={texts!r}"
        )
    items = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
    return np.array(items, dtype=object).reshape([len(items)])


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _check_model_spec(model_name, version, version_label):
    """The served model's name, and at most one of a version and a version label."""
    if not model_name or not isinstance(model_name, str):
        raise ValueError(
            f"`model_name` must be a non-empty string. Received: model_name={model_name!r}"
        )
    if version is not None and version_label is not None:
        raise ValueError(
            "Pass `version` or `version_label`, not both. "
            f"Received: version={version!r}, version_label={version_label!r}"
        )


def _check_timeout(timeout):
    """Seconds, or None for no limit."""
    _checks.check_positive("timeout", timeout, allow_none=True)
    return timeout


class Closing:
    """A client that holds a connection or a loaded model: `close()` it, or use it as a context
    manager (`with GrpcClient(...) as client:`), which closes it on the way out."""

    def close(self):
        """Free what the client holds (nothing here)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _TextClient(Closing):
    """The signature-level helpers shared by the clients (subclasses define `predict`).

    A search call names a mode (`beam_search`, `greedy`, `sample`) and the request parameters it
    sets; the served table (`keras_attn.serving.specs`) picks the signature (the smallest of the
    mode's that takes every parameter given), checks each value against the Python API's range (the same
    `ValueError`, before anything is sent) and fills the others with their defaults."""

    def predict(self, signature_name, inputs, output_filter=None, timeout=None):
        raise NotImplementedError

    def translate(self, texts, timeout=None):
        """`serving_default`: `[(text, score), ...]`, one per input."""
        if not len(_as_bytes_array(texts)):
            return []
        out = self.predict(
            "serving_default", {specs.TEXT_INPUT: _as_bytes_array(texts)}, timeout=timeout
        )
        return [
            (_text(t), float(s)) for t, s in zip(out["outputs"].tolist(), out["scores"].tolist())
        ]

    def beam_search(
        self, texts, *, alignments=False, timeout=None, prefix=None, constraints=None, **params
    ):
        """`beam_search`: a dict with `outputs` (list of n-best lists of str), `scores`,
        `log_probs` float32 `[B, K]`, `lengths` int32 `[B, K]`, and `alignments` float32
        `[B, K, T, S]` only when `alignments=True`.

        `params`: `beam_size` (default 4), `max_length` (50), `length_penalty`,
        `coverage_penalty` (0), and the controls `min_length`, `no_repeat_ngram_size`,
        `repetition_penalty`: given any control, the request goes to `beam_search_controls`
        (the others at their neutral values 0, 0 and 1.0); without them to `beam_search`,
        which every export has. `prefix` (a str for every text, or one per text) and
        `constraints` (a list of phrases for every text, or one list per text) send it to
        `beam_search_constrained` (docs/serving.md); the result then also has
        `constraints_met` bool `[B, K]`."""
        request = SearchRequest.build("beam", params, prefix, constraints)
        return self.search(request, texts, alignments=alignments, timeout=timeout)

    def greedy(self, texts, *, alignments=False, timeout=None, **params):
        """`greedy`: a dict with `outputs` (list of str), `scores` `[B]`, and `alignments`
        `[B, T, S]` only when `alignments=True`.

        Given `max_length` or any control, the request goes to `greedy_controls` (`max_length`
        defaults to 50, the controls to 0, 0 and 1.0); without them to `greedy` (the export's
        `max_length`)."""
        request = SearchRequest.build("greedy", params)
        return self.search(request, texts, alignments=alignments, timeout=timeout)

    def sample(self, texts, *, alignments=False, timeout=None, **params):
        """`sample`: one sampled output per text, drawn from the temperature-scaled, top-k,
        top-p distribution (the same `seed` gives the same outputs). `params`: `temperature`
        (1.0), `top_k` (0), `top_p` (1.0), `seed` (0), `max_length` (50) and the controls.
        A dict as `greedy`'s."""
        request = SearchRequest.build("sample", params)
        return self.search(request, texts, alignments=alignments, timeout=timeout)

    def search(self, request, texts, *, alignments=False, timeout=None):
        """The search a `SearchRequest` asks for (`keras_attn.serving.request`), through the
        signature the served table routes it to.

        A request with a `prefix` (a str for every text, or one per text) or `constraints` (a
        list of phrases for every text, or one list per text) goes to
        `beam_search_constrained` (docs/serving.md); the result then also has
        `constraints_met` bool `[B, K]`."""
        if not isinstance(request, SearchRequest):
            raise ValueError(f"`request` must be a SearchRequest. Received: request={request!r}")
        signature = request.signature
        values = specs.as_arrays(request.values(signature))
        strings = {}
        if signature in specs.TEXT_ARGUMENTS:
            strings = _constraint_inputs(texts, request.prefix or "", request.constraints or [])
        beam = request.mode == "beam"
        beam_shape = (values["beam_size"].item(),) if beam else ()
        out = self._search(signature, texts, {**strings, **values}, alignments, timeout, beam_shape)
        if beam:
            result = {
                "outputs": [[_text(t) for t in row] for row in np.asarray(out["outputs"]).tolist()],
                "log_probs": np.asarray(out["log_probs"], np.float32),
                "lengths": np.asarray(out["lengths"], np.int32),
                "token_log_probs": np.asarray(out["token_log_probs"], np.float32),
            }
            if "constraints_met" in out:
                result["constraints_met"] = np.asarray(out["constraints_met"], bool)
        else:
            result = {"outputs": [_text(t) for t in np.asarray(out["outputs"]).tolist()]}
        result["scores"] = np.asarray(out["scores"], np.float32)
        if alignments:
            result["alignments"] = np.asarray(out["alignments"], np.float32)
        return result

    def _search(self, signature, texts, params, alignments, timeout, beam_shape):
        """Runs a search signature, or answers an empty batch without asking (REST cannot send
        one). `beam_shape`: `(K,)` for beam outputs, `()` for one output per text."""
        texts = _as_bytes_array(texts)
        if not len(texts):
            empty = (0,) + tuple(beam_shape)
            answer = {
                "outputs": np.zeros(empty, object),
                "scores": np.zeros(empty),
                "log_probs": np.zeros(empty),
                "lengths": np.zeros(empty),
                "alignments": np.zeros(empty + (0, 0)),
                "token_log_probs": np.zeros(empty + (0,)),
            }
            if "constraints_met" in specs.OUTPUTS[signature]:
                answer["constraints_met"] = np.zeros(empty, bool)
            return answer
        wanted = [n for n in specs.OUTPUTS[signature] if n != "alignments" or alignments]
        return self.predict(
            signature, {specs.TEXT_INPUT: texts, **params}, output_filter=wanted, timeout=timeout
        )


def _constraint_inputs(texts, prefix, constraints):
    """`{"prefix": bytes [B], "constraints": bytes [B, C]}` for the given ones (a str for every
    text or one per text; a list of phrases for every text or one list per text, rows padded
    with ''), `{}` when neither is given."""
    out = {}
    batch = len(_as_bytes_array(texts))
    if prefix is not None:
        rows = [prefix] * batch if isinstance(prefix, (str, bytes)) else list(prefix)
        if len(rows) != batch:
            raise ValueError(
                "`prefix` must be a string or one string per text. "
                f"Received: {len(rows)} prefixes for {batch} texts"
            )
        out["prefix"] = _as_bytes_array(rows)
    if constraints is not None:
        if isinstance(constraints, (str, bytes)):
            raise ValueError(
                "`constraints` must be a list of phrases (or one list per text). "
                f"Received: constraints={constraints!r}"
            )
        constraints = list(constraints)
        per_text = bool(constraints) and not isinstance(constraints[0], (str, bytes))
        rows = [list(r) for r in constraints] if per_text else [constraints] * batch
        if len(rows) != batch:
            raise ValueError(
                "`constraints` must be a list of phrases or one list per text. "
                f"Received: {len(rows)} lists for {batch} texts"
            )
        # At least one column ('' = no phrase): a REST row cannot carry an empty list.
        width = max([len(r) for r in rows] + [1])
        table = np.empty((batch, width), dtype=object)
        for i, row in enumerate(rows):
            table[i] = list(_as_bytes_array(row)) + [b""] * (width - len(row))
        out["constraints"] = table
    return out


def _tensor_proto(value):
    """A request input as a `TensorProto`: a NumPy array (or scalar) of numbers or booleans
    straight from its bytes in the machine's byte order (`tensor_content`, without
    `tf.make_tensor_proto`'s per-call checks: a streamed step sends a dozen such arrays),
    anything else through `tf.make_tensor_proto` (its own dtype inference for Python values
    and strings)."""
    import tensorflow as tf

    if not (isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf"):
        return tf.make_tensor_proto(value)
    from tensorflow.core.framework import tensor_pb2

    array = np.asarray(value)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    proto = tensor_pb2.TensorProto(
        dtype=tf.as_dtype(array.dtype).as_datatype_enum, tensor_content=array.tobytes()
    )
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


class GrpcClient(_TextClient):
    """TensorFlow Serving's gRPC `PredictionService` (default port 8500).

    Args:
        target: `"host:port"`.
        model_name: the served model's name (`--model_name` / `models.config`).
        version: optional model version to pin (int); `version_label` pins a label instead.
        timeout: default deadline per call, in seconds.
        max_message_bytes: largest response accepted (alignments can be large).
        channel: an existing `grpc.Channel` to use instead of opening one.
    """

    def __init__(
        self,
        target,
        model_name,
        version=None,
        version_label=None,
        timeout=DEFAULT_TIMEOUT,
        max_message_bytes=64 * 1024 * 1024,
        channel=None,
    ):
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        _check_model_spec(model_name, version, version_label)
        self.target = target
        self.model_name = model_name
        self.version = version
        self.version_label = version_label
        self.timeout = _check_timeout(timeout)
        self._own_channel = channel is None
        if channel is None:
            options = [
                ("grpc.max_receive_message_length", int(max_message_bytes)),
                ("grpc.max_send_message_length", int(max_message_bytes)),
            ]
            channel = grpc.insecure_channel(target, options=options)
        self._channel = channel
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

    def request(self, signature_name, inputs, output_filter=None):
        """The `PredictRequest` for a signature and a dict of numpy-convertible inputs."""
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        request.model_spec.name = self.model_name
        request.model_spec.signature_name = signature_name
        if self.version is not None:
            request.model_spec.version.value = int(self.version)
        elif self.version_label is not None:
            request.model_spec.version_label = self.version_label
        for alias, value in inputs.items():
            request.inputs[alias].CopyFrom(_tensor_proto(value))
        if output_filter:
            request.output_filter.extend(output_filter)
        return request

    def predict(self, signature_name, inputs, output_filter=None, timeout=None):
        """Runs one signature; returns `{output alias: numpy array}` (strings as bytes)."""
        import grpc
        import tensorflow as tf

        timeout = _check_timeout(timeout) or self.timeout
        request = self.request(signature_name, inputs, output_filter)
        try:
            response = self._stub.Predict(request, timeout=timeout)
        except grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else None
            details = err.details() if hasattr(err, "details") else str(err)
            name = code.name if code is not None else "UNKNOWN"
            if code == grpc.StatusCode.UNAVAILABLE:
                raise ServingUnavailableError(
                    f"Could not reach TensorFlow Serving at {self.target!r} (gRPC): {details}. "
                    "Is the server running and is this its gRPC port (default 8500)?",
                    code=name,
                ) from err
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ServingTimeoutError(
                    f"TensorFlow Serving at {self.target!r} did not answer within {timeout} s.",
                    code=name,
                ) from err
            raise _serving_error(f"{name}: {details}", code=name) from err
        return {alias: tf.make_ndarray(proto) for alias, proto in response.outputs.items()}

    def close(self):
        if self._own_channel:
            self._channel.close()


def _to_json(value):
    """A numpy value -> JSON-ready Python (bytes that are not UTF-8 as {"b64": ...})."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":  # numbers: nested lists of Python numbers in one call
            return value.tolist()
        return [_to_json(v) for v in value] if value.ndim else _to_json(value.item())
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_json(value):
    """JSON value -> numpy array; strings come back as bytes (like the gRPC client)."""

    def convert(v):
        if isinstance(v, list):
            return [convert(x) for x in v]
        if isinstance(v, dict) and set(v) == {"b64"}:
            return base64.b64decode(v["b64"])
        if isinstance(v, str):
            return v.encode("utf-8")
        return v

    flat = value
    while isinstance(flat, list) and flat:
        flat = flat[0]
    if isinstance(flat, (bool, int, float)):  # numbers (a tensor's values share one type)
        return np.asarray(value)
    converted = convert(value)
    flat = converted
    while isinstance(flat, list) and flat:
        flat = flat[0]
    if isinstance(flat, bytes):
        return np.array(converted, dtype=object)
    return np.asarray(converted)


class RestClient(_TextClient):
    """TensorFlow Serving's REST API (default port 8501).

    Args:
        base_url: `"http://host:port"`.
        model_name, version, version_label, timeout: as for `GrpcClient`.
        form: `"auto"` (rows when every input has the batch dimension, else columnar),
            `"instances"` (row form) or `"inputs"` (columnar form).
    """

    def __init__(
        self,
        base_url,
        model_name,
        version=None,
        version_label=None,
        timeout=DEFAULT_TIMEOUT,
        form="auto",
    ):
        _check_model_spec(model_name, version, version_label)
        if form not in ("auto", "instances", "inputs"):
            raise ValueError(
                f"`form` must be 'auto', 'instances' or 'inputs'. Received: form={form!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.model_name = model_name
        self.version = version
        self.version_label = version_label
        self.timeout = _check_timeout(timeout)
        self.form = form

    @property
    def url(self):
        url = f"{self.base_url}/v1/models/{self.model_name}"
        if self.version is not None:
            url += f"/versions/{int(self.version)}"
        elif self.version_label is not None:
            url += f"/labels/{self.version_label}"
        return url + ":predict"

    def body(self, signature_name, inputs, form=None):
        """The JSON body (a dict) of a predict call in the row or columnar form."""
        form = form or self.form
        arrays = {
            alias: np.asarray(value, dtype=object if isinstance(value, (bytes, str)) else None)
            for alias, value in inputs.items()
        }
        if form == "auto":
            form = "inputs" if any(a.ndim == 0 for a in arrays.values()) else "instances"
        if form == "inputs":
            return {
                "signature_name": signature_name,
                "inputs": {k: _to_json(v) for k, v in arrays.items()},
            }
        batch = {a.shape[0] if a.ndim else None for a in arrays.values()}
        if None in batch or len(batch) != 1:
            raise ValueError(
                "The row (`instances`) form needs every input to have the same batch dimension; "
                "scalar inputs such as beam_size need the columnar (`inputs`) form. "
                f"Received: input shapes { {k: a.shape for k, a in arrays.items()} }"
            )
        (size,) = batch
        if len(arrays) == 1:
            (only,) = arrays.values()
            instances = [_to_json(only[i]) for i in range(size)]
        else:
            instances = [{k: _to_json(a[i]) for k, a in arrays.items()} for i in range(size)]
        return {"signature_name": signature_name, "instances": instances}

    def predict(self, signature_name, inputs, output_filter=None, timeout=None, form=None):
        """Runs one signature; returns `{output alias: numpy array}` (strings as bytes).

        `output_filter` is applied here (the REST API has none: everything is transferred)."""
        timeout = _check_timeout(timeout) or self.timeout
        body = self.body(signature_name, inputs, form)
        data = json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            self.url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                answer = json.loads(reply.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", errors="replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except (ValueError, AttributeError):
                pass
            raise _serving_error(f"HTTP {err.code}: {detail}", code=err.code) from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise ServingTimeoutError(
                    f"TensorFlow Serving at {self.base_url!r} did not answer within {timeout} s."
                ) from err
            raise ServingUnavailableError(
                f"Could not reach TensorFlow Serving at {self.base_url!r} (REST): {err.reason}. "
                "Is the server running and is this its REST port (default 8501)?"
            ) from err
        except TimeoutError as err:
            raise ServingTimeoutError(
                f"TensorFlow Serving at {self.base_url!r} did not answer within {timeout} s."
            ) from err
        outputs = self._parse(answer)
        if output_filter:
            outputs = {k: v for k, v in outputs.items() if k in set(output_filter)}
        return outputs

    @staticmethod
    def _parse(answer):
        if "error" in answer:
            raise _serving_error(str(answer["error"]))
        if "outputs" in answer:  # columnar
            outputs = answer["outputs"]
            if not isinstance(outputs, dict):  # a single output is returned bare
                outputs = {"outputs": outputs}
            return {k: _from_json(v) for k, v in outputs.items()}
        if "predictions" in answer:  # rows
            rows = answer["predictions"]
            if rows and not isinstance(rows[0], dict):
                return {"outputs": _from_json(rows)}
            names = list(rows[0]) if rows else []
            return {k: _from_json([row[k] for row in rows]) for k in names}
        raise ServingError(f"Unexpected REST answer with keys {sorted(answer)}")


def resolve_version_dir(path):
    """`path` itself if it holds a saved_model.pb, else its highest numeric subdirectory that does."""
    import os

    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = []
    if os.path.isdir(path):
        for entry in os.listdir(path):
            if entry.isdigit() and os.path.isfile(os.path.join(path, entry, "saved_model.pb")):
                versions.append(int(entry))
    if not versions:
        raise ValueError(
            "Not a SavedModel directory nor a base directory with numeric versions. "
            f"Received: export_dir={path!r}"
        )
    return os.path.join(path, str(max(versions)))


def unreadable_message(path, err):
    import os

    return (
        f"`export_dir` must hold a readable SavedModel; {os.path.join(path, 'saved_model.pb')} "
        f"could not be read ({type(err).__name__}: {str(err).strip()[:300]}). "
        f"Received: export_dir={path!r}"
    )


class SavedModelClient(_TextClient):
    """The clients' interface over an exported SavedModel loaded in this process (no server):
    what `keras-attn translate` uses. Needs `tensorflow` and `tensorflow_text`.

    Args:
        export_dir: a version directory, or a base directory (its highest version is used).
    """

    def __init__(self, export_dir):
        self.export_dir = export_dir
        self.path = resolve_version_dir(export_dir)
        self._loaded = None

    @property
    def signatures(self):
        """The loaded model's signatures (loaded on first use)."""
        if self._loaded is None:
            import tensorflow as tf
            import tensorflow_text  # noqa: F401  (registers the TF Text ops)

            try:
                self._loaded = tf.saved_model.load(self.path)
            except Exception as err:  # a corrupt or truncated saved_model.pb, missing variables
                raise ValueError(unreadable_message(self.path, err)) from None
        return self._loaded.signatures

    def predict(self, signature_name, inputs, output_filter=None, timeout=None):
        """Runs one signature; returns `{output alias: numpy array}` (strings as bytes).
        `timeout` is accepted for the common interface and ignored (the call is in-process)."""
        import tensorflow as tf

        signatures = self.signatures
        if signature_name not in signatures:
            raise MissingSignatureError(
                f"`export_dir` has no `{signature_name}` signature (exported before it existed): "
                f"re-export the model. Received: export_dir={self.export_dir!r} with signatures "
                f"{sorted(signatures)}"
            )
        tensors = {alias: tf.constant(value) for alias, value in inputs.items()}
        out = signatures[signature_name](**tensors)
        wanted = set(output_filter) if output_filter else set(out)
        return {alias: value.numpy() for alias, value in out.items() if alias in wanted}
