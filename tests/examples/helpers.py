"""Run an example script in a subprocess (the way a user runs it) and read what it wrote."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def script_env():
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["KERAS_BACKEND"] = "tensorflow"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def script(name):
    return os.path.join(ROOT, "examples", name)


def run_script(name, *args, timeout=300, verbose=True):
    """Run `examples/<name> args...` (with `--verbose 2`: one line per epoch); returns
    stdout+stderr, failing with it on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, script(name), *(["--verbose", "2"] if verbose else []), *args],
        capture_output=True, text=True, timeout=timeout, env=script_env(), cwd=ROOT,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"
