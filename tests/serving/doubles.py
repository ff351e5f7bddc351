"""Test stand-ins for TensorFlow Serving's gRPC PredictionService and REST API.

They answer from a SavedModel loaded in this process. Test doubles only: loopback address,
ephemeral port, a few requests per test; never shipped as a server.
"""

import base64
import contextlib
import http.server
import json
import re
import threading
import time
from concurrent import futures

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc

DEFAULT_SIGNATURE = "serving_default"


class SavedModelRunner:
    """Runs a SavedModel's signatures on numpy inputs, checking them like the server."""

    def __init__(self, export_dir):
        self.loaded = tf.saved_model.load(export_dir)
        self.signatures = dict(self.loaded.signatures)

    def input_specs(self, name):
        return self.signatures[name].structured_input_signature[1]

    def run(self, name, inputs, output_filter=()):
        """`{alias: numpy}` -> `{alias: numpy}`; ValueError/KeyError for a bad request,
        `tf.errors.OpError` from the graph."""
        if name not in self.signatures:
            raise KeyError(f'Serving signature name: "{name}" not found in signature def')
        specs = self.input_specs(name)
        if set(inputs) != set(specs):
            raise ValueError(
                f"input size does not match signature: {sorted(inputs)} != {sorted(specs)}"
            )
        args = {
            alias: tf.constant(np.asarray(value), dtype=specs[alias].dtype)
            for alias, value in inputs.items()
        }
        outputs = self.signatures[name](**args)
        wanted = list(output_filter) or sorted(outputs)
        unknown = sorted(set(wanted) - set(outputs))
        if unknown:
            raise ValueError(f"output tensor alias not found in signature: {unknown}")
        return {alias: outputs[alias].numpy() for alias in wanted}


class PredictionServiceDouble(prediction_service_pb2_grpc.PredictionServiceServicer):
    """A `PredictionServiceServicer` answering Predict from a `SavedModelRunner` (the other
    methods answer UNIMPLEMENTED, the generated base class's default)."""

    def __init__(self, runner, model_name, delay=0.0):
        self.runner = runner
        self.model_name = model_name
        self.delay = delay
        self.requests = []

    def Predict(self, request, context):
        import grpc
        from tensorflow_serving.apis import predict_pb2

        self.requests.append(request)
        if self.delay:
            time.sleep(min(self.delay, 2.0))
        if request.model_spec.name != self.model_name:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Servable not found for request: Latest({request.model_spec.name})",
            )
        name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        inputs = {alias: tf.make_ndarray(proto) for alias, proto in request.inputs.items()}
        try:
            outputs = self.runner.run(name, inputs, list(request.output_filter))
        except (KeyError, ValueError) as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except tf.errors.OpError as err:
            # TensorFlow's error codes are gRPC's status codes.
            codes = {status.value[0]: status for status in grpc.StatusCode}
            context.abort(codes.get(err.error_code, grpc.StatusCode.INTERNAL), err.message)
        response = predict_pb2.PredictResponse()
        response.model_spec.name = self.model_name
        response.model_spec.version.value = 1
        response.model_spec.signature_name = name
        for alias, value in outputs.items():
            response.outputs[alias].CopyFrom(tf.make_tensor_proto(value))
        return response


@contextlib.contextmanager
def grpc_double(runner, model_name, delay=0.0, max_workers=2):
    """Yields `(target, servicer)` of a PredictionService double on 127.0.0.1, ephemeral port,
    answering up to `max_workers` requests at a time."""
    import grpc

    servicer = PredictionServiceDouble(runner, model_name, delay)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(grace=None)


_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:predict$")


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _encode(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _as_array(value, dtype):
    decoded = _decode(value)
    if dtype == tf.string:
        return np.array(decoded, dtype=object)
    return np.asarray(decoded, dtype=dtype.as_numpy_dtype)


def _b64(value):
    if isinstance(value, list):
        return [_b64(v) for v in value]
    return {"b64": base64.b64encode(value).decode("ascii")}


def _jsonable(array, alias=""):
    """An output as TensorFlow Serving's REST API writes it: an alias ending in `_bytes` holds
    binary strings, written as `{"b64": ...}`."""
    if alias.endswith("_bytes"):
        return _b64(np.asarray(array).tolist())
    return json.loads(json.dumps(np.asarray(array).tolist(), default=_encode))


@contextlib.contextmanager
def rest_double(runner, model_name):
    """Yields `(base_url, bodies)` of a REST predict stand-in on 127.0.0.1, ephemeral port;
    `bodies` collects the JSON bodies received."""
    bodies = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, payload):
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            match = _PATH.match(self.path)
            if not match:
                return self.reply(404, {"error": f"Malformed request: POST {self.path}"})
            if match.group(1) != model_name:
                return self.reply(
                    404, {"error": f"Servable not found for request: Latest({match.group(1)})"}
                )
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            name = body.get("signature_name", DEFAULT_SIGNATURE)
            if name not in runner.signatures:
                return self.reply(
                    400, {"error": f'Serving signature name: "{name}" not found in signature def'}
                )
            specs = runner.input_specs(name)
            try:
                if "instances" in body:
                    rows = body["instances"]
                    if rows and isinstance(rows[0], dict) and set(rows[0]) != {"b64"}:
                        columns = {k: [row[k] for row in rows] for k in rows[0]}
                    else:
                        (only,) = specs
                        columns = {only: rows}
                else:
                    columns = (
                        body["inputs"]
                        if isinstance(body["inputs"], dict)
                        else {next(iter(specs)): body["inputs"]}
                    )
                inputs = {k: _as_array(v, specs[k].dtype) for k, v in columns.items() if k in specs}
                outputs = runner.run(name, inputs)
            except (KeyError, ValueError, TypeError, StopIteration) as err:
                return self.reply(400, {"error": str(err)})
            except tf.errors.OpError as err:
                return self.reply(400, {"error": err.message})
            if "instances" in body:
                size = len(body["instances"])
                predictions = [
                    {k: _jsonable(v[i], k) for k, v in outputs.items()} for i in range(size)
                ]
                return self.reply(200, {"predictions": predictions})
            return self.reply(200, {"outputs": {k: _jsonable(v, k) for k, v in outputs.items()}})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
