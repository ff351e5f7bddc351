"""A finished translator run exported as a SavedModel, from its output directory alone: the run may
have been trained anywhere (any backend, no TensorFlow); the export needs TensorFlow."""

import dataclasses
import json
import os

from keras_attn.train.checkpoints import latest_checkpoint
from keras_attn.train.config import BY_TASK, TranslatorConfig


def run_config(run_dir):
    """The `TranslatorConfig` a run recorded in RUN_DIR/run_config.json."""
    with open(os.path.join(run_dir, "run_config.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    names = {f.name for f in dataclasses.fields(TranslatorConfig)}
    settings = {k: v for k, v in recorded["args"].items() if k in names}
    resolved = recorded.get("resolved", {})
    row = BY_TASK[resolved.get("row", "dates")]
    # A setting newer than the run (an export-only one): the table's value for its row.
    settings.update({k: row[k] for k in names - settings.keys() if k in row})
    return TranslatorConfig(
        **settings,
        flags=resolved.get("flags", {}),
        row=resolved.get("row", "dates"),
        train_pairs=resolved.get("train_pairs"),
    )


def run_weights(run_dir):
    """The weights a run scored: final.weights.h5, else its last epoch checkpoint."""
    final = os.path.join(run_dir, "final.weights.h5")
    if os.path.exists(final):
        return final
    path = latest_checkpoint(run_dir)[1]
    if path is None:
        raise ValueError(f"No weights in the run directory. Received: run_dir={run_dir!r}")
    return path


def run_model(run_dir):
    """`(config, model, tokenizer, max_length, warmup source)` of a run, its weights loaded (the
    decoding limit as the run computed it)."""
    from keras_attn.train.batching import count_tokens, encode_pairs
    from keras_attn.train.translator import build_model, load_data

    config = run_config(run_dir)
    config = dataclasses.replace(config, out=run_dir, resume=True)
    if config.text:
        from keras_attn.data import load_tsv
        from keras_attn.text import SentencePieceTokenizer

        tokenizer = SentencePieceTokenizer.load(os.path.join(run_dir, "tokenizer.model"))
        train_path = os.path.join(run_dir, "data", "train.tsv")
        longest = count_tokens(train_path, tokenizer, config.max_seq)[3]
        max_length = config.max_length or min(longest + 5, config.max_seq + 1)
        warmup = load_tsv(os.path.join(run_dir, "data", "val.tsv"))[0][0][0]
    else:
        splits, tokenizer, _ = load_data(config)
        max_length = config.max_length or int(
            encode_pairs(splits["train"], tokenizer)[1].shape[1] + 5
        )
        warmup = splits["val"][0][0]
    model = build_model(config, tokenizer.vocab_size)
    model.build()
    model.optimizer.build(model.trainable_variables)  # the files hold the optimizer's state too
    model.load_weights(run_weights(run_dir))
    return config, model, tokenizer, max_length, warmup


def export_run(run_dir, export_dir, version=1, beam_size=None, xla=None, word_rules=None):
    """Export the translator run in `run_dir` (its run_config.json, tokenizer and weights) as a
    SavedModel under `export_dir/<version>/`, as `train_translator.py --export` would at the end
    of the run. `beam_size`, `xla`, `word_rules`: default the run's. Returns the version
    directory."""
    from keras_attn.train.translator import export

    config, model, tokenizer, max_length, warmup = run_model(run_dir)
    config = dataclasses.replace(
        config,
        export=os.fspath(export_dir),
        export_version=int(version),
        beam_size=config.beam_size if beam_size is None else int(beam_size),
        xla=config.xla if xla is None else bool(xla),
        word_rules=config.word_rules if word_rules is None else bool(word_rules),
    )
    return export(config, model, tokenizer, max_length, warmup)
