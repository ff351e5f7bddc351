"""The training recipes' library: run settings and flags (`config`, `args`), the run loop with
checkpoints, resume and distribution strategies (`loop`), Keras callbacks, batching, decoding
and scoring during training (`evaluate`), and the translator recipe (`translator`)."""

from keras_attn.train.args import base_parser, build_parser, parse_run_args
from keras_attn.train.batching import (
    bucket_batch_sizes,
    bucket_boundaries,
    count_tokens,
    encode_pairs,
    epoch_order,
    token_batches,
    token_dropout,
    width_multiple,
)
from keras_attn.train.callbacks import (
    EpochCheckpoint,
    TimeBudget,
    Validation,
    spent_epoch_seconds,
    tensorboard_callback,
)
from keras_attn.train.checkpoints import (
    average_checkpoints,
    last_checkpoints,
    latest_checkpoint,
    save_weights,
    seed_states,
)
from keras_attn.train.config import TranslatorConfig, resolve_config
from keras_attn.train.evaluate import (
    decode_texts,
    greedy_decoder,
    loop_rate,
    score,
    text_scores,
    token_strings,
)
from keras_attn.train.loop import Run
from keras_attn.train.strategies import check_global_batch, get_strategy, is_chief
