"""Run an example script in a subprocess (the way a user runs it) and read what it wrote."""

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def script_env():
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["KERAS_BACKEND"] = "tensorflow"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def script(name):
    return os.path.join(ROOT, "examples", name)


# Wall-clock limit of one script run: generous, because a machine shared with other work can be
# 10x slower than idle (a --smoke run takes well under a minute on 2 idle cores), yet finite, so a
# hung script still fails the test, with the output it wrote so far.
TIMEOUT = 900


def run_script(name, *args, timeout=TIMEOUT, verbose=True):
    """Run `examples/<name> args...` (with `--verbose 2`: one line per epoch); returns
    stdout+stderr, failing with it on a non-zero exit or when the run outlives `timeout` s."""
    proc = subprocess.Popen(
        [sys.executable, script(name), *(["--verbose", "2"] if verbose else []), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(),
        cwd=ROOT,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        output = out + err
        raise AssertionError(
            f"examples/{name} still running after {timeout} s (killed):\n{output[-4000:]}"
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = out + err
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


def kill_after_checkpoint(name, *args, latest, settle=0.0, timeout=TIMEOUT):
    """Run example script `name` and SIGKILL it once `latest` (its checkpoint index) exists,
    `settle` seconds later; returns the process's return code (-SIGKILL when it was killed
    before finishing)."""
    proc = subprocess.Popen(
        [sys.executable, script(name), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=script_env(),
        cwd=ROOT,
    )
    try:
        deadline = time.time() + timeout
        while not latest.exists():
            assert proc.poll() is None, "the run ended before writing a checkpoint"
            assert time.time() < deadline, f"no checkpoint within {timeout} s"
            time.sleep(0.01)
        time.sleep(settle)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode
