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
- **buckets** (with train: `--parts train,buckets`): coarser length buckets on JAX, fewer
  train steps to compile against more padding per pass over the corpus's pairs (its length
  distribution, tokenized as a run on it does), priced with the train part's JAX compile and
  step seconds.
- **ops** (`--parts ops`, its own section): the train step's dominant ops timed alone at the
  shapes the step runs them on one real batch of that corpus (the embedding's gather and its
  scatter-add gradient, the dense layers, the vocabulary projection with its softmax
  cross-entropy, the attention's matmuls and softmax, each forward and backward), on JAX
  (`jax.jit`) and TensorFlow (`tf.function` without and with XLA), and the step's parts
  compiled alone (host input, forward, forward and backward, the optimizer update, the whole
  step) beside Keras' own train step.

    .venv/bin/python benchmarks/jax_vs_tf.py [--repeats 3] [--train-steps 100] [--train-epochs 3]
    .venv/bin/python benchmarks/jax_vs_tf.py --parts ops --train-data FILE.tsv --train-steps 10
    .venv/bin/python benchmarks/jax_vs_tf.py --small      # tiny models and corpus: a check that it runs

Without `--small` the tables go to benchmarks/RESULTS.md ("JAX vs TensorFlow on the CPU").
"""

from __future__ import annotations

import functools
import json
import os
import re
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
TRAIN_MAX_TOKENS = 4096  # --train-data: the large corpus's batches
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
                compiles[:] = [0, 0.0, 0]
                self.t0 = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                seconds = time.perf_counter() - self.t0
                loss = float((logs or {}).get("loss", float("nan")))
                reply = {
                    "seconds": seconds,
                    "compiles": compiles[0],
                    "compile_seconds": compiles[1],
                    "loaded": compiles[2],
                }
                print(TAG + json.dumps({**reply, "loss": loss}), flush=True)

        self.callback = Turns()


def _compile_counter():
    """`[compilations, seconds, loaded]` from now on (JAX only; zeros on TensorFlow): the XLA
    programs compiled and the seconds spent getting programs, compiled or loaded from the
    persistent compilation cache, and how many were loaded (JAX counts those as compiled)."""
    counts = [0, 0.0, 0]
    import keras

    if keras.backend.backend() == "jax":
        import jax.monitoring

        def duration(event, seconds, **_):
            if event == "/jax/core/compile/backend_compile_duration":
                counts[0] += 1
                counts[1] += seconds

        def loaded(event, **_):
            if event == "/jax/compilation_cache/cache_hits":
                counts[0] -= 1
                counts[2] += 1

        jax.monitoring.register_event_duration_secs_listener(duration)
        jax.monitoring.register_event_listener(loaded)
    return counts


def _train_flags(args):
    flags = ["--steps-per-epoch", str(args.train_steps), "--epochs", str(args.train_epochs)]
    flags += ["--verbose", "0", "--seed", "0", "--patience", "0"]
    if args.small:
        return ["--data", args.data, *TRAIN_SMALL_FLAGS, *flags]
    if args.train_data:  # a TSV with the large corpus's settings
        return [
            *("--data", args.train_data, "--max-tokens", str(TRAIN_MAX_TOKENS)),
            *("--dropout", "0.1", *flags),
        ]
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
        # the same JAX run again, in the same run directory: its compilation cache is warm
        with BackendWorker(__file__, "jax", argv) as again:
            repeated = again.time("epoch")
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
    t, j = epochs["tensorflow"][0], repeated
    rows.append(
        (
            "1, the JAX run repeated",
            f"{t['seconds']:.1f}",
            f"{j['seconds']:.1f}",
            f"**{j['seconds'] / t['seconds']:.2f}x**",
            f"{j['compiles']}, {j['loaded']} loaded ({j['compile_seconds']:.1f} s)",
            f"{(j['seconds'] - j['compile_seconds']) / t['seconds']:.2f}x",
            "",
            "",
            "",
        )
    )
    later = [
        epochs["jax"][e]["seconds"] / epochs["tensorflow"][e]["seconds"]
        for e in range(1, args.train_epochs)
    ]
    steady = statistics.median(later) if later else None
    last = epochs["jax"][-1]
    prices = {  # a bucket's compiling seconds (epoch 1's over its shapes), a compiled step's
        "compile_seconds": epochs["jax"][0]["compile_seconds"]
        / max(jax_info["new_shapes_per_epoch"][0], 1),
        "step_seconds": (last["seconds"] - last["compile_seconds"]) / steps,
    }
    first = epochs["jax"][0]["seconds"] / epochs["tensorflow"][0]["seconds"]
    checks = {
        f"training epoch: JAX within {EPOCH_TARGET}x TensorFlow, first epoch ({first:.2f}x)": first
        <= EPOCH_TARGET
    }
    again = repeated["seconds"] / epochs["tensorflow"][0]["seconds"]
    checks[
        f"training epoch: JAX within {EPOCH_TARGET}x TensorFlow, first epoch of the JAX run "
        f"repeated ({again:.2f}x)"
    ] = again <= EPOCH_TARGET
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
        + ". JAX runs with its compilation cache in the run directory (`--compilation-cache`, "
        "the default): empty at the start; the last row is the JAX run started again in the "
        "same directory, its first epoch, beside TensorFlow's first. Compilations: the XLA "
        "programs JAX compiled during the epoch (loaded: those read from the cache instead), "
        "the seconds spent getting them (a train step per new shape, and in a process's first "
        "epoch the few small programs of the metrics' results at its end), and JAX's epoch less "
        "those seconds over TensorFlow's; "
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
    return text, checks, prices


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


# ------------------------------------------------------------------------------ buckets
GROWTHS = (1.25, 1.5, 2.0)  # bucket boundaries about this much longer than the previous


def _bucket_corpus(args):
    """`(name, training pairs)` whose length distribution the bucket table reads: the built
    corpus (`make corpora`) where it is on this machine, else `--train-data`."""
    from keras_attn.data import corpora, load_tsv

    directory = corpora.built_dir(args.corpus)
    if os.path.exists(os.path.join(directory, "manifest.json")):
        return f"the `{args.corpus}` corpus", corpora.load_corpus(directory)[0]["train"]
    if args.train_data:
        return f"`{os.path.basename(args.train_data)}`", load_tsv(args.train_data)[0]
    return "a small generated corpus", None


def bucket_plans(lengths, max_length, max_tokens, growths=GROWTHS):
    """`{growth: (buckets used, batches per pass, padded share)}` of examples of bucket lengths
    `lengths` (`max(source, target + 1)` tokens, as `token_batches` measures them) grouped as
    `token_batches` groups them with boundaries `bucket_boundaries(max_length, growth=g)`:
    each bucket's batches of `bucket_batch_sizes` rows, its last one full on JAX (rows of
    padding), every row padded to the bucket's width; padded share: the positions that hold
    padding."""
    import numpy as np

    from keras_attn.train.batching import bucket_batch_sizes, bucket_boundaries

    lengths = np.minimum(np.asarray(lengths), max_length)
    plans = {}
    for growth in growths:
        bounds = bucket_boundaries(max_length, growth=growth)
        sizes = bucket_batch_sizes(bounds, max_tokens)
        counts = np.bincount(np.searchsorted(bounds, lengths, side="right"), minlength=len(sizes))
        batches = [-(-int(n) // sizes[i]) for i, n in enumerate(counts)]
        positions = sum(b * sizes[i] * (bounds[i] - 1) for i, b in enumerate(batches) if b)
        plans[growth] = (
            int((counts > 0).sum()),
            sum(batches),
            1.0 - float(lengths.sum()) / positions,
        )
    return plans


def run_buckets(args, compile_seconds, step_seconds):
    """The bucket table: coarser length buckets on JAX (fewer train steps to compile, more
    padding per pass) on the corpus's length distribution, tokenized as a run on it tokenizes
    (`train_translator.py`'s tokenizer trained on its pairs) with its batch settings, priced
    with a JAX run's compile seconds per bucket and compiled step seconds."""
    import types

    import numpy as np

    from keras_attn.train import translator

    name, pairs = _bucket_corpus(args)
    if pairs is None:
        return ""
    flags = {"data": "corpus.tsv", "max_tokens": TRAIN_MAX_TOKENS}
    config = translator.resolve_config(flags, train_pairs=len(pairs))
    with tempfile.TemporaryDirectory() as tmp:
        settings = types.SimpleNamespace(init_from=None, out=tmp, resume=False, vocab_size=0)
        tokenizer = translator.text_tokenizer(settings, pairs)
    src = tokenizer.tokenize([s for s, _ in pairs], max_length=config.max_seq).row_lengths()
    tgt = tokenizer.tokenize(
        [t for _, t in pairs], add_start=True, add_end=True, max_length=config.max_seq + 1
    ).row_lengths()
    lengths = np.maximum(np.asarray(src), np.asarray(tgt) - 1)
    plans = bucket_plans(lengths, config.max_seq, config.max_tokens)
    base_buckets, base_batches, _ = plans[GROWTHS[0]]
    rows = []
    for growth, (buckets, batches, padded) in plans.items():
        saved = (base_buckets - buckets) * compile_seconds
        extra = (batches - base_batches) * step_seconds
        rows.append(
            (
                f"{growth:g}",
                buckets,
                batches,
                f"{padded:.1%}",
                f"{saved:.0f}",
                f"{extra:.0f}",
                f"{saved / extra:.1f}" if extra > 0 else "",
            )
        )
    text = (
        "#### Coarser length buckets on JAX?\n\n"
        f"The {len(pairs)} training pairs of {name}, tokenized as a run on them tokenizes "
        f"(vocabulary {tokenizer.vocab_size}); bucket boundaries `bucket_boundaries({config.max_seq}, growth=g)`, "
        f"batches of <= {config.max_tokens} token positions as `token_batches` makes them, "
        "every batch of a bucket padded to the bucket's width and rows on JAX. A coarser "
        "bucket plan compiles fewer train steps (priced at this run's JAX compile seconds per "
        f"bucket, {compile_seconds:.1f} s) and pads more, so a pass over the pairs takes more "
        f"batches (priced at this run's compiled JAX step, {step_seconds:.2f} s). Passes to "
        "break even: the passes after which the padding has cost what fewer compilations "
        "saved (a persistent compilation cache saves those compilations on every run after the "
        "first).\n\n"
        + common.table(
            [
                "growth g",
                "buckets used",
                "batches per pass",
                "padded positions",
                "compile s saved",
                "padding s per pass",
                "passes to break even",
            ],
            rows,
        )
    )
    return text


# ------------------------------------------------------------------------------ ops profile
OPS_SECTION = "jax-vs-tf-ops"
OPS_CASES = ("JAX, jit", "TF, graph", "TF, XLA")  # the TF worker times both of its cases


def _grad_fn(fn, argnums, jit_compile):
    """`fn(*args) -> scalar` -> the backend's compiled `grads(*args)` (gradient w.r.t. the
    arguments at `argnums`): `jax.jit(jax.grad(...))`, or a `tf.function` over a tape."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(jax.grad(fn, argnums=argnums))
    import tensorflow as tf

    def grads(*args):
        with tf.GradientTape() as tape:
            for i in argnums:
                tape.watch(args[i])
            value = fn(*args)
        return tape.gradient(value, [args[i] for i in argnums])

    return tf.function(grads, jit_compile=jit_compile)


def _compile(fn, jit_compile):
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    return tf.function(fn, jit_compile=jit_compile)


def _done(out):
    """Wait for `out` (JAX dispatches asynchronously; TensorFlow's eager calls return done)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        jax.block_until_ready(out)
    return out


def _profile_batch(text, steps):
    """The epoch's batch with the most token positions (of the first `steps`), padded to its
    bucket width (the shape JAX's step runs; the same on both backends), and unpadded."""
    import numpy as np

    from keras_attn.train.batching import pad_numpy_to_bucket

    best = None
    batches = iter(text.batches()[0])
    for _ in range(steps):
        x, y = next(batches)
        x, y = {k: np.asarray(v) for k, v in x.items()}, np.asarray(y)
        if best is None or y.size > best[1].size:
            best = (x, y)
    return pad_numpy_to_bucket(*best), best


def _op_fns(y, d, heads, vocab, ffn, jit_compile):
    """name -> a compiled call, each op at the shapes the train step runs on targets `y`
    (`d` the model's width, `ffn` its FFN's)."""
    import keras
    import numpy as np
    from keras import ops

    rng = np.random.default_rng(0)
    rows, width = y.shape
    n = rows * width
    t = keras.ops.convert_to_tensor

    def normal(*shape):
        return t(rng.normal(size=shape).astype("float32") * 0.1)

    ids = t(np.asarray(y).reshape(-1).astype("int32"))
    fns = {}
    table, cot = normal(vocab, d), normal(n, d)
    g = _grad_fn(lambda e, i, c: ops.sum(ops.take(e, i, axis=0) * c), (0,), jit_compile)
    fns[f"embedding gather + scatter-add gradient [{vocab}, {d}] at {n} ids"] = functools.partial(
        g, table, ids, cot
    )
    for d_in, d_out, what in (
        (d, d, "attention projection"),
        (d, ffn, "FFN in"),
        (ffn, d, "FFN out"),
    ):
        xs, w, c = normal(n, d_in), normal(d_in, d_out), normal(n, d_out)
        g = _grad_fn(lambda a, b, c: ops.sum(ops.matmul(a, b) * c), (0, 1), jit_compile)
        fns[f"dense {what} [{n}, {d_in}] x [{d_in}, {d_out}], fwd+bwd"] = functools.partial(
            g, xs, w, c
        )
    hidden, w_out = normal(n, d), normal(d, vocab)

    def cross_entropy(h, w, labels):
        logits = ops.matmul(h, w)
        return ops.mean(
            ops.logsumexp(logits, axis=-1) - ops.take_along_axis(logits, labels[:, None], -1)[:, 0]
        )

    g = _grad_fn(cross_entropy, (0, 1), jit_compile)
    fns[f"vocabulary projection + softmax cross-entropy [{n}, {d}] x [{d}, {vocab}], fwd+bwd"] = (
        functools.partial(g, hidden, w_out, ids)
    )
    head = d // heads
    q, k, v = (normal(rows, heads, width, head) for _ in range(3))
    c = normal(rows, heads, width, head)

    def attention(q, k, v, c):
        scores = ops.softmax(ops.einsum("bhqd,bhkd->bhqk", q, k) / head**0.5, axis=-1)
        return ops.sum(ops.einsum("bhqk,bhkd->bhqd", scores, v) * c)

    g = _grad_fn(attention, (0, 1, 2), jit_compile)
    fns[f"attention scores, softmax, values [{rows}, {heads}, {width}, {head}], fwd+bwd"] = lambda: (
        g(q, k, v, c)
    )
    return {name: (lambda fn=fn: _done(fn())) for name, fn in fns.items()}


def _step_fns(model, x, y, jit_compile):
    """The train step's parts on batch `(x, y)`, each compiled alone: host input (the NumPy
    batch onto the device), forward (model + loss), forward+backward (the gradients), the
    optimizer update alone (Adam on gradients of the weights' shapes), and the whole step
    written out (forward, backward, update) beside Keras' own (`train_on_batch`)."""
    import keras
    from keras import ops

    def values(variables):
        # copies: Keras' JAX step donates the variables' buffers to its next values
        return [ops.copy(ops.convert_to_tensor(v.value)) for v in variables]

    trainable = values(model.trainable_variables)
    non_trainable = values(model.non_trainable_variables)
    optimizer = model.optimizer
    opt_vars = values(optimizer.variables)
    xt = {k: ops.convert_to_tensor(v) for k, v in x.items()}
    yt = ops.convert_to_tensor(y)

    def loss(trainable, non_trainable, x, y):
        pred, _ = model.stateless_call(trainable, non_trainable, x, training=True)
        return model.loss(y, pred)

    forward = _compile(loss, jit_compile)
    grads = _grad_fn(loss, (0,), jit_compile)
    grad_values = [ops.ones_like(w) * 1e-3 for w in trainable]

    if keras.backend.backend() == "jax":

        def update(opt_vars, trainable, grad_values):
            return optimizer.stateless_apply(opt_vars, grad_values, trainable)

        def step(opt_vars, trainable, non_trainable, x, y):
            g = _grad_fn_raw(loss)(trainable, non_trainable, x, y)
            return optimizer.stateless_apply(opt_vars, g, trainable)

    else:  # TensorFlow's optimizer has no stateless update: its variables are updated

        def update(opt_vars, trainable, grad_values):
            optimizer.apply(grad_values, model.trainable_variables)

        def step(opt_vars, trainable, non_trainable, x, y):
            import tensorflow as tf

            with tf.GradientTape() as tape:
                value = model.loss(y, model(x, training=True))
            g = tape.gradient(value, model.trainable_variables)
            optimizer.apply(g, model.trainable_variables)
            return value

    apply = _compile(update, jit_compile)
    whole = _compile(step, jit_compile)

    def host():
        _done([ops.convert_to_tensor(v) for v in (*x.values(), y)])

    return {
        "host input (NumPy batch to the device)": host,
        "forward (model + loss)": lambda: _done(forward(trainable, non_trainable, xt, yt)),
        "forward + backward": lambda: _done(grads(trainable, non_trainable, xt, yt)),
        "optimizer update alone (Adam, clipnorm)": lambda: _done(
            apply(opt_vars, trainable, grad_values)
        ),
        "whole step written out": lambda: _done(whole(opt_vars, trainable, non_trainable, xt, yt)),
        "Keras' train step (`train_on_batch`)": lambda: model.train_on_batch(x, y),
    }


def _grad_fn_raw(fn):
    """The gradient of `fn` w.r.t. its first argument, uncompiled (inside a compiled step)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return jax.grad(fn)
    import tensorflow as tf

    def grads(trainable, *rest):
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            value = fn(trainable, *rest)
        return tape.gradient(value, trainable)

    return grads


def ops_worker(args):
    import keras

    from keras_attn.train import translator

    out = os.path.join(args.tmp, keras.backend.backend())
    config = translator.parse_args([*_train_flags(args), "--out", out], prepare_data=True)
    text = translator.TextRun(config)
    (x, y), (x_own, y_own) = _profile_batch(text, config.steps_per_epoch or text.steps)
    cases = (
        {"JAX, jit": True}
        if keras.backend.backend() == "jax"
        else {
            "TF, graph": False,
            "TF, XLA": True,
        }
    )
    fns = {}
    for case, jit in cases.items():
        keras.utils.set_random_seed(0)
        model = translator.build_model(config, text.tokenizer.vocab_size, text.steps, text.steps)
        if keras.backend.backend() == "tensorflow":
            model.compile(
                optimizer=model.optimizer, loss=model.loss, jit_compile=jit
            )  # the recipe's step on TF: graph (its default) or XLA
        _share_weights(model, os.path.join(args.tmp, "ops.npz"))
        model.train_on_batch(x, y)  # builds the optimizer
        shapes = (config.units, config.heads, text.tokenizer.vocab_size, 2 * config.units)
        for name, fn in {**_op_fns(y, *shapes, jit), **_step_fns(model, x, y, jit)}.items():
            fns[f"{case}|{name}"] = fn
        if case == "TF, graph":
            fns[f"{case}|Keras' train step, the unpadded batch"] = lambda model=model: (
                model.train_on_batch(x_own, y_own)
            )
    serve(
        fns,
        {
            "shape": [*x["source"].shape, x["target_in"].shape[1]],
            "own_shape": [*x_own["source"].shape, x_own["target_in"].shape[1]],
            "model": f"{config.model}, units {config.units}, layers {config.layers}, heads "
            f"{config.heads}, copy {config.copy}, vocabulary {text.tokenizer.vocab_size}",
        },
    )


def run_ops(args):

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--part", "ops", "--tmp", tmp, *_passed(args)]
        if args.small:
            argv += ["--data", _small_corpus(tmp)]
        with BackendWorker(__file__, "tensorflow", argv) as tf_worker:
            with BackendWorker(__file__, "jax", argv) as jax_worker:
                workers = (tf_worker, jax_worker)
                samples = {n: [] for w in workers for n in w.info["names"]}
                for _ in range(args.repeats):
                    for worker in workers:
                        for name in worker.info["names"]:
                            samples[name].append(worker.time(name, args.op_calls))
                info = tf_worker.info
    rows_of = {}
    for name in samples:
        case, what = name.split("|", 1)
        rows_of.setdefault(what, {})[case] = samples[name]
    lines, checks = [], {}
    for what, by_case in rows_of.items():
        cells = [what]
        for case in OPS_CASES:
            s = by_case.get(case)
            cells.append(f"{statistics.median(s) * 1e3:.2f}" if s else "")
        for case in ("TF, graph", "TF, XLA"):
            if "JAX, jit" in by_case and case in by_case:
                ratio = statistics.median(j / t for j, t in zip(by_case["JAX, jit"], by_case[case]))
                cells.append(f"**{ratio:.2f}x**")
            else:
                cells.append("")
        lines.append(cells)
    batch = "x".join(str(v) for v in info["shape"])
    own = "x".join(str(v) for v in info["own_shape"])
    text = (
        "### JAX vs TensorFlow on the CPU: the train step's ops (benchmarks/jax_vs_tf.py)\n\n"
        "    .venv/bin/python benchmarks/jax_vs_tf.py --parts ops"
        f" --repeats {args.repeats} --op-calls {args.op_calls} --train-steps {args.train_steps}"
        + (f" --train-data {os.path.basename(args.train_data)}" if args.train_data else "")
        + "\n\n"
        f"The translator's model of the training table ({info['model']}) on one of its real "
        f"batches: the epoch's batch with the most token positions (rows, source width, target "
        f"width) {own}, padded to its bucket width as JAX's step receives it, {batch}; the same "
        "padded batch and initial weights on both backends. Each op alone at the shapes the "
        "step runs it (N = rows x target width), its forward and backward (the gradients of "
        "a fixed random cotangent), compiled with `jax.jit` (JAX) or a `tf.function` without "
        "and with XLA (TensorFlow); then the step's parts, each compiled alone: host input "
        "(the NumPy batch onto the device), forward (model and loss), forward and backward, "
        "the optimizer update alone, the whole step written out (`stateless_call`, the "
        "gradient, `stateless_apply`) and Keras' own train step (`train_on_batch`, the step "
        "`fit` runs: its work per call included). ms per call: the mean of "
        f"{args.op_calls} calls, the median over {args.repeats} rounds; every name's calls of "
        "one backend then the other's in each round; JAX / TF is taken within each round "
        "(below 1: JAX faster).\n\n"
        + common.table(
            ["op or part", *[f"{c} (ms)" for c in OPS_CASES], "JAX / TF graph", "JAX / TF XLA"],
            lines,
        )
    )
    return text, checks


# ------------------------------------------------------------------------------ main
# The parts a run of the other parts keeps from the section's previous text: each part's
# subsection heading, and the words that begin its checks.
KEPT_PARTS = {
    "generate": ("#### Repeated `generate`", "generate "),
    "train": ("#### The translator's training epoch", "training epoch"),
}


def _previous(part):
    """`(command lines, check lines, subsection)` of `part` in the section as it is in
    RESULTS.md (empty where absent): what a run of the other parts keeps of it (its
    subsection runs to the next kept part's heading or the machine's lines)."""
    heading, check = KEPT_PARTS[part]
    old = ""
    if os.path.exists(common.RESULTS):
        with open(common.RESULTS, encoding="utf-8") as f:
            old = f.read()
    found = re.search(rf"<!-- {SECTION}:begin -->(.*?)<!-- {SECTION}:end -->", old, re.S)
    body = found.group(1) if found else ""
    commands = [
        line
        for line in body.splitlines()
        if line.startswith("    .venv/bin/python") and re.search(rf"--parts '?{part}'?( |$)", line)
    ]
    checks = [
        line
        for line in body.splitlines()
        if re.match(rf"- (met|\*\*missed\*\*): {re.escape(check)}", line)
    ]
    table = ""
    if heading in body:
        table = body[body.index(heading) :]
        ends = [re.escape(h) for h, _ in KEPT_PARTS.values() if h != heading] + ["- date: "]
        table = re.split(rf"\n(?={'|'.join(ends)})", table)[0].strip()
    return commands, checks, table


def run(args):
    parts, checks = [], {}
    kept_commands, kept_checks, kept_names = [], [], []

    def keep(part):
        commands, lines, table = _previous(part)
        if lines:
            kept_commands.extend(commands)
            kept_checks.extend(lines)
            kept_names.append(part)
        parts.extend([table] if table else [])

    if "generate" in args.parts:
        text, more = run_generate(args)
        parts.append(text)
        checks.update(more)
    elif not args.small:
        keep("generate")
    if "train" in args.parts:
        text, more, prices = run_train(args)
        parts.append(text)
        checks.update(more)
        if "buckets" in args.parts:
            parts.append(run_buckets(args, **prices))
    elif not args.small:
        keep("train")
    met = [f"- {'met' if ok else '**missed**'}: {name}" for name, ok in checks.items()]
    info = common.machine_info() if not args.small else {}
    command = (
        "    .venv/bin/python benchmarks/jax_vs_tf.py"
        + (" --small" if args.small else "")
        + f" --repeats {args.repeats}"
        + (
            f" --train-steps {args.train_steps} --train-epochs {args.train_epochs}"
            if "train" in args.parts
            else ""
        )
        + "".join(
            f" --{flag} '{getattr(args, flag)}'"
            for flag in ("parts", "models", "searches", "batches")
            if getattr(args, flag) and getattr(args, flag) != "generate,train"
        )
        + (f" --train-data {os.path.basename(args.train_data)}" if args.train_data else "")
    )
    kept = (
        f"The {' and '.join(kept_names)} rows are those of the last run of its command (a run "
        "of the other parts keeps them); the rest, and the machine below, are the last "
        "command's.\n\n"
        if kept_names
        else ""
    )
    text = (
        "### JAX vs TensorFlow on the CPU (benchmarks/jax_vs_tf.py)\n\n"
        + "\n".join([*kept_commands, command])
        + "\n\n"
        "Targets: repeated `generate` on JAX at least as fast as on TensorFlow, its first call "
        f"at most {FIRST_TARGET:g}x TensorFlow's; the training epoch on JAX within "
        f"{EPOCH_TARGET}x TensorFlow's.\n\n"
        + kept
        + "\n".join([*kept_checks, *met])
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
    parser.add_argument(
        "--parts",
        default="generate,train",
        help="of generate, train, buckets (with train: coarser length buckets priced on the "
        "corpus's lengths), ops (the train step's ops and parts timed alone; its own section)",
    )
    parser.add_argument("--op-calls", type=int, default=5, help="ops: calls per timed sample")
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
    if args.part == "ops":
        ops_worker(args)
        return
    if "ops" in args.parts:
        text, _ = run_ops(args)
        print(text)
        if not args.small:
            common.write_section(OPS_SECTION, text)
        args.parts = ",".join(p for p in args.parts.split(",") if p != "ops")
        if not args.parts:
            return
    text, checks = run(args)
    print(text)
    for name, ok in checks.items():
        print(("MET   " if ok else "MISSED") + " " + name)
    if not args.small:
        common.write_section(SECTION, text)


if __name__ == "__main__":
    main()
