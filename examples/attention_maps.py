"""Attention heat maps of chosen sentences, from a finished `train_translator.py` run on a text corpus.

    python examples/attention_maps.py --run runs/es --out docs/attention_es "Republic of Iceland" "Save and add another" \\
        -- --corpus es --model bahdanau

Everything after `--` is the training command's model flags (the model is rebuilt from them);
the run's `tokenizer.model` and `best.weights.h5` (or its last checkpoint) are loaded, each
sentence is greedy-decoded, and `OUT/<i>.png` shows the decoder's attention over the source
pieces (rows: output pieces, columns: source pieces). See docs/real_data.md.
"""

from __future__ import annotations

import argparse
import os
import sys


def build_parser():
    """The script's own flags (those before `--`; the model flags after it are the
    translator's, `keras_attn.train.build_parser`)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="the training run's --out directory")
    p.add_argument("--out", required=True, help="directory of the PNG files")
    p.add_argument("--max-length", type=int, default=60)
    p.add_argument("sentences", nargs="+")
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    model_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = build_parser().parse_args(argv)

    from keras_attn.data.padding import pad_ids
    from keras_attn.text import SentencePieceTokenizer
    from keras_attn.train import translator as tt
    from keras_attn.train.checkpoints import latest_checkpoint
    from keras_attn.train.evaluate import decode_texts, greedy_decoder

    if "--out" not in model_flags:  # the run's own data sizes its settings
        model_flags += ["--out", args.run]
    model_args = tt.parse_args(model_flags)
    tokenizer = SentencePieceTokenizer.load(os.path.join(args.run, "tokenizer.model"))
    model = tt.build_model(model_args, tokenizer.vocab_size)
    weights = os.path.join(args.run, "best.weights.h5")
    if not os.path.exists(weights):
        weights = latest_checkpoint(args.run)[1]
    model.load_weights(weights)
    decode = greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, args.max_length)

    class _Out:
        def path(self, *parts):
            return os.path.join(args.out, *parts[1:])  # drop the run's "attention" folder

    paths = tt.write_heatmaps(
        model_args, _Out(), [(s, "") for s in args.sentences], decode, tokenizer
    )
    hyps, _ = decode_texts(decode, pad_ids(tokenizer.tokenize(args.sentences).to_list()), tokenizer)
    for source, hyp, path in zip(args.sentences, hyps, paths):
        print(f"{path}: {source} -> {hyp}")
    print(f"Heat maps in {os.path.abspath(args.out)}", flush=True)
    return paths


if __name__ == "__main__":
    main()
