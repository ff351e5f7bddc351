"""The deployment kit in export/: the files parse and agree with each other."""

import os
import re

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

KIT = os.path.join(os.path.dirname(__file__), "..", "..", "export")
BATCHING_FIELDS = {
    "max_batch_size",
    "batch_timeout_micros",
    "max_enqueued_batches",
    "num_batch_threads",
    "allowed_batch_sizes",
    "pad_variable_length_inputs",
}


def read(name):
    with open(os.path.join(KIT, name), encoding="utf-8") as f:
        return f.read()


def services(compose):
    """{service name: its text} of a compose file (top-level services, two-space indent)."""
    body = compose.split("\nservices:\n", 1)[1]
    parts = re.split(r"^  ([\w-]+):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_models_config_parses_and_matches_the_compose_mounts():
    config = text_format.Parse(read("models.config"), model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert model.name == "dates" and model.model_platform == "tensorflow"
    assert model.base_path == "/models/dates"
    for name, text in services(read("docker-compose.yml")).items():
        assert "./models:/models:ro" in text, name
        assert "./models.config:/config/models.config:ro" in text, name
        assert "--model_config_file=/config/models.config" in text, name


def test_batching_parameters():
    lines = [
        line
        for line in read("batching_parameters.txt").splitlines()
        if line and not line.startswith("#")
    ]
    seen = {}
    for line in lines:
        match = re.fullmatch(r"(\w+) \{ value: (\d+|true|false) \}", line)
        assert match, line
        assert match.group(1) in BATCHING_FIELDS, line
        seen[match.group(1)] = match.group(2)
    assert int(seen["max_batch_size"]) >= 1 and int(seen["num_batch_threads"]) >= 1


def test_batching_only_where_every_input_has_the_batch_dimension():
    found = services(read("docker-compose.yml"))
    assert set(found) == {"serving", "serving-beam"}
    assert "--enable_batching=true" in found["serving"]
    assert "/config/batching_parameters.txt" in found["serving"]
    assert "enable_batching" not in found["serving-beam"]
    readme = read("README.md")
    assert "columnar only" in readme and "beam_search" in readme and "make demo" in readme
