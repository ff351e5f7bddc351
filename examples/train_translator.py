"""Train a translator: human-written dates -> ISO dates (default), or any parallel corpus.

    python examples/train_translator.py                          # dates, Bahdanau attention
    python examples/train_translator.py --model luong-general-local-p --epochs 8
    python examples/train_translator.py --model transformer
    python examples/train_translator.py --data pairs.tsv                   # SentencePiece, chrF + BLEU
    python examples/train_translator.py --corpus zh                        # English -> Chinese UI strings
    python examples/train_translator.py --export export/models/dates       # SavedModel for TF Serving
    python examples/train_translator.py --resume                           # continue an interrupted run

Models (`--model`): bahdanau | luong-{dot,general,concat}-{global,local-m,local-p} | hard | transformer | convs2s.
Validation after each epoch: exact match (dates) or chrF and BLEU via sacrebleu (TSV, `--corpus`) of
greedy decoding on a validation subset; on text corpora the weights of the epoch with the best
validation chrF are kept (`best.weights.h5`) and scored on the test split. `--corpus LANG` reads the
gettext catalogues installed packages ship (`keras_attn.data.catalogue_pairs`, docs/real_data.md).
At the end: the test metrics (`results.json`, with the copy-the-source baseline), attention heat maps
of a few validation examples (`attention/*.png`), and with `--export` the SavedModel.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from keras_attn import training

SCORES = ("dot", "general", "concat")
ALIGNMENTS = ("global", "local-m", "local-p")
MODELS = ("bahdanau", "hard", "transformer", "convs2s") + tuple(
    f"luong-{s}-{a}" for s in SCORES for a in ALIGNMENTS
)


def parse_args(argv=None):
    p = training.base_parser(
        __doc__.splitlines()[0], epochs=10, batch_size=64, out="runs/translator"
    )
    p.add_argument(
        "--model",
        choices=MODELS,
        default=None,
        metavar="MODEL",
        help=" | ".join(MODELS) + " (default: transformer on text corpora, bahdanau on dates)",
    )
    p.add_argument(
        "--data", default=None, help="TSV corpus (source<TAB>target per line); default: dates"
    )
    p.add_argument(
        "--corpus",
        default=None,
        metavar="LANG",
        help="English -> LANG pairs from installed packages' gettext catalogues (es, zh, ja, fr, ...)",
    )
    p.add_argument(
        "--corpus-dir",
        default=None,
        metavar="DIR",
        help="with --corpus: the built corpus to read (default: `make corpora`'s, built if missing)",
    )
    p.add_argument(
        "--init-from",
        default=None,
        metavar="RUN_DIR",
        help="fine-tune: start from a text run's vocabulary, model settings and best weights",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=0,
        metavar="MINUTES",
        help="stop after the epoch past which another would end beyond MINUTES of training "
        "(the run's: --resume counts the epochs already trained)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="text: token positions per batch, padding included (length-bucketed batches; "
        "default: by size, 1024 below 20,000 training pairs, else 4096)",
    )
    p.add_argument(
        "--steps-per-epoch",
        type=int,
        default=0,
        help="text: batches per epoch (0: one pass over the training pairs)",
    )
    p.add_argument(
        "--token-dropout",
        type=float,
        default=None,
        help="text: source tokens replaced by <unk> with this probability (default: by size)",
    )
    p.add_argument(
        "--patience",
        type=int,
        default=None,
        help="text: stop after this many epochs without a better validation chrF (default: by size)",
    )
    p.add_argument(
        "--average",
        type=int,
        default=None,
        help="text: also try the mean of the last N epochs' weights; kept if its validation chrF "
        "is higher (default: by size)",
    )
    p.add_argument("--n-train", type=int, default=20000, help="dates: training examples")
    p.add_argument(
        "--n-val", type=int, default=500, help="validation examples decoded after each epoch"
    )
    p.add_argument(
        "--n-test", type=int, default=2000, help="dates: test examples (held out by date)"
    )
    p.add_argument(
        "--vocab-size",
        type=int,
        default=0,
        help="TSV: SentencePiece vocabulary size (0: sized to the corpus, see auto_vocab_size)",
    )
    p.add_argument(
        "--label-smoothing", type=float, default=0.1, help="label smoothing of the sequence loss"
    )
    p.add_argument(
        "--max-seq", type=int, default=128, help="text: tokens per sequence at most (cut beyond)"
    )
    p.add_argument("--max-chars", type=int, default=200, help="TSV: drop pairs longer than this")
    p.add_argument(
        "--embedding-dim", type=int, default=None, help="default 32 (dates), 64 (text corpora)"
    )
    p.add_argument(
        "--units",
        type=int,
        default=None,
        help="RNN units / Transformer d_model; default 64 (dates), 128 (text)",
    )
    p.add_argument(
        "--layers", type=int, default=None, help="Transformer / ConvS2S layers (default 2)"
    )
    p.add_argument("--heads", type=int, default=4, help="Transformer heads")
    p.add_argument(
        "--kv-heads",
        type=int,
        default=None,
        help="Transformer key/value heads (GQA; 1 = multi-query)",
    )
    p.add_argument(
        "--sliding-window", type=int, default=None, help="Transformer self-attention window"
    )
    p.add_argument("--gate", action="store_true", help="Transformer gated attention")
    p.add_argument(
        "--rotary",
        type=float,
        default=None,
        metavar="WAVELENGTH",
        help="Transformer rotary embeddings",
    )
    p.add_argument("--window", type=int, default=10, help="Luong local window half-width D")
    p.add_argument(
        "--dropout", type=float, default=None, help="default 0 (dates), 0.2 (text corpora)"
    )
    p.add_argument(
        "--copy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="copy attention (pointer-generator; default: on for text corpora, off for dates)",
    )
    p.add_argument(
        "--coverage-weight", type=float, default=0.0, help="copy attention's coverage loss weight"
    )
    p.add_argument(
        "--schedule",
        choices=("cosine", "constant", "rsqrt"),
        default=None,
        help="learning-rate schedule: cosine decay over --epochs (default), constant, or rsqrt "
        "(warm-up, then 1/sqrt(step): needs no end; the default with --time-budget)",
    )
    p.add_argument("--cell", choices=("lstm", "gru"), default="lstm", help="RNN cell")
    p.add_argument(
        "--max-length", type=int, default=None, help="decoding length limit (default: from data)"
    )
    p.add_argument("--beam-size", type=int, default=4, help="export: serving_default beam size")
    p.add_argument(
        "--xla",
        action="store_true",
        help="export: also the <name>_xla signatures compiled with XLA (docs/serving.md)",
    )
    p.add_argument(
        "--keep-placeholders",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="export: every placeholder and markup tag of the source required in the served "
        "answers (docs/serving.md; default: on for text, off for dates)",
    )
    args = p.parse_args(argv)
    if args.model is None:  # the model that wins on each (docs/real_data.md, RESULTS.md)
        args.model = "transformer" if (args.data or args.corpus) else "bahdanau"
    if args.model not in MODELS:
        p.error(f"--model must be one of {', '.join(MODELS)}")
    if args.data and args.corpus:
        p.error("give --data or --corpus, not both")
    if args.export:
        import keras

        if keras.backend.backend() != "tensorflow":
            p.error(
                "--export writes a TensorFlow SavedModel: train on this backend, then run the same "
                "command with KERAS_BACKEND=tensorflow --resume --export DIR (docs/distributed.md)"
            )
    if args.init_from and not (args.data or args.corpus):
        p.error("--init-from fine-tunes a text model: give --data or --corpus too")
    if args.init_from:
        problem = init_from_problem(args.init_from)
        if problem:
            p.error(f"--init-from {args.init_from}: {problem}")
    text = bool(args.data or args.corpus)
    # Defaults per task: the small real corpora (a few thousand pairs, docs/real_data.md) want a
    # wider model with dropout, more epochs and copy attention; the generated dates keep theirs.
    args.explicit = {a for a in ("dropout",) if getattr(args, a) is not None}
    for name, dates_value, text_value in (
        ("embedding_dim", 32, 64),
        ("units", 64, 128),
        ("dropout", 0.0, 0.2),
    ):
        if getattr(args, name) is None:
            setattr(args, name, text_value if text else dates_value)
    if args.copy is None:
        args.copy = text and args.model not in ("hard", "convs2s")
    if args.copy and args.model in ("hard", "convs2s"):
        p.error(
            "--copy needs an RNN with soft attention or the Transformer (not --model hard or convs2s)"
        )
    if text:
        args.default_epochs = 30
    if args.layers is None:
        args.layers = 2
    if args.schedule is None:
        args.schedule = "rsqrt" if args.time_budget else "cosine"
    for name, value in (("token_dropout", 0.0), ("patience", 0), ("average", 0)):
        if getattr(args, name) is None and not text:
            setattr(args, name, value)
    if args.smoke:
        args.n_train, args.n_val, args.n_test = 256, 32, 32
        args.units, args.embedding_dim = min(args.units, 16), min(args.embedding_dim, 16)
        args.vocab_size = min(args.vocab_size or 200, 200)
        args.max_tokens = min(args.max_tokens or 512, 512)
    if args.keep_placeholders is None:
        args.keep_placeholders = text
    args.text = text
    return args


# The recipe by corpus size (docs/real_data.md, "Defaults by corpus size"): applied to every
# text setting left at its default once the number of training pairs is known.
SMALL_CORPUS = 20000  # training pairs below which the small-corpus recipe applies


def size_defaults(n_train):
    """The text defaults for a corpus of `n_train` training pairs."""
    if n_train < SMALL_CORPUS:  # smaller batches: four times the updates per pass
        return dict(
            token_dropout=0.1, patience=10, average=5, dropout=0.3, epochs=200, max_tokens=1024
        )
    return dict(token_dropout=0.0, patience=5, average=5, dropout=0.1, epochs=30, max_tokens=4096)


def apply_size_defaults(args, n_train, explicit):
    """Fill the settings the user did not give (`explicit`: the names given on the command
    line) from `size_defaults(n_train)`; returns the rule's values."""
    rule = size_defaults(n_train)
    for name, value in rule.items():
        if name == "epochs":
            if args.epochs is None:
                args.default_epochs = value
        elif getattr(args, name) is None or (name == "dropout" and name not in explicit):
            setattr(args, name, value)
    return rule


