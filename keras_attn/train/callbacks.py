"""The run's Keras callbacks: epoch checkpoints, the validation metric with `metrics.jsonl`, the
time budget and TensorBoard's scalars."""

import json
import os
import time

import keras
import numpy as np

from keras_attn.train.checkpoints import CHECKPOINT_DIR, LATEST, save_weights, seed_states


class EpochCheckpoint(keras.callbacks.Callback):
    """After each epoch: save weights + optimizer state and point `latest.json` at them (atomic
    rename), with the states of the model's seed generators; keep the last `keep` epochs."""

    def __init__(self, out_dir, keep=3):
        super().__init__()
        self.out_dir, self.keep = out_dir, keep

    def on_epoch_end(self, epoch, logs=None):
        directory = os.path.join(self.out_dir, CHECKPOINT_DIR)
        os.makedirs(directory, exist_ok=True)
        name = f"epoch-{epoch + 1:04d}.weights.h5"
        save_weights(self.model, os.path.join(directory, name))
        info = {
            "epoch": epoch + 1,
            "file": name,
            "time": time.time(),
            "seed_states": [np.asarray(v).tolist() for v in seed_states(self.model)],
        }
        tmp = os.path.join(directory, LATEST + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(info, f)
        os.replace(tmp, os.path.join(directory, LATEST))
        old = epoch + 1 - self.keep
        if self.keep and old >= 1:
            stale = os.path.join(directory, f"epoch-{old:04d}.weights.h5")
            if os.path.exists(stale):
                os.remove(stale)


class Validation(keras.callbacks.Callback):
    """`fn(model) -> {name: value}` after each epoch, added to the logs (so the progress bar
    prints it and TensorBoard records it) and appended to `metrics.jsonl` with the epoch's
    training time (`epoch_seconds`, validation excluded), this process's CPU time in it
    (`epoch_cpu_seconds`, all threads) and the batches it trained (`epoch_steps`: fewer than
    the epoch's steps where a time budget stopped it)."""

    def __init__(self, fn, out_dir):
        super().__init__()
        self.fn, self.out_dir = fn, out_dir
        self.start = self.cpu_start = None
        self.steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.cpu_start = time.time(), time.process_time()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps = batch + 1  # the epoch's last batch index (several per call with
        # `steps_per_execution`)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        now, cpu_now = time.time(), time.process_time()
        seconds = now - (now if self.start is None else self.start)
        cpu_seconds = cpu_now - (cpu_now if self.cpu_start is None else self.cpu_start)
        if self.fn is not None:
            logs.update({k: float(v) for k, v in self.fn(self.model).items()})
        record = {"epoch": epoch + 1}
        record.update({k: float(v) for k, v in logs.items() if np.ndim(v) == 0})
        record["epoch_seconds"] = round(seconds, 3)
        record["epoch_cpu_seconds"] = round(cpu_seconds, 3)
        record["epoch_steps"] = self.steps
        with open(os.path.join(self.out_dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


class TimeBudget(keras.callbacks.Callback):
    """Stop training before `seconds` of training are spent: at the end of a batch after which
    one more batch and an epoch's end (its validation and checkpoint) would pass `seconds`, and
    likewise at an epoch's end. The epoch it stops in ends as any other (validated,
    checkpointed), so a budget is used to its last batch, not to the last whole epoch that fits.

    One more batch is reckoned as the longest batch so far after the first of this `fit` (the
    first traces the train step: it is the estimate only until a second batch ends); an epoch's
    end as the latest one (the first also traces the validation's search). `spent` and `tail`:
    the seconds and the epoch end of the epochs a resumed run already trained
    (`spent_epoch_seconds`, `budget_tail`), so the budget is the run's, resumed parts together.
    `out_dir`: where `time_budget.json` keeps the tail for a resumed run (None: nowhere)."""

    def __init__(self, seconds, spent=0.0, tail=0.0, out_dir=None):
        super().__init__()
        self.seconds, self.spent, self.initial_tail, self.out_dir = seconds, spent, tail, out_dir
        self.start, self.tail, self.stopped_at = None, tail, None
        self.last, self.first_batch, self.later_batch, self.epoch = None, None, 0.0, 0

    def on_train_begin(self, logs=None):
        self.start = time.time() - self.spent
        self.tail, self.stopped_at = self.initial_tail, None
        self.first_batch, self.later_batch = None, 0.0

    @property
    def longest_batch(self):
        """The seconds one more batch is reckoned to take (the class's docstring)."""
        return self.later_batch if self.later_batch else self.first_batch or 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.last = epoch, time.time()

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        if self.first_batch is None:
            self.first_batch = now - self.last
        else:
            self.later_batch = max(self.later_batch, now - self.last)
        self.last = now
        room = now - self.start + self.longest_batch + self.tail <= self.seconds
        if self.stopped_at is None and not room:
            self._stop(f"stopping in epoch {self.epoch + 1} after its batch {batch + 1}")

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        self.tail = now - self.last
        if self.out_dir is not None:
            with open(os.path.join(self.out_dir, BUDGET_FILE), "w", encoding="utf-8") as f:
                json.dump({"tail_seconds": round(self.tail, 3)}, f)
        room = now - self.start + self.longest_batch + self.tail <= self.seconds
        if self.stopped_at is None and not room:
            self._stop(f"stopping after epoch {epoch + 1}")

    def _stop(self, where):
        self.model.stop_training = True
        self.stopped_at = self.epoch + 1
        print(f"Time budget ({self.seconds / 60:.0f} min): {where}", flush=True)


# What `TimeBudget` keeps for a resumed run: the latest epoch end.
BUDGET_FILE = "time_budget.json"


def budget_tail(out_dir):
    """The latest epoch end (validation, checkpoint) a run in `out_dir` recorded (0: none)."""
    path = os.path.join(out_dir, BUDGET_FILE)
    if not os.path.exists(path):
        return 0.0
    with open(path, encoding="utf-8") as f:
        return float(json.load(f).get("tail_seconds", 0.0))


def spent_epoch_seconds(out_dir, epochs):
    """`(total, longest)` of `epoch_seconds` over the first `epochs` epochs recorded in
    `out_dir/metrics.jsonl` (what a resumed run already spent of its time budget)."""
    path = os.path.join(out_dir, "metrics.jsonl")
    seconds = []
    if epochs > 0 and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record.get("epoch", 0) <= epochs and "epoch_seconds" in record:
                    seconds.append(float(record["epoch_seconds"]))
    return sum(seconds), max(seconds, default=0.0)


class ScalarEvents(keras.callbacks.Callback):
    """The per-epoch scalars `keras.callbacks.TensorBoard` writes (`epoch_<metric>`, train and
    validation), as event files written with TensorFlow's summary writer: for a machine
    without the `tensorboard` package."""

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir, self.writers = log_dir, {}

    def on_train_begin(self, logs=None):
        import tensorflow as tf

        self.writers = {
            part: tf.summary.create_file_writer(os.path.join(self.log_dir, part))
            for part in ("train", "validation")
        }

    def on_epoch_end(self, epoch, logs=None):
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2
        from tensorflow.python.ops import summary_ops_v2

        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )
        for key, value in (logs or {}).items():
            if np.ndim(value) != 0:
                continue
            part, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            with self.writers[part].as_default():
                summary_ops_v2.write(
                    f"epoch_{name}", tf.constant(float(value)), step=epoch, metadata=metadata
                )
            self.writers[part].flush()

    def on_train_end(self, logs=None):
        for writer in self.writers.values():
            writer.close()


def tensorboard_callback(log_dir):
    """`keras.callbacks.TensorBoard` when the `tensorboard` package is installed; otherwise
    `ScalarEvents` (the same per-epoch scalars, readable by TensorBoard later)."""
    try:
        import tensorboard  # noqa: F401

        return keras.callbacks.TensorBoard(log_dir, write_graph=False, profile_batch=0)
    except ImportError:
        return ScalarEvents(log_dir)
