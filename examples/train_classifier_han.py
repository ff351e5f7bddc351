"""Train a hierarchical attention network: which language is the document's formatted message in?

    python examples/train_classifier_han.py                    # de / fr / es / it, 8 sentences each
    python examples/train_classifier_han.py --export export/models/han   # raw-text SavedModel
    python examples/train_classifier_han.py --resume           # continue an interrupted run

Data: `keras_attn.data.han_splits` (real gettext strings of Debian packages; the label is the
language of the one message with a printf placeholder among the document's sentences, so the evidence sentence is known).
Validation after each epoch: accuracy on the validation documents. At the end (`results.json`):
test accuracy, how often the sentence attention's argmax is the evidence sentence, and the
bag-of-words baseline (logistic regression on word counts, same split); heat maps of word x
sentence attention (`attention/*.png`); with `--export` the SavedModel.
"""

from __future__ import annotations

import json
import os

import numpy as np

from keras_attn import train


def build_parser():
    """The script's flags."""
    p = train.base_parser(__doc__.splitlines()[0], epochs=8, batch_size=64, out="runs/han")
    p.add_argument("--n-train", type=int, default=8000)
    p.add_argument("--n-val", type=int, default=500)
    p.add_argument("--n-test", type=int, default=2000)
    p.add_argument(
        "--languages",
        default="de,fr,es,it",
        help="comma-separated catalogue languages (the classes)",
    )
    p.add_argument(
        "--locale-dir", default="/usr/share/locale", help="where the gettext catalogues are"
    )
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument("--units", type=int, default=32, help="GRU units per direction (both levels)")
    p.add_argument("--attention-units", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--max-words", type=int, default=24, help="words kept per sentence")
    return p


def parse_args(argv=None):
    smoke = dict(n_train=128, n_val=32, n_test=32, embedding_dim=8, units=4, attention_units=8)
    return train.parse_run_args(build_parser(), argv, smoke=smoke)


def bag_of_words_accuracy(train, test):
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    from keras_attn.data.words import split_words

    vectorizer = CountVectorizer(tokenizer=split_words, lowercase=False, token_pattern=None)
    x = vectorizer.fit_transform([d.text for d in train])
    classifier = LogisticRegression(max_iter=2000).fit(x, [d.label for d in train])
    return float(
        classifier.score(vectorizer.transform([d.text for d in test]), [d.label for d in test])
    )


def main(argv=None):
    from keras_attn.data import han_splits
    from keras_attn.models.han import document_ids

    args = parse_args(argv)
    run = train.Run(args)
    languages = args.languages.split(",")
    splits = han_splits(
        args.n_train,
        args.n_val,
        args.n_test,
        languages=languages,
        seed=args.seed,
        locale_dir=args.locale_dir,
    )
    vocabulary = load_vocabulary(args, run, splits["train"])

    def encode(docs):
        labels = np.array([d.label for d in docs], np.int32)
        return document_ids(vocabulary, [d.text for d in docs], max_words=args.max_words), labels

    x, y = encode(splits["train"])
    print(
        f"{len(y)} training documents {x.shape}, vocabulary {vocabulary.vocab_size}, classes {languages}",
        flush=True,
    )
    with run.strategy.scope():
        model = build_model(args, vocabulary.vocab_size, len(languages))
    run.restore(model)

    def evaluate(docs):
        if not docs:
            return float("nan"), float("nan"), None
        ids, labels = encode(docs)
        logits, sentences = [], []
        for i in range(0, len(ids), 256):
            out = model(ids[i : i + 256], training=False, return_attention=True)
            logits.append(np.asarray(out[0]))
            sentences.append(np.asarray(out[2]))
        logits, sentences = np.concatenate(logits), np.concatenate(sentences)
        accuracy = float(np.mean(logits.argmax(-1) == labels))
        on_evidence = float(np.mean(sentences.argmax(-1) == np.array([d.evidence for d in docs])))
        return accuracy, on_evidence, ids

    def validation(_model):
        accuracy, on_evidence, _ = evaluate(splits["val"])
        return {"val_accuracy_docs": accuracy, "val_attention_on_evidence": on_evidence}

    dataset, steps = run.batches(x, y)
    run.fit(model, dataset, steps, validation=validation)

    test_accuracy, test_on_evidence, _ = evaluate(splits["test"])
    baseline = bag_of_words_accuracy(splits["train"], splits["test"])
    counts = np.bincount(y, minlength=len(languages))
    results = {
        "task": "han-formatted-message-language",
        "model": "HAN",
        "epochs": args.epochs,
        "train_seconds": round(run.train_seconds, 1),
        "languages": languages,
        "test_accuracy": test_accuracy,
        "test_attention_on_evidence": test_on_evidence,
        "test_bag_of_words_accuracy": baseline,
        "test_majority_accuracy": float(
            np.mean(np.array([d.label for d in splits["test"]]) == counts.argmax())
        ),
    }
    write_results(run, results)
    write_heatmaps(
        run, model, vocabulary, splits["test"][: args.heatmaps], languages, args.max_words
    )
    if args.export:
        export(args, model, vocabulary, languages, splits["val"][0].text)
    run.print_outputs()
    return results


def write_results(run, results):
    """Print the results and write them to RUN_DIR/results.json."""
    print("Results: " + json.dumps(results), flush=True)
    with open(run.path("results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)


def build_model(args, vocab_size, classes):
    """The HAN classifier, built and compiled."""
    import keras

    from keras_attn.models import HierarchicalAttentionNetwork

    model = HierarchicalAttentionNetwork(
        vocab_size,
        classes,
        embedding_dim=args.embedding_dim,
        word_units=args.units,
        sentence_units=args.units,
        attention_units=args.attention_units,
        dropout=args.dropout,
    )
    model.build()
    model.compile(
        keras.optimizers.Adam(args.learning_rate, clipnorm=1.0),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=args.jit_compile,
    )
    return model


def load_vocabulary(args, run, documents):
    """The run's word vocabulary: the saved one on `--resume`, else built from the training
    documents (words seen at least twice)."""
    from keras_attn.data.words import WordVocabulary

    saved = run.path("words.txt")
    if args.resume and os.path.exists(saved):
        return WordVocabulary.load(saved)
    vocabulary = WordVocabulary.build((d.text for d in documents), min_count=2)
    vocabulary.save(saved)
    return vocabulary


def export(args, model, vocabulary, languages, warmup):
    """The SavedModel under `--export` (`export_classifier`), warmed up on one document."""
    from keras_attn.models.han import export_classifier

    path = export_classifier(
        model,
        vocabulary,
        languages,
        args.export,
        version=args.export_version,
        warmup_documents=[warmup],
        max_words=args.max_words,
        overwrite=True,
    )
    print(f"Exported SavedModel: {path}", flush=True)
    return path


def write_heatmaps(run, model, vocabulary, docs, languages, max_words):
    """One PNG per document: rows = sentences (labelled with their sentence weight), columns =
    word positions, cell = word weight x sentence weight."""
    from keras_attn.data.words import split_words
    from keras_attn.models.han import document_ids
    from keras_attn.plotting import plot_attention

    paths = []
    for i, doc in enumerate(docs):
        ids = document_ids(vocabulary, [doc.text], max_words=max_words)
        logits, words, sentences = model(ids, training=False, return_attention=True)
        words, sentences = np.asarray(words)[0], np.asarray(sentences)[0]
        grid = words * sentences[:, None]
        width = max(len(split_words(s)[:max_words]) for s in doc.sentences)
        rows = [
            f"{sentences[j]:.2f}{' *' if j == doc.evidence else ''} {s[:40]}"
            for j, s in enumerate(doc.sentences)
        ]
        predicted = languages[int(np.argmax(np.asarray(logits)[0]))]
        paths.append(
            plot_attention(
                grid[:, :width],
                [str(k) for k in range(width)],
                rows,
                run.path("attention", f"test_{i}.png"),
                title=f"label {languages[doc.label]}, predicted {predicted} (* = evidence)",
            )
        )
    if paths:
        print("Attention heat maps: " + ", ".join(paths), flush=True)
    return paths


if __name__ == "__main__":
    main()
