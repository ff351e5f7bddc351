"""A run killed with SIGKILL after its first checkpoint continues from the last checkpoint with
`--resume`: epoch counter and optimizer state restored, later epochs trained, not the earlier ones."""

import json
import os
import signal

import h5py
import pytest

from tests.examples.helpers import kill_after_checkpoint, read_json, read_jsonl, run_script


def _iterations(path):
    """The optimizer's step counter stored in a weights checkpoint."""
    with h5py.File(path, "r") as f:
        return int(f["optimizer"]["vars"]["0"][()])


@pytest.mark.processes
def test_killed_run_resumes_from_last_checkpoint(tmp_path):
    out = tmp_path / "run"
    latest = out / "checkpoints" / "latest.json"
    args = ["--smoke", "--out", str(out), "--heatmaps", "0", "--verbose", "2"]
    returncode = kill_after_checkpoint(
        "sequential_classifier.py", *args, "--epochs", "500", latest=latest
    )
    assert returncode == -signal.SIGKILL  # killed, not finished (500 epochs)

    saved = read_json(latest)
    k = saved["epoch"]
    assert 1 <= k < 500
    steps = _iterations(out / "checkpoints" / saved["file"]) // k
    assert steps >= 1 and _iterations(out / "checkpoints" / saved["file"]) == k * steps
    lines_before = len(read_jsonl(out / "metrics.jsonl"))

    log = run_script("sequential_classifier.py", *args, "--resume", "--epochs", str(k + 2))
    assert f"(epoch {k} of {k + 2})" in log
    after = read_json(latest)
    assert after["epoch"] == k + 2
    # The optimizer continued counting from the checkpoint: k + 2 epochs of steps in all
    # (a fresh optimizer would hold 2 epochs' worth).
    assert _iterations(out / "checkpoints" / after["file"]) == (k + 2) * steps
    new_records = read_jsonl(out / "metrics.jsonl")[lines_before:]
    assert [r["epoch"] for r in new_records] == [k + 1, k + 2]
    assert "Epoch 1/" not in log and f"Epoch {k + 1}/{k + 2}" in log


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    out = tmp_path / "run"
    log = run_script(
        "sequential_classifier.py", "--smoke", "--out", str(out), "--heatmaps", "0", "--resume"
    )
    assert "no checkpoint" in log
    assert read_json(out / "checkpoints" / "latest.json")["epoch"] == 1
    assert json.dumps(read_jsonl(out / "metrics.jsonl")[0]["epoch"]) == "1"
    assert os.path.exists(out / "results.json")
