"""Train an attention-over-attention cloze reader on questions cut from real sentences.

    python examples/train_reader_aoa.py                        # Python standard library docstrings
    python examples/train_reader_aoa.py --export export/models/reader   # raw-text SavedModel
    python examples/train_reader_aoa.py --resume               # continue an interrupted run

Data: `keras_attn.data.cloze_splits` (a document of real sentences, a query sentence with one
word blanked, 10 candidate words from the document; split by document). Validation after each
epoch: accuracy on the validation questions. At the end (`results.json`): test accuracy and the
most-frequent-candidate baseline on the same questions; heat maps of the document attention `s`
(`attention/*.png`); with `--export` the SavedModel.
"""

from __future__ import annotations

import json
import os

import numpy as np

from keras_attn import train


def build_parser():
    """The script's flags."""
    p = train.base_parser(__doc__.splitlines()[0], epochs=6, batch_size=32, out="runs/reader")
    p.add_argument(
        "--modules",
        default=None,
        help="comma-separated stdlib modules whose docstrings are read "
        "(default: keras_attn.data.cloze.MODULES)",
    )
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--units", type=int, default=64, help="GRU units per direction")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--per-document", type=int, default=8, help="questions cut from each document")
    return p


def parse_args(argv=None):
    smoke = dict(embedding_dim=8, units=4, per_document=1)
    return train.parse_run_args(build_parser(), argv, smoke=smoke)


def main(argv=None):
    from keras_attn.data import cloze_splits, most_frequent_candidate
    from keras_attn.models.cloze_reader import question_ids

    args = parse_args(argv)
    run = train.Run(args)
    kwargs = {"modules": tuple(args.modules.split(","))} if args.modules else {}
    splits = cloze_splits(seed=args.seed, per_document=args.per_document, **kwargs)
    if args.smoke:
        splits = {k: v[: 128 if k == "train" else 32] for k, v in splits.items()}
    vocabulary = load_vocabulary(args, run, splits)
    x, y = question_ids(vocabulary, splits["train"])
    print(
        f"{len(y)} training questions, documents up to {x['document'].shape[1]} words, "
        f"vocabulary {vocabulary.vocab_size}",
        flush=True,
    )
    with run.strategy.scope():
        model = build_model(args, vocabulary.vocab_size)
    run.restore(model)

    def predict(questions):
        qx, qy = question_ids(vocabulary, questions)
        probabilities = []
        for i in range(0, len(qy), 128):
            probabilities.append(
                np.asarray(model({k: v[i : i + 128] for k, v in qx.items()}, training=False))
            )
        return np.concatenate(probabilities), qy

    def accuracy(questions):
        if not questions:
            return float("nan")
        probabilities, qy = predict(questions)
        return float(np.mean(probabilities.argmax(-1) == qy))

    def validation(_model):
        return {"val_accuracy_questions": accuracy(splits["val"])}

    dataset, steps = run.batches(x, y, trim=("document", "query"))
    run.fit(model, dataset, steps, validation=validation)

    test = splits["test"]
    baseline = float(np.mean([most_frequent_candidate(q) == q.answer for q in test]))
    results = {
        "task": "cloze-stdlib-docstrings",
        "model": "AoA reader",
        "epochs": args.epochs,
        "train_seconds": round(run.train_seconds, 1),
        "test_questions": len(test),
        "test_accuracy": accuracy(test),
        "test_most_frequent_candidate_accuracy": baseline,
    }
    results["test_accuracy_over_baseline"] = results["test_accuracy"] / max(baseline, 1e-9)
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    write_heatmaps(run, model, vocabulary, test[: args.heatmaps])
    if args.export:
        export(args, model, vocabulary, splits["val"][0])
    run.print_outputs()
    return results


def build_model(args, vocab_size):
    """The reader, built and compiled."""
    import keras

    from keras_attn.models import AttentionOverAttentionReader

    model = AttentionOverAttentionReader(
        vocab_size, embedding_dim=args.embedding_dim, units=args.units, dropout=args.dropout
    )
    model.build()
    model.compile(
        keras.optimizers.Adam(args.learning_rate, clipnorm=5.0),
        keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
        jit_compile=args.jit_compile,
    )
    return model


def load_vocabulary(args, run, splits):
    """The run's word vocabulary: the saved one on `--resume`, else built from every split's
    words (no answers): the pointer sum compares ids, so a test document's words need ids of
    their own even when training never saw them."""
    from keras_attn.data.words import WordVocabulary

    saved = run.path("words.txt")
    if args.resume and os.path.exists(saved):
        return WordVocabulary.load(saved)
    vocabulary = WordVocabulary.build(
        q.document + "\n" + q.query for part in splits.values() for q in part
    )
    vocabulary.save(saved)
    return vocabulary


def export(args, model, vocabulary, question):
    """The SavedModel under `--export` (`export_reader`), warmed up on `question`."""
    from keras_attn.models.cloze_reader import export_reader

    path = export_reader(
        model,
        vocabulary,
        args.export,
        version=args.export_version,
        overwrite=True,
        warmup=(question.document, question.query, " ".join(question.candidates)),
    )
    print(f"Exported SavedModel: {path}", flush=True)
    return path


def write_heatmaps(run, model, vocabulary, questions):
    """One PNG per question: the document attention `s` over the document's words, one row per
    sentence (a column per word position)."""
    from keras_attn.data.words import split_words
    from keras_attn.models.cloze_reader import question_ids
    from keras_attn.plotting import plot_attention

    paths = []
    for i, q in enumerate(questions):
        qx, _ = question_ids(vocabulary, [q])
        probabilities, s = model(qx, training=False, return_attention=True)
        s = np.asarray(s)[0]
        sentences = [split_words(line) for line in q.document.split("\n")]
        width = max(len(w) for w in sentences)
        grid = np.zeros((len(sentences), width), np.float32)
        start = 0
        for j, words in enumerate(sentences):
            grid[j, : len(words)] = s[start : start + len(words)]
            start += len(words)
        guess = q.candidates[int(np.argmax(np.asarray(probabilities)[0]))]
        rows = [" ".join(w)[:40] for w in sentences]
        paths.append(
            plot_attention(
                grid,
                [str(k) for k in range(width)],
                rows,
                run.path("attention", f"test_{i}.png"),
                title=f"{q.query[:60]} | answer {q.answer}, read {guess}",
            )
        )
    if paths:
        print("Attention heat maps: " + ", ".join(paths), flush=True)
    return paths


if __name__ == "__main__":
    main()
