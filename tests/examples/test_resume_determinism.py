"""With a fixed seed, a run killed (SIGKILL) mid-epoch and resumed with `--resume` ends exactly
where an uninterrupted run ends: same per-epoch loss, accuracy and validation metric after the
checkpoint, same test results, same final weights.

The script is the sequential classifier in smoke mode with dropout on (the MultiHeadAttention
and Dropout layers draw new masks every step), small batches so that an epoch has many steps
and the kill lands inside one.
"""

import signal

import h5py
import numpy as np
import pytest

from tests.examples.helpers import kill_after_checkpoint, read_json, read_jsonl, run_script

SCRIPT = "sequential_classifier.py"
EPOCHS = 4
ARGS = [
    "--smoke",
    "--seed",
    "3",
    "--batch-size",
    "8",
    "--dropout",
    "0.3",
    "--heatmaps",
    "0",
    "--epochs",
    str(EPOCHS),
]


def _h5_arrays(path):
    """Every dataset in a weights file: `{path inside the file: array}`."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def _final_checkpoint(out):
    saved = read_json(out / "checkpoints" / "latest.json")
    assert saved["epoch"] == EPOCHS
    return out / "checkpoints" / saved["file"]


def _kill_mid_epoch(out):
    """Start the run, SIGKILL it shortly after its first checkpoint (inside epoch 2); returns the
    epoch of the last checkpoint written before the kill."""
    latest = out / "checkpoints" / "latest.json"
    returncode = kill_after_checkpoint(
        SCRIPT,
        *ARGS,
        "--out",
        str(out),
        "--verbose",
        "2",
        latest=latest,
        settle=0.05,  # a few steps into the next epoch
    )
    assert returncode == -signal.SIGKILL, "the run finished before it could be killed"
    return read_json(latest)["epoch"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    run_script(SCRIPT, *ARGS, "--out", str(out))
    return out


@pytest.mark.processes
def test_killed_and_resumed_run_ends_like_an_uninterrupted_one(uninterrupted, tmp_path):
    out = tmp_path / "run"
    k = _kill_mid_epoch(out)
    assert 1 <= k < EPOCHS
    log = run_script(SCRIPT, *ARGS, "--out", str(out), "--resume")
    assert f"(epoch {k} of {EPOCHS})" in log and "Epoch 1/" not in log

    # Every epoch trained after the resume logged the same loss, accuracy and validation accuracy.
    reference = {r["epoch"]: r for r in read_jsonl(uninterrupted / "metrics.jsonl")}
    resumed = {r["epoch"]: r for r in read_jsonl(out / "metrics.jsonl")}
    assert sorted(reference) == list(range(1, EPOCHS + 1))
    for epoch in range(k + 1, EPOCHS + 1):
        for key in ("loss", "accuracy", "val_accuracy"):
            assert resumed[epoch][key] == pytest.approx(
                reference[epoch][key], rel=1e-6, abs=1e-7
            ), (epoch, key)

    # Final validation and test accuracy (decided on the trained model after the last epoch).
    ref_results, got_results = (
        read_json(uninterrupted / "results.json"),
        read_json(out / "results.json"),
    )
    for key in ("val_accuracy", "test_accuracy"):
        assert got_results[key] == pytest.approx(ref_results[key], abs=1e-9), key

    # The final weights and optimizer state are the same numbers.
    ref_weights, got_weights = (
        _h5_arrays(_final_checkpoint(uninterrupted)),
        _h5_arrays(_final_checkpoint(out)),
    )
    assert sorted(ref_weights) == sorted(got_weights)
    for name, value in ref_weights.items():
        np.testing.assert_allclose(got_weights[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
