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
corpus `make corpora` builds from gettext catalogues (`keras_attn.data.corpora`, docs/real_data.md).
At the end: the test metrics (`results.json`, with the copy-the-source baseline), attention heat maps
of a few validation examples (`attention/*.png`), and with `--export` the SavedModel.
"""

from keras_attn.train.args import build_parser as _build_parser
from keras_attn.train.config import MODELS, TranslatorConfig, resolve_config  # noqa: F401
from keras_attn.train.evaluate import score, text_scores  # noqa: F401
from keras_attn.train.translator import (  # noqa: F401
    DESCRIPTION,
    auto_vocab_size,
    build_model,
    init_from_problem,
    main,
    parse_args,
    write_heatmaps,
)


def build_parser():
    """The script's flags (every default left out of the parsed namespace: the config's table
    fills them, `keras_attn.train.config`)."""
    return _build_parser(DESCRIPTION)


if __name__ == "__main__":
    main()
