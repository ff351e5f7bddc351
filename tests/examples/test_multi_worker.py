"""`--distribute multi-worker` the way it runs on N machines, with N = 2 worker processes on this
machine (TF_CONFIG with two loopback addresses on free ports, each process pinned to one core):

- the data: each global batch is split between the workers, every example of an epoch is seen
  exactly once across them, in the single-process order;
- training: both workers finish, only the chief writes checkpoints, TensorBoard logs, metrics,
  results and the export, and the run follows a single-process run on the same global batch;
- fault tolerance: one worker SIGKILLed mid-epoch, the job restarted with `--resume`: it continues
  from the last checkpoint and ends with the weights of the uninterrupted two-worker run.

Every worker process has a timeout and is killed (SIGKILL) when a test ends, however it ends.
"""

import glob
import os
import signal
import time

import h5py
import numpy as np
import pytest

from keras_attn import train
from tests.examples.helpers import ROOT, read_json, read_jsonl
from tests.examples.multi_worker import Job

# Jobs of several processes: `make test-processes` (CI runs it after `make test`).
pytestmark = pytest.mark.processes

SCRIPT = "train_translator.py"
EPOCHS = 2
BATCH = 16  # global batch: 8 examples per worker, 16 steps per epoch on the 256 smoke pairs
ARGS = [
    "--smoke",
    "--seed",
    "5",
    "--batch-size",
    str(BATCH),
    "--epochs",
    str(EPOCHS),
    "--heatmaps",
    "0",
    "--verbose",
    "2",
]
MULTI = ["--distribute", "multi-worker"]
TIMEOUT = 900  # per job: generous, a machine shared with other work can be 10x slower than idle


