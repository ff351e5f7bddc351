"""The `word_rules` setting, a served behaviour of its own (`WORD_RULES`): the searches it
binds (beam and sampling, `specs.RULED_SEARCHES`) run over the model's step wrapped with the
word rules (`keras_attn.decoding.words.word_rules_step`, docs/serving.md "Word rules"). Its
pieces: the vocabulary's tables (`word_rule_tables`, and the words' texts for the loop ban on
words), the source's phrases the rules read (`rule_phrases`), the source ids beside them, the
wrapped step. The source words the rules copy whole are a behaviour of their own
(`keras_attn.serving.known_words.UNKNOWN_WORDS`), whose per-row tensor (`fixed`) the wrapped
step reads too."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_attn.decoding.words import (
    sentencepiece_word_starts,
    word_rules_step,
    word_text_tables,
)
from keras_attn.serving.behaviours import Behaviour
from keras_attn.serving.specs import RULED_SEARCHES
from keras_attn.text.placeholders import (
    ACCELERATOR_MARKER,
    OPEN_ENDED_PATTERN,
    glue_pieces,
    graph_placeholders,
)

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


def rule_phrases(signatures, inputs):
    """The phrases `glue_ban` reads for text `[B]`: the source's placeholders
    (`phrase_ids`, `phrase_alt_ids`, as `keep_placeholders` requires them) and whether each
    is open-ended (`open_end`, `keras_attn.text.placeholders.OPEN_ENDED_PATTERN`) and not
    glued to the text after it by the source itself (`%8U`, `$a$b`: an answer may glue
    what its source glues), and whether each is a keyboard accelerator's marker (`marker`:
    the placeholder `_` or `&`, which a letter must follow)."""
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
    # the alternative spelling of each phrase's first piece; the accelerators' markers
    marker = tf.strings.regex_full_match(found, ACCELERATOR_MARKER)
    return {
        "phrase_ids": ids,
        "phrase_alt_ids": alts[:, :, 0],
        "open_end": open_end,
        "marker": marker,
    }


class WordRules(Behaviour):
    """The `word_rules` setting: the vocabulary's tables, the source's phrases and ids as the
    per-row tensors of the beam and sampling signatures' step, the step wrapped."""

    name = "word rules"
    settings = ("word_rules",)

    def prepare(self, signatures):
        """`signatures.word_start` and `.glue` (`word_rule_tables`) and, for a SentencePiece
        vocabulary, `.word_text` (`keras_attn.decoding.words.word_text_tables`: the loop ban
        on a word's text however its copies are spelled; None for other tokenizers, whose
        loop ban reads the tokens alone)."""
        signatures.word_start, signatures.glue = word_rule_tables(
            signatures.source_tokenizer, signatures.target_tokenizer
        )
        if signatures.word_start is not None:
            vocabulary = list(signatures.target_tokenizer.vocabulary)
            signatures.word_text = word_text_tables(vocabulary)

    def step_rows(self, signatures, spec, inputs):
        if spec.search not in RULED_SEARCHES:
            return None
        return rule_phrases(signatures, inputs)

    def source_rows(self, signatures, rows, source_ids):
        return dict(rows, source=source_ids)

    def step(self, signatures, step, state, rows):
        """The step wrapped with the word rules (`keras_attn.decoding.words.
        word_rules_step`), or as it is where `rows` is None."""
        if rows is None:
            return step, state
        return word_rules_step(
            step,
            state,
            rows["source"],
            signatures.word_start,
            signatures.target_tokenizer.end_id,
            signatures.settings.max_length_limit,  # no request's max_length is above it
            phrase_ids=tf.ensure_shape(rows["phrase_ids"], [None, None, GLUE_PHRASE_TOKENS]),
            open_end=rows["open_end"],
            phrase_alt_ids=rows["phrase_alt_ids"],
            fixed=rows.get("fixed"),
            marker=rows.get("marker"),
            glue=signatures.glue,
            word_text=signatures.word_text,
        )


WORD_RULES = WordRules()
