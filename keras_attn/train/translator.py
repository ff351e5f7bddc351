"""The translator recipe (`examples/train_translator.py`): the data of a run, its tokenizer,
its model, the training loop with validation, early stopping and checkpoint averaging, the
scores, heat maps and export.

    config = parse_args(argv)                  # the flags resolved (`keras_attn.train.config`)
    results = train(config)                    # dates or a text corpus, by the config
"""

import json
import math
import os
import shutil
import time

import keras
import numpy as np

from keras_attn.data.padding import pad_ids
from keras_attn.train import args as flags_
from keras_attn.train.batching import (
    BucketShapes,
    count_tokens,
    encode_pairs,
    token_batches,
    token_dropout,
)
from keras_attn.train.checkpoints import (
    average_checkpoints,
    last_checkpoints,
    latest_checkpoint,
    save_weights,
)
from keras_attn.train.config import SMALL_CORPUS, data_settings, resolve_config
from keras_attn.train.evaluate import (
    decode_texts,
    greedy_decoder,
    loop_rate,
    score,
    text_scores,
    token_strings,
)
from keras_attn.train.loop import Run
from keras_attn.train.numpy_text import (
    SentencePieceText,
    numpy_token_batches,
    tensorflow_available,
)


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
    return read_text_data(args), None, "chrf"


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


