"""`examples/train_translator.py` on JAX (`KERAS_BACKEND=jax`, every run a subprocess):

- data-parallel over two processes (`keras.distribution.initialize` over loopback, one CPU device
  each) and over two local CPU devices in one process: both follow one process without a
  distribution on the same global batch, and only process 0 writes files;
- a killed process: the job restarted with `--resume` ends with the weights of the
  uninterrupted two-process run;
- a text corpus trained on JAX (validation chrF, checkpoints, best weights, heat maps), then
  exported on TensorFlow from the run's weights (`--resume --export`): the SavedModel's
  `beam_search` answers what `keras_attn.decoding.beam_search` decodes on JAX with the same
  weights.

Every process has a timeout and is killed (SIGKILL) when its test ends, however it ends.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from tests.examples.helpers import ROOT, read_json, read_jsonl, script, script_env
from tests.examples.multi_worker import free_ports

SCRIPT = "train_translator.py"
EPOCHS = 2
BATCH = 16  # global batch: 16 steps per epoch on the 256 smoke pairs
ARGS = ["--smoke", "--seed", "5", "--batch-size", str(BATCH), "--epochs", str(EPOCHS)]
ARGS += ["--heatmaps", "0", "--verbose", "2"]
TIMEOUT = 900  # per job: generous, a machine shared with other work can be 10x slower than idle


def jax_env(devices=1):
    env = script_env()
    env["KERAS_BACKEND"] = "jax"
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


class Processes:
    """Processes started from `(argv, env, log path)` triples; on exit every one still running
    is killed (SIGKILL)."""

    def __init__(self, commands):
        self.procs, self.logs = [], []
        try:
            for argv, env, log in commands:
                os.makedirs(os.path.dirname(log), exist_ok=True)
                self.logs.append(log)
                with open(log, "w", encoding="utf-8") as f:
                    self.procs.append(
                        subprocess.Popen(
                            argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT
                        )
                    )
        except BaseException:
            self.kill()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    def log(self, i):
        with open(self.logs[i], encoding="utf-8", errors="replace") as f:
            return f.read()

    def kill(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def check(self, timeout=TIMEOUT):
        """Wait for every process; the first to fail (in any order) ends the wait, so a peer
        left waiting on a collective for a crashed process does not run to the timeout."""
        deadline = time.time() + timeout
        running = set(range(len(self.procs)))
        while running:
            for i in sorted(running):
                code = self.procs[i].poll()
                if code is None:
                    continue
                running.discard(i)
                if code != 0:
                    self.kill()
                    raise AssertionError(f"process {i} exited {code}:\n{self.log(i)[-4000:]}")
            if running and time.time() > deadline:
                i = min(running)
                self.kill()
                raise AssertionError(
                    f"process {i} still running after {timeout} s:\n{self.log(i)[-3000:]}"
                )
            time.sleep(0.2)


def translator(args, env, log):
    return [sys.executable, script(SCRIPT), *args], env, str(log)


def two_processes(args, logs, outs=None):
    """The two processes of a data-parallel job over loopback (`outs`: an --out per process)."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    return [
        translator(
            [
                *args,
                "--distribute",
                "data-parallel",
                "--coordinator-address",
                address,
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                *(["--out", str(outs[i])] if outs else []),
            ],
            jax_env(1),
            logs / f"process-{i}.log",
        )
        for i in range(2)
    ]


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


