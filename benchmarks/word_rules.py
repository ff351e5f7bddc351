"""What the word rules cost a decoding step (keras_attn.decoding.words, docs/serving.md "Word
rules"): `WordRules.process` over one step's logits, as the served beam search runs it (a
TensorFlow graph), against the log-softmax over the same logits, the least a step does.

Rows: a served beam's sizes (N hypotheses, vocabulary V, source length S, 50 tokens written),
the rules with their defaults (loop periods up to 8, three copies, source words up to
`max_word` pieces, the glue ban), the source's placeholders (3 phrases of 6 pieces) and its
words copied whole (`fixed`, half the source's pieces: a translator run's export with
`known_words`). Columns: the graph operations of one rules step; the median ms per call of the
whole rules step, of its loop ban and of its cut-word test, and of the log-softmax; the rules'
time as a multiple of the log-softmax's (rounds interleaved, the median of the per-round
ratios). `--max-word 16` times the rules for source words of up to 16 pieces.

    .venv/bin/python benchmarks/word_rules.py [--repeats 9]
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np
import tensorflow as tf

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

SIZES = [(32, 8000, 30), (256, 16000, 80)]  # (N, V, S)
TOKENS, PHRASES, PIECES = 100, 3, 6


def step_functions(n, vocab, source_length, seed=0, max_word=8):
    """`{name: zero-argument callable}` for one size, and the rules step's graph op count."""
    from keras_attn.decoding.words import WordRules, cut_word, loop_ban

    rng = np.random.default_rng(seed)
    word_start = rng.random(vocab) < 0.4
    glue = rng.random(vocab) < 0.3
    rules = WordRules(word_start, end_id=2, glue=glue, max_word=max_word)
    # few distinct tokens, so that repeats and source matches occur as in real answers
    sequences = tf.constant(rng.integers(4, 40, (n, TOKENS)), tf.int32)
    source = tf.constant(rng.integers(4, 40, (n, source_length)), tf.int32)
    phrases = tf.constant(rng.integers(4, 40, (n, PHRASES, PIECES)), tf.int32)
    open_end = tf.constant(rng.random((n, PHRASES)) < 0.5)
    alt = -tf.ones((n, PHRASES), tf.int32)
    logits = tf.constant(rng.normal(size=(n, vocab)), tf.float32)
    fixed = tf.constant(rng.random((n, source_length)) < 0.5)
    step = tf.constant(50)

    def graph(fn):
        return tf.function(fn, autograph=False)

    process = graph(
        lambda: rules.process(logits, sequences, step, source, (phrases, open_end, alt), fixed)
    )
    ops = len(process.get_concrete_function().graph.get_operations())
    fns = {
        "rules": process,
        "loop ban": graph(lambda: loop_ban(sequences, step, source)),
        "cut word": graph(lambda: cut_word(sequences, step, source, word_start, max_word)),
        "log-softmax": graph(lambda: tf.nn.log_softmax(logits)),
    }
    return fns, ops


def run(repeats=9, max_word=8):
    rows = []
    for n, vocab, source_length in SIZES:
        fns, ops = step_functions(n, vocab, source_length, max_word=max_word)
        medians, samples = common.interleaved(
            fns, repeats=repeats, warmup=2, min_time=0.05, return_samples=True
        )
        ratio = common.paired_ratio(samples, "rules", "log-softmax")
        rows.append(
            [f"N {n}, V {vocab}, S {source_length}", ops]
            + [common.fmt(medians[name] * 1e3) for name in fns]
            + [f"{ratio:.1f}x"]
        )
    headers = ["size", "graph ops", "rules ms", "loop ban ms", "cut word ms", "log-softmax ms"]
    text = "\n".join(
        [
            f"### Word rules per decoding step (benchmarks/word_rules.py, max_word {max_word})",
            "",
            common.table(headers + ["rules / log-softmax"], rows),
        ]
    )
    return text, {}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--max-word", type=int, default=8, help="WordRules' max_word")
    args = parser.parse_args()
    print(run(args.repeats, args.max_word)[0])