def prepare_text_data(args):
    """Write RUN_DIR/data/{train,val,test[,test_in_domain]}.tsv and manifest.json: exactly what
    the model trains and is scored on (with `--corpus`, also the corpus's held-out names,
    `test_names.tsv`, where it has them). `--resume` reuses the files already there."""
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
    names = os.path.join(source, corpora.NAMES_FILE) if args.corpus else None
    if names and os.path.exists(names) and not args.smoke:
        # the held-out names (`corpora.build_names`): scored by benchmarks/corpus_answers.py
        shutil.copyfile(names, os.path.join(data_dir, corpora.NAMES_FILE))
    with open(os.path.join(data_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    return data_dir


def read_text_data(args):
    """-> splits {"train", "val", "test"[, "test_in_domain"]} read from RUN_DIR/data (written
    by `prepare_text_data`)."""
    from keras_attn.data import load_tsv

    data_dir = os.path.join(args.out, "data")
    splits = {}
    for name in ("train", "val", "test", "test_in_domain"):
        path = os.path.join(data_dir, f"{name}.tsv")
        if os.path.exists(path):
            splits[name] = load_tsv(path)[0]
    splits["val"] = splits.get("val", [])[: args.n_val]
    return splits


def text_tokenizer(args, train_pairs):
    """The run's SentencePiece model: the `--init-from` run's, the saved one on `--resume`, or
    one trained on the training pairs (both sides: copy attention needs one vocabulary).
    Without TensorFlow: the same model applied in Python (`SentencePieceText`)."""
    if tensorflow_available():
        from keras_attn.text import SentencePieceTokenizer
    else:
        SentencePieceTokenizer = SentencePieceText

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


# --------------------------------------------------------------------------------- model
def learning_rate(args, total_steps, steps_per_epoch=None):
    """Adam's learning rate (`--schedule`): constant, cosine decay to 5% over the whole run, or
    rsqrt with a warm-up of `warmup_steps(steps_per_epoch)`."""
    if args.schedule == "constant":
        return args.learning_rate
    if args.schedule == "rsqrt":
        warmup = warmup_steps(steps_per_epoch)
        if args.time_budget:  # the peak early, then the decay of a run without a budget
            return InverseSqrt(
                args.learning_rate, warmup=min(warmup, BUDGET_WARMUP), decay_from=warmup
            )
        return InverseSqrt(args.learning_rate, warmup=warmup)
    return keras.optimizers.schedules.CosineDecay(
        args.learning_rate, decay_steps=max(total_steps, 1), alpha=0.05
    )


# A run on a time budget warms up over this many steps at most: a slow machine's budget may buy
# fewer steps than the usual warm-up, which would spend it below the peak learning rate.
BUDGET_WARMUP = 100


def warmup_steps(steps_per_epoch=None):
    """The rsqrt warm-up: 1,000 steps, or four epochs where that is less. A small corpus passes
    in few steps, and a run that stops on a time budget must not spend it warming up."""
    if not steps_per_epoch:
        return 1000
    return max(1, min(1000, 4 * int(steps_per_epoch)))


class InverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """`peak * min(step / warmup, 1, sqrt(decay_from / step))`: linear warm-up to `peak`, the
    peak until `decay_from` (default: `warmup`), then the inverse square root decay of Vaswani
    et al. 2017 (no total step count needed)."""

    def __init__(self, peak, warmup=1000, decay_from=None):
        self.peak, self.warmup = peak, warmup
        self.decay_from = warmup if decay_from is None else decay_from
        if self.decay_from < warmup:
            raise ValueError(
                "`decay_from` must be at least `warmup` (the decay starts at the peak). "
                f"Received: decay_from={decay_from}, warmup={warmup}"
            )

    def __call__(self, step):
        step = keras.ops.cast(step, "float32") + 1.0
        rise = keras.ops.minimum(step / self.warmup, 1.0)
        return self.peak * keras.ops.minimum(rise, keras.ops.sqrt(self.decay_from / step))

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "decay_from": self.decay_from}


# The models' constructor keywords read from the settings: {keyword: setting}, by family.
_COPY_KEYWORDS = {"copy_attention": "copy", "coverage_weight": "coverage_weight"}
_MODEL_KEYWORDS = {
    "convs2s": {
        "embedding_dim": "embedding_dim",
        "hidden_dim": "units",
        "num_layers": "layers",
        "dropout": "dropout",
    },
    "transformer": {
        "num_layers": "layers",
        "d_model": "units",
        "num_heads": "heads",
        "dropout": "dropout",
        # Also on the FFN's hidden layer (the layers' default is the paper's, none there):
        # the recipe the figures in benchmarks/RESULTS.md were trained with.
        "activation_dropout": "dropout",
        "num_key_value_heads": "kv_heads",
        "sliding_window": "sliding_window",
        "use_gate": "gate",
        "rotary_max_wavelength": "rotary",
        **_COPY_KEYWORDS,
    },
    "rnn": {
        "embedding_dim": "embedding_dim",
        "units": "units",
        "cell": "cell",
        "dropout": "dropout",
        "seed": "seed",
        **_COPY_KEYWORDS,
    },
}


def _model_arguments(args):
    """`(family, keywords)`: the `_MODEL_KEYWORDS` family of `args.model` and its constructor's
    keywords: the table's settings, then what the model's name or the family fixes."""
    if args.model in ("convs2s", "transformer"):
        family = args.model
    else:
        family = "rnn"
    keywords = {
        keyword: getattr(args, setting) for keyword, setting in _MODEL_KEYWORDS[family].items()
    }
    if family == "transformer":
        keywords.update(intermediate_dim=2 * args.units, share_embeddings=True)
    elif args.model in ("bahdanau", "hard"):
        keywords.update(attention=args.model)
    elif family == "rnn":
        _, score, alignment = args.model.split("-", 2)
        keywords.update(attention="luong", score=score, alignment=alignment, window=args.window)
    return family, keywords


def build_model(args, vocab_size, total_steps=1, steps_per_epoch=None):
    from keras_attn.models import (
        ConvS2S,
        MaskedSequenceAccuracy,
        MaskedSequenceLoss,
        RNNSeq2Seq,
        Transformer,
    )

    family, keywords = _model_arguments(args)
    model_class = {"convs2s": ConvS2S, "transformer": Transformer, "rnn": RNNSeq2Seq}[family]
    model = model_class(vocab_size, vocab_size, **keywords)
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


# ---------------------------------------------------------------------------------- config
DESCRIPTION = (
    "Train a translator: human-written dates -> ISO dates (default), or any parallel corpus."
)


def parse_args(argv=None, train_pairs=None, prepare_data=False):
    """The translator's flags in `argv` resolved into a `TranslatorConfig`; a setting refused
    (`ValueError`) exits as argparse does (status 2, the reason on stderr). `train_pairs`: the
    text corpus's size (default: the run's prepared training split, when there is one).
    `prepare_data`: write a text run's RUN_DIR/data first (`prepare_text_data`), so the one
    resolution knows the corpus size."""
    parser = flags_.build_parser(DESCRIPTION)
    flags = flags_.translator_flags(parser, argv)
    try:
        return config_from_flags(flags, train_pairs, prepare_data)
    except ValueError as err:
        parser.error(str(err))


def config_from_flags(flags, train_pairs=None, prepare_data=False):
    """`resolve_config` with what it reads from disk: the `--init-from` run's model settings
    (checked first: `init_from_problem`), and the number of training pairs prepared in
    RUN_DIR/data when `train_pairs` is not given (with `prepare_data`, a text run's data is
    prepared first: `data_settings`, `prepare_text_data`). Refuses `--export` off
    TensorFlow."""
    if flags.get("export") and keras.backend.backend() != "tensorflow":
        raise ValueError(
            "--export writes a TensorFlow SavedModel: train on this backend, then run the same "
            "command with KERAS_BACKEND=tensorflow --resume --export DIR (docs/distributed.md)"
        )
    text = bool(flags.get("data") or flags.get("corpus"))
    init_model = None
    if flags.get("init_from") and text:
        problem = init_from_problem(flags["init_from"])
        if problem:
            raise ValueError(f"--init-from {flags['init_from']}: {problem}")
        with open(os.path.join(flags["init_from"], "run_config.json"), encoding="utf-8") as f:
            init_model = json.load(f)["model"]
    if text and prepare_data:
        prepare_text_data(data_settings(flags))
    if train_pairs is None and text:
        train_pairs = prepared_pairs(flags.get("out", flags_.cfg.SHARED["out"]))
    return resolve_config(flags, train_pairs, init_model)


def prepared_pairs(out):
    """The training pairs in RUN_DIR/data/train.tsv, or None before the data is prepared."""
    from keras_attn.data import load_tsv

    path = os.path.join(out, "data", "train.tsv")
    return len(load_tsv(path)[0]) if os.path.exists(path) else None


def trained_sources(run_dir):
    """The source sides the weights of the run in `run_dir` were trained on: its
    data/train.tsv, then those of the run it started from (`init_from`) and so on; the export's
    `known_words`."""
    from keras_attn.data import load_tsv

    sources, seen = [], set()
    while run_dir and os.path.realpath(run_dir) not in seen:
        seen.add(os.path.realpath(run_dir))
        path = os.path.join(run_dir, "data", "train.tsv")
        if os.path.exists(path):
            sources += [s for s, _ in load_tsv(path)[0]]
        try:
            with open(os.path.join(run_dir, "run_config.json"), encoding="utf-8") as f:
                run_dir = json.load(f).get("args", {}).get("init_from")
        except FileNotFoundError:
            run_dir = None
    return sources


def write_run_config(run, config):
    """RUN_DIR/run_config.json: the resolved config as it is (`TranslatorConfig.record`)."""
    with open(run.path("run_config.json"), "w", encoding="utf-8") as f:
        json.dump(config.record(), f, indent=1, default=str)


# ---------------------------------------------------------------------------------- runs
def main(argv=None):
    """Train as `argv` says (the flags of `build_parser`); returns the results (None on a
    worker other than the chief)."""
    config = parse_args(argv, prepare_data=True)
    return train_text(config) if config.text else train_dates(config)


def train_dates(config):
    """The generated dates: in-memory batches, exact match of greedy decoding."""
    run, t0 = Run(config), time.time()
    splits, tokenizer, metric = load_data(config)
    if run.chief:  # multi-worker: the other workers write nothing
        tokenizer.save(run.path("tokenizer_vocab.txt"))
        write_run_config(run, config)
    x, y = encode_pairs(splits["train"], tokenizer)
    max_length = config.max_length or int(y.shape[1] + 5)
    print(
        f"{len(splits['train'])} training pairs, vocabulary {tokenizer.vocab_size}, model "
        f"{config.model}, epochs {config.epochs} (data ready in {time.time() - t0:.1f}s)",
        flush=True,
    )
    set_precision(config)
    with run.strategy.scope():
        steps_per_epoch = max(len(y) // min(config.batch_size, len(y)), 1)
        model = build_model(
            config, tokenizer.vocab_size, steps_per_epoch * config.epochs, steps_per_epoch
        )
    run.restore(model)
    decode = greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, max_length)

    def evaluate(pairs):
        if not pairs:
            return {metric: float("nan")}
        hyps, _ = decode_texts(decode, source_ids(tokenizer, pairs), tokenizer)
        return score(metric, hyps, [t for _, t in pairs])

    def validation(model_):
        return {f"val_{k}": v for k, v in evaluate(splits["val"]).items()}

    dataset, steps = run.batches(x, y, trim=("source", "target_in", "y"))
    run.fit(model, dataset, steps, validation=validation)
    if not run.chief:  # multi-worker: the chief evaluates, plots and exports
        return None
    results = {
        "task": "dates",
        "model": config.model,
        "copy": bool(config.copy),
        "metric": metric,
        "epochs": config.epochs,
        "train_seconds": round(run.train_seconds, 1),
    }
    for name in ("val", "test", "test_locale"):
        if splits.get(name):
            for k, v in evaluate(splits[name]).items():
                results[f"{name}_{k}"] = v
    return finish(config, run, model, tokenizer, decode, max_length, splits, results)


def set_precision(config):
    """Keras' global dtype policy for the model built next: `mixed_<dtype>` with
    `mixed_precision`, else float32."""
    policy = f"mixed_{config.mixed_precision}" if config.mixed_precision else "float32"
    keras.mixed_precision.set_global_policy(policy)


def source_ids(tokenizer, pairs):
    """The padded source ids of `(source, target)` pairs."""
    return pad_ids(tokenizer.tokenize([s for s, _ in pairs]).to_list())


class TextRun:
    """A text corpus run's data (RUN_DIR/data, prepared when the config was resolved:
    `parse_args(..., prepare_data=True)`), tokenizer and sizes: the tokenizer trained (or read),
    run_config.json written."""

    def __init__(self, config):
        t0 = time.time()
        self.splits = read_text_data(config)
        self.config = config
        self.run = run = Run(config)
        self.tokenizer = tokenizer = text_tokenizer(config, self.splits["train"])
        if run.chief:
            tokenizer.save(run.path("tokenizer.model"))
            write_run_config(run, config)
        self.train_path = run.path("data", "train.tsv")
        lines, src_tokens, tgt_tokens, longest = count_tokens(
            self.train_path, tokenizer, config.max_seq
        )
        self.lines = lines
        self.max_length = config.max_length or min(longest + 5, config.max_seq + 1)
        # One pass: the longer side's tokens over a batch's positions (about 80% filled).
        self.steps = config.steps_per_epoch or max(
            1, int(math.ceil(max(src_tokens, tgt_tokens) / (0.8 * config.max_tokens)))
        )
        print(
            f"{lines} training pairs ({src_tokens} source, {tgt_tokens} target tokens), "
            f"vocabulary {tokenizer.vocab_size}, model {config.model}, {self.steps} batches of "
            f"<= {config.max_tokens} tokens per epoch, epochs {config.epochs}, dropout "
            f"{config.dropout}, token dropout {config.token_dropout}, patience "
            f"{config.patience}, average {config.average} "
            f"(data ready in {time.time() - t0:.1f}s)",
            flush=True,
        )

    def batches(self):
        """The run's token batches from its first epoch: `(dataset, steps)`."""
        config, tokenizer = self.config, self.tokenizer
        if isinstance(tokenizer, SentencePieceText):  # no TensorFlow: the NumPy pipeline
            batches, dropout = numpy_token_batches, dict(token_dropout=config.token_dropout)
        else:
            transform = None
            if config.token_dropout:
                transform = token_dropout(config.token_dropout, tokenizer.unk_id, config.seed)
            batches, dropout = token_batches, dict(source_transform=transform)
        stream = batches(
            self.train_path,
            tokenizer,
            max_tokens=config.max_tokens,
            max_length=config.max_seq,
            seed=config.seed,
            **dropout,
        )
        return self.run.stream(stream, self.steps, BucketShapes(config.max_tokens, config.max_seq))


class BestEpoch:
    """The validation of a text run: chrF (and the other text scores) after each epoch, the
    best epoch's weights kept in RUN_DIR/best.weights.h5 (its epoch and score in best.json),
    early stopping after `patience` epochs without a better one."""

    def __init__(self, run, patience, translate, pairs):
        self.run, self.patience, self.translate, self.pairs = run, patience, translate, pairs
        self.path, self.json = run.path("best.weights.h5"), run.path("best.json")
        self.best = {"value": -1.0, "epoch": 0}
        if run.args.resume and os.path.exists(self.json):
            with open(self.json, encoding="utf-8") as f:
                self.best = json.load(f)
        self.epochs = 0  # trained by this process

    def __call__(self, model):
        scores = text_scores(self.translate(self.pairs), self.pairs)
        self.epochs += 1
        epoch = self.run.initial_epoch + self.epochs
        if scores["chrf"] > self.best["value"]:  # keep the best epoch's weights
            self.best.update(value=scores["chrf"], epoch=epoch)
            if self.run.chief:
                save_weights(model, self.path)
                with open(self.json, "w", encoding="utf-8") as f:
                    json.dump(self.best, f)
        elif self.patience and epoch - self.best["epoch"] >= self.patience:
            print(f"Early stop: no better validation chrF for {self.patience} epochs", flush=True)
            model.stop_training = True
        return {f"val_{k}": v for k, v in scores.items()}


def train_text(config):
    """A text corpus (`--corpus` / `--data`): streamed, length-bucketed token batches; early
    stopping on validation chrF; checkpoint averaging; `--init-from` fine-tuning."""
    text = TextRun(config)
    config, run, tokenizer, splits = text.config, text.run, text.tokenizer, text.splits
    set_precision(config)
    with run.strategy.scope():
        model = build_model(config, tokenizer.vocab_size, text.steps * config.epochs, text.steps)
    if config.init_from and not (config.resume and latest_checkpoint(config.out)[1]):
        load_init_weights(config, model, tokenizer)
    run.restore(model)
    decode = greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, text.max_length)

    def translate(pairs):
        if not pairs:
            return []
        return decode_texts(decode, source_ids(tokenizer, pairs), tokenizer)[0]

    validation = BestEpoch(run, config.patience, translate, splits["val"])
    dataset, steps = text.batches()
    run.fit(model, dataset, steps, validation=validation, keep=max(3, config.average))
    if not run.chief:
        return None
    chosen = choose_weights(config, run, model, validation, translate, splits["val"])
    results = {
        "task": config.task,
        "model": config.model,
        "copy": bool(config.copy),
        "metric": "chrf",
        "epochs": config.epochs,
        "epochs_trained": run.initial_epoch + validation.epochs,
        "weights": chosen,
        "init_from": config.init_from,
        "train_pairs": text.lines,
        "train_seconds": round(run.train_seconds, 1),
    }
    results.update(test_scores(run, splits, translate))
    return finish(config, run, model, tokenizer, decode, text.max_length, splits, results)


