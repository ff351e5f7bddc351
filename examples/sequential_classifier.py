"""Classify scikit-learn's handwritten digits read row by row, with a plain `keras.Sequential`:

    model = keras.Sequential()
    model.add(keras.Input((8, 8)))                  # 8 rows of 8 pixels: a sequence of 8 vectors
    model.add(keras.layers.Dense(d_model))          # pixels of a row -> a row embedding
    model.add(PositionalEncoding())                 # + which row it is
    model.add(MultiHeadAttention(4, d_model // 4))  # self-attention over the rows (value=None)
    model.add(keras.layers.GlobalAveragePooling1D())
    model.add(keras.layers.Dense(10, activation="softmax"))

    python examples/sequential_classifier.py [--epochs 60] [--resume] [--export DIR]

Validation accuracy after each epoch; at the end the test accuracy (`results.json`), heat maps of
the self-attention (rows attending to rows, averaged over heads) of a few validation digits, and
with `--export DIR` a SavedModel (`model.export`, endpoint `serve`: images [B, 8, 8] -> probabilities).
"""

from __future__ import annotations

import json
import os

import numpy as np

from keras_attn import train


def build_parser():
    """The script's flags."""
    p = train.base_parser(__doc__.splitlines()[0], epochs=60, batch_size=32, out="runs/classifier")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    return p


def parse_args(argv=None):
    return train.parse_run_args(build_parser(), argv, smoke=dict(d_model=16, heads=2))


def load_splits(seed, smoke=False):
    """sklearn digits (pixels / 16) -> {"train", "val", "test"}: (images [N, 8, 8], labels [N])."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images, labels = (digits.images / 16.0).astype(np.float32), digits.target.astype(np.int32)
    x_rest, x_test, y_rest, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels
    )
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=0.125, random_state=seed, stratify=y_rest
    )
    splits = {"train": (x_train, y_train), "val": (x_val, y_val), "test": (x_test, y_test)}
    if smoke:
        splits = {k: (x[:128], y[:128]) for k, (x, y) in splits.items()}
    return splits


def build_model(args):
    import keras

    from keras_attn.layers import MultiHeadAttention, PositionalEncoding

    model = keras.Sequential(name="row_reader")
    model.add(keras.Input((8, 8)))
    model.add(keras.layers.Dense(args.d_model, activation="relu", name="row_embedding"))
    model.add(PositionalEncoding(name="positions"))
    model.add(
        MultiHeadAttention(
            args.heads, args.d_model // args.heads, dropout=args.dropout, name="self_attention"
        )
    )
    model.add(keras.layers.GlobalAveragePooling1D(name="pooling"))
    model.add(keras.layers.Dropout(args.dropout))
    model.add(keras.layers.Dense(10, activation="softmax", name="classes"))
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=args.jit_compile,
    )
    return model


def accuracy(model, x, y):
    """Calls the model directly (not `model.predict`, whose multi-worker form is a collective
    step that every worker would have to join: the chief alone validates)."""
    probs = np.concatenate(
        [np.asarray(model(x[i : i + 512], training=False)) for i in range(0, len(x), 512)]
    )
    return float(np.mean(np.argmax(probs, -1) == y))


def attention_maps(model, images):
    """Self-attention weights `[N, 8, 8]` (averaged over heads) of `images`."""
    x = images
    for layer in model.layers:
        if layer.name == "self_attention":
            _, weights = layer(x, return_attention_scores=True, training=False)
            return np.asarray(weights).mean(axis=1)
        x = layer(x)
    raise ValueError("The model has no `self_attention` layer. Received: a model without it")


def main(argv=None):
    args = parse_args(argv)
    run = train.Run(args)
    splits = load_splits(args.seed, args.smoke)
    with run.strategy.scope():
        model = build_model(args)
    run.restore(model)
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = (
        splits["train"],
        splits["val"],
        splits["test"],
    )
    print(
        f"{len(y_train)} training digits, {model.count_params()} parameters, epochs {args.epochs}",
        flush=True,
    )

    dataset, steps = run.batches(x_train, y_train)
    run.fit(model, dataset, steps, validation=lambda m: {"val_accuracy": accuracy(m, x_val, y_val)})
    if not run.chief:  # multi-worker: the chief evaluates, plots and exports
        return None

    results = {
        "task": "digits row by row",
        "model": "Sequential(PE, MHA, pooling)",
        "epochs": args.epochs,
        "train_seconds": round(run.train_seconds, 1),
        "val_accuracy": accuracy(model, x_val, y_val),
        "test_accuracy": accuracy(model, x_test, y_test),
    }
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)

    from keras_attn.plotting import plot_attention

    count = min(args.heatmaps, len(y_val))
    paths = []
    if count:
        maps = attention_maps(model, x_val[:count])
        rows = [f"row {r}" for r in range(8)]
        for i in range(count):
            paths.append(
                plot_attention(
                    maps[i],
                    rows,
                    rows,
                    run.path("attention", f"val_{i}.png"),
                    title=f"digit {y_val[i]}",
                )
            )
        print("Attention heat maps: " + ", ".join(paths), flush=True)
    if args.export:
        path = os.path.join(args.export, str(args.export_version))
        model.export(path, verbose=False)
        print(f"Exported SavedModel: {path}", flush=True)
    run.print_outputs()
    return results


if __name__ == "__main__":
    main()
