"""One training run: seeds, output directory, distribution strategy, resume, the batches of its
epochs and `fit` with the run's callbacks.

A script does:

    run = Run(config)                        # seeds, output dir, strategy
    with run.strategy.scope():
        model = build(); model.compile(...)
    run.restore(model)                       # with `resume`: weights, optimizer, epoch
    dataset, steps = run.batches(x, y)       # seeded order per epoch, from run.initial_epoch
    run.fit(model, dataset, steps, validation=fn)  # fn(model) -> {"val_metric": value}

`config` is any object with the run's settings as attributes (`TranslatorConfig`, or the
namespace of `parse_run_args`): epochs, batch_size, seed, out, resume, distribute, verbose, and
optionally logical_cpus, coordinator_address, num_processes, process_id, time_budget (minutes).

Output directory (`out`):

    checkpoints/epoch-0003.weights.h5   weights + optimizer state after epoch 3 (1-based)
    checkpoints/latest.json             {"epoch": 3, "file": "epoch-0003.weights.h5", ...}
    metrics.jsonl                       one line per epoch: the fit logs, the validation metric, epoch (CPU) seconds
    tensorboard/                        keras.callbacks.TensorBoard logs
    jax_cache/                          JAX: the XLA programs compiled (`use_compilation_cache`)

Resuming: the data order of epoch `e` depends only on `(seed, e)`, the optimizer's state
and step counter are in the checkpoint, and so are the states of the model's random seed
generators (dropout masks; `latest.json`, "seed_states": `save_weights` leaves them out), so a run
stopped after epoch `k` and resumed trains epochs `k+1...` on the same batches with the same
dropout masks as an uninterrupted run, and ends with the same weights and metrics.
"""

import json
import os
import time

import keras
import numpy as np

from keras_attn.train.batching import (
    _pad_to_bucket,
    _trim,
    epoch_order,
    pad_numpy_to_bucket,
    pads_to_buckets,
)
from keras_attn.train.callbacks import (
    EpochCheckpoint,
    TimeBudget,
    Validation,
    budget_tail,
    spent_epoch_seconds,
    tensorboard_callback,
)
from keras_attn.train.checkpoints import CHECKPOINT_DIR, LATEST, latest_checkpoint, seed_states
from keras_attn.train.strategies import (
    TF_STRATEGIES,
    JaxDataParallel,
    check_global_batch,
    get_strategy,
    is_chief,
)


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


COMPILATION_CACHE = "jax_cache"


def use_compilation_cache(path):
    """On JAX: keep every XLA program compiled from now on in the directory `path`, and load a
    program from there instead of compiling it when it was compiled before (JAX's persistent
    compilation cache), so that a resumed or repeated run compiles no train step, evaluation
    or decoding program that a run before it compiled. Every program is kept, however quickly
    it compiles (JAX's own threshold keeps those of a second or more). The directory holds
    executable code: it is for this user's runs only. Returns `path`; None (nothing done) with
    `path` None or on another backend."""
    if path is None or keras.backend.backend() != "jax":
        return None
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    compilation_cache.reset_cache()  # JAX opens its cache once: this directory from now on
    compilation_cache.set_cache_dir(path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


def tensorboard_runs():
    """Whether TensorBoard logs can be written here (they are written with TensorFlow)."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


class Run:
    """One training run's setup: seeds, output directory, strategy, resume and `fit`."""

    def __init__(self, args):
        self.args = args
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
        # before anything compiles; one process only (the processes of a job would hold
        # programs from two sources, and the others write nothing)
        self.compilation_cache = use_compilation_cache(
            self.path(COMPILATION_CACHE)
            if getattr(args, "compilation_cache", True) and not self.multi_worker
            else None
        )
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

    def print_outputs(self):
        """The run's last line: where its files are (only the chief writes them)."""
        print(
            f"Outputs in {os.path.abspath(self.out)}: checkpoints, metrics, TensorBoard logs, "
            "heat maps"
            if self.chief
            else "Outputs: none on this worker (the chief writes them)",
            flush=True,
        )

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
            to_bucket = pads_to_buckets()
            if isinstance(bx, dict):
                bx = {k: (_trim(v, to_bucket=to_bucket) if k in trim else v) for k, v in bx.items()}
            if "y" in trim:
                by = _trim(by, to_bucket=to_bucket)
            return share(bx, by)

        dataset = tf.data.Dataset.from_tensor_slices(index).map(take).prefetch(2)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return dataset.with_options(options), steps

    def stream(self, dataset, steps, shapes=None):
        """An endless `dataset` of batches (e.g. `token_batches`) cut into Keras epochs of
        `steps` batches, from `initial_epoch`: the batches a resumed run skips are the ones the
        interrupted run trained on (the stream depends only on the seed), so `--resume` trains
        on the same batches as an uninterrupted run. Returns `(dataset, steps)`. A Python
        iterator of NumPy batches (`numpy_token_batches`, no TensorFlow) is cut the same way.
        On JAX each batch is padded to its length bucket's width and, with `shapes` (the
        stream's `BucketShapes`), to the rows of its bucket's full batch, so the compiled train
        step sees one shape per bucket (`batching`)."""
        if not hasattr(dataset, "skip"):
            return self._stream_numpy(dataset, steps, shapes), steps
        import tensorflow as tf

        dataset = dataset.skip(self.initial_epoch * steps)
        if pads_to_buckets():  # one shape per length bucket for the compiled step
            dataset = dataset.map(lambda x, y: _pad_to_bucket((x, y), shapes=shapes))
        if isinstance(self.strategy, JaxDataParallel):
            replicas = self.strategy.num_replicas_in_sync

            def cut(x, y):  # an equal share per device; rows past the last multiple are left out
                rows = tf.shape(y)[0] // replicas * replicas
                x = tf.nest.map_structure(lambda t: t[:rows], x)
                return self._share(rows)(x, y[:rows])

            dataset = dataset.map(cut).filter(lambda x, y: tf.shape(y)[0] > 0)
        dataset = dataset.prefetch(2)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return dataset.with_options(options), steps

    def _stream_numpy(self, batches, steps, shapes=None):
        """`stream` of an iterator of `(x, y)` NumPy batches: a generator."""
        replicas = self.strategy.num_replicas_in_sync
        process, processes = self.process_share
        to_bucket = pads_to_buckets()
        for _ in range(self.initial_epoch * steps):
            next(batches)
        for x, y in batches:
            if to_bucket:
                x, y = pad_numpy_to_bucket(x, y, shapes=shapes)
            rows = len(y) // replicas * replicas
            if rows == 0:
                continue
            size = rows // processes
            share = slice(process * size, (process + 1) * size)
            x, y = {k: v[share] for k, v in x.items()}, y[share]
            yield x, y

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
            *([tensorboard_callback(self.path("tensorboard"))] if tensorboard_runs() else []),
            *(
                [TimeBudget(budget, self.spent[0], budget_tail(self.out), self.out)]
                if budget > 0
                else []
            ),
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
        spent = self.spent[0]
        if self.time_budget and spent + budget_tail(self.out) >= self.time_budget:
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
