"""The SentencePiece training every keras-attn SentencePiece model goes through (its settings and
`train_model_proto`),
whether by `SentencePieceTokenizer.train` (TensorFlow) or by `keras_attn.train`'s
TensorFlow-free text pipeline: the same options give the same model file and ids."""

import io

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


def train_model_proto(texts, vocab_size, **options):
    """A SentencePiece model trained in memory on an iterable of str (one sentence each); returns
    the model file's bytes. `options` go to `sentencepiece.SentencePieceTrainer.train` over
    `DEFAULT_OPTIONS`; the reserved ids and pieces cannot be changed."""
    import sentencepiece as spm

    if int(vocab_size) <= len(RESERVED_TOKENS):
        raise ValueError(
            f"`vocab_size` must be > {len(RESERVED_TOKENS)}. Received: vocab_size={vocab_size}"
        )
    clash = sorted(set(options) & set(RESERVED_OPTIONS))
    if clash:
        raise ValueError(
            "The reserved ids and pieces are fixed (pad 0, <s> 1, </s> 2, <unk> 3). "
            f"Received: {clash}"
        )

    def sentences():
        for text in texts:
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            # One sentence per item: a line break inside would be read as a separator.
            text = " ".join(text.split())
            if text:
                yield text

    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            vocab_size=int(vocab_size),
            **{**DEFAULT_OPTIONS, **options, **RESERVED_OPTIONS},
        )
    except RuntimeError as err:
        raise ValueError(f"SentencePiece training failed: {err}") from err
    return model.getvalue()