def _h5_arrays(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


def _final_weights(out):
    saved = read_json(out / "checkpoints" / "latest.json")
    assert saved["epoch"] == EPOCHS
    return _h5_arrays(out / "checkpoints" / saved["file"])


def test_global_batch_must_split_evenly_over_replicas():
    train.check_global_batch(16, 2)
    with pytest.raises(ValueError, match="batch_size=15"):
        train.check_global_batch(15, 2)


def test_each_example_is_seen_once_per_epoch_across_workers(tmp_path):
    """Two workers read `Run.batches` through `experimental_distribute_dataset` (what `fit`
    does): at every step each takes half of the global batch of the single-process order."""
    n, batch, epochs, seed = 40, 8, 2, 7
    probe = os.path.join(ROOT, "tests", "examples", "shard_probe.py")
    with Job(
        probe,
        lambda i: [str(tmp_path / f"seen-{i}.json"), str(n), str(batch), str(epochs), str(seed)],
        tmp_path / "logs",
    ) as job:
        job.check(timeout=TIMEOUT)
    w0, w1 = (read_json(tmp_path / f"seen-{i}.json") for i in range(2))
    assert (w0["chief"], w1["chief"]) == (True, False) and w0["replicas"] == w1["replicas"] == 2
    steps = n // batch
    assert (
        w0["steps"] == w1["steps"] == steps and len(w0["seen"]) == len(w1["seen"]) == steps * epochs
    )
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(n)  # the single-process order
        for step in range(steps):
            a, b = w0["seen"][epoch * steps + step], w1["seen"][epoch * steps + step]
            assert len(a) == len(b) == batch // 2
            np.testing.assert_array_equal(a + b, order[step * batch : (step + 1) * batch])
        seen = [i for s in range(steps) for w in (w0, w1) for i in w["seen"][epoch * steps + s]]
        # n is divisible by the batch: every example exactly once
        assert sorted(seen) == list(range(n))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two workers, each with its own output and export directory (no shared file system), and
    alongside them the reference: one process, no strategy, the same global batch."""
    base = tmp_path_factory.mktemp("two_workers")
    with (
        Job(
            SCRIPT, [*ARGS, "--out", str(base / "single")], base / "logs-single", n=1, cluster=False
        ) as single,
        Job(
            SCRIPT,
            lambda i: [
                *ARGS,
                *MULTI,
                "--out",
                str(base / f"out-{i}"),
                "--export",
                str(base / f"export-{i}"),
            ],
            base / "logs",
        ) as job,
    ):
        job.check(timeout=TIMEOUT)
        single.check(timeout=TIMEOUT)
        logs = [job.log(0), job.log(1)]
    return base, logs


def test_two_workers_train_like_one_process_and_only_the_chief_writes(runs):
    base, logs = runs
    single = base / "single"
    assert "worker 0, 2 replicas in sync, chief" in logs[0]
    assert "worker 1, 2 replicas in sync, writes nothing" in logs[1]
    for log in logs:
        assert f"Epoch {EPOCHS}/{EPOCHS}" in log
    chief = base / "out-0"
    assert read_json(chief / "checkpoints" / "latest.json")["epoch"] == EPOCHS
    assert glob.glob(str(chief / "tensorboard" / "train" / "events.out.tfevents.*"))
    assert (chief / "results.json").exists() and (
        base / "export-0" / "1" / "saved_model.pb"
    ).exists()
    # The other worker created neither its output directory nor its export directory.
    assert not (base / "out-1").exists() and not (base / "export-1").exists()

    # Same trajectory as one process on the same global batch. The runs differ only in the order
    # of float32 sums (two half-batch gradients all-reduced instead of one batch sum): rounding,
    # ~1e-7 relative per operation, which 32 Adam steps keep far below 1e-4 on the epoch losses
    # and 1e-5 on the weights. One step on a different batch moves the weights by about the
    # learning rate (Adam's update is ~lr per weight: 1e-3 here, >= 5e-5 at the end of the cosine
    # schedule), which these tolerances catch.
    ref = read_jsonl(single / "metrics.jsonl")
    got = read_jsonl(chief / "metrics.jsonl")
    assert [r["epoch"] for r in got] == [r["epoch"] for r in ref] == list(range(1, EPOCHS + 1))
    for r, g in zip(ref, got):
        for key in ("loss", "masked_accuracy"):
            assert g[key] == pytest.approx(r[key], rel=1e-4), (r["epoch"], key)
    ref_w, got_w = _final_weights(single), _final_weights(chief)
    assert sorted(ref_w) == sorted(got_w)
    for name, value in ref_w.items():
        np.testing.assert_allclose(got_w[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_killed_worker_and_a_restarted_job_end_like_the_uninterrupted_run(runs, tmp_path):
    """Shared output directory (what `--resume` needs on N machines: docs/distributed.md)."""
    out = tmp_path / "run"
    args = [*ARGS, *MULTI, "--out", str(out)]
    latest = out / "checkpoints" / "latest.json"
    with Job(SCRIPT, args, tmp_path / "logs-killed") as job:
        deadline = time.time() + TIMEOUT
        while not latest.exists():
            assert all(p.poll() is None for p in job.procs), (
                "a worker ended before the first checkpoint"
            )
            assert time.time() < deadline, f"no checkpoint within {TIMEOUT} s"
            time.sleep(0.01)
        time.sleep(0.2)  # a few steps into the next epoch
        job.procs[1].send_signal(signal.SIGKILL)
        assert job.procs[1].wait(timeout=30) == -signal.SIGKILL
        # What a cluster manager does when a task dies: tear the job down and start it again.
        # (Left alone, the chief's next all-reduce fails and it exits with an error.)
    k = read_json(latest)["epoch"]
    assert 1 <= k < EPOCHS, "the job finished before the kill"

    with Job(SCRIPT, [*args, "--resume"], tmp_path / "logs-resumed") as job:
        job.check(timeout=TIMEOUT)
        logs = [job.log(0), job.log(1)]
    for log in logs:  # both workers loaded the checkpoint and trained only the epochs after it
        assert (
            f"(epoch {k} of {EPOCHS})" in log
            and "Epoch 1/" not in log
            and f"Epoch {EPOCHS}/{EPOCHS}" in log
        )

    base, _ = runs
    reference = {r["epoch"]: r for r in read_jsonl(base / "out-0" / "metrics.jsonl")}
    resumed = {r["epoch"]: r for r in read_jsonl(out / "metrics.jsonl")}
    for epoch in range(k + 1, EPOCHS + 1):
        for key in ("loss", "masked_accuracy", "val_exact_match"):
            assert resumed[epoch][key] == pytest.approx(
                reference[epoch][key], rel=1e-6, abs=1e-7
            ), (epoch, key)
    ref_w, got_w = _final_weights(base / "out-0"), _final_weights(out)
    assert sorted(ref_w) == sorted(got_w)
    for name, value in ref_w.items():
        np.testing.assert_allclose(got_w[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
