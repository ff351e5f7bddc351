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
DISTRIBUTE = ("none", "mirrored", "multi-worker", "data-parallel")
TF_STRATEGIES = ("mirrored", "multi-worker")


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
        help="TensorFlow: mirrored (all local devices) or multi-worker (TF_CONFIG); JAX: "
        "data-parallel (keras.distribution.DataParallel over every device of every process)",
    )
    p.add_argument(
        "--coordinator-address",
        default=None,
        metavar="HOST:PORT",
        help="data-parallel over several processes: the address of process 0 (every process gives the same)",
    )
    p.add_argument(
        "--num-processes",
        type=int,
        default=1,
        help="data-parallel: the number of processes (default 1: this process's devices)",
    )
    p.add_argument(
        "--process-id", type=int, default=0, help="data-parallel: this process's id, 0 ... N-1"
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
    p.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the train step with XLA (always on with KERAS_BACKEND=jax, where a step "
        "that is not compiled runs op by op)",
    )
    p.add_argument(
        "--verbose",
        type=int,
        default=1,
        choices=(0, 1, 2),
        help="fit's verbosity (1: progress bar)",
    )
    return p


class NoDistribution:
    """JAX without `--distribute`: one process, Keras' default placement."""

    num_replicas_in_sync = 1
    process_id, num_processes = 0, 1

    def scope(self):
        import contextlib

        return contextlib.nullcontext()


class JaxDataParallel:
    """`--distribute data-parallel` on JAX: `keras.distribution.DataParallel` over the devices
    of every process, set as Keras' global distribution. The variables are replicated on every
    device; each step's global batch is split along the batch axis over all devices (each
    process feeds its consecutive share, `Run.batches`), and the gradient is the mean over the
    global batch, as in one process."""

    def __init__(self, coordinator_address=None, num_processes=1, process_id=0):
        import keras

        if num_processes < 1 or not 0 <= process_id < num_processes:
            raise ValueError(
                "`--process-id` must be in 0 ... `--num-processes` - 1. "
                f"Received: num_processes={num_processes}, process_id={process_id}"
            )
        if num_processes > 1:
            if not coordinator_address:
                raise ValueError(
                    "Data-parallel training over several processes needs "
                    "`--coordinator-address HOST:PORT` (process 0's). "
                    f"Received: coordinator_address={coordinator_address!r}"
                )
            keras.distribution.initialize(coordinator_address, num_processes, process_id)
        self.process_id, self.num_processes = process_id, num_processes
        self.devices = keras.distribution.list_devices()
        # Run.batches shards each global batch over the processes itself (so every process's
        # share is trimmed to the same width); Keras assembles the global batch from them.
        self.distribution = keras.distribution.DataParallel(
            devices=self.devices, auto_shard_dataset=False
        )
        keras.distribution.set_distribution(self.distribution)
        self.num_replicas_in_sync = len(self.devices)

    def scope(self):
        return self.distribution.scope()


def get_strategy(name, logical_cpus=0, coordinator_address=None, num_processes=1, process_id=0):
    """`"none"` -> the default strategy; `"mirrored"`, `"multi-worker"` -> tf.distribute
    strategies (TensorFlow backend); `"data-parallel"` -> `JaxDataParallel` (JAX backend).
    `logical_cpus=N` (N >= 2) first splits the CPU into N logical devices; without a GPU, mirrored
    then runs one replica on each (TensorFlow's default would be the one CPU device); on JAX the
    CPU then shows N devices (set before JAX starts its backend)."""
    import keras

    if logical_cpus < 0 or logical_cpus == 1:
        raise ValueError(
            f"`--logical-cpus` must be 0 (as the machine is) or >= 2. Received: logical_cpus={logical_cpus}"
        )
    if name not in (None,) + DISTRIBUTE:
        raise ValueError(f"`distribute` must be one of {DISTRIBUTE}. Received: distribute={name!r}")
    backend = keras.backend.backend()
    if name == "data-parallel" and backend != "jax":
        raise ValueError(
            "`--distribute data-parallel` is keras.distribution, which runs on JAX: run with "
            f"KERAS_BACKEND=jax (or use mirrored / multi-worker). Received: backend={backend!r}"
        )
    if name in TF_STRATEGIES and backend != "tensorflow":
        raise ValueError(
            f"`--distribute {name}` is a tf.distribute strategy: run with KERAS_BACKEND=tensorflow "
            f"(on JAX use data-parallel). Received: backend={backend!r}"
        )
    if name != "data-parallel" and (num_processes != 1 or process_id or coordinator_address):
        raise ValueError(
            "`--coordinator-address`, `--num-processes` and `--process-id` belong to "
            f"`--distribute data-parallel`. Received: distribute={name!r}"
        )
    if backend == "jax":
        if logical_cpus:
            import jax

            jax.config.update("jax_num_cpu_devices", logical_cpus)
        if name == "data-parallel":
            return JaxDataParallel(coordinator_address, num_processes, process_id)
        return NoDistribution()
    import tensorflow as tf

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
    if isinstance(strategy, (NoDistribution, JaxDataParallel)):
        return strategy.process_id == 0
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


# On JAX a compiled train step has static shapes: each new batch shape compiles it again. There
# the widths of token batches are rounded up to a multiple of this (padding, masked like any
# other), so a run compiles a few shapes instead of one per distinct longest row.
JAX_WIDTH_MULTIPLE = 8


def width_multiple():
    """`JAX_WIDTH_MULTIPLE` on the JAX backend, else 1 (batches keep their exact widths)."""
    import keras

    return JAX_WIDTH_MULTIPLE if keras.backend.backend() == "jax" else 1


def _trim(tensor, pad_id=0, multiple=1):
    """Cut trailing all-padding columns of a `[B, T]` int batch, keeping a width that is a
    multiple of `multiple` (or `T`)."""
    import tensorflow as tf

    used = tf.reduce_any(tf.not_equal(tensor, pad_id), axis=0)
    width = tf.maximum(tf.reduce_max(tf.where(used, tf.range(1, tf.shape(tensor)[1] + 1), 0)), 1)
    if multiple > 1:
        width = tf.minimum((width + multiple - 1) // multiple * multiple, tf.shape(tensor)[1])
    return tensor[:, :width]


def _pad_width(tensor, multiple, pad_id=0):
    """A `[B, T]` int batch padded with `pad_id` to a width that is a multiple of `multiple`;
    any other tensor as it is."""
    import tensorflow as tf

    if multiple <= 1 or tensor.shape.rank != 2 or not tensor.dtype.is_integer:
        return tensor
    extra = (multiple - tf.shape(tensor)[1] % multiple) % multiple
    return tf.pad(tensor, [[0, 0], [0, extra]], constant_values=pad_id)


def save_weights(model, path):
    """`model.save_weights(path, overwrite=True)`, safe from one process of a multi-process
    `keras.distribution` job (the chief saves alone). Keras' weights writer builds a throwaway
    optimizer at every save to list the attributes it skips (its cache of that list is read
    under one key and written under another), and under a multi-process distribution creating
    that optimizer's variables is a step every process must join: a save made by the chief
    alone would leave the processes out of step. The save runs with the distribution unset, so
    only that throwaway object is local; the model's variables are read as they are."""
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None:
        model.save_weights(path, overwrite=True)
        return
    keras.distribution.set_distribution(None)
    try:
        model.save_weights(path, overwrite=True)
    finally:
        keras.distribution.set_distribution(distribution)


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


class TimeBudget:
    """Keras callback: stop training after the epoch (its checkpoint written) after which
    another epoch like the longest so far would end past `seconds` of training. `spent` and
    `longest`: the seconds and the longest epoch of the epochs a resumed run already trained
    (`spent_epoch_seconds`), so the budget is the run's, resumed parts together."""

    def __new__(cls, seconds, spent=0.0, longest=0.0):
        import keras

        class _TimeBudget(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.start, self.longest, self.stopped_at = time.time() - spent, longest, None

            def on_epoch_begin(self, epoch, logs=None):
                self.epoch_start = time.time()

            def on_epoch_end(self, epoch, logs=None):
                now = time.time()
                self.longest = max(self.longest, now - self.epoch_start)
                if now - self.start + self.longest > seconds:
                    self.model.stop_training = True
                    self.stopped_at = epoch + 1
                    print(
                        f"Time budget ({seconds / 60:.0f} min): stopping after epoch {epoch + 1}",
                        flush=True,
                    )

        return _TimeBudget()


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
    dict inputs, and is an extra collective step anyway."""
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
        self.strategy = get_strategy(
            args.distribute,
            getattr(args, "logical_cpus", 0),
            getattr(args, "coordinator_address", None),
            getattr(args, "num_processes", 1),
            getattr(args, "process_id", 0),
        )
        # Under MultiWorkerMirroredStrategy every worker trains; only the chief writes files.
        self.chief = is_chief(self.strategy)
        # A JAX run feeds this process's share of each global batch: (process id, processes).
        self.process_share = (
            getattr(self.strategy, "process_id", 0),
            getattr(self.strategy, "num_processes", 1),
        )
        resolver = getattr(self.strategy, "cluster_resolver", None)
        self.multi_worker = (
            resolver is not None and bool(resolver.cluster_spec().as_dict())
        ) or self.process_share[1] > 1
        check_global_batch(args.batch_size, self.strategy.num_replicas_in_sync)
        if args.distribute != "none":
            if resolver is not None and self.multi_worker:
                role = f"{resolver.task_type} {resolver.task_id}, "
            elif self.multi_worker:
                role = f"process {self.process_share[0]} of {self.process_share[1]}, "
            else:
                role = ""
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
        share = self._share(batch)

        def take(idx):
            bx = (
                {k: tf.gather(v, idx) for k, v in xs.items()}
                if isinstance(xs, dict)
                else tf.gather(xs, idx)
            )
            by = tf.gather(ys, idx)
            multiple = width_multiple()
            if isinstance(bx, dict):
                bx = {k: (_trim(v, multiple=multiple) if k in trim else v) for k, v in bx.items()}
            if "y" in trim:
                by = _trim(by, multiple=multiple)
            return share(bx, by)

        dataset = tf.data.Dataset.from_tensor_slices(index).map(take).prefetch(2)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return dataset.with_options(options), steps

    def stream(self, dataset, steps):
        """An endless `dataset` of batches (e.g. `token_batches`) cut into Keras epochs of
        `steps` batches, from `initial_epoch`: the batches a resumed run skips are the ones the
        interrupted run trained on (the stream depends only on the seed), so `--resume` trains
        on the same batches as an uninterrupted run. Returns `(dataset, steps)`."""
        import tensorflow as tf

        dataset = dataset.skip(self.initial_epoch * steps)
        if isinstance(self.strategy, JaxDataParallel):
            replicas = self.strategy.num_replicas_in_sync

            def cut(x, y):  # an equal share per device; rows past the last multiple are left out
                rows = tf.shape(y)[0] // replicas * replicas
                x = tf.nest.map_structure(lambda t: t[:rows], x)
                return self._share(rows)(x, y[:rows])

            dataset = dataset.map(cut).filter(lambda x, y: tf.shape(y)[0] > 0)
        multiple = width_multiple()
        if multiple > 1:  # a bounded set of shapes for the compiled step (`JAX_WIDTH_MULTIPLE`)
            dataset = dataset.map(
                lambda x, y: tf.nest.map_structure(lambda t: _pad_width(t, multiple), (x, y))
            )
        dataset = dataset.prefetch(2)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return dataset.with_options(options), steps

    def _share(self, batch):
        """`fn(x, y)` -> this process's consecutive rows of a global batch of `batch` rows
        (all of them in one process; trimmed widths are the global batch's)."""
        import tensorflow as tf

        process, processes = self.process_share
        if processes == 1:
            return lambda x, y: (x, y)

        def share(x, y):
            size = batch // processes
            return tf.nest.map_structure(lambda t: t[process * size : (process + 1) * size], (x, y))

        return share

    def callbacks(self, validation=None, extra=(), keep=3):
        """The chief's callbacks: validation metric + `metrics.jsonl`, checkpoints, TensorBoard.
        The other workers of a multi-worker run get only `extra`: they write nothing (and do
        not decode the validation set, which involves no other worker)."""
        if not self.chief:
            return [*extra]
        budget = self.time_budget
        return [
            Validation(validation, self.out),
            EpochCheckpoint(self.out, keep=keep),
            tensorboard_callback(self.path("tensorboard")),
            *([TimeBudget(budget, *self.spent)] if budget > 0 else []),
            *extra,
        ]

    @property
    def time_budget(self):
        """`--time-budget` in seconds (0: none)."""
        return float(getattr(self.args, "time_budget", 0) or 0) * 60.0

    @property
    def spent(self):
        """`(seconds, longest epoch)` of the epochs trained before this process resumed."""
        return spent_epoch_seconds(self.out, self.initial_epoch)

    def fit(self, model, dataset, steps, validation=None, extra_callbacks=(), keep=3):
        """`model.fit` from `initial_epoch` to `--epochs` with the shared callbacks (`keep`:
        the epoch checkpoints kept)."""
        start = time.time()
        # the run's training time: the epochs trained before a resume count too
        self.train_seconds = self.spent[0]
        if self.initial_epoch >= self.args.epochs:
            print(
                f"Already trained {self.initial_epoch} epochs (--epochs {self.args.epochs}); nothing to do."
            )
            return None
        spent, longest = self.spent
        if self.time_budget and spent + longest > self.time_budget:
            print(
                f"Time budget ({self.time_budget / 60:.0f} min) spent by the {self.initial_epoch} "
                f"epochs already trained ({spent / 60:.1f} min); nothing to do."
            )
            return None
        if self.args.distribute in TF_STRATEGIES:
            _build_from_spec(model, dataset)
        if self.multi_worker and self.args.distribute in TF_STRATEGIES:
            _rank1_step_logs(model)
        self.history = model.fit(
            dataset,
            epochs=self.args.epochs,
            initial_epoch=self.initial_epoch,
            steps_per_epoch=steps,
            callbacks=self.callbacks(validation, extra_callbacks, keep=keep),
            verbose=self.args.verbose,
            shuffle=False,  # the dataset is already in its seeded order
        )
        self.train_seconds += time.time() - start
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
    """`fn(source_ids [B, S]) -> dict` (greedy_search's outputs) compiled once with tf.function
    (TensorFlow) or `jax.jit` (JAX)."""
    import keras

    if keras.backend.backend() == "jax":
        return _jax_greedy_decoder(model, end_id, start_id, max_length)
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


def _jax_greedy_decoder(model, end_id, start_id, max_length):
    """The JAX twin of `greedy_decoder`: one `jax.jit` function of the model's variable values
    and the ids (read in a `StatelessScope`, so a call sees the weights of that moment, not of
    the first trace). Across processes the values are this process's copies (the variables are
    replicated), so the chief decodes alone. Outputs are NumPy arrays."""
    import jax
    import keras

    from keras_attn.decoding import greedy_search

    def search(values, source_ids):
        with keras.StatelessScope(list(zip(model.variables, values))):
            encoded = model.encode(source_ids)
            state = model.initial_decode_state(encoded, max_length)
            start = keras.ops.full((source_ids.shape[0],), start_id, dtype="int32")
            return greedy_search(
                model.decode_step,
                state,
                start,
                end_id,
                max_length=max_length,
                source_mask=keras.ops.cast(encoded["source_mask"], "bool"),
            )

    compiled = jax.jit(search)

    def decode(source_ids):
        local = jax.process_count() > 1
        values = [np.asarray(v.value) if local else v.value for v in model.variables]
        out = compiled(values, np.asarray(source_ids, np.int32))
        return {k: np.asarray(v) for k, v in out.items()}

    return decode


def decode_texts(decode, source_ids, tokenizer, batch_size=256):
    """Greedy-decode `source_ids` in batches -> (texts, [alignments per example `[T, S]`])."""
    texts, aligns = [], []
    for i in range(0, len(source_ids), batch_size):
        chunk = source_ids[i : i + batch_size]
        out = decode(chunk)
        seqs = np.asarray(out["sequences"])
        lengths = np.asarray(out["lengths"])
        decoded = tokenizer.detokenize(seqs).numpy()
        texts += [t.decode("utf-8") for t in decoded]
        if "alignments" in out:
            a = np.asarray(out["alignments"])
            aligns += [a[j, : lengths[j]] for j in range(len(chunk))]
    return texts, aligns


def token_strings(tokenizer, ids):
    """Ids -> the display string of each id (for heat-map labels)."""
    vocab = tokenizer.vocabulary
    return [vocab[i] if 0 <= i < len(vocab) else "?" for i in ids]


# ------------------------------------------------------------------- streamed text corpora
def bucket_boundaries(max_length, first=8, growth=1.25):
    """Length bucket boundaries `8, 10, 12, ... > max_length` (each about `growth` times the
    previous), the last one past `max_length` so that every kept example has a bucket."""
    bounds, b = [], first
    while b <= max_length:
        bounds.append(b)
        b = max(b + 2, int(b * growth))
    bounds.append(max_length + 1)
    return bounds


def bucket_batch_sizes(boundaries, max_tokens):
    """Examples per batch in each bucket: a batch of bucket `i` (lengths below `boundaries[i]`)
    holds at most `max_tokens` positions counting padding (`size * (boundaries[i] - 1)`), and
    at least one example. The bucket past the last boundary is never used (lengths are cut)."""
    return [max(1, int(max_tokens) // (b - 1)) for b in boundaries] + [1]


def token_batches(
    path,
    tokenizer,
    max_tokens=4096,
    max_length=128,
    seed=0,
    shuffle_buffer=20000,
    chunk=256,
    repeat=True,
    source_transform=None,
):
    """An endless, seeded `tf.data.Dataset` of `({"source", "target_in"}, target_out)` batches
    read from a `source<TAB>target` file and tokenized in the graph.

    Memory is bounded whatever the file's size: lines are streamed (`TextLineDataset`), shuffled
    in a buffer of `shuffle_buffer` lines (re-shuffled each pass, seeded), tokenized `chunk`
    at a time and grouped into length buckets (`bucket_boundaries`), each batch holding at most
    `max_tokens` token positions, padding included (`bucket_batch_sizes`; as fairseq's
    `--max-tokens`). Sequences are cut to `max_length` tokens (target: start/end included).
    `source_transform(ids, index) -> ids` (ragged `[chunk, None]` int32, the chunk's index in
    the stream) is applied to the source ids (e.g. `token_dropout`). The order depends only on `seed`."""
    import tensorflow as tf

    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, max_tokens)
    lines = tf.data.TextLineDataset(os.fspath(path))
    lines = lines.filter(lambda line: tf.strings.regex_full_match(line, "[^\\t]+\\t[^\\t]+.*"))
    lines = lines.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        lines = lines.repeat()

    def tokenize(index, batch):
        fields = tf.strings.split(batch, "\t", maxsplit=2).to_tensor("", shape=[None, 2])
        src = tokenizer.tokenize(fields[:, 0], max_length=max_length)
        tgt = tokenizer.tokenize(
            fields[:, 1], add_start=True, add_end=True, max_length=max_length + 1
        )
        if source_transform is not None:
            src = source_transform(src, index)
        # Dense rows and their lengths: unbatched below into one tensor per sequence.
        return src.to_tensor(), src.row_lengths(), tgt.to_tensor(), tgt.row_lengths()

    examples = (
        lines.batch(chunk)
        .enumerate()
        .map(tokenize)
        .unbatch()
        .map(lambda src, ns, tgt, nt: (src[:ns], tgt[:nt]))
    )

    def length(src, tgt):
        return tf.maximum(tf.shape(src)[0], tf.shape(tgt)[0] - 1)

    batches = examples.bucket_by_sequence_length(
        length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=sizes,
        padded_shapes=([None], [None]),
        padding_values=(tokenizer.pad_id, tokenizer.pad_id),
    )

    def split(src, tgt):
        target_in = tgt[:, :-1]
        target_in = tf.where(tf.equal(target_in, tokenizer.end_id), tokenizer.pad_id, target_in)
        return {"source": src, "target_in": target_in}, tgt[:, 1:]

    return batches.map(split)


def token_dropout(rate, unk_id, seed=0):
    """A `source_transform` for `token_batches`: each source token becomes `unk_id` with
    probability `rate` (word dropout, Sennrich & Zhang 2019); the noise of chunk `index` is a
    stateless function of `(seed, index)`, so a resumed stream draws the same."""
    import tensorflow as tf

    def transform(ids, index):
        values = ids.flat_values
        noise = tf.random.stateless_uniform(
            tf.shape(values), seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(index, tf.int64)])
        )
        return ids.with_flat_values(tf.where(noise < rate, tf.cast(unk_id, values.dtype), values))

    return transform


def count_tokens(path, tokenizer, max_length=128, chunk=4096):
    """`(lines, source tokens, target tokens, longest target)` of a TSV file, tokenized as
    `token_batches` does (to size a Keras epoch and the decoding limit)."""
    lines, src_total, tgt_total, longest = 0, 0, 0, 0
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    rows = [r for r in rows if len(r) >= 2 and r[0] and r[1]]
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        src = tokenizer.tokenize([r[0] for r in part], max_length=max_length).row_lengths()
        tgt = tokenizer.tokenize([r[1] for r in part], max_length=max_length - 1).row_lengths()
        lines += len(part)
        src_total += int(src.numpy().sum())
        tgt_total += int(tgt.numpy().sum()) + len(part)
        longest = max(longest, int(tgt.numpy().max(initial=0)))
    return lines, src_total, tgt_total, longest


def last_checkpoints(out_dir, n):
    """The paths of the last `n` epoch checkpoints still in `out_dir` (oldest first)."""
    epoch, _ = latest_checkpoint(out_dir)
    paths = [
        os.path.join(out_dir, CHECKPOINT_DIR, f"epoch-{e:04d}.weights.h5")
        for e in range(max(1, epoch - n + 1), epoch + 1)
    ]
    return [p for p in paths if os.path.exists(p)]


def average_checkpoints(model, paths):
    """Load the mean of the weights stored in `paths` (`save_weights` files of `model`) into
    `model` (checkpoint averaging, as fairseq's `average_checkpoints.py`)."""
    import numpy as np

    if not paths:
        raise ValueError("`paths` must name at least one checkpoint. Received: paths=[]")
    total = None
    for path in paths:
        model.load_weights(path)
        values = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = values if total is None else [t + v for t, v in zip(total, values)]
    model.set_weights(
        [(t / len(paths)).astype(w.dtype) for t, w in zip(total, model.get_weights())]
    )
    return model


def loop_rate(texts, repeats=3):
    """The fraction of `texts` in which one token occurs `repeats` or more times in a row
    (tokens: whitespace-separated words, and each Han / kana character on its own)."""
    import re

    texts = list(texts)
    if not texts:
        return float("nan")
    pattern = re.compile(
        r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"
    )
    looping = 0
    for text in texts:
        tokens, run = pattern.findall(text), 1
        for a, b in zip(tokens, tokens[1:]):
            run = run + 1 if a == b else 1
            if run >= repeats:
                looping += 1
                break
    return looping / len(texts)
