"""A finished translator run exported as a SavedModel, from its output directory alone: the run may
have been trained anywhere (any backend, no TensorFlow); the export needs TensorFlow."""

import dataclasses
import json
import os

from keras_attn.train.checkpoints import latest_checkpoint
from keras_attn.train.config import BY_TASK, TranslatorConfig, served_length_penalty


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
    if settings.get("length_penalty") is None:  # a run from before the setting: its rule
        text = bool(settings.get("data") or settings.get("corpus"))
        settings["length_penalty"] = served_length_penalty(text, settings.get("corpus"))
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


# The warm-up input of a dates run's export, and an answer of the length every dates answer has
# (`YYYY-MM-DD`): what the run's decoding limit is computed from, without drawing its data
# (which renders dates with locale data).
DATES_WARMUP = "21 November 2026"
ISO_DATE = "2026-11-21"


def run_model(run_dir, config=None):
    """`(config, model, tokenizer, max_length, warmup source)` of a run, its weights loaded (the
    decoding limit as the run computed it). `config`: the run's `run_config` (read when not
    given)."""
    from keras_attn.train.batching import count_tokens, encode_pairs
    from keras_attn.train.translator import build_model

    config = run_config(run_dir) if config is None else config
    config = dataclasses.replace(config, out=run_dir, resume=True)
    if config.text:
        from keras_attn.data import load_tsv
        from keras_attn.text import SentencePieceTokenizer

        tokenizer = SentencePieceTokenizer.load(os.path.join(run_dir, "tokenizer.model"))
        train_path = os.path.join(run_dir, "data", "train.tsv")
        longest = count_tokens(train_path, tokenizer, config.max_seq)[3]
        max_length = config.max_length or min(longest + 5, config.max_seq + 1)
        warmup = load_tsv(os.path.join(run_dir, "data", "val.tsv"))[0][0][0]
    else:  # dates: the vocabulary the run trained with; every answer is an ISO date
        from keras_attn.text import CharTokenizer

        tokenizer = CharTokenizer.load(os.path.join(run_dir, "tokenizer_vocab.txt"))
        warmup = DATES_WARMUP
        max_length = config.max_length or int(
            encode_pairs([(warmup, ISO_DATE)], tokenizer)[1].shape[1] + 5
        )
    model = build_model(config, tokenizer.vocab_size)
    model.build()
    model.optimizer.build(model.trainable_variables)  # the files hold the optimizer's state too
    model.load_weights(run_weights(run_dir))
    return config, model, tokenizer, max_length, warmup


def served_model(config, model, tokenizer):
    """The model a run's exports serve: the dates model behind the ISO-date grammar
    (`keras_attn.data.date_grammar.ValidDates`: every answer a date that exists, or ""), a
    text model as it is."""
    if config.text:
        return model
    from keras_attn.data.date_grammar import ValidDates

    return ValidDates(model, tokenizer)


def export_run(
    run_dir,
    export_dir,
    version=1,
    beam_size=None,
    length_penalty=None,
    xla=None,
    word_rules=None,
    litert=None,
    quantize=None,
):
    """Export the translator run in `run_dir` (its run_config.json, tokenizer and weights) as a
    SavedModel under `export_dir/<version>/`, as `train_translator.py --export` would at the end
    of the run. `beam_size`, `length_penalty`, `xla`, `word_rules`: default the
    run's. With `litert` (a `.tflite` path) also the LiteRT file of the same served model
    (`quantize`: as for `export_litert`), refused before anything is written when the
    SavedModel's settings do not reach a device (`litert.check_device_settings`). Returns the
    version directory, or `(version directory, .tflite path)` with `litert`."""
    from keras_attn.train.translator import export

    config = run_config(run_dir)
    config = dataclasses.replace(
        config,
        export=os.fspath(export_dir),
        export_version=int(version),
        beam_size=config.beam_size if beam_size is None else int(beam_size),
        length_penalty=(config.length_penalty if length_penalty is None else float(length_penalty)),
        xla=config.xla if xla is None else bool(xla),
        word_rules=config.word_rules if word_rules is None else bool(word_rules),
    )
    if litert is not None:
        from keras_attn.serving.litert import check_device_settings

        check_device_settings(device_settings(config))  # before the model loads
    config, model, tokenizer, max_length, warmup = run_model(run_dir, config)
    path = export(config, model, tokenizer, max_length, warmup)
    if litert is None:
        return path
    from keras_attn.serving.litert import export_litert

    lite = export_litert(
        served_model(config, model, tokenizer),
        litert,
        quantize,
        tokenizer=tokenizer,
        max_length=max_length,
    )
    return path, lite


def device_settings(config):
    """What of a run's export settings a `.tflite` file would have to carry (the graph-only
    ones, `keras_attn.serving.litert.GRAPH_ONLY_SETTINGS`), as the run's export sets them."""
    from types import SimpleNamespace

    return SimpleNamespace(
        keep_placeholders=bool(config.keep_placeholders),
        word_rules=bool(config.word_rules),
        copy_source=bool(config.text and config.word_rules),
    )
