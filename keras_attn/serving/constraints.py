"""The phrase constraints of the served searches, built in the graph (TensorFlow only).

Three sources of phrases, spelled with the target tokenizer:

- a request to `beam_search_constrained`: its `prefix` `[B]` and `constraints` `[B, C]` strings
  (`request_constraints`), each tokenized alone as a word start (docs/serving.md, "Constraints");
- the source's placeholders and markup tags, with `keep_placeholders` (`placeholder_constraints`):
  required as often as in the source, with a token budget so that no answer holds a placeholder
  the source lacks (docs/serving.md, "Placeholders");
- the source words the model never saw, with `keep_unknown_words` (`word_phrases`), spelled as
  the placeholders are (`spelled_phrases`; docs/serving.md, "Unknown words kept").

`PhraseConstraints(target_tokenizer)` builds both; what depends on the vocabulary alone (the
inside-word spelling of each piece, the placeholder characters of each piece) is computed once
per export.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from keras_attn.serving.checks import assert_rank
from keras_attn.text.placeholders import (
    PLACEHOLDER_CHARACTERS,
    character_counts,
    graph_character_counts,
    graph_placeholders,
)

# The most `B * beam_size * (C * L) ** 2` a constrained request may need (C phrases of up to
# L tokens each, after the cut to `max_length + 1` tokens): the search compares every phrase
# token with every phrase position of every hypothesis, each step. A request above it is
# refused (INVALID_ARGUMENT naming `constraints`) instead of exhausting the server's memory.
CONSTRAINT_CELLS = 2**26
# SentencePiece's word-start mark.
_MARK = "\u2581"


def first_true(mask):
    """`(pick, found)` of a bool `[B, K]`: per row the index of its first True (0 where none,
    int32), and whether it has one."""
    first = tf.argmax(tf.cast(mask, tf.int32), axis=1, output_type=tf.int32)
    found = tf.reduce_any(mask, axis=1)
    return tf.where(found, first, 0), found


def concat_phrases(a, b):
    """Two `[B, C, L]` phrase tensors (-1 padded) as one `[B, Ca + Cb, max(La, Lb)]`."""
    width = tf.maximum(tf.shape(a)[2], tf.shape(b)[2])
    a, b = (
        tf.pad(x, [[0, 0], [0, 0], [0, width - tf.shape(x)[2]]], constant_values=-1) for x in (a, b)
    )
    return tf.concat([a, b], axis=1)


def bounded_phrases(phrases, max_length, beam_size):
    """A request's `[B, C, L]` phrase ids with each phrase cut to `max_length + 1` tokens (a
    longer one can no more fit than that: the answer stays "not met"), checked against
    `CONSTRAINT_CELLS`."""
    keep = tf.minimum(tf.shape(phrases)[2], tf.cast(max_length, tf.int32) + 1)
    phrases = phrases[:, :, :keep]
    shape = tf.cast(tf.shape(phrases), tf.float64)
    cells = shape[0] * tf.cast(beam_size, tf.float64) * tf.square(shape[1] * shape[2])
    check = tf.debugging.Assert(
        cells <= CONSTRAINT_CELLS,
        [
            "`constraints` must be smaller: batch x beam_size x (phrases x tokens of the "
            f"longest phrase)^2 must be at most {CONSTRAINT_CELLS} (send fewer inputs, "
            "fewer or shorter phrases). Received: batch, beam_size, phrases, tokens =",
            tf.shape(phrases)[0],
            beam_size,
            tf.shape(phrases)[1],
            tf.shape(phrases)[2],
        ],
    )
    with tf.control_dependencies([check]):
        return tf.identity(phrases)


class PhraseConstraints:
    """The constraint tensors of the searches, spelled with `target_tokenizer` (a
    `keras_attn.text` tokenizer: `tokenize`, `detokenize`, `vocabulary`, `unk_id`)."""

    def __init__(self, target_tokenizer):
        self.tokenizer = target_tokenizer

    def phrase_ids(self, texts):
        """`string [...]` -> int32 `[..., L]` right-padded with -1: each string tokenized alone
        with the target tokenizer (the subword rule, docs/serving.md: a phrase is spelled as
        the tokenizer spells it at the start of a text, i.e. as a word start), `L >= 0`;
        `''` gives a row of only padding (no phrase)."""
        shape = tf.shape(texts)
        ragged = tf.cast(self.tokenizer.tokenize(tf.reshape(texts, [-1])), tf.int32)
        dense = ragged.to_tensor(default_value=-1)
        return tf.reshape(dense, tf.concat([shape, tf.shape(dense)[1:]], 0))

    @functools.cached_property
    def inside_word_ids(self):
        """`(inside [V], bare)` (NumPy int32, int): for each target id whose piece starts with
        SentencePiece's word-start mark, the id of the same piece without it (-1: none), and
        the id of the mark alone (-1: none). All -1 for a vocabulary without the mark."""
        vocabulary = list(self.tokenizer.vocabulary)
        index = {piece: i for i, piece in enumerate(vocabulary)}
        inside = np.full([len(vocabulary)], -1, np.int32)
        for i, piece in enumerate(vocabulary):
            if len(piece) > 1 and piece.startswith(_MARK):
                inside[i] = index.get(piece[1:], -1)
        return inside, index.get(_MARK, -1)

    @functools.cached_property
    def placeholder_costs(self):
        """`(ids [U], costs [U, R])` int32 NumPy: the target ids whose text (each id
        detokenized alone) holds `keras_attn.text.placeholders.PLACEHOLDER_CHARACTERS`, and how
        many of each (one unused entry, id -1, where no piece holds any)."""
        tokenizer = self.tokenizer
        with tf.init_scope():  # eagerly, also while a signature is traced
            texts = tokenizer.detokenize(tf.range(tokenizer.vocab_size)[:, None]).numpy()
        counts = character_counts(texts)
        ids = np.flatnonzero(counts.sum(axis=1) > 0).astype(np.int32)
        costs = counts[ids]
        if not len(ids):
            ids = np.array([-1], np.int32)
            costs = np.zeros([1, len(PLACEHOLDER_CHARACTERS)], np.int32)
        return ids, costs

    def placeholder_ids(self, inputs):
        """Text `[B]` -> `(constraint_ids, constraint_alt_ids)` int32 `[B, C, L]`: every
        placeholder and markup tag of each source (`keras_attn.text.placeholders.
        PLACEHOLDER_PATTERN`, run in the graph by RE2), once per occurrence, tokenized alone,
        and its first piece's spelling inside a word as the alternative (a placeholder glued to
        the text before it, `=%s`, is spelled without the word-start mark; a leading bare mark
        piece is dropped). A placeholder whose pieces hold the unknown id (the target vocabulary
        cannot spell it) is left out: no output could hold it."""
        return self.spelled_phrases(graph_placeholders(inputs).to_tensor(default_value=""))

    def spelled_phrases(self, texts):
        """`string [B, C]` ('' pads) -> `(constraint_ids, constraint_alt_ids)` int32
        `[B, C, L]`: each text tokenized alone, its first piece's inside-word spelling as the
        alternative, a leading bare mark piece dropped, a text the vocabulary cannot spell (an
        unknown id among its pieces) left out (`placeholder_ids`)."""
        ids = self.phrase_ids(texts)  # [B, C, L]
        spelled = ~tf.reduce_any(tf.equal(ids, self.tokenizer.unk_id), axis=-1)
        ids = tf.where(spelled[..., None], ids, -1)
        inside, bare = self.inside_word_ids
        if bare >= 0:  # a phrase spelled "<mark> X ...": X ... is its spelling in both places
            width = tf.shape(ids)[-1]
            padded = tf.pad(ids, [[0, 0], [0, 0], [0, 2]], constant_values=-1)
            lead = tf.equal(padded[..., :1], bare) & tf.not_equal(padded[..., 1:2], -1)
            ids = tf.where(lead, padded[..., 1 : width + 1], ids)
        first = tf.equal(tf.range(tf.shape(ids)[-1]), 0)
        alts = tf.gather(tf.constant(inside), tf.maximum(ids, 0))
        alts = tf.where(first & (ids >= 0), alts, -1)
        return ids, alts

    def word_phrases(self, words, max_tokens):
        """The source words of `keep_unknown_words` (`string [B, C]`, '' pads) ->
        `(constraint_ids, constraint_alt_ids, words)`: as `spelled_phrases`, a word of more
        than `max_tokens` pieces left out too (the search's cost grows with the square of the
        phrases' tokens), and `words` with those left out blanked (no answer is asked for
        them)."""
        ids, alts = self.spelled_phrases(words)
        ids = ids[:, :, : max_tokens + 1]
        kept = tf.reduce_any(ids >= 0, axis=-1) & tf.reduce_all(ids[:, :, max_tokens:] < 0, -1)
        ids, alts = (tf.where(kept[..., None], x[:, :, :max_tokens], -1) for x in (ids, alts))
        return ids, alts, tf.where(kept, words, "")

    def placeholder_budget(self, inputs, *extra, within_placeholders=False):
        """Text `[B]` -> the search's token budget: no answer holds a placeholder character
        (`keras_attn.text.placeholders.PLACEHOLDER_CHARACTERS`) more often than its source, so
        none holds a placeholder or tag the source lacks (`budget_ids` `[U]`, `budget_costs`
        `[U, R]`, `budgets` `[B, R]`). `within_placeholders`: only the characters of the
        source's placeholders count, not those of its other text (the `<qt>` of a KDE string,
        the `->` of a message): the budget of a search that requires the placeholders, where
        those characters would only pay for a tag the source lacks (docs/serving.md,
        "Placeholders"). `extra`: string tensors `[B, ...]` (a request's prefix and phrases)
        whose characters are allowed too."""
        ids, costs = self.placeholder_costs
        if within_placeholders:
            inputs = tf.strings.reduce_join(graph_placeholders(inputs), axis=1)
        budgets = graph_character_counts(inputs)
        for texts in extra:
            counts = graph_character_counts(tf.reshape(texts, [-1]))  # [B * C, R]
            budgets += tf.reduce_sum(
                tf.reshape(counts, [tf.shape(inputs)[0], -1, counts.shape[-1]]), axis=1
            )
        return {
            "budget_ids": tf.constant(ids),
            "budget_costs": tf.constant(costs),
            "budgets": budgets,
        }

    def placeholder_constraints(self, inputs, within_placeholders=False, extra=()):
        """The search's constraints that keep the placeholders of text `[B]`: required phrases
        with their inside-word alternatives, and the budget (`placeholder_budget`, with the
        characters of the `extra` string tensors allowed too)."""
        ids, alts = self.placeholder_ids(inputs)
        return {
            "constraint_ids": ids,
            "constraint_alt_ids": alts,
            **self.placeholder_budget(inputs, *extra, within_placeholders=within_placeholders),
        }

    def with_placeholders(self, inputs, rows, texts=()):
        """The search's constraint tensors `rows` with the placeholders of text `[B]` required
        too (`keep_placeholders`): without a request's phrases, `placeholder_constraints` (the
        characters of the string inputs `texts` allowed by the budget); after a request's
        phrases (`request_constraints`), the source's placeholders follow them."""
        if "constraint_ids" not in rows:
            return dict(rows, **self.placeholder_constraints(inputs, extra=texts))
        ids, alts = self.placeholder_ids(inputs)
        requested = rows["constraint_ids"]
        out = dict(rows)
        out["constraint_ids"] = concat_phrases(requested, ids)
        out["constraint_alt_ids"] = concat_phrases(tf.fill(tf.shape(requested), -1), alts)
        # after the checks of the request's prefix and phrases (their clear errors)
        with tf.control_dependencies(list(out.values())):
            out.update(self.placeholder_budget(inputs, *texts))
        return out

    def request_constraints(self, inputs, prefix, constraints, max_length, beam_size):
        """A constrained request's `prefix` `[B]` and `constraints` `[B, C]` strings, checked
        (ranks and batch, at run time, naming the input) -> `(constraints, spelled)`: the
        search's `prefix_ids` `[B, P]` and `constraint_ids` `[B, C, L]`, and `spelled` bool
        `[B]`, False where a phrase the target vocabulary cannot spell was dropped (it cannot
        be met). The source's placeholders join them in `with_placeholders`."""
        prefix = assert_rank("prefix", prefix, 1, "a vector [B] of strings ('' = none)")
        constraints = assert_rank(
            "constraints", constraints, 2, "a matrix [B, C] of strings ('' = none)"
        )
        batch = tf.shape(inputs)[0]
        checks = [
            tf.debugging.Assert(
                tf.equal(tf.shape(value)[0], batch),
                [
                    f"`{name}` must have one row per input. Received: {name} with rows",
                    tf.shape(value)[0],
                    "for inputs of",
                    batch,
                ],
            )
            for name, value in (("prefix", prefix), ("constraints", constraints))
        ]
        with tf.control_dependencies(checks):
            prefix_ids = self.phrase_ids(tf.identity(prefix))
            phrases = self.phrase_ids(tf.identity(constraints))
        # A phrase the target vocabulary cannot spell cannot be met: it is not searched for (no
        # unknown token forced into the output) and the row's answers say `constraints_met` False.
        phrases = bounded_phrases(phrases, max_length, beam_size)
        unspelled = tf.reduce_any(tf.equal(phrases, self.tokenizer.unk_id), axis=-1)  # [B, C]
        out = {
            "prefix_ids": prefix_ids,
            "constraint_ids": tf.where(unspelled[..., None], -1, phrases),
        }
        return out, ~tf.reduce_any(unspelled, axis=1)
