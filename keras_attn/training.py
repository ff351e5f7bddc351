"""What the example training scripts share: arguments, seeded batches, per-epoch checkpoints with
resume, the validation-metric callback, TensorBoard, distribution strategies, greedy decoding.

A script does:

    parser = training.base_parser("...", epochs=10, batch_size=64)
    args = parser.parse_args()
    run = training.Run(args)                 # seeds, output dir, strategy
    with run.strategy.scope():
        model = build(); model.compile(...)
    run.restore(model)                       # with --resume: weights, optimizer, epoch
    dataset, steps = run.batches(x, y)       # seeded order per epoch, from run.initial_epoch
    run.fit(model, dataset, steps, validation=fn)  # fn(model) -> {"val_metric": value}

Output directory (`--out`):

    checkpoints/epoch-0003.weights.h5   weights + optimizer state after epoch 3 (1-based)
    checkpoints/latest.json             {"epoch": 3, "file": "epoch-0003.weights.h5", ...}
    metrics.jsonl                       one line per epoch: the fit logs, the validation metric, epoch (CPU) seconds
    tensorboard/                        keras.callbacks.TensorBoard logs
    attention/*.png                     heat maps written by the script at the end

Resuming: the data order of epoch `e` depends only on `(seed, e)`, the optimizer's state
and step counter are in the checkpoint, and so are the states of the model's random seed
generators (dropout masks; `latest.json`, "seed_states": `save_weights` leaves them out), so a run
stopped after epoch `k` and resumed trains epochs `k+1...` on the same batches with the same
dropout masks as an uninterrupted run, and ends with the same weights and metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.json"
DISTRIBUTE = ("none", "mirrored", "multi-worker")


def base_parser(description, epochs=10, batch_size=64, learning_rate=1e-3, out="runs/example"):
    """The arguments every example script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"total number of epochs (default {epochs}; 1 with --smoke)",
    )
    p.set_defaults(default_epochs=epochs)
    p.add_argument(
        "--batch-size", type=int, default=batch_size, help="global batch size (default %(default)s)"
    )
    p.add_argument("--learning-rate", type=float, default=learning_rate, help="Adam learning rate")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of data, initialisation and batch order"
    )
    p.add_argument("--out", default=out, help="output directory (checkpoints, logs, heat maps)")
    p.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint in --out"
    )
    p.add_argument(
        "--smoke", action="store_true", help="tiny data, 1 epoch: runs end to end in seconds"
    )
    p.add_argument(
        "--distribute",
        choices=DISTRIBUTE,
        default="none",
        help="tf.distribute strategy: mirrored (all local devices) or multi-worker (TF_CONFIG)",
    )
    p.add_argument(
        "--logical-cpus",
        type=int,
        default=0,
        metavar="N",
        help="split the CPU into N logical devices (with --distribute mirrored: N replicas on one machine)",
    )
    p.add_argument(
        "--export", metavar="DIR", default=None, help="write a SavedModel under DIR/<version>/"
    )
    p.add_argument("--export-version", type=int, default=1, help="version subdirectory of --export")
    p.add_argument(
        "--heatmaps", type=int, default=3, help="attention heat maps of validation examples"
    )
    p.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    p.add_argument(
        "--verbose",
        type=int,
        default=1,
        choices=(0, 1, 2),
        help="fit's verbosity (1: progress bar)",
    )
    return p


def get_strategy(name, logical_cpus=0):
    """`"none"` -> the default strategy; `"mirrored"`, `"multi-worker"` -> tf.distribute strategies.
    `logical_cpus=N` (N >= 2) first splits the CPU into N logical devices; without a GPU, mirrored
    then runs one replica on each (TensorFlow's default would be the one CPU device)."""
    import tensorflow as tf

    if logical_cpus < 0 or logical_cpus == 1:
        raise ValueError(
            f"`--logical-cpus` must be 0 (as the machine is) or >= 2. Received: logical_cpus={logical_cpus}"
        )
    if logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * logical_cpus
        )
    if name in (None, "none"):
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if logical_cpus and not tf.config.list_logical_devices("GPU"):
            return tf.distribute.MirroredStrategy(
                [d.name for d in tf.config.list_logical_devices("CPU")]
            )
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"`distribute` must be one of {DISTRIBUTE}. Received: distribute={name!r}")


