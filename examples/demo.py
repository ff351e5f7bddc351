"""`make demo`: train the dates translator, export it, translate through the exported model.

1. trains the Bahdanau-attention dates translator (`examples/train_translator.py`, settings sized
   to finish within 5 minutes on 2 CPU cores);
2. exports it to `export/models/dates/1` (a TF Serving SavedModel) behind the ISO-date grammar
   (`keras_attn.data.date_grammar.ValidDates`): every served answer is a date that exists, in
   the years the model was trained on (1950-2049), or "" (no date: a year written outside
   that range); the export holds the step signatures too (`encode`, `decode_step`,
   `detokenize`, `tokenize`), the grammar inside `decode_step`, so `keras-attn translate
   export/models/dates --stream ...` streams the same answers;
3. loads that SavedModel with `tf.saved_model.load` (nothing of keras_attn needed) and translates
   a handful of dates through its `beam_search` signature, printing the n-best with scores;
4. writes the attention heat map of one of them to a PNG and prints its path.

    python examples/demo.py [--model bahdanau] [--epochs N] [--n-train N] [--beam-size 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The training settings: sized so that training and export fit 5 minutes on 2 CPU cores.
DEFAULTS = dict(
    epochs=6, n_train=20000, batch_size=128, learning_rate=5e-3, units=96, embedding_dim=32
)
MAX_LENGTH = 16  # decoding limit of the export and the requests ("YYYY-MM-DD" + end is 11)
DAY = datetime.date(2026, 11, 21)  # the demo's first inputs all write this date


def demo_dates():
    """`[(source, answer)]`: one date written in several locales (rendered by CLDR through
    babel), then dates as people write them with ordinals, and a year the model never saw
    (answer "": no date)."""
    from babel.dates import format_date

    styles = [
        ("es", "long"),
        ("zh", "long"),
        ("en_US", "medium"),
        ("de", "short"),
        ("fr", "full"),
        ("ru", "long"),
        ("en_GB", "medium"),
    ]  # en_GB: a locale held out of training
    same_day = [(format_date(DAY, format=fmt, locale=loc), DAY.isoformat()) for loc, fmt in styles]
    return same_day + [
        ("March 3rd, 2001", "2001-03-03"),
        ("le 1er mai 1968", "1968-05-01"),
        ("29 de febrero de 2024", "2024-02-29"),
        ("le 14 juillet 1789", ""),  # before 1950: outside the years trained on
    ]


def shown(answer):
    return answer if answer else '""'


def export_valid_dates(train_args, export_dir, beam_size, warmup):
    """Rebuild the trained model from its last checkpoint and export it behind the date
    grammar; returns the version directory."""
    from keras_attn.data.date_grammar import ValidDates
    from keras_attn.serving import export_text_model
    from keras_attn.serving.steps import STEP_SIGNATURES
    from keras_attn.text import CharTokenizer
    from keras_attn.train import Run
    from keras_attn.train.translator import build_model, parse_args

    config = parse_args(train_args + ["--resume"])
    run = Run(config)
    tokenizer = CharTokenizer.load(run.path("tokenizer_vocab.txt"))
    model = build_model(config, tokenizer.vocab_size)
    if not run.restore(model):
        raise SystemExit(f"no checkpoint in {config.out}")
    return export_text_model(
        ValidDates(model, tokenizer),  # years: the generator's default range, as trained
        tokenizer,
        export_dir,
        version=1,
        beam_size=beam_size,
        max_length=MAX_LENGTH,
        warmup_inputs=[warmup],
        overwrite=True,
        extra_signatures=[STEP_SIGNATURES],  # `keras-attn translate --stream`
    )


def build_parser():
    """The script's flags."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="bahdanau")
    p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    p.add_argument("--n-train", type=int, default=DEFAULTS["n_train"])
    p.add_argument("--export-dir", default=os.path.join(ROOT, "export", "models", "dates"))
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "demo"))
    p.add_argument("--beam-size", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="tiny run (for tests)")
    return p