def _same_run(reference, got, rel_loss, rtol, atol):
    ref, new = read_jsonl(reference / "metrics.jsonl"), read_jsonl(got / "metrics.jsonl")
    assert [r["epoch"] for r in new] == [r["epoch"] for r in ref] == list(range(1, EPOCHS + 1))
    for r, g in zip(ref, new):
        for key in ("loss", "masked_accuracy"):
            assert g[key] == pytest.approx(r[key], rel=rel_loss), (r["epoch"], key)
    ref_w, got_w = _final_weights(reference), _final_weights(got)
    assert sorted(ref_w) == sorted(got_w)
    for name, value in ref_w.items():
        np.testing.assert_allclose(got_w[name], value, rtol=rtol, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process without a distribution (the reference), one process data-parallel over two
    CPU devices, and two processes data-parallel over loopback, each with its own --out."""
    base = tmp_path_factory.mktemp("jax_data_parallel")
    commands = [
        translator([*ARGS, "--out", str(base / "single")], jax_env(1), base / "single.log"),
        translator(
            [*ARGS, "--distribute", "data-parallel", "--out", str(base / "local")],
            jax_env(2),
            base / "local.log",
        ),
        *two_processes(ARGS, base / "logs", [base / "dp-0", base / "dp-1"]),
    ]
    with Processes(commands) as job:
        job.check()
        logs = [job.log(i) for i in range(4)]
    return base, logs


@pytest.mark.processes
def test_two_processes_train_like_one_process_and_only_process_0_writes(runs):
    base, logs = runs
    assert "--distribute data-parallel: 2 replicas in sync, chief" in logs[1]
    assert "process 0 of 2, 2 replicas in sync, chief (writes the files)" in logs[2]
    assert "process 1 of 2, 2 replicas in sync, writes nothing" in logs[3]
    chief = base / "dp-0"
    assert glob.glob(str(chief / "tensorboard" / "train" / "events.out.tfevents.*"))
    assert (chief / "results.json").exists()
    assert "val_exact_match" in read_jsonl(chief / "metrics.jsonl")[-1]
    assert not (base / "dp-1").exists()
    # Same trajectory as one process on the same global batch: the two halves of each batch are
    # summed on different devices, so only float32 rounding differs. A step on a different batch
    # moves the weights by about the learning rate (Adam: ~1e-3 per weight), far above these.
    _same_run(base / "single", chief, rel_loss=1e-4, rtol=1e-4, atol=1e-5)
    _same_run(base / "single", base / "local", rel_loss=1e-4, rtol=1e-4, atol=1e-5)


@pytest.mark.processes
def test_a_killed_process_and_a_restarted_job_end_like_the_uninterrupted_run(runs, tmp_path):
    out = tmp_path / "run"
    args = [*ARGS, "--out", str(out)]
    latest = out / "checkpoints" / "latest.json"
    with Processes(two_processes(args, tmp_path / "logs-killed")) as job:
        deadline = time.time() + TIMEOUT
        while not latest.exists():
            assert all(p.poll() is None for p in job.procs), "a process ended before a checkpoint"
            assert time.time() < deadline, f"no checkpoint within {TIMEOUT} s"
            time.sleep(0.01)
        time.sleep(0.2)  # a few steps into the next epoch
        job.procs[1].send_signal(signal.SIGKILL)
        assert job.procs[1].wait(timeout=30) == -signal.SIGKILL
        # What a cluster manager does when a process dies: stop the job, start it again.
    k = read_json(latest)["epoch"]
    assert 1 <= k < EPOCHS, "the job finished before the kill"
    with Processes(two_processes([*args, "--resume"], tmp_path / "logs-resumed")) as job:
        job.check()
        logs = [job.log(0), job.log(1)]
    for log in logs:  # both loaded the checkpoint and trained only the epochs after it
        assert f"(epoch {k} of {EPOCHS})" in log and "Epoch 1/" not in log
        assert f"Epoch {EPOCHS}/{EPOCHS}" in log
    base, _ = runs
    _same_run(base / "dp-0", out, rel_loss=1e-6, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------ train on JAX, export on TF
TEXT_ARGS = ["--smoke", "--model", "bahdanau", "--epochs", "2", "--heatmaps", "2"]
TEXT_ARGS += ["--verbose", "2", "--no-keep-placeholders"]
BEAM, MAX_LENGTH = 3, 12


def _write_pairs(path):
    words = "red green blue cat dog bird sun moon tree river stone cloud".split()
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(300):
        phrase = list(rng.choice(words, size=int(rng.integers(2, 5))))
        lines.append(" ".join(phrase) + "\t" + " ".join(reversed(phrase)).upper())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def decode_on_jax(argv, sources, out_path):
    """The run's exported weights (`final.weights.h5`) in the model the script builds,
    `beam_search` on JAX over `sources` under the word rules the export applies; writes
    `{"outputs", "scores", "lengths"}` as JSON."""
    import importlib.util

    import keras

    from keras_attn.data.padding import pad_ids
    from keras_attn.decoding.beam_search import beam_search
    from keras_attn.decoding.protocol import encode_for_search
    from keras_attn.decoding.words import word_rules_step, word_text_tables
    from keras_attn.serving.signatures import word_rule_tables
    from keras_attn.text import SentencePieceTokenizer

    assert keras.backend.backend() == "jax", keras.backend.backend()
    spec = importlib.util.spec_from_file_location("train_translator", script(SCRIPT))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.parse_args(argv)
    tokenizer = SentencePieceTokenizer.load(os.path.join(args.out, "tokenizer.model"))
    model = module.build_model(args, tokenizer.vocab_size)
    model.build()
    model.optimizer.build(model.trainable_variables)  # the file holds the optimizer's state too
    model.load_weights(os.path.join(args.out, "final.weights.h5"))
    ids = pad_ids(tokenizer.tokenize(sources).to_list())
    # the export's beam search is bound by the word rules (the text recipes' default), the word
    # loop ban included: the same rules wrap the step here, on JAX
    word_start, glue = word_rule_tables(tokenizer, tokenizer)
    encoded = encode_for_search(model, ids, tokenizer.start_id, MAX_LENGTH)
    step, state = word_rules_step(
        model.decode_step,
        encoded.state,
        ids,
        word_start,
        tokenizer.end_id,
        MAX_LENGTH,
        glue=glue,
        word_text=word_text_tables(list(tokenizer.vocabulary)),
    )
    result = beam_search(
        step,
        state,
        encoded.start_tokens,
        tokenizer.end_id,
        max_length=MAX_LENGTH,
        beam_size=BEAM,
        source_mask=encoded.source_mask,
    )
    sequences = np.asarray(result["sequences"])
    b, k, t = sequences.shape
    texts = tokenizer.detokenize(sequences.reshape(b * k, t)).numpy().reshape(b, k)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "outputs": [[x.decode("utf-8") for x in row] for row in texts],
                "scores": np.asarray(result["scores"], np.float64).tolist(),
                "lengths": np.asarray(result["lengths"]).tolist(),
            },
            f,
        )


@pytest.mark.processes
def test_trained_on_jax_exported_on_tensorflow_answers_as_jax_decodes(tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the TF Text ops the SavedModel holds)

    data, out, export = tmp_path / "pairs.tsv", tmp_path / "run", tmp_path / "export"
    _write_pairs(data)
    argv = [*TEXT_ARGS, "--data", str(data), "--out", str(out)]
    with Processes([translator(argv, jax_env(1), tmp_path / "jax.log")]) as job:
        job.check()
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2]
    assert all(np.isfinite(r["val_chrf"]) and np.isfinite(r["loss"]) for r in records)
    assert read_json(out / "checkpoints" / "latest.json")["epoch"] == 2
    assert (out / "best.weights.h5").exists() and (out / "final.weights.h5").exists()
    assert len(glob.glob(str(out / "attention" / "*.png"))) == 2
    assert np.isfinite(read_json(out / "results.json")["test_chrf"])

    tf_env = dict(script_env(), KERAS_BACKEND="tensorflow")
    export_argv = [*argv, "--resume", "--export", str(export)]
    with Processes([translator(export_argv, tf_env, tmp_path / "tf.log")]) as job:
        job.check()
        log = job.log(0)
    assert "nothing to do" in log and "Exported SavedModel" in log

    sources = [
        s
        for s, _ in (
            line.split("\t")
            for line in (out / "data" / "val.tsv").read_text(encoding="utf-8").splitlines()[:8]
        )
    ]
    decoded = tmp_path / "jax_decode.json"
    command = [
        sys.executable,
        "-m",
        "tests.examples.test_jax_training",
        "decode",
        str(decoded),
        json.dumps(sources),
        *argv,
    ]
    with Processes([(command, jax_env(1), str(tmp_path / "decode.log"))]) as job:
        job.check()
    on_jax = read_json(decoded)

    served = tf.saved_model.load(str(export / "1")).signatures["beam_search"](
        inputs=tf.constant(sources),
        beam_size=tf.constant(BEAM),
        max_length=tf.constant(MAX_LENGTH),
        length_penalty=tf.constant(0.0),
        coverage_penalty=tf.constant(0.0),
    )
    texts = [[x.decode("utf-8") for x in row] for row in served["outputs"].numpy()]
    assert texts == on_jax["outputs"]
    np.testing.assert_array_equal(served["lengths"].numpy(), on_jax["lengths"])
    np.testing.assert_allclose(served["scores"].numpy(), on_jax["scores"], atol=1e-4)


if __name__ == "__main__":
    if sys.argv[1] == "decode":
        decode_on_jax(sys.argv[4:], json.loads(sys.argv[3]), sys.argv[2])