# ---------------------------------------------------------------------------------- data
def load_data(args):
    """-> (splits {"train", "val", "test", ["test_locale"]} of (source, target), tokenizer, metric)."""
    if args.data is None and args.corpus is None:
        from keras_attn.data import dates_splits
        from keras_attn.text import CharTokenizer

        splits = dates_splits(args.n_train, args.n_val, args.n_test, seed=args.seed)
        saved = os.path.join(args.out, "tokenizer_vocab.txt")
        if args.resume and os.path.exists(saved):  # the vocabulary the checkpoint was trained with
            tokenizer = CharTokenizer.load(saved)
        else:
            tokenizer = CharTokenizer.build(t for pair in splits["train"] for t in pair)
        return splits, tokenizer, "exact_match"
    return load_text_data(args), None, "chrf"


def init_from_problem(run_dir):
    """Why `run_dir` cannot be fine-tuned from (`--init-from`), or None: it must be the output
    directory of a text run (`--data` / `--corpus`), with the files fine-tuning reads."""
    if not os.path.isdir(run_dir):
        return "no such directory"
    config = os.path.join(run_dir, "run_config.json")
    if not os.path.exists(config):
        return "not the output directory of a text run (no run_config.json)"
    try:
        with open(config, encoding="utf-8") as f:
            model = json.load(f)["model"]
        if not isinstance(model, dict) or "model" not in model:
            raise ValueError("no model settings")
    except (ValueError, KeyError, TypeError) as err:
        return f"its run_config.json does not describe a model ({err})"
    if not os.path.exists(os.path.join(run_dir, "tokenizer.model")):
        return "no tokenizer.model (the vocabulary the weights were trained with)"
    if not any(
        os.path.exists(os.path.join(run_dir, name))
        for name in ("final.weights.h5", "best.weights.h5")
    ):
        return "no weights (final.weights.h5 or best.weights.h5): the run never finished an epoch"
    return None