def load_init_weights(config, model, tokenizer):
    """`--init-from`: the weights of the run fine-tuned from (its final, else its best)."""
    start = os.path.join(config.init_from, "final.weights.h5")
    if not os.path.exists(start):
        start = os.path.join(config.init_from, "best.weights.h5")
    try:
        model.load_weights(start)
    except ValueError as err:  # the run's files disagree (its tokenizer or config replaced)
        raise SystemExit(
            f"train_translator.py: error: --init-from {config.init_from}: its weights do not fit "
            f"the model its run_config.json and tokenizer.model (vocabulary "
            f"{tokenizer.vocab_size}) describe: {str(err).splitlines()[0]}"
        ) from None
    print(f"Fine-tuning from {start}", flush=True)


def choose_weights(config, run, model, best, translate, val_pairs):
    """The weights scored and exported: the best epoch's, or the mean of the last epochs'
    (checkpoint averaging) when that scores higher on the validation pairs; saved as
    RUN_DIR/final.weights.h5. Returns which, in words."""
    chosen = "last epoch"
    if os.path.exists(best.path):
        model.load_weights(best.path)
        chosen = f"best epoch ({best.best['epoch']}, validation chrF {best.best['value']:.1f})"
    if config.average and config.average > 1:
        kept = last_checkpoints(config.out, config.average)
        if len(kept) > 1:
            held = [keras.ops.convert_to_numpy(w) for w in model.weights]
            average_checkpoints(model, kept)
            averaged = score("chrf", translate(val_pairs), [t for _, t in val_pairs])["chrf"]
            print(f"Mean of the last {len(kept)} checkpoints: validation chrF {averaged:.1f}")
            if averaged > best.best["value"]:
                chosen = f"mean of the last {len(kept)} epochs (validation chrF {averaged:.1f})"
            else:
                for variable, value in zip(model.weights, held):
                    variable.assign(value)
    save_weights(model, run.path("final.weights.h5"))
    print(f"Scored and exported: {chosen} -> final.weights.h5", flush=True)
    return chosen


