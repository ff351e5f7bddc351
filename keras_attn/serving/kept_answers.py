"""The `keep_placeholders` and `keep_unknown_words` settings, a served behaviour of its own
(`KEEP`): what the answers keep of their source (docs/serving.md, "Placeholders", "Unknown
words kept").

- `beam_search` and `beam_search_constrained` require the source's placeholders and markup
  tags, as often as the source holds them, under the budget of their characters
  (`PhraseConstraints.with_placeholders`; a constrained request's phrases first);
- `serving_default` answers the beam's best hypothesis that holds the source's placeholders
  and the source words the model never saw, with a second, constrained search for the rows
  where none does (`kept_best`).
"""

from __future__ import annotations

import re

import tensorflow as tf

from keras_attn.decoding.words import MAX_WORD
from keras_attn.serving.behaviours import Behaviour
from keras_attn.serving.constraints import concat_phrases, first_true
from keras_attn.serving.known_words import holds_words
from keras_attn.text.base import clean_utf8
from keras_attn.text.placeholders import (
    ICU_NUMBER_STAND_IN,
    graph_icu_join,
    graph_icu_split,
    graph_placeholders_kept,
)


def kept_best(signatures, search, inputs, config, xla):
    """`serving_default` with `keep_placeholders` or `keep_unknown_words` (`kept_texts`);
    with `keep_placeholders`, an ICU `plural` / `select` message or a Fluent select expression
    keeps its structure by construction: its skeleton (`{n, plural, one {`, `} other {`, `}}`;
    `{ $n ->`, `[one]`, `*[other]`, `}`) is copied as it is
    and only the texts around and between its pieces are translated, each one alone, its
    number signs `#` read as `ICU_NUMBER_STAND_IN` (a placeholder they keep) and back
    (`keras_attn.text.placeholders.icu_split`). A text of only spaces, digits and marks is
    copied; a split message's score is the sum of its translated texts' scores."""
    if not signatures.settings.keep_placeholders:
        return kept_texts(signatures, search, inputs, config, xla)
    skeleton, parts = graph_icu_split(inputs)
    texts = parts.flat_values
    split = tf.gather(skeleton.row_lengths() > 0, parts.value_rowids())
    # a split message's texts: their spaces around kept aside, `#` read as the stand-in
    core = tf.strings.regex_replace(texts, r"(?s)^\s*(.*?)\s*$", r"\1")
    lead = tf.strings.regex_replace(texts, r"(?s)^(\s*).*$", r"\1")
    trail = tf.strings.regex_replace(texts, r"(?s)^.*?(\s*)$", r"\1")
    asked = ~split | tf.strings.regex_full_match(core, r"(?s).*\pL.*")
    core = tf.where(split, tf.strings.regex_replace(core, "#", ICU_NUMBER_STAND_IN), texts)
    where = tf.cast(tf.where(asked), tf.int32)
    answer = kept_texts(signatures, search, tf.boolean_mask(core, asked), config, xla)
    said = tf.where(
        tf.boolean_mask(split, asked),
        tf.strings.join(
            [
                tf.boolean_mask(lead, asked),
                tf.strings.regex_replace(answer["outputs"], re.escape(ICU_NUMBER_STAND_IN), "#"),
                tf.boolean_mask(trail, asked),
            ]
        ),
        answer["outputs"],
    )
    texts = tf.tensor_scatter_nd_update(texts, where, said)
    scores = tf.tensor_scatter_nd_update(
        tf.zeros(tf.shape(texts), tf.float32), where, answer["scores"]
    )
    rows = parts.value_rowids()
    return {
        "outputs": graph_icu_join(skeleton, parts.with_flat_values(texts)),
        "scores": tf.math.unsorted_segment_sum(
            scores, rows, tf.shape(inputs, out_type=tf.int64)[0]
        ),
    }


