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
    p.add_argument("--layers", type=int, default=2, help="Transformer / ConvS2S layers")
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
        choices=("cosine", "constant"),
        default="cosine",
        help="learning-rate schedule",
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
    args = p.parse_args(argv)
    if args.model is None:  # the model that wins on each (docs/real_data.md, RESULTS.md)
        args.model = "transformer" if (args.data or args.corpus) else "bahdanau"
    if args.model not in MODELS:
        p.error(f"--model must be one of {', '.join(MODELS)}")
    if args.data and args.corpus:
        p.error("give --data or --corpus, not both")
    text = bool(args.data or args.corpus)
    # Defaults per task: the small real corpora (a few thousand pairs, docs/real_data.md) want a
    # wider model with dropout, more epochs and copy attention; the generated dates keep theirs.
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
    if args.smoke:
        args.n_train, args.n_val, args.n_test = 256, 32, 32
        args.units, args.embedding_dim = min(args.units, 16), min(args.embedding_dim, 16)
        args.vocab_size = min(args.vocab_size or 200, 200)
    return args


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
    from keras_attn.data import catalogue_pairs, load_tsv, split_pairs
    from keras_attn.text import SentencePieceTokenizer

    if args.corpus:
        pairs, report = catalogue_pairs(args.corpus, max_length=args.max_chars)
    else:
        pairs, report = load_tsv(args.data, max_length=args.max_chars)
    print(report, flush=True)
    if args.smoke:
        pairs = pairs[:400]
    if len(pairs) < 10:
        raise SystemExit(f"{args.data or args.corpus}: only {len(pairs)} usable pairs")
    train, val, test = split_pairs(pairs, seed=args.seed)
    saved = os.path.join(args.out, "tokenizer.model")
    if args.resume and os.path.exists(saved):  # the vocabulary the checkpoint was trained with
        tokenizer = SentencePieceTokenizer.load(saved)
    else:
        texts = [
            t for pair in train for t in pair
        ]  # one model for both sides (copy attention needs it)
        tokenizer = SentencePieceTokenizer.train(
            texts, vocab_size=args.vocab_size or auto_vocab_size(texts)
        )
    return {"train": train, "val": val[: args.n_val], "test": test}, tokenizer, "chrf"


def auto_vocab_size(texts):
    """A SentencePiece vocabulary sized to the corpus: every character gets a piece (needed with
    `character_coverage=1.0`), plus about one piece per 8 words of text, at most 8,000. A few
    thousand pairs get a few hundred to two thousand pieces: small enough that each is seen often."""
    chars = len(set("".join(texts)))
    words = sum(len(t.split()) for t in texts)
    return int(min(8000, max(chars + 64, chars + words // 8)))


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
def learning_rate(args, total_steps):
    """Adam's learning rate: constant, or cosine decay to 5% over the whole run (`--schedule`)."""
    import keras

    if args.schedule == "constant":
        return args.learning_rate
    return keras.optimizers.schedules.CosineDecay(
        args.learning_rate, decay_steps=max(total_steps, 1), alpha=0.05
    )


def build_model(args, vocab_size, total_steps=1):
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
        optimizer=keras.optimizers.Adam(learning_rate(args, total_steps), clipnorm=1.0),
        loss=MaskedSequenceLoss(label_smoothing=args.label_smoothing),
        metrics=[MaskedSequenceAccuracy()],
        jit_compile=args.jit_compile,
    )
    return model


def main(argv=None):
    args = parse_args(argv)
    run = training.Run(args)
    t0 = time.time()
    splits, tokenizer, metric = load_data(args)
    if run.chief:  # multi-worker: the other workers write nothing
        tokenizer.save(run.path("tokenizer.model" if metric == "chrf" else "tokenizer_vocab.txt"))
    x, y = training.encode_pairs(splits["train"], tokenizer)
    max_length = args.max_length or int(y.shape[1] + 5)
    print(
        f"{len(splits['train'])} training pairs, vocabulary {tokenizer.vocab_size}, model {args.model}, "
        f"epochs {args.epochs} (data ready in {time.time() - t0:.1f}s)",
        flush=True,
    )

    with run.strategy.scope():
        steps_per_epoch = max(len(y) // min(args.batch_size, len(y)), 1)
        model = build_model(args, tokenizer.vocab_size, steps_per_epoch * args.epochs)
    run.restore(model)
    decode = training.greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, max_length)

    def source_ids(pairs):
        return (
            training.pad_ids(tokenizer.tokenize([s for s, _ in pairs]).to_list()) if pairs else None
        )

    def evaluate(pairs):
        if not pairs:
            return {metric: float("nan")}, [], []
        hyps, aligns = training.decode_texts(decode, source_ids(pairs), tokenizer)
        return score(metric, hyps, [t for _, t in pairs]), hyps, aligns

    best = {"value": -1.0, "epoch": 0, "seen": 0}
    best_path = run.path("best.weights.h5")

    def validation(model_):
        scores = evaluate(splits["val"])[0]
        best["seen"] += 1
        if metric == "chrf" and scores["chrf"] > best["value"]:  # keep the best epoch's weights
            best.update(value=scores["chrf"], epoch=run.initial_epoch + best["seen"])
            if run.chief:
                model_.save_weights(best_path, overwrite=True)
        return {f"val_{k}": v for k, v in scores.items()}

    dataset, steps = run.batches(x, y, trim=("source", "target_in", "y"))
    run.fit(model, dataset, steps, validation=validation)
    if not run.chief:  # multi-worker: the chief evaluates, plots and exports
        return None
    if metric == "chrf" and os.path.exists(best_path):  # this run's best, or a resumed run's
        model.load_weights(best_path)
        print(
            f"Best validation chrF weights loaded ({best_path}"
            + (f", chrF {best['value']:.1f} at epoch {best['epoch']}" if best["epoch"] else "")
            + "): those are scored and exported",
            flush=True,
        )

    task = (
        "dates"
        if metric == "exact_match"
        else (f"catalogues-{args.corpus}" if args.corpus else "tsv")
    )
    results = {
        "task": task,
        "model": args.model,
        "copy": bool(args.copy),
        "metric": metric,
        "epochs": args.epochs,
        "train_seconds": round(run.train_seconds, 1),
    }
    for name in ("val", "test", "test_locale"):
        if splits.get(name):
            for k, v in evaluate(splits[name])[0].items():
                results[f"{name}_{k}"] = v
            if metric == "chrf":  # the baseline a translator must beat: the source copied unchanged
                for k, v in score(
                    metric, [s for s, _ in splits[name]], [t for _, t in splits[name]]
                ).items():
                    results[f"{name}_copy_source_{k}"] = v
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)

    write_heatmaps(args, run, splits["val"][: args.heatmaps], decode, tokenizer)
    if args.export:
        from keras_attn.serving import export_text_model

        exported = model
        if metric == "exact_match":  # dates: served answers are dates that exist (docs/dates.md)
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
        )
        print(f"Exported SavedModel: {path}", flush=True)
    return results


def write_heatmaps(args, run, pairs, decode, tokenizer):
    from keras_attn.plotting import plot_attention

    if not pairs:
        return []
    ids = training.pad_ids(tokenizer.tokenize([s for s, _ in pairs]).to_list())
    out = decode(ids)
    seqs, lengths = out["sequences"].numpy(), out["lengths"].numpy()
    paths = []
    for i, (src, _) in enumerate(pairs):
        src_ids = [t for t in ids[i] if t != tokenizer.pad_id]
        n = int(lengths[i])
        out_ids = seqs[i, :n]
        weights = out["alignments"].numpy()[i, :n, : len(src_ids)]
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