# Settings a fine-tuned run takes from the run it starts from (`--init-from`): its model.
MODEL_SETTINGS = (
    "model",
    "units",
    "embedding_dim",
    "layers",
    "heads",
    "kv_heads",
    "sliding_window",
    "gate",
    "rotary",
    "window",
    "copy",
    "cell",
)


def prepare_text_data(args):
    """Write RUN_DIR/data/{train,val,test[,test_in_domain]}.tsv and manifest.json: exactly what
    the model trains and is scored on. `--resume` reuses the files already there."""
    from keras_attn.data import corpora

    data_dir = os.path.join(args.out, "data")
    if args.resume and os.path.exists(os.path.join(data_dir, "train.tsv")):
        return data_dir
    os.makedirs(data_dir, exist_ok=True)
    if args.corpus:
        source = args.corpus_dir or corpora.built_dir(args.corpus)
        if not os.path.exists(os.path.join(source, "manifest.json")):
            print(f"Building the {args.corpus} corpus in {source} (see `make corpora`)", flush=True)
            corpus = corpora.build_corpus(args.corpus, source, max_chars=args.max_chars)
            print(corpus.report, flush=True)
        splits, manifest = corpora.load_corpus(source)
        manifest = dict(manifest, built_corpus=os.path.abspath(source))
    else:
        from keras_attn.data import load_tsv, split_pairs

        pairs, report = load_tsv(args.data, max_length=args.max_chars)
        print(report, flush=True)
        if len(pairs) < 10:
            raise SystemExit(f"{args.data}: only {len(pairs)} usable pairs")
        train, val, test = split_pairs(pairs, seed=args.seed)
        splits = {"train": train, "val": val, "test": test}
        manifest = {
            "sources": [{"name": os.path.abspath(args.data), "kind": "tsv"}],
            "entries": report.lines,
            "kept": report.kept,
            "drops": {
                k: getattr(report, k)
                for k in ("blank", "no_tab", "undecodable", "empty_field", "too_long")
            },
            "split": "split_pairs (seeded random sentences; no source in two splits)",
            "seed": args.seed,
        }
    if args.smoke:  # tiny: a few hundred training pairs
        splits = {k: v[: 400 if k == "train" else 50] for k, v in splits.items()}
    splits = {k: v for k, v in splits.items() if v}
    manifest["split_sizes"] = {k: len(v) for k, v in splits.items()}
    for name, pairs in splits.items():
        corpora.write_tsv(pairs, os.path.join(data_dir, f"{name}.tsv"))
    with open(os.path.join(data_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    return data_dir


def load_text_data(args):
    """-> splits {"train", "val", "test"[, "test_in_domain"]} read from RUN_DIR/data."""
    from keras_attn.data import load_tsv

    data_dir = prepare_text_data(args)
    splits = {}
    for name in ("train", "val", "test", "test_in_domain"):
        path = os.path.join(data_dir, f"{name}.tsv")
        if os.path.exists(path):
            splits[name] = load_tsv(path)[0]
    splits["val"] = splits.get("val", [])[: args.n_val]
    return splits


def text_tokenizer(args, train_pairs):
    """The run's SentencePiece model: the `--init-from` run's, the saved one on `--resume`, or
    one trained on the training pairs (both sides: copy attention needs one vocabulary)."""
    from keras_attn.text import SentencePieceTokenizer

    if args.init_from:
        return SentencePieceTokenizer.load(os.path.join(args.init_from, "tokenizer.model"))
    saved = os.path.join(args.out, "tokenizer.model")
    if args.resume and os.path.exists(saved):  # the vocabulary the checkpoint was trained with
        return SentencePieceTokenizer.load(saved)
    texts = [t for pair in train_pairs for t in pair]
    options = {}
    if len(train_pairs) >= SMALL_CORPUS:  # large corpora: rare characters as UTF-8 bytes
        options = dict(
            character_coverage=0.9995,
            byte_fallback=True,
            input_sentence_size=400000,
            shuffle_input_sentence=True,
        )
    return SentencePieceTokenizer.train(
        texts, vocab_size=args.vocab_size or auto_vocab_size(texts), **options
    )


def auto_vocab_size(texts):
    """A SentencePiece vocabulary sized to the corpus: every character gets a piece (needed with
    `character_coverage=1.0`), plus about one piece per 32 words of text, at most 8,000. A few
    thousand pairs get one to two thousand pieces: small enough that each is seen often
    (Sennrich & Zhang 2019: small subword vocabularies for small corpora)."""
    chars = len(set("".join(texts)))
    words = sum(len(t.split()) for t in texts)
    return int(min(8000, max(chars + 64, chars + words // 32)))


def score(metric, hypotheses, references):
    """`{"exact_match"}` (dates) or `{"chrf", "bleu"}` (sacrebleu, text corpora; BLEU with the
    tokenizer for Chinese or Japanese when the references are written without spaces)."""
    if metric == "exact_match":
        return {
            "exact_match": float(np.mean([h == r for h, r in zip(hypotheses, references)]))
            if references
            else 0.0
        }
    import sacrebleu

    cjk = (
        sum(any(ord(c) >= 0x3000 for c in r) and " " not in r for r in references)
        > len(references) / 2
    )
    tokenize = "zh" if cjk else "13a"
    return {
        "chrf": float(sacrebleu.corpus_chrf(hypotheses, [references]).score),
        "bleu": float(sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize).score),
    }


# --------------------------------------------------------------------------------- model
def learning_rate(args, total_steps, steps_per_epoch=None):
    """Adam's learning rate (`--schedule`): constant, cosine decay to 5% over the whole run, or
    rsqrt with a warm-up of `warmup_steps(steps_per_epoch)`."""
    import keras

    if args.schedule == "constant":
        return args.learning_rate
    if args.schedule == "rsqrt":
        return InverseSqrt(args.learning_rate, warmup=warmup_steps(steps_per_epoch))
    return keras.optimizers.schedules.CosineDecay(
        args.learning_rate, decay_steps=max(total_steps, 1), alpha=0.05
    )


def warmup_steps(steps_per_epoch=None):
    """The rsqrt warm-up: 1,000 steps, or four epochs where that is less. A small corpus passes
    in few steps, and a run that stops on a time budget must not spend it warming up."""
    if not steps_per_epoch:
        return 1000
    return max(1, min(1000, 4 * int(steps_per_epoch)))


def InverseSqrt(peak, warmup=1000):
    """`peak * min(step / warmup, sqrt(warmup / step))`: linear warm-up to `peak`, then the
    inverse square root decay of Vaswani et al. 2017 (no total step count needed)."""
    import keras

    class _InverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = keras.ops.cast(step, "float32") + 1.0
            return peak * keras.ops.minimum(step / warmup, keras.ops.sqrt(warmup / step))

        def get_config(self):
            return {}

    return _InverseSqrt()


def build_model(args, vocab_size, total_steps=1, steps_per_epoch=None):
    import keras

    from keras_attn.models import (
        MaskedSequenceAccuracy,
        MaskedSequenceLoss,
        RNNSeq2Seq,
        Transformer,
    )

    if args.model == "convs2s":
        from keras_attn.models import ConvS2S

        model = ConvS2S(
            vocab_size,
            vocab_size,
            embedding_dim=args.embedding_dim,
            hidden_dim=args.units,
            num_layers=args.layers,
            dropout=args.dropout,
        )
    elif args.model == "transformer":
        model = Transformer(
            vocab_size,
            vocab_size,
            num_layers=args.layers,
            d_model=args.units,
            num_heads=args.heads,
            intermediate_dim=2 * args.units,
            dropout=args.dropout,
            # Also on the FFN's hidden layer (the layers' default is the paper's, none there):
            # the recipe the figures in benchmarks/RESULTS.md were trained with.
            activation_dropout=args.dropout,
            share_embeddings=True,
            num_key_value_heads=args.kv_heads,
            sliding_window=args.sliding_window,
            use_gate=args.gate,
            rotary_max_wavelength=args.rotary,
            copy_attention=args.copy,
            coverage_weight=args.coverage_weight,
        )
    elif args.model in ("bahdanau", "hard"):
        model = RNNSeq2Seq(
            vocab_size,
            vocab_size,
            embedding_dim=args.embedding_dim,
            units=args.units,
            cell=args.cell,
            attention=args.model,
            dropout=args.dropout,
            seed=args.seed,
            copy_attention=args.copy,
            coverage_weight=args.coverage_weight,
        )
    else:
        _, score_name, alignment = args.model.split("-", 2)
        model = RNNSeq2Seq(
            vocab_size,
            vocab_size,
            embedding_dim=args.embedding_dim,
            units=args.units,
            cell=args.cell,
            attention="luong",
            score=score_name,
            alignment=alignment,
            window=args.window,
            dropout=args.dropout,
            seed=args.seed,
            copy_attention=args.copy,
            coverage_weight=args.coverage_weight,
        )
    model.build()
    model.compile(
        optimizer=keras.optimizers.Adam(
            learning_rate(args, total_steps, steps_per_epoch), clipnorm=1.0
        ),
        loss=MaskedSequenceLoss(label_smoothing=args.label_smoothing),
        metrics=[MaskedSequenceAccuracy()],
        # JAX runs an uncompiled step op by op (each scan compiled at each call): jit there.
        jit_compile=args.jit_compile or keras.backend.backend() == "jax",
    )
    return model


def main(argv=None):
    args = parse_args(argv)
    run = training.Run(args) if not args.text else None
    t0 = time.time()
    if args.text:
        return main_text(args, t0)
    splits, tokenizer, metric = load_data(args)
    if run.chief:  # multi-worker: the other workers write nothing
        tokenizer.save(run.path("tokenizer_vocab.txt"))
    x, y = training.encode_pairs(splits["train"], tokenizer)
    max_length = args.max_length or int(y.shape[1] + 5)
    print(
        f"{len(splits['train'])} training pairs, vocabulary {tokenizer.vocab_size}, model {args.model}, "
        f"epochs {args.epochs} (data ready in {time.time() - t0:.1f}s)",
        flush=True,
    )
    with run.strategy.scope():
        steps_per_epoch = max(len(y) // min(args.batch_size, len(y)), 1)
        model = build_model(
            args, tokenizer.vocab_size, steps_per_epoch * args.epochs, steps_per_epoch
        )
    run.restore(model)
    decode = training.greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, max_length)

    def evaluate(pairs):
        if not pairs:
            return {metric: float("nan")}
        ids = training.pad_ids(tokenizer.tokenize([s for s, _ in pairs]).to_list())
        hyps, _ = training.decode_texts(decode, ids, tokenizer)
        return score(metric, hyps, [t for _, t in pairs])

    def validation(model_):
        return {f"val_{k}": v for k, v in evaluate(splits["val"]).items()}

    dataset, steps = run.batches(x, y, trim=("source", "target_in", "y"))
    run.fit(model, dataset, steps, validation=validation)
    if not run.chief:  # multi-worker: the chief evaluates, plots and exports
        return None
    results = {
        "task": "dates",
        "model": args.model,
        "copy": bool(args.copy),
        "metric": metric,
        "epochs": args.epochs,
        "train_seconds": round(run.train_seconds, 1),
    }
    for name in ("val", "test", "test_locale"):
        if splits.get(name):
            for k, v in evaluate(splits[name]).items():
                results[f"{name}_{k}"] = v
    return finish(args, run, model, tokenizer, decode, max_length, splits, results)


def finish(args, run, model, tokenizer, decode, max_length, splits, results):
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    write_heatmaps(args, run, splits["val"][: args.heatmaps], decode, tokenizer)
    if args.export:
        from keras_attn.serving import export_text_model

        exported = model
        if not args.text:  # dates: served answers are dates that exist (docs/dates.md)
            from keras_attn.data.date_grammar import ValidDates

            exported = ValidDates(model, tokenizer)
        path = export_text_model(
            exported,
            tokenizer,
            args.export,
            version=args.export_version,
            beam_size=args.beam_size,
            max_length=max_length,
            warmup_inputs=[splits["val"][0][0]],
            overwrite=True,
            xla=args.xla,
            keep_placeholders=args.keep_placeholders,
        )
        print(f"Exported SavedModel: {path}", flush=True)
        if args.text:  # the figures a user of the export gets: its own search, its own loader
            results.update(served_scores(path, splits, run))
            print("Served: " + json.dumps({k: v for k, v in results.items() if "served" in k}))
            with open(run.path("results.json"), "w", encoding="utf-8") as f:
                json.dump(results, f, indent=1)
    print(
        f"Outputs in {os.path.abspath(run.out)}: checkpoints, metrics, TensorBoard logs, heat maps"
        if run.chief
        else "Outputs: none on this worker (the chief writes them)",
        flush=True,
    )
    return results


def served_scores(path, splits, run, batch_size=64):
    """The test splits translated by the exported SavedModel's `serving_default` (loaded with
    `tf.saved_model.load`, as TF Serving loads it): `{served_<split>_<score>}`, and the
    answers in RUN_DIR/<split>.served.txt."""
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    scores = {}
    for name in ("test", "test_in_domain"):
        pairs = splits.get(name)
        if not pairs:
            continue
        hyps = []
        for i in range(0, len(pairs), batch_size):
            texts = tf.constant([s for s, _ in pairs[i : i + batch_size]])
            hyps += [h.decode("utf-8") for h in serve(inputs=texts)["outputs"].numpy()]
        for k, v in text_scores(hyps, pairs).items():
            scores[f"served_{name}_{k}"] = v
        with open(run.path(f"{name}.served.txt"), "w", encoding="utf-8") as f:
            f.write("".join(h.replace("\n", " ") + "\n" for h in hyps))
    return scores


def text_scores(hypotheses, pairs):
    """chrF, BLEU, placeholders kept and loop rate of `hypotheses` against `pairs`' targets."""
    from keras_attn.text.placeholders import placeholders_kept_rate

    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    scores = score("chrf", hypotheses, references)
    scores["placeholders_kept"] = placeholders_kept_rate(sources, hypotheses)
    scores["loop_rate"] = training.loop_rate(hypotheses)
    return scores


def main_text(args, t0):
    """A text corpus (`--corpus` / `--data`): streamed, length-bucketed token batches; early
    stopping on validation chrF; checkpoint averaging; `--init-from` fine-tuning."""
    import keras

    if args.init_from:  # the model of the run fine-tuned from
        with open(os.path.join(args.init_from, "run_config.json"), encoding="utf-8") as f:
            settings = json.load(f)["model"]
        for name in MODEL_SETTINGS:
            if name in settings:
                setattr(args, name, settings[name])
    os.makedirs(args.out, exist_ok=True)
    splits = load_data(args)[0]
    rule = apply_size_defaults(args, len(splits["train"]), args.explicit)
    run = training.Run(args)
    tokenizer = text_tokenizer(args, splits["train"])
    if run.chief:
        tokenizer.save(run.path("tokenizer.model"))
        with open(run.path("run_config.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "model": {k: getattr(args, k) for k in MODEL_SETTINGS},
                    "size_rule": rule,
                    "args": {k: v for k, v in vars(args).items() if k != "explicit"},
                },
                f,
                indent=1,
                default=str,
            )
    train_path = run.path("data", "train.tsv")
    lines, src_tokens, tgt_tokens, longest = training.count_tokens(
        train_path, tokenizer, args.max_seq
    )
    max_length = args.max_length or min(longest + 5, args.max_seq + 1)
    # One pass: the longer side's tokens over a batch's positions (about 80% filled).
    steps = args.steps_per_epoch or max(
        1, int(math.ceil(max(src_tokens, tgt_tokens) / (0.8 * args.max_tokens)))
    )
    print(
        f"{lines} training pairs ({src_tokens} source, {tgt_tokens} target tokens), vocabulary "
        f"{tokenizer.vocab_size}, model {args.model}, {steps} batches of <= {args.max_tokens} "
        f"tokens per epoch, epochs {args.epochs}, dropout {args.dropout}, token dropout "
        f"{args.token_dropout}, patience {args.patience}, average {args.average} "
        f"(data ready in {time.time() - t0:.1f}s)",
        flush=True,
    )
    with run.strategy.scope():
        model = build_model(args, tokenizer.vocab_size, steps * args.epochs, steps)
    if args.init_from and not (args.resume and training.latest_checkpoint(args.out)[1]):
        start = os.path.join(args.init_from, "final.weights.h5")
        if not os.path.exists(start):
            start = os.path.join(args.init_from, "best.weights.h5")
        try:
            model.load_weights(start)
        except ValueError as err:  # the run's files disagree (its tokenizer or config replaced)
            raise SystemExit(
                f"train_translator.py: error: --init-from {args.init_from}: its weights do not fit "
                f"the model its run_config.json and tokenizer.model (vocabulary "
                f"{tokenizer.vocab_size}) describe: {str(err).splitlines()[0]}"
            ) from None
        print(f"Fine-tuning from {start}", flush=True)
    run.restore(model)
    decode = training.greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, max_length)

    def translate(pairs):
        if not pairs:
            return []
        ids = training.pad_ids(tokenizer.tokenize([s for s, _ in pairs]).to_list())
        return training.decode_texts(decode, ids, tokenizer)[0]

    best_path, best_json = run.path("best.weights.h5"), run.path("best.json")
    best = {"value": -1.0, "epoch": 0}
    if args.resume and os.path.exists(best_json):
        with open(best_json, encoding="utf-8") as f:
            best = json.load(f)
    seen = {"epochs": 0}

    def validation(model_):
        scores = text_scores(translate(splits["val"]), splits["val"])
        seen["epochs"] += 1
        epoch = run.initial_epoch + seen["epochs"]
        if scores["chrf"] > best["value"]:  # keep the best epoch's weights
            best.update(value=scores["chrf"], epoch=epoch)
            if run.chief:
                training.save_weights(model_, best_path)
                with open(best_json, "w", encoding="utf-8") as f:
                    json.dump(best, f)
        elif args.patience and epoch - best["epoch"] >= args.patience:
            print(f"Early stop: no better validation chrF for {args.patience} epochs", flush=True)
            model_.stop_training = True
        return {f"val_{k}": v for k, v in scores.items()}

    source_transform = None
    if args.token_dropout:
        source_transform = training.token_dropout(args.token_dropout, tokenizer.unk_id, args.seed)
    stream = training.token_batches(
        train_path,
        tokenizer,
        max_tokens=args.max_tokens,
        max_length=args.max_seq,
        seed=args.seed,
        source_transform=source_transform,
    )
    dataset, steps = run.stream(stream, steps)
    run.fit(model, dataset, steps, validation=validation, keep=max(3, args.average))
    if not run.chief:
        return None
    # The weights scored and exported: the best epoch's, or the mean of the last epochs'
    # (checkpoint averaging) when that scores higher on the validation pairs.
    chosen = "last epoch"
    if os.path.exists(best_path):
        model.load_weights(best_path)
        chosen = f"best epoch ({best['epoch']}, validation chrF {best['value']:.1f})"
    if args.average and args.average > 1:
        kept = training.last_checkpoints(args.out, args.average)
        if len(kept) > 1:
            held = [keras.ops.convert_to_numpy(w) for w in model.weights]
            training.average_checkpoints(model, kept)
            averaged = score("chrf", translate(splits["val"]), [t for _, t in splits["val"]])
            print(
                f"Mean of the last {len(kept)} checkpoints: validation chrF {averaged['chrf']:.1f}"
            )
            if averaged["chrf"] > best["value"]:
                chosen = (
                    f"mean of the last {len(kept)} epochs (validation chrF {averaged['chrf']:.1f})"
                )
            else:
                for variable, value in zip(model.weights, held):
                    variable.assign(value)
    training.save_weights(model, run.path("final.weights.h5"))
    print(f"Scored and exported: {chosen} -> final.weights.h5", flush=True)

    results = {
        "task": f"catalogues-{args.corpus}" if args.corpus else "tsv",
        "model": args.model,
        "copy": bool(args.copy),
        "metric": "chrf",
        "epochs": args.epochs,
        "epochs_trained": run.initial_epoch + seen["epochs"],
        "weights": chosen,
        "init_from": args.init_from,
        "train_pairs": lines,
        "train_seconds": round(run.train_seconds, 1),
    }
    for name in ("val", "test", "test_in_domain"):
        pairs = splits.get(name)
        if not pairs:
            continue
        hyps = translate(pairs)
        for k, v in text_scores(hyps, pairs).items():
            results[f"{name}_{k}"] = v
        # The baselines: the source copied unchanged, and the references' own loop rate.
        for k, v in score("chrf", [s for s, _ in pairs], [t for _, t in pairs]).items():
            results[f"{name}_copy_source_{k}"] = v
        results[f"{name}_reference_loop_rate"] = training.loop_rate([t for _, t in pairs])
        with open(run.path(f"{name}.hyp.txt"), "w", encoding="utf-8") as f:
            f.write("".join(h.replace("\n", " ") + "\n" for h in hyps))
    return finish(args, run, model, tokenizer, decode, max_length, splits, results)


def write_heatmaps(args, run, pairs, decode, tokenizer):
    from keras_attn.plotting import plot_attention

    if not pairs:
        return []
    ids = training.pad_ids(tokenizer.tokenize([s for s, _ in pairs]).to_list())
    out = decode(ids)
    seqs, lengths = np.asarray(out["sequences"]), np.asarray(out["lengths"])
    paths = []
    for i, (src, _) in enumerate(pairs):
        src_ids = [t for t in ids[i] if t != tokenizer.pad_id]
        n = int(lengths[i])
        out_ids = seqs[i, :n]
        weights = np.asarray(out["alignments"])[i, :n, : len(src_ids)]
        path = plot_attention(
            weights,
            training.token_strings(tokenizer, src_ids),
            training.token_strings(tokenizer, out_ids),
            run.path("attention", f"val_{i}.png"),
            title=src,
        )
        paths.append(path)
    print("Attention heat maps: " + ", ".join(paths), flush=True)
    return paths


if __name__ == "__main__":
    main()