def test_scores(run, splits, translate):
    """The text scores of the validation and test splits, with the baselines (the source
    copied unchanged, the references' own loop rate); the answers in RUN_DIR/<split>.hyp.txt."""
    results = {}
    for name in ("val", "test", "test_in_domain"):
        pairs = splits.get(name)
        if not pairs:
            continue
        hyps = translate(pairs)
        for k, v in text_scores(hyps, pairs).items():
            results[f"{name}_{k}"] = v
        for k, v in score("chrf", [s for s, _ in pairs], [t for _, t in pairs]).items():
            results[f"{name}_copy_source_{k}"] = v
        results[f"{name}_reference_loop_rate"] = loop_rate([t for _, t in pairs])
        with open(run.path(f"{name}.hyp.txt"), "w", encoding="utf-8") as f:
            f.write("".join(h.replace("\n", " ") + "\n" for h in hyps))
    return results


def finish(config, run, model, tokenizer, decode, max_length, splits, results):
    """results.json, the heat maps, and with `export` the SavedModel (for text, scored as
    served)."""
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    write_heatmaps(config, run, splits["val"][: config.heatmaps], decode, tokenizer)
    if config.export:
        path = export(config, model, tokenizer, max_length, splits["val"][0][0])
        print(f"Exported SavedModel: {path}", flush=True)
        if config.text:  # the figures a user of the export gets: its own search, its own loader
            results.update(served_scores(path, splits, run))
            print("Served: " + json.dumps({k: v for k, v in results.items() if "served" in k}))
            with open(run.path("results.json"), "w", encoding="utf-8") as f:
                json.dump(results, f, indent=1)
    run.print_outputs()
    return results