def is_chief(strategy):
    """Whether this process writes the run's files: always without a cluster; under
    `MultiWorkerMirroredStrategy` only the chief (the `"chief"` task, or worker 0 when the
    cluster of `TF_CONFIG` has no chief task)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    return (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


def check_global_batch(batch_size, replicas):
    """The global batch is split evenly over the replicas (docs/distributed.md): `batch_size`
    must be a multiple of `replicas`."""
    if batch_size < 1 or batch_size % replicas:
        raise ValueError(
            f"`--batch-size` (the global batch) must be a positive multiple of the {replicas} replicas in sync, "
            f"so that every replica gets an equal share. Received: batch_size={batch_size}"
        )


def latest_checkpoint(out_dir):
    """`(epoch, path)` of the last checkpoint written in `out_dir`, or `(0, None)`."""
    meta = os.path.join(out_dir, CHECKPOINT_DIR, LATEST)
    if not os.path.exists(meta):
        return 0, None
    with open(meta, encoding="utf-8") as f:
        info = json.load(f)
    return int(info["epoch"]), os.path.join(out_dir, CHECKPOINT_DIR, info["file"])


def seed_states(model):
    """The state variables of the model's `keras.random.SeedGenerator`s (dropout, sampling), in
    a fixed order: `model.variables` less `model.weights` (which `save_weights` stores)."""
    stored = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in stored]


def epoch_order(n, seed, epoch):
    """The example order of `epoch` (0-based): a permutation depending only on `(seed, epoch)`."""
    return np.random.default_rng([int(seed), int(epoch)]).permutation(n)


def _trim(tensor, pad_id=0):
    """Cut trailing all-padding columns of a `[B, T]` int batch."""
    import tensorflow as tf

    used = tf.reduce_any(tf.not_equal(tensor, pad_id), axis=0)
    width = tf.maximum(tf.reduce_max(tf.where(used, tf.range(1, tf.shape(tensor)[1] + 1), 0)), 1)
    return tensor[:, :width]


class EpochCheckpoint:
    """Keras callback (built lazily so importing this module does not import keras): after each
    epoch, save weights + optimizer state and point `latest.json` at them (atomic rename)."""

    def __new__(cls, out_dir, keep=3):
        import keras

        class _EpochCheckpoint(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                directory = os.path.join(out_dir, CHECKPOINT_DIR)
                os.makedirs(directory, exist_ok=True)
                name = f"epoch-{epoch + 1:04d}.weights.h5"
                self.model.save_weights(os.path.join(directory, name), overwrite=True)
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
                old = epoch + 1 - keep
                if keep and old >= 1:
                    stale = os.path.join(directory, f"epoch-{old:04d}.weights.h5")
                    if os.path.exists(stale):
                        os.remove(stale)

        return _EpochCheckpoint()


class Validation:
    """Keras callback: `fn(model) -> {name: value}` after each epoch, added to the logs (so the
    progress bar prints it and TensorBoard records it) and appended to `metrics.jsonl` with the
    epoch's training time (`epoch_seconds`, validation excluded) and this process's CPU time in it
    (`epoch_cpu_seconds`, all threads)."""

    def __new__(cls, fn, out_dir):
        import keras

        class _Validation(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start, self.cpu_start = time.time(), time.process_time()

            def on_epoch_end(self, epoch, logs=None):
                logs = logs if logs is not None else {}
                seconds = time.time() - getattr(
                    self, "start", time.time()
                )  # the epoch's training steps
                cpu_seconds = time.process_time() - getattr(self, "cpu_start", time.process_time())
                if fn is not None:
                    logs.update({k: float(v) for k, v in fn(self.model).items()})
                record = {"epoch": epoch + 1}
                record.update({k: float(v) for k, v in logs.items() if np.ndim(v) == 0})
                record["epoch_seconds"] = round(seconds, 3)
                record["epoch_cpu_seconds"] = round(cpu_seconds, 3)  # this process, all its threads
                with open(os.path.join(out_dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")

        return _Validation()


def tensorboard_callback(log_dir):
    """`keras.callbacks.TensorBoard` when the `tensorboard` package is installed; otherwise a
    callback writing the same per-epoch scalars (`epoch_<metric>`) as TensorBoard event files
    with TensorFlow's own summary writer, readable by TensorBoard later."""
    import keras

    try:
        import tensorboard  # noqa: F401

        return keras.callbacks.TensorBoard(log_dir, write_graph=False, profile_batch=0)
    except ImportError:
        pass
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2
    from tensorflow.python.ops import summary_ops_v2

    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )

    class _ScalarEvents(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.writers = {
                part: tf.summary.create_file_writer(os.path.join(log_dir, part))
                for part in ("train", "validation")
            }

        def on_epoch_end(self, epoch, logs=None):
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

    return _ScalarEvents()


def _build_from_spec(model, dataset):
    """Let `fit` under a tf.distribute strategy build the loss and metrics from the dataset's
    element spec. Keras' own way (`_maybe_symbolic_build`) first averages a real batch across
    replicas with `strategy.reduce`, which fails under MultiWorkerMirroredStrategy for
    dict inputs (keras-team/keras issue 20329) and is an extra collective step anyway."""
    spec = dataset.element_spec

    def build(iterator=None, data_batch=None):
        with model.distribute_strategy.scope():
            model._symbolic_build(data_batch=spec)

    model._maybe_symbolic_build = build


def _rank1_step_logs(model):
    """Under MultiWorkerMirroredStrategy Keras averages each replica's step logs with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars (tensorflow/tensorflow issue
    72388): the train step returns its logs as `[1]` vectors, whose mean over axis 0 across all
    replicas is the scalar that `fit`'s callbacks expect."""
    import tensorflow as tf

    step = model.train_step

    def train_step(data):
        return {
            k: tf.reshape(v, [1]) if tf.is_tensor(v) and v.shape.rank == 0 else v
            for k, v in step(data).items()
        }

    model.train_step = train_step


class Run:
    """One training run's setup: seeds, output directory, strategy, resume and `fit`."""

    def __init__(self, args):
        import keras

        self.args = args
        if args.epochs is None:
            args.epochs = 1 if args.smoke else args.default_epochs
        if args.epochs < 1:
            raise ValueError(f"`--epochs` must be >= 1. Received: epochs={args.epochs}")
        keras.utils.set_random_seed(args.seed)
        self.out = args.out
        self.strategy = get_strategy(args.distribute, getattr(args, "logical_cpus", 0))
        # Under MultiWorkerMirroredStrategy every worker trains; only the chief writes files.
        self.chief = is_chief(self.strategy)
        resolver = getattr(self.strategy, "cluster_resolver", None)
        self.multi_worker = resolver is not None and bool(resolver.cluster_spec().as_dict())
        check_global_batch(args.batch_size, self.strategy.num_replicas_in_sync)
        if args.distribute != "none":
            role = f"{resolver.task_type} {resolver.task_id}, " if self.multi_worker else ""
            print(
                f"--distribute {args.distribute}: {role}{self.strategy.num_replicas_in_sync} replicas in sync, "
                f"{'chief (writes the files)' if self.chief else 'writes nothing'}",
                flush=True,
            )
        if self.chief:
            os.makedirs(args.out, exist_ok=True)
        self.initial_epoch = 0
        self.history = None
        self.train_seconds = 0.0

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def restore(self, model):
        """With `--resume`: load the last checkpoint (weights, optimizer state) and set
        `initial_epoch`. Returns the epoch restored (0 when starting fresh)."""
        epoch, path = latest_checkpoint(self.out)
        if not self.args.resume or path is None:
            if self.args.resume:
                print(f"--resume: no checkpoint in {self.out}; starting from epoch 0", flush=True)
            return 0
        with self.strategy.scope():
            if not model.built:
                model.build()
            if model.optimizer is not None and not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            model.load_weights(path)
            with open(os.path.join(self.out, CHECKPOINT_DIR, LATEST), encoding="utf-8") as f:
                saved = json.load(f).get("seed_states")
            states = seed_states(model)
            if saved is not None and len(saved) == len(
                states
            ):  # dropout masks continue, not restart
                for variable, value in zip(states, saved):
                    variable.assign(np.asarray(value, dtype=variable.dtype))
        self.initial_epoch = epoch
        print(f"Resumed from {path} (epoch {epoch} of {self.args.epochs})", flush=True)
        return epoch

    def batches(self, x, y, trim=()):
        """A `tf.data.Dataset` of `(x, y)` batches for epochs `initial_epoch..epochs-1`, in the
        seeded order of `epoch_order`; int sequence keys listed in `trim` (and `y` when "y" is
        listed) are cut to the batch's longest row. Returns `(dataset, steps_per_epoch)`."""
        import tensorflow as tf

        n = len(y)
        replicas = self.strategy.num_replicas_in_sync
        batch = max(
            min(self.args.batch_size, n) // replicas * replicas, replicas
        )  # equal shares per replica
        steps = max(n // batch, 1)
        epochs = range(self.initial_epoch, self.args.epochs)
        index = np.concatenate(
            [epoch_order(n, self.args.seed, e)[: steps * batch] for e in epochs]
            or [np.zeros((0,), np.int64)]
        ).reshape(-1, batch)
        xs = {k: tf.constant(v) for k, v in x.items()} if isinstance(x, dict) else tf.constant(x)
        ys = tf.constant(y)

        def take(idx):
            bx = (
                {k: tf.gather(v, idx) for k, v in xs.items()}
                if isinstance(xs, dict)
                else tf.gather(xs, idx)
            )
            by = tf.gather(ys, idx)
            if isinstance(bx, dict):
                bx = {k: (_trim(v) if k in trim else v) for k, v in bx.items()}
            if "y" in trim:
                by = _trim(by)
            return bx, by

        dataset = tf.data.Dataset.from_tensor_slices(index).map(take).prefetch(2)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return dataset.with_options(options), steps

    def callbacks(self, validation=None, extra=()):
        """The chief's callbacks: validation metric + `metrics.jsonl`, checkpoints, TensorBoard.
        The other workers of a multi-worker run get only `extra`: they write nothing (and do
        not decode the validation set, which involves no other worker)."""
        if not self.chief:
            return [*extra]
        return [
            Validation(validation, self.out),
            EpochCheckpoint(self.out),
            tensorboard_callback(self.path("tensorboard")),
            *extra,
        ]

    def fit(self, model, dataset, steps, validation=None, extra_callbacks=()):
        """`model.fit` from `initial_epoch` to `--epochs` with the shared callbacks."""
        start = time.time()
        if self.initial_epoch >= self.args.epochs:
            print(
                f"Already trained {self.initial_epoch} epochs (--epochs {self.args.epochs}); nothing to do."
            )
            return None
        if self.args.distribute != "none":
            _build_from_spec(model, dataset)
        if self.multi_worker:
            _rank1_step_logs(model)
        self.history = model.fit(
            dataset,
            epochs=self.args.epochs,
            initial_epoch=self.initial_epoch,
            steps_per_epoch=steps,
            callbacks=self.callbacks(validation, extra_callbacks),
            verbose=self.args.verbose,
            shuffle=False,  # the dataset is already in its seeded order
        )
        self.train_seconds = time.time() - start
        return self.history


# ---------------------------------------------------------------------------- text models
def pad_ids(rows, length=None, pad_id=0):
    """List of id lists -> int32 `[N, length]` (default: the longest row)."""
    length = max([len(r) for r in rows] + [1]) if length is None else length
    out = np.full((len(rows), length), pad_id, np.int32)
    for i, r in enumerate(rows):
        r = list(r)[:length]
        out[i, : len(r)] = r
    return out


def encode_pairs(pairs, source_tokenizer, target_tokenizer=None, max_source=None, max_target=None):
    """(source, target) str pairs -> `(x, y)` for `fit`: `x = {"source", "target_in"}`,
    `y` = target_out (teacher forcing: `target_in = [start, y..]`, `y = [y.., end]`)."""
    target_tokenizer = target_tokenizer or source_tokenizer
    sources = [s for s, _ in pairs]
    targets = [t for _, t in pairs]
    src = source_tokenizer.tokenize(sources, max_length=max_source)
    tgt = target_tokenizer.tokenize(
        targets,
        add_start=True,
        add_end=True,
        max_length=None if max_target is None else max_target + 1,
    )
    src = pad_ids(src.to_list())
    tgt = pad_ids(tgt.to_list())
    target_in = tgt[:, :-1].copy()
    target_in[target_in == target_tokenizer.end_id] = target_tokenizer.pad_id
    return {"source": src, "target_in": target_in}, tgt[:, 1:].copy()


def greedy_decoder(model, end_id, start_id, max_length):
    """`fn(source_ids [B, S]) -> dict` (greedy_search's outputs) compiled once with tf.function."""
    import tensorflow as tf

    from keras_attn.decoding import greedy_search

    @tf.function(reduce_retracing=True)
    def decode(source_ids):
        encoded = model.encode(source_ids)
        state = model.initial_decode_state(encoded, max_length)
        start = tf.fill(tf.shape(source_ids)[:1], tf.constant(start_id, tf.int32))
        return greedy_search(
            model.decode_step,
            state,
            start,
            end_id,
            max_length=max_length,
            source_mask=tf.cast(encoded["source_mask"], tf.bool),
        )

    return decode


def decode_texts(decode, source_ids, tokenizer, batch_size=256):
    """Greedy-decode `source_ids` in batches -> (texts, [alignments per example `[T, S]`])."""
    texts, aligns = [], []
    for i in range(0, len(source_ids), batch_size):
        chunk = source_ids[i : i + batch_size]
        out = decode(chunk)
        seqs = out["sequences"].numpy()
        lengths = out["lengths"].numpy()
        decoded = tokenizer.detokenize(seqs).numpy()
        texts += [t.decode("utf-8") for t in decoded]
        if "alignments" in out:
            a = out["alignments"].numpy()
            aligns += [a[j, : lengths[j]] for j in range(len(chunk))]
    return texts, aligns


def token_strings(tokenizer, ids):
    """Ids -> the display string of each id (for heat-map labels)."""
    vocab = tokenizer.vocabulary
    return [vocab[i] if 0 <= i < len(vocab) else "?" for i in ids]
