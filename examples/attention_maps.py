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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    model_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="the training run's --out directory")
    p.add_argument("--out", required=True, help="directory of the PNG files")
    p.add_argument("--max-length", type=int, default=60)
    p.add_argument("sentences", nargs="+")
    args = p.parse_args(argv)

    import train_translator as tt

    from keras_attn import training
    from keras_attn.text import SentencePieceTokenizer

    model_args = tt.parse_args(model_flags)
    tokenizer = SentencePieceTokenizer.load(os.path.join(args.run, "tokenizer.model"))
    model = tt.build_model(model_args, tokenizer.vocab_size)
    weights = os.path.join(args.run, "best.weights.h5")
    if not os.path.exists(weights):
        weights = training.latest_checkpoint(args.run)[1]
    model.load_weights(weights)
    decode = training.greedy_decoder(model, tokenizer.end_id, tokenizer.start_id, args.max_length)

    class _Out:
        def path(self, *parts):
            return os.path.join(args.out, *parts[1:])  # drop the run's "attention" folder

    paths = tt.write_heatmaps(
        model_args, _Out(), [(s, "") for s in args.sentences], decode, tokenizer
    )
    hyps, _ = training.decode_texts(
        decode, training.pad_ids(tokenizer.tokenize(args.sentences).to_list()), tokenizer
    )
    for source, hyp, path in zip(args.sentences, hyps, paths):
        print(f"{path}: {source} -> {hyp}")
    print(f"Heat maps in {os.path.abspath(args.out)}", flush=True)
    return paths


if __name__ == "__main__":
    main()
