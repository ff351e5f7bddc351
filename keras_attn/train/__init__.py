"""The training recipes' library: run settings and flags (`config`, `args`), the run loop with
checkpoints, resume and distribution strategies (`loop`), Keras callbacks, batching (tf.data, or
NumPy without TensorFlow: `numpy_text`), decoding and scoring during training (`evaluate`), the
translator recipe (`translator`) and a finished run's export (`export`).

The names below import on first use, so a submodule loads only what it needs."""

import importlib

from keras_attn import _pins

_NAMES = {
    "args": ("base_parser", "build_parser", "parse_run_args"),
    "batching": (
        "bucket_batch_sizes",
        "bucket_boundaries",
        "count_tokens",
        "encode_pairs",
        "epoch_order",
        "token_batches",
        "token_dropout",
        "bucket_width",
    ),
    "callbacks": (
        "EpochCheckpoint",
        "TimeBudget",
        "Validation",
        "budget_tail",
        "spent_epoch_seconds",
        "tensorboard_callback",
    ),
    "checkpoints": (
        "average_checkpoints",
        "last_checkpoints",
        "latest_checkpoint",
        "save_weights",
        "seed_states",
    ),
    "config": ("TranslatorConfig", "resolve_config"),
    "evaluate": (
        "decode_texts",
        "greedy_decoder",
        "loop_rate",
        "score",
        "text_scores",
        "token_strings",
    ),
    "export": ("export_run",),
    "loop": ("Run",),
    "strategies": ("check_global_batch", "get_strategy", "is_chief"),
}
_MODULE = {name: module for module, names in _NAMES.items() for name in names}
__all__ = sorted(_MODULE)


def __getattr__(name):
    if _MODULE.get(name) == "export":  # a SavedModel: TensorFlow's side
        from keras_attn.serving import EXPORT_NEEDS

        _pins.require(f"keras_attn.train.{name}", EXPORT_NEEDS)
    if name in _MODULE:
        return getattr(importlib.import_module(f"keras_attn.train.{_MODULE[name]}"), name)
    raise AttributeError(f"module 'keras_attn.train' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