def kept_texts(signatures, search, inputs, config, xla):
    """`serving_default` with `keep_placeholders` or `keep_unknown_words`: the beam (under
    the placeholder budget alone with `keep_placeholders`: no answer holds a placeholder its
    source lacks), its best hypothesis that holds exactly the source's placeholders; only
    the rows where none of its K does, or whose answer lacks a source word the model never
    saw (`unknown_words`), are searched again with those placeholders and words required
    (the budget of the placeholders' and the words' characters alone), and answer the best
    hypothesis that holds them all (docs/serving.md, "Placeholders", "Unknown words kept").
    A row searched again for its words alone keeps its first answer where no hypothesis
    holds them. Requiring them of every row would make the beam share its K places among
    the requirements' progress (dynamic beam allocation), a worse search where the model
    keeps them anyway."""
    s = signatures.settings
    placeholders = s.keep_placeholders
    rules = signatures.rule_phrases(inputs) if s.word_rules else None
    budget = signatures.phrases.placeholder_budget(inputs) if placeholders else {}
    result = signatures.decode(search, inputs, config, budget, rules, xla)
    plain = signatures.beam_outputs(*result)
    batch = tf.shape(inputs)[:1]

    def sound(sources, outputs):  # [B, K]: the placeholders exactly, no loop of its own
        ok = tf.ones(tf.shape(outputs), tf.bool)
        if placeholders:
            ok &= graph_placeholders_kept(sources, outputs)
        if s.word_rules:
            ok &= ~graph_new_loops(sources, outputs)
        return ok

    pick, found = first_true(sound(inputs, plain["outputs"]))
    best = {name: tf.gather(plain[name], pick, batch_dims=1) for name in ("outputs", "scores")}
    held = tf.ones(batch, tf.bool)
    if s.keep_unknown_words:
        words = unknown_words(signatures, inputs)
        held = holds_words(words[2], best["outputs"][:, None])[:, 0]
    rows = tf.cast(tf.where(~found | ~held)[:, 0], tf.int32)  # the rows searched again

    def required():
        again = tf.gather(inputs, rows)
        constraints, extra = {}, ()
        if s.keep_unknown_words:
            ids, alts, texts = (tf.gather(x, rows) for x in words)
            constraints = {"constraint_ids": ids, "constraint_alt_ids": alts}
            extra = (texts,)
        if placeholders:
            # the source's other text pays for nothing: a hypothesis that holds the
            # required placeholders (and words) holds no other
            kept = signatures.phrases.placeholder_constraints(
                again, within_placeholders=True, extra=extra
            )
            for name in constraints:
                kept[name] = concat_phrases(kept[name], constraints[name])
            constraints = kept
        rules = signatures.rule_phrases(again) if s.word_rules else None
        result = signatures.decode(search, again, config, constraints, rules, xla)
        outputs = signatures.beam_outputs(*result)
        exact = sound(again, outputs["outputs"])
        whole = exact
        if s.keep_unknown_words:
            whole = exact & holds_words(texts, outputs["outputs"])

        # the first hypothesis that holds everything; else, where the placeholders or a loop
        # sent the row here, the first that holds the placeholders without a loop, and where
        # none does the source itself: it holds them, and no loop it does not have
        first_whole, has_whole = first_true(whole)
        first_exact_, has_exact = first_true(exact)
        pick = tf.where(has_whole, first_whole, first_exact_)
        use = has_whole | ~tf.gather(found, rows)
        answer = {n: tf.gather(outputs[n], pick, batch_dims=1) for n in ("outputs", "scores")}
        copied = ~has_whole & ~has_exact
        return tf.where(copied, again, answer["outputs"]), answer["scores"], use

    def none():
        return tf.zeros([0], tf.string), tf.zeros([0], tf.float32), tf.zeros([0], tf.bool)

    texts, scores, use = tf.cond(tf.size(rows) > 0, required, none)
    rows, texts, scores = (tf.boolean_mask(x, use) for x in (rows, texts, scores))
    return {
        "outputs": tf.tensor_scatter_nd_update(best["outputs"], rows[:, None], texts),
        "scores": tf.tensor_scatter_nd_update(best["scores"], rows[:, None], scores),
    }


# A word for the loop check: a run of letters, digits and `_` (Python's `\w`; RE2 names them
# by their Unicode classes), case folded.
_WORD_CHARACTERS = r"\pL\pN_"


def tripled_words(text):
    """The words (runs of letters, digits and `_`, case folded) that `text` writes three times in a row, with
    anything but a word between them (`la la la`, `--ter--ter--ter`)."""
    words = re.findall(r"\w+", text.lower())
    return {w for a, b, w in zip(words, words[1:], words[2:]) if a == b == w}


def graph_new_loops(sources, outputs):
    """`tripled_words` in a TensorFlow graph: `sources` string `[B]`, `outputs` `[B, K]` ->
    bool `[B, K]`, True where the answer writes a word three times in a row that its source
    does not."""
    k = tf.shape(outputs)[1]

    def tripled(texts):  # [N, W] the words that close a run of three, "" elsewhere
        texts = tf.strings.lower(clean_utf8(texts), encoding="utf-8")
        spaced = tf.strings.regex_replace(texts, "[^" + _WORD_CHARACTERS + "]+", " ")
        words = tf.strings.split(tf.strings.strip(spaced)).to_tensor(default_value="")
        later, last = words[:, 1:-1], words[:, 2:]
        run = tf.equal(words[:, :-2], later) & tf.equal(later, last) & tf.not_equal(last, "")
        return tf.where(run, last, "")

    mine = tripled(tf.reshape(outputs, [-1]))  # [B*K, Wo]
    theirs = tf.repeat(tripled(sources), k, axis=0)  # [B*K, Ws]
    held = tf.reduce_any(tf.equal(mine[:, :, None], theirs[:, None, :]), axis=2)
    new = tf.reduce_any(tf.not_equal(mine, "") & ~held, axis=1)
    return tf.reshape(new, tf.shape(outputs))


def unknown_words(signatures, inputs):
    """`keep_unknown_words`' phrases of text `[B]`: `(constraint_ids, constraint_alt_ids,
    words)` of the source words the model never saw (`KnownWords.unknown_words`), as the
    source writes them and within the source as the model reads it (cut to
    `max_input_length`, its unknown pieces lost); those that the target vocabulary cannot
    spell or that take more than the word rules' `MAX_WORD` pieces left out
    (`PhraseConstraints.word_phrases`)."""
    read = signatures.source_tokenizer.detokenize(signatures.source_ids(inputs))
    words = signatures.known.unknown_words(inputs, within=read)
    return signatures.phrases.word_phrases(words, MAX_WORD)


class Keep(Behaviour):
    """The `keep_placeholders` and `keep_unknown_words` settings (module docstring)."""

    name = "placeholders and unknown words kept"
    settings = ("keep_placeholders", "keep_unknown_words")

    def request(self, signatures, spec, inputs, texts, rows):
        if not (spec.placeholders and signatures.settings.keep_placeholders):
            return rows
        return signatures.phrases.with_placeholders(inputs, rows, texts)

    def answer(self, signatures, spec, search, answer, xla):
        s = signatures.settings
        placeholders = spec.placeholders and s.keep_placeholders
        if not spec.best_only or not (placeholders or s.keep_unknown_words):
            return answer

        def kept(inputs, texts, config):
            return kept_best(signatures, search, inputs, config, xla)

        return kept


KEEP = Keep()