def export(config, model, tokenizer, max_length, warmup):
    """The SavedModel under `config.export` (dates: behind the date grammar, docs/dates.md),
    with the step signatures (streaming clients, docs/serving.md)."""
    from keras_attn.serving import export_text_model
    from keras_attn.serving.steps import STEP_SIGNATURES
    from keras_attn.train.export import served_model

    # the source words the model never saw are copied whole
    known = trained_sources(config.out) if config.text and config.word_rules else None
    return export_text_model(
        served_model(config, model, tokenizer),
        tokenizer,
        config.export,
        version=config.export_version,
        beam_size=config.beam_size,
        length_penalty=config.length_penalty,
        max_length=max_length,
        warmup_inputs=[warmup],
        overwrite=True,
        xla=config.xla,
        keep_placeholders=config.keep_placeholders,
        word_rules=config.word_rules,
        known_words=known,
        # ... and the answer holds each source word the model never saw
        keep_unknown_words=known is not None,
        # with the rules, the source itself is served where the model finds it as likely per token
        copy_source=bool(config.text and config.word_rules),
        extra_signatures=(STEP_SIGNATURES,),
    )


def served_scores(path, splits, run, batch_size=64):
    """The test splits translated by the exported SavedModel's `serving_default` (loaded with
    `tf.saved_model.load`, as TF Serving loads it): `{served_<split>_<score>}`, and the
    answers in RUN_DIR/<split>.served.txt."""
    scores = {}
    for name in ("test", "test_in_domain"):
        pairs = splits.get(name)
        if not pairs:
            continue
        hyps = served_answers(path, [s for s, _ in pairs], batch_size)
        for k, v in text_scores(hyps, pairs).items():
            scores[f"served_{name}_{k}"] = v
        with open(run.path(f"{name}.served.txt"), "w", encoding="utf-8") as f:
            f.write("".join(h.replace("\n", " ") + "\n" for h in hyps))
    return scores


