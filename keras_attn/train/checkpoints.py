"""A run's checkpoints: per-epoch weights with the optimizer's state and the model's seed
generator states, `latest.json` pointing at the last one, and checkpoint averaging."""

import json
import os

import keras
import numpy as np

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.json"


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


def save_weights(model, path):
    """`model.save_weights(path, overwrite=True)`, safe from one process of a multi-process
    `keras.distribution` job (the chief saves alone). Keras' weights writer builds a throwaway
    optimizer at every save to list the attributes it skips (its cache of that list is read
    under one key and written under another), and under a multi-process distribution creating
    that optimizer's variables is a step every process must join: a save made by the chief
    alone would leave the processes out of step. The save runs with the distribution unset, so
    only that throwaway object is local; the model's variables are read as they are."""

    distribution = keras.distribution.distribution()
    if distribution is None:
        model.save_weights(path, overwrite=True)
        return
    keras.distribution.set_distribution(None)
    try:
        model.save_weights(path, overwrite=True)
    finally:
        keras.distribution.set_distribution(distribution)


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
