"""JAX vs TensorFlow on the CPU: repeated `generate` and the translator's training epoch, each
backend in its own process, rounds interleaved.

Two parts, each with one TensorFlow and one JAX worker process (`KERAS_BACKEND` is fixed per
process; `jax_training.BackendWorker`): the TensorFlow worker starts first and writes the initial
weights, the JAX worker reads them, and this process asks each side for one timed sample in
turn, round after round, so every ratio is taken within a round (median over rounds).

- **generate**: `keras_attn.decoding.generate` called eagerly, as a user calls it, on the
  translator recipe's two model families as `examples/train_translator.py --model transformer`
  and `--model bahdanau` build them (the dates settings), greedy and beam 4, batch 1 and 32. The
  first call of each row (tracing, compiling) is timed on its own, in the order of the rows;
  the repeated calls are the rounds. The best sequences of both backends are compared.
- **train**: the translator's training epoch: the model, tokenizer and length-bucketed token
  batches (`token_batches`, the same seed: the same batches in the same order) that
  `train_translator.py --corpus es` makes, and `fit` over `--train-steps` batches per epoch.
  The first epoch (which compiles) and the later ones are timed by a callback, each epoch
  waiting for this process's turn. The profile beside it: the compilations during each epoch
  and their seconds (JAX's compile events), the distinct batch shapes the step sees, and the
  input pipeline alone (the same batches drawn without training).

    .venv/bin/python benchmarks/jax_vs_tf.py [--repeats 3] [--train-steps 100] [--train-epochs 3]
    .venv/bin/python benchmarks/jax_vs_tf.py --small      # tiny models and corpus: a check that it runs

Without `--small` the tables go to benchmarks/RESULTS.md ("JAX vs TensorFlow on the CPU").
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common
from benchmarks.jax_training import TAG, BackendWorker, serve

SECTION = "jax-vs-tf"
MODELS = ("transformer", "bahdanau")
SEARCHES = {"greedy": {}, "beam 4": {"beam_size": 4}}
# generate's inputs: a target vocabulary the size of the dates recipe's, sources of
# SOURCE_LENGTH ids (the batch's rows shortened by up to a third, padded), MAX_LENGTH tokens.
FULL = dict(vocab=64, source_length=24, max_length=24, batches=(1, 32), model_flags=())
SMALL = dict(
    vocab=24,
    source_length=6,
    max_length=5,
    batches=(1, 4),
    model_flags=("--units", "16", "--embedding-dim", "8", "--layers", "1"),
)
TRAIN_SMALL_FLAGS = (
    "--units",
    "16",
    "--embedding-dim",
    "8",
    "--layers",
    "1",
    "--max-tokens",
    "256",
)
# targets of the section
REPEATED_TARGET = 1.0  # JAX's repeated calls at least as fast as TensorFlow's
FIRST_TARGET = 3.0  # JAX's first call at most 3x TensorFlow's
EPOCH_TARGET = 1.3  # JAX's epoch within 1.3x TensorFlow's


def _row(model, search, batch):
    return f"{model}, {search}, B {batch}"


# ------------------------------------------------------------------------------ generate
def _sources(cfg, batch):
    import numpy as np

    rng = np.random.RandomState(batch)
    ids = rng.randint(3, cfg["vocab"], size=(batch, cfg["source_length"])).astype("int32")
    lengths = cfg["source_length"] - rng.randint(0, cfg["source_length"] // 3 + 1, size=batch)
    lengths[0] = cfg["source_length"]
    ids[np.arange(cfg["source_length"]) >= lengths[:, None]] = 0
    return ids


def _model(name, cfg, weights_path):
    """The translator recipe's model `name` with the dates settings, its initial weights
    written to `weights_path` if absent, else read from it (both backends start alike)."""
    import keras

    from keras_attn.train import translator

    config = translator.parse_args(["--model", name, *cfg["model_flags"]])
    keras.utils.set_random_seed(0)
    model = translator.build_model(config, cfg["vocab"])
    _share_weights(model, weights_path)
    keys = (
        ("units", "layers", "heads")
        if name == "transformer"
        else ("units", "embedding_dim", "cell")
    )
    settings = {k: getattr(config, k) for k in keys}
    return model, settings


def _share_weights(model, path):
    import numpy as np

    variables = model.weights
    if os.path.exists(path):
        saved = np.load(path)
        for i, v in enumerate(variables):
            v.assign(saved[f"w{i}"])
    else:
        np.savez(path, **{f"w{i}": np.asarray(v) for i, v in enumerate(variables)})


def generate_worker(args):
    import keras

    from keras_attn.decoding import generate

    cfg = SMALL if args.small else FULL
    fns, outputs, settings = {}, {}, {}
    for name in _chosen(args.models, MODELS):
        model, settings[name] = _model(name, cfg, os.path.join(args.tmp, f"{name}.npz"))
        for search in _chosen(args.searches, SEARCHES):
            keywords = SEARCHES[search]
            for batch in _batches(args, cfg):
                source = _sources(cfg, batch)

                def call(model=model, source=source, search=search, keywords=keywords):
                    out = generate(
                        model,
                        source,
                        1,
                        2,
                        search="beam" if keywords else "greedy",
                        max_length=cfg["max_length"],
                        **keywords,
                    )
                    sequences = keras.ops.convert_to_numpy(out["sequences"])
                    return sequences[:, 0] if sequences.ndim == 3 else sequences

                fns[_row(name, search, batch)] = call
    first = {}
    for row, fn in fns.items():
        t0 = time.perf_counter()
        outputs[row] = fn().tolist()
        first[row] = time.perf_counter() - t0
    serve(fns, {"first": first, "outputs": outputs, "settings": settings})  # (one more warm-up)


def _chosen(names, all_names):
    chosen = [n.strip() for n in names.split(",")] if names else list(all_names)
    unknown = [n for n in chosen if n not in all_names]
    if unknown:
        raise ValueError(f"Choose among {list(all_names)}. Received: {', '.join(unknown)}")
    return chosen


def _batches(args, cfg):
    return [int(b) for b in args.batches.split(",")] if args.batches else list(cfg["batches"])


def run_generate(args):
    small, repeats = args.small, args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--part", "generate", "--tmp", tmp] + (["--small"] if small else [])
        for flag in ("models", "searches", "batches"):
            if getattr(args, flag):
                argv += [f"--{flag}", getattr(args, flag)]
        with BackendWorker(__file__, "tensorflow", argv) as tf_worker:
            with BackendWorker(__file__, "jax", argv) as jax_worker:
                samples = {
                    w.backend: {n: [] for n in w.info["names"]} for w in (tf_worker, jax_worker)
                }
                for _ in range(repeats):
                    for name in tf_worker.info["names"]:
                        for worker in (tf_worker, jax_worker):
                            samples[worker.backend][name].append(worker.time(name))
                info = {w.backend: w.info for w in (tf_worker, jax_worker)}
    rows, checks = [], {}
    for name in info["tensorflow"]["names"]:
        tf_s, jax_s = samples["tensorflow"][name], samples["jax"][name]
        repeated = statistics.median(t / j for t, j in zip(tf_s, jax_s))
        first_tf, first_jax = info["tensorflow"]["first"][name], info["jax"]["first"][name]
        same = sum(
            a == b
            for a, b in zip(info["tensorflow"]["outputs"][name], info["jax"]["outputs"][name])
        )
        rows.append(
            (
                name,
                f"{first_tf:.2f}",
                f"{first_jax:.2f}",
                f"{first_jax / first_tf:.2f}x",
                f"{statistics.median(tf_s) * 1e3:.0f}",
                f"{statistics.median(jax_s) * 1e3:.0f}",
                f"**{repeated:.2f}x**",
                f"{same}/{len(info['jax']['outputs'][name])}",
            )
        )
        checks[f"generate {name}: repeated JAX >= TensorFlow ({repeated:.2f}x)"] = (
            repeated >= REPEATED_TARGET
        )
        checks[
            f"generate {name}: first call JAX <= 3x TensorFlow ({first_jax / first_tf:.2f}x)"
        ] = first_jax <= FIRST_TARGET * first_tf
    cfg = SMALL if small else FULL
    settings = info["tensorflow"]["settings"]
    text = (
        "#### Repeated `generate`\n\n"
        "`keras_attn.decoding.generate(model, source, 1, 2, search=..., max_length="
        f"{cfg['max_length']})` called eagerly; the models as `train_translator.py --model "
        "transformer` / `--model bahdanau` build them with the dates settings ("
        + "; ".join(
            f"{name}: " + ", ".join(f"{k} {v}" for k, v in s.items())
            for name, s in settings.items()
        )
        + f"), vocabulary {cfg['vocab']}, the same initial weights on both backends; sources of "
        f"{cfg['source_length']} ids, rows padded by up to a third. First call: the row's first "
        "call in its process (the rows in this order), tracing and compiling included. Repeated: "
        f"median of {repeats} rounds, one call per backend per round; TF / JAX is within each "
        "round (above 1: JAX faster). Same best: rows whose best sequence is the same on both.\n\n"
        + common.table(
            [
                "model, search, batch",
                "first call TF (s)",
                "first call JAX (s)",
                "JAX / TF first",
                "repeated TF (ms)",
                "repeated JAX (ms)",
                "TF / JAX repeated",
                "same best",
            ],
            rows,
        )
    )
    return text, checks


# ------------------------------------------------------------------------------ training
class _Turns:
    """A `fit` callback: each epoch waits for a line on standard input, then its seconds, the
    compilations during it and their seconds are written (`TAG` + JSON)."""

    def __init__(self, compiles):
        import keras

        class Turns(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                if not sys.stdin.readline():
                    raise SystemExit(0)
                compiles[:] = [0, 0.0]
                self.t0 = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                seconds = time.perf_counter() - self.t0
                loss = float((logs or {}).get("loss", float("nan")))
                reply = {
                    "seconds": seconds,
                    "compiles": compiles[0],
                    "compile_seconds": compiles[1],
                }
                print(TAG + json.dumps({**reply, "loss": loss}), flush=True)

        self.callback = Turns()


def _compile_counter():
    """`[count, seconds]` of the XLA compilations from now on (JAX only; zeros on TensorFlow)."""
    counts = [0, 0.0]
    import keras

    if keras.backend.backend() == "jax":
        import jax.monitoring

        def listen(event, seconds, **_):
            if event == "/jax/core/compile/backend_compile_duration":
                counts[0] += 1
                counts[1] += seconds

        jax.monitoring.register_event_duration_secs_listener(listen)
    return counts


def _train_flags(args):
    flags = ["--steps-per-epoch", str(args.train_steps), "--epochs", str(args.train_epochs)]
    flags += ["--verbose", "0", "--seed", "0", "--patience", "0"]
    if args.small:
        return ["--data", args.data, *TRAIN_SMALL_FLAGS, *flags]
    if args.train_data:  # a TSV with the large corpus's settings
        return ["--data", args.train_data, "--max-tokens", "4096", "--dropout", "0.1", *flags]
    return ["--corpus", args.corpus, *flags]


def train_worker(args):
    import keras
    import numpy as np

    from keras_attn.train import translator

    compiles = _compile_counter()
    out = os.path.join(args.tmp, keras.backend.backend())
    config = translator.parse_args([*_train_flags(args), "--out", out], prepare_data=True)
    text = translator.TextRun(config)
    keras.utils.set_random_seed(0)
    model = translator.build_model(
        config, text.tokenizer.vocab_size, text.steps * config.epochs, text.steps
    )
    _share_weights(model, os.path.join(args.tmp, "train.npz"))
    # the batch plan and the input pipeline alone: the same stream, drawn without training
    shapes, tokens, checksum, pipeline = [], 0, 0, []
    batches = iter(text.batches()[0])
    for _ in range(config.epochs):
        t0 = time.perf_counter()
        for _ in range(text.steps):
            x, y = next(batches)
            x = {k: np.asarray(v) for k, v in x.items()}
            y = np.asarray(y)
            shapes.append((*x["source"].shape, x["target_in"].shape[1]))
            tokens += int((y != 0).sum())
            checksum = (checksum + int(y.astype("int64").sum()) + int(x["source"].sum())) % 1000003
        pipeline.append(time.perf_counter() - t0)
    dataset, steps = text.batches()
    info = {
        "names": ["epoch"],
        "steps": steps,
        "pairs": text.lines,
        "max_tokens": config.max_tokens,
        "shapes_per_epoch": [
            len(set(shapes[e * steps : (e + 1) * steps])) for e in range(config.epochs)
        ],
        "new_shapes_per_epoch": [
            len(set(shapes[e * steps : (e + 1) * steps]) - set(shapes[: e * steps]))
            for e in range(config.epochs)
        ],
        "tokens": tokens,
        "checksum": checksum,
        "pipeline_seconds": pipeline,
        "model": f"{config.model}, units {config.units}, layers {config.layers}, heads "
        f"{config.heads}, copy {config.copy}, vocabulary {text.tokenizer.vocab_size}",
    }
    print(TAG + json.dumps(info), flush=True)
    turns = _Turns(compiles)
    model.fit(
        dataset,
        epochs=config.epochs,
        steps_per_epoch=steps,
        callbacks=[turns.callback],
        verbose=0,
        shuffle=False,
    )
    sys.stdin.read()  # until this process is closed


def run_train(args):
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--part", "train", "--tmp", tmp, *_passed(args)]
        if args.small:
            argv += ["--data", _small_corpus(tmp)]
        with BackendWorker(__file__, "tensorflow", argv) as tf_worker:
            with BackendWorker(__file__, "jax", argv) as jax_worker:
                epochs = {"tensorflow": [], "jax": []}
                for _ in range(args.train_epochs):
                    for worker in (tf_worker, jax_worker):
                        epochs[worker.backend].append(worker.time("epoch"))
                info = {w.backend: w.info for w in (tf_worker, jax_worker)}
    tf_info, jax_info = info["tensorflow"], info["jax"]
    steps = tf_info["steps"]
    same_plan = (tf_info["tokens"], tf_info["checksum"]) == (
        jax_info["tokens"],
        jax_info["checksum"],
    )
    rows = []
    for e in range(args.train_epochs):
        t, j = epochs["tensorflow"][e], epochs["jax"][e]
        rows.append(
            (
                e + 1,
                f"{t['seconds']:.1f}",
                f"{j['seconds']:.1f}",
                f"**{j['seconds'] / t['seconds']:.2f}x**",
                f"{j['compiles']} ({j['compile_seconds']:.1f} s)",
                f"{(j['seconds'] - j['compile_seconds']) / t['seconds']:.2f}x",
                f"{tf_info['shapes_per_epoch'][e]} / {jax_info['shapes_per_epoch'][e]}",
                f"{jax_info['new_shapes_per_epoch'][e]}",
                f"{tf_info['pipeline_seconds'][e]:.1f} / {jax_info['pipeline_seconds'][e]:.1f}",
            )
        )
    later = [
        epochs["jax"][e]["seconds"] / epochs["tensorflow"][e]["seconds"]
        for e in range(1, args.train_epochs)
    ]
    steady = statistics.median(later) if later else None
    first = epochs["jax"][0]["seconds"] / epochs["tensorflow"][0]["seconds"]
    checks = {
        f"training epoch: JAX within {EPOCH_TARGET}x TensorFlow, first epoch ({first:.2f}x)": first
        <= EPOCH_TARGET
    }
    if steady is not None:
        checks[
            f"training epoch: JAX within {EPOCH_TARGET}x TensorFlow, later epochs ({steady:.2f}x)"
        ] = steady <= EPOCH_TARGET
    corpus = (
        "a small generated corpus"
        if args.small
        else f"`{os.path.basename(args.train_data)}` (with the large corpus's batch settings)"
        if args.train_data
        else f"the `{args.corpus}` corpus"
    )
    text = (
        "#### The translator's training epoch\n\n"
        f"`train_translator.py`'s model, tokenizer and token batches on {corpus} "
        f"({tf_info['pairs']} training pairs; {tf_info['model']}; batches of <= "
        f"{tf_info['max_tokens']} token positions), the same initial weights; `fit` over "
        f"{steps} batches per epoch, {args.train_epochs} epochs, each epoch of one backend "
        "then the other's. Same batch plan on both backends: "
        + ("yes (the same tokens in the same batches)" if same_plan else "**no**")
        + ". Compilations: the XLA programs JAX compiled during the epoch (and their seconds), "
        "and JAX's epoch less those seconds over TensorFlow's; "
        "shapes: distinct batch shapes `(rows, source width, target width)` the train step "
        "received (TF / JAX), and how many of JAX's were new that epoch; pipeline: the same "
        "batches drawn alone, no training (s, TF / JAX).\n\n"
        + common.table(
            [
                "epoch",
                "TF (s)",
                "JAX (s)",
                "JAX / TF",
                "JAX compilations",
                "JAX less compiling / TF",
                "shapes TF / JAX",
                "new JAX shapes",
                "pipeline TF / JAX (s)",
            ],
            rows,
        )
    )
    return text, checks


def _passed(args):
    out = ["--train-steps", str(args.train_steps), "--train-epochs", str(args.train_epochs)]
    out += ["--corpus", args.corpus] + (["--small"] if args.small else [])
    return out + (["--train-data", args.train_data] if args.train_data else [])


def _small_corpus(tmp):
    """A TSV of a few hundred dates pairs for `--small`."""
    from keras_attn.data.dates import make_dates

    path = os.path.join(tmp, "pairs.tsv")
    pairs = make_dates(300, seed=0)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{s}\t{t}\n" for s, t in pairs)
    return path


# ------------------------------------------------------------------------------ main
def run(args):
    parts, checks = [], {}
    if "generate" in args.parts:
        text, more = run_generate(args)
        parts.append(text)
        checks.update(more)
    if "train" in args.parts:
        text, more = run_train(args)
        parts.append(text)
        checks.update(more)
    met = [f"- {'met' if ok else '**missed**'}: {name}" for name, ok in checks.items()]
    info = common.machine_info() if not args.small else {}
    text = (
        "### JAX vs TensorFlow on the CPU (benchmarks/jax_vs_tf.py)\n\n"
        "    .venv/bin/python benchmarks/jax_vs_tf.py"
        + (" --small" if args.small else "")
        + f" --repeats {args.repeats} --train-steps "
        f"{args.train_steps} --train-epochs {args.train_epochs}"
        + "".join(
            f" --{flag} '{getattr(args, flag)}'"
            for flag in ("parts", "models", "searches", "batches")
            if getattr(args, flag) and getattr(args, flag) != "generate,train"
        )
        + (f" --train-data {os.path.basename(args.train_data)}" if args.train_data else "")
        + "\n\n"
        "Targets: repeated `generate` on JAX at least as fast as on TensorFlow, its first call "
        f"at most {FIRST_TARGET:g}x TensorFlow's; the training epoch on JAX within "
        f"{EPOCH_TARGET}x TensorFlow's.\n\n"
        + "\n".join(met)
        + "\n\n"
        + "\n\n".join(parts)
        + ("\n\n" + common.machine_markdown(info) if info else "")
    )
    return text, checks


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of repeated generate calls")
    parser.add_argument("--train-steps", type=int, default=100, help="batches per training epoch")
    parser.add_argument("--train-epochs", type=int, default=3, help="training epochs timed")
    parser.add_argument("--corpus", default="es", help="the corpus `make corpora` builds")
    parser.add_argument(
        "--train-data", help="a source<TAB>target file to train on instead of the corpus"
    )
    parser.add_argument("--models", help="generate: of transformer,bahdanau (default both)")
    parser.add_argument("--searches", help="generate: of 'greedy,beam 4' (default both)")
    parser.add_argument("--batches", help="generate: batch sizes (default 1,32)")
    parser.add_argument("--parts", default="generate,train", help="generate, train or both")
    parser.add_argument(
        "--small", action="store_true", help="tiny models and corpus, no file written"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.small and args.train_steps == parser.get_default("train_steps"):
        args.train_steps, args.repeats, args.train_epochs = 4, 2, 2
    if args.part == "generate":
        generate_worker(args)
        return
    if args.part == "train":
        train_worker(args)
        return
    text, checks = run(args)
    print(text)
    for name, ok in checks.items():
        print(("MET   " if ok else "MISSED") + " " + name)
    if not args.small:
        common.write_section(SECTION, text)


if __name__ == "__main__":
    main()