def served_answers(path, sources, batch_size=64, signature="serving_default"):
    """The answers of the SavedModel at `path` (its `signature`, loaded with
    `tf.saved_model.load` as TF Serving loads it) to `sources`, in batches."""
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures[signature]
    answers = []
    for i in range(0, len(sources), batch_size):
        texts = tf.constant(list(sources[i : i + batch_size]))
        answers += [h.decode("utf-8") for h in serve(inputs=texts)["outputs"].numpy()]
    return answers


def write_heatmaps(config, run, pairs, decode, tokenizer):
    """Attention heat maps of the greedy answers to `pairs`: RUN_DIR/attention/val_<i>.png;
    none, said in one line, where matplotlib is not installed (a JAX-only machine may lack it:
    the run's results stand without them)."""
    from keras_attn.plotting import plot_attention

    if not pairs:
        return []
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "Attention heat maps skipped: matplotlib is not installed (pip install matplotlib; "
            "--heatmaps 0 asks for none)",
            flush=True,
        )
        return []
    ids = source_ids(tokenizer, pairs)
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
            token_strings(tokenizer, src_ids),
            token_strings(tokenizer, out_ids),
            run.path("attention", f"val_{i}.png"),
            title=src,
        )
        paths.append(path)
    print("Attention heat maps: " + ", ".join(paths), flush=True)
    return paths
