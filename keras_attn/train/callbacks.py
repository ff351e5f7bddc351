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
    training time (`epoch_seconds`, validation excluded) and this process's CPU time in it
    (`epoch_cpu_seconds`, all threads)."""

    def __init__(self, fn, out_dir):
        super().__init__()
        self.fn, self.out_dir = fn, out_dir
        self.start = self.cpu_start = None

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.cpu_start = time.time(), time.process_time()

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
        with open(os.path.join(self.out_dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


class TimeBudget(keras.callbacks.Callback):
    """Stop training after the epoch (its checkpoint written) after which another epoch like
    the longest so far would end past `seconds` of training. `spent` and `longest`: the seconds
    and the longest epoch of the epochs a resumed run already trained (`spent_epoch_seconds`),
    so the budget is the run's, resumed parts together."""

    def __init__(self, seconds, spent=0.0, longest=0.0):
        super().__init__()
        self.seconds, self.spent, self.initial_longest = seconds, spent, longest
        self.start, self.longest, self.stopped_at, self.epoch_start = None, longest, None, None

    def on_train_begin(self, logs=None):
        self.start = time.time() - self.spent
        self.longest, self.stopped_at = self.initial_longest, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        self.longest = max(self.longest, now - self.epoch_start)
        if now - self.start + self.longest > self.seconds:
            self.model.stop_training = True
            self.stopped_at = epoch + 1
            print(
                f"Time budget ({self.seconds / 60:.0f} min): stopping after epoch {epoch + 1}",
                flush=True,
            )


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