def training_args(args):
    """The `train_translator.py` command line of the demo's training run."""
    train_args = [
        "--model",
        args.model,
        "--out",
        args.out,
        "--epochs",
        str(1 if args.smoke else args.epochs),
        "--n-train",
        str(args.n_train),
        "--batch-size",
        str(DEFAULTS["batch_size"]),
        "--learning-rate",
        str(DEFAULTS["learning_rate"]),
        "--units",
        str(DEFAULTS["units"]),
        "--embedding-dim",
        str(DEFAULTS["embedding_dim"]),
        "--n-val",
        "300",
        "--n-test",
        "1000",
        "--heatmaps",
        "0",
        "--verbose",
        "2",
    ]
    if args.smoke:
        train_args += ["--smoke"]
    return train_args


def main(argv=None):
    args = build_parser().parse_args(argv)
    start = time.time()

    from keras_attn.train import translator

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)  # a fresh run each time (no stale checkpoint to resume from)
    train_args = training_args(args)
    print(f"== 1. Training the dates translator ({args.model})", flush=True)
    results = translator.main(train_args)
    examples = demo_dates()
    version_dir = export_valid_dates(train_args, args.export_dir, args.beam_size, examples[0][0])
    trained = time.time()

    print(
        f"\n== 2. Exported to {os.path.relpath(version_dir, ROOT)} (answers: a date that exists "
        'in 1950-2049, or "" for no date); loading it with tf.saved_model.load',
        flush=True,
    )
    import tensorflow as tf

    loaded = tf.saved_model.load(version_dir)
    beam = loaded.signatures["beam_search"]
    inputs = [source for source, _ in examples]
    out = beam(
        inputs=tf.constant(inputs),
        beam_size=tf.constant(args.beam_size, tf.int32),
        max_length=tf.constant(MAX_LENGTH, tf.int32),
        length_penalty=tf.constant(0.0, tf.float32),
        coverage_penalty=tf.constant(0.0, tf.float32),
    )
    outputs, scores = out["outputs"].numpy(), out["scores"].numpy()
    print(
        f"\n== 3. beam_search signature, beam_size={args.beam_size}: n-best with scores (log-prob)",
        flush=True,
    )
    right = 0
    for i, (text, answer) in enumerate(examples):
        print(f"{text}    (right answer: {shown(answer)})")
        for k in range(outputs.shape[1]):
            print(f"    {k + 1}. {shown(outputs[i, k].decode('utf-8')):<14} {scores[i, k]:9.4f}")
        right += outputs[i, 0].decode("utf-8") == answer
    print(f"Right at rank 1: {right} of {len(examples)}", flush=True)

    from keras_attn.plotting import plot_attention

    pick = 0
    source = inputs[pick]
    best = outputs[pick, 0].decode("utf-8")
    length = int(out["lengths"].numpy()[pick, 0])
    weights = out["alignments"].numpy()[pick, 0, :length, : len(source)]
    labels = list(best)[: length - 1] + ["</s>"]
    png = plot_attention(
        weights,
        list(source),
        labels[:length],
        os.path.join(args.out, "demo_attention.png"),
        title=f"{source} -> {best}",
    )
    print(
        f"\n== 4. Attention heat map of '{source}' -> '{best}': {os.path.abspath(png)}", flush=True
    )
    print(
        f"\nThe model alone, greedy, no grammar: test exact match (held out by date): {results.get('test_exact_match', float('nan')):.3f}; "
        f"held-out locales: {results.get('test_locale_exact_match', float('nan')):.3f}. "
        f"Training+export {trained - start:.0f}s, total {time.time() - start:.0f}s.",
        flush=True,
    )
    print(
        f"Outputs: run {os.path.abspath(args.out)}, SavedModel {os.path.abspath(args.export_dir)}",
        flush=True,
    )
    return png


if __name__ == "__main__":
    main()
