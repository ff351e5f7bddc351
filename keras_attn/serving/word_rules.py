"""The `word_rules` setting, a served behaviour of its own: the searches it binds (beam and
sampling, `specs.RULED_SEARCHES`) run over the model's step wrapped with the word rules
(`keras_attn.decoding.words.word_rules_step`, docs/serving.md "Word rules"). Its pieces: the
vocabulary's tables (`word_rule_tables`, set on the export by `prepare`), the source's phrases
the rules read (`rule_phrases`), the source ids and unknown words beside them
(`source_rules`), the wrapped step (`ruled_step`). Each takes the export's
`ServingSignatures`."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_attn.decoding.words import (
    sentencepiece_word_starts,
    word_rules_step,
    word_text_tables,
)
from keras_attn.text.placeholders import OPEN_ENDED_PATTERN, glue_pieces, graph_placeholders

# The settings row of this behaviour.
SETTINGS = ("word_rules",)
# The longest open-ended placeholder (in target tokens) the `word_rules` keep unglued.
GLUE_PHRASE_TOKENS = 16


def word_rule_tables(source_tokenizer, target_tokenizer):
    """`(word_start, glue)` (NumPy `[V]` bool) of the `word_rules` setting: the word-start
    pieces of a SentencePiece vocabulary (None for other tokenizers: the loop ban only) and the
    pieces that glue to an open-ended placeholder. The rules read the source's ids as target
    ids, so source and target must share one vocabulary (`ValueError` otherwise)."""
    if source_tokenizer is None:
        raise ValueError(
            "`word_rules` applies to text inputs only (it reads the source's tokens). "
            "Received: word_rules=True for a model without a source tokenizer"
        )
    vocabulary = list(target_tokenizer.vocabulary)
    if source_tokenizer is not target_tokenizer and list(source_tokenizer.vocabulary) != vocabulary:
        raise ValueError(
            "`word_rules` needs a source and target that share one vocabulary (the rules "
            "compare the answer's tokens with the source's). Received: word_rules=True with "
            f"source and target vocabularies of {source_tokenizer.vocab_size} and "
            f"{len(vocabulary)} pieces that differ"
        )
    word_start = None
    if hasattr(target_tokenizer, "model_proto"):  # SentencePiece: `▁` starts a word
        word_start = sentencepiece_word_starts(vocabulary)
    return word_start, np.asarray(glue_pieces(vocabulary), bool)


def prepare(signatures):
    """Set the vocabulary's tables the rules read on the export's `signatures`: `word_start`
    and `glue` (`word_rule_tables`), and for a SentencePiece vocabulary `word_text`
    (`keras_attn.decoding.words.word_text_tables`: the loop ban on a word's text however its
    copies are spelled; None for other tokenizers, whose loop ban reads the tokens alone)."""
    signatures.word_start, signatures.glue = word_rule_tables(
        signatures.source_tokenizer, signatures.target_tokenizer
    )
    signatures.word_text = None
    if signatures.word_start is not None:
        signatures.word_text = word_text_tables(list(signatures.target_tokenizer.vocabulary))


def rule_phrases(signatures, inputs):
    """The phrases `glue_ban` reads for text `[B]`: the source's placeholders
    (`phrase_ids`, `phrase_alt_ids`, as `keep_placeholders` requires them) and whether each
    is open-ended (`open_end`, `keras_attn.text.placeholders.OPEN_ENDED_PATTERN`) and not
    glued to the text after it by the source itself (`%8U`, `$a$b`: an answer may glue
    what its source glues)."""
    ids, alts = signatures.phrases.placeholder_ids(inputs)
    found, glued = graph_placeholders(inputs, glued=True)
    found, glued = found.to_tensor(default_value=""), glued.to_tensor(default_value=False)
    open_end = tf.strings.regex_full_match(found, OPEN_ENDED_PATTERN) & ~glued
    # `glue_ban` reads the phrases at a fixed width: a longer one is left out
    width = GLUE_PHRASE_TOKENS
    open_end = open_end & ~tf.reduce_any(ids[:, :, width:] >= 0, axis=-1)
    pad = tf.maximum(width - tf.shape(ids)[2], 0)
    ids, alts = (
        tf.pad(x, [[0, 0], [0, 0], [0, pad]], constant_values=-1)[:, :, :width] for x in (ids, alts)
    )
    # the alternative spelling of each phrase's first piece
    return {"phrase_ids": ids, "phrase_alt_ids": alts[:, :, 0], "open_end": open_end}


def source_rules(signatures, rules, source_ids):
    """`rules` with the source ids (`source`) and, with `known_words`, the pieces of the
    source words the model never saw (`fixed`, `KnownWords.unknown_pieces`)."""
    rules = dict(rules, source=source_ids)
    if signatures.known is not None:
        rules["fixed"] = signatures.known.unknown_pieces(source_ids)
    return rules


def ruled_step(signatures, state, rules):
    """`(step, state)`: the model's step wrapped with the word rules
    (`keras_attn.decoding.words.word_rules_step`), or as it is where `rules` is None."""
    if rules is None:
        return signatures.model.decode_step, state
    return word_rules_step(
        signatures.model.decode_step,
        state,
        rules["source"],
        signatures.word_start,
        signatures.target_tokenizer.end_id,
        signatures.settings.max_length_limit,  # no request's max_length is above it
        phrase_ids=tf.ensure_shape(rules["phrase_ids"], [None, None, GLUE_PHRASE_TOKENS]),
        open_end=rules["open_end"],
        phrase_alt_ids=rules["phrase_alt_ids"],
        fixed=rules.get("fixed"),
        glue=signatures.glue,
        word_text=signatures.word_text,
    )
