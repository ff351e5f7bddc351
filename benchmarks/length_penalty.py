"""The served length penalty, chosen on the validation split: a finished translator run's
export answers its validation split through `beam_search_controls` (the export's beam size,
word rules and placeholder budget, every other knob off) at each length penalty alpha, scored
with chrF and BLEU as the run scores its splits. Writes the section
`length-penalty-<RUN_DIR's name>` of benchmarks/RESULTS.md.

    python -m benchmarks.length_penalty --run runs/quality/corpus-es \
        --export runs/quality/corpus-es-export/1 --alphas 0,1,2,3,4

`serving_default` fixes its alpha at export (`--length-penalty`, the translator's rule by
corpus: `keras_attn.train.config.served_length_penalty`); `beam_search_controls` takes it per
request, so one export answers every row. It searches under the placeholder budget alone
(`serving_default` also searches again the sources whose hypotheses all lost a placeholder), so
its figures sit a little apart from `serving_default`'s at the same alpha.
"""

from __future__ import annotations

import argparse
import json
import os
import time

if __name__ == "__main__" and not __package__:  # run as a file: as `python -m benchmarks.X`
    __import__("_module").run_as_module(__file__)

from benchmarks import common

SIGNATURE = "beam_search_controls"


def answers(signature, sources, alpha, beam_size, max_length, batch_size=64):
    """The best answer of `signature` to each of `sources` at length penalty `alpha`."""
    import numpy as np
    import tensorflow as tf

    knobs = {
        "beam_size": np.int32(beam_size),
        "max_length": np.int32(max_length),
        "length_penalty": np.float32(alpha),
        "coverage_penalty": np.float32(0.0),
        "min_length": np.int32(0),
        "no_repeat_ngram_size": np.int32(0),
        "repetition_penalty": np.float32(1.0),
    }
    out = []
    for i in range(0, len(sources), batch_size):
        texts = tf.constant(list(sources[i : i + batch_size]))
        best = signature(inputs=texts, **knobs)["outputs"].numpy()[:, 0]
        out += [a.decode("utf-8") for a in best]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="the translator run directory")
    parser.add_argument("--export", required=True, help="its export's version directory")
    parser.add_argument("--alphas", default="0,1,2,3,4", help="length penalties, comma-separated")
    parser.add_argument("--split", default="val", help="the run's split to score (data/SPLIT.tsv)")
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    from keras_attn.data import load_tsv
    from keras_attn.train.evaluate import text_scores

    pairs = load_tsv(os.path.join(args.run, "data", f"{args.split}.tsv"))[0]
    with open(os.path.join(args.export, "assets.extra", "search_settings.json")) as f:
        settings = json.load(f)
    signature = tf.saved_model.load(args.export).signatures[SIGNATURE]
    rows = []
    for alpha in [float(a) for a in args.alphas.split(",")]:
        start = time.perf_counter()
        got = answers(
            signature,
            [s for s, _ in pairs],
            alpha,
            settings["beam_size"],
            settings["max_length"],
        )
        scores = text_scores(got, pairs)
        rows.append(
            [common.fmt(alpha, 1), common.fmt(scores["chrf"], 2), common.fmt(scores["bleu"], 2)]
        )
        print(rows[-1], f"{time.perf_counter() - start:.0f} s", flush=True)
    name = os.path.basename(os.path.normpath(args.run))
    text = "\n".join(
        [
            f"The {args.split} split of `{name}` ({len(pairs)} pairs) through `{SIGNATURE}`, "
            f"beam {settings['beam_size']} (`python -m benchmarks.length_penalty --run "
            f"{args.run} --export {args.export} --alphas {args.alphas}`):",
            "",
            common.table(["length penalty alpha", "chrF", "BLEU"], rows),
            "",
            common.machine_markdown(common.machine_info()),
        ]
    )
    print(text)
    common.write_section(f"length-penalty-{name}", text)


if __name__ == "__main__":
    main()
