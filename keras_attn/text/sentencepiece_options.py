"""The SentencePiece trainer settings every keras-attn SentencePiece model is trained with,
whether by `SentencePieceTokenizer.train` (TensorFlow) or by `keras_attn.train`'s
TensorFlow-free text pipeline: the same options give the same model file and ids."""

from keras_attn._ids import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID

# The reserved ids and pieces: fixed, a caller's options may not override them.
RESERVED_OPTIONS = dict(
    pad_id=PAD_ID,
    bos_id=START_ID,
    eos_id=END_ID,
    unk_id=UNK_ID,
    pad_piece=RESERVED_TOKENS[0],
    bos_piece=RESERVED_TOKENS[1],
    eos_piece=RESERVED_TOKENS[2],
    unk_piece=RESERVED_TOKENS[3],
)
# Defaults a caller's options may override.
DEFAULT_OPTIONS = dict(
    model_type="unigram",
    character_coverage=1.0,
    normalization_rule_name="identity",
    hard_vocab_limit=False,
    num_threads=1,
    minloglevel=2,
)
