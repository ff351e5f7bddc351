"""The `keep_placeholders` and `keep_unknown_words` settings in `serving_default`, a served
behaviour of its own: the beam's best answer that holds the source's placeholders and the
source words the model never saw, with a second, constrained search for the rows where none
does (docs/serving.md, "Placeholders", "Unknown words kept")."""

from __future__ import annotations

import tensorflow as tf

from keras_attn.decoding.words import MAX_WORD
from keras_attn.serving.constraints import concat_phrases, first_exact, first_true
from keras_attn.serving.known_words import holds_words
from keras_attn.text.placeholders import graph_placeholders_kept

# The settings row of this behaviour.
SETTINGS = ("keep_placeholders", "keep_unknown_words", "known_words")


def kept_best(signatures, search, inputs, config, xla):
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
    pick, found = tf.zeros(batch, tf.int32), tf.ones(batch, tf.bool)
    if placeholders:
        pick, found = first_exact(inputs, plain["outputs"])
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
        exact = tf.ones(tf.shape(outputs["outputs"]), tf.bool)
        if placeholders:
            exact = graph_placeholders_kept(again, outputs["outputs"])
        whole = exact
        if s.keep_unknown_words:
            whole = exact & holds_words(texts, outputs["outputs"])

        # the first hypothesis that holds everything; else, where the placeholders sent
        # the row here, the first that holds them (the first where none does)
        first_whole, has_whole = first_true(whole)
        pick = tf.where(has_whole, first_whole, first_true(exact)[0])
        use = has_whole | ~tf.gather(found, rows)
        answer = {n: tf.gather(outputs[n], pick, batch_dims=1) for n in ("outputs", "scores")}
        return answer["outputs"], answer["scores"], use

    def none():
        return tf.zeros([0], tf.string), tf.zeros([0], tf.float32), tf.zeros([0], tf.bool)

    texts, scores, use = tf.cond(tf.size(rows) > 0, required, none)
    rows, texts, scores = (tf.boolean_mask(x, use) for x in (rows, texts, scores))
    return {
        "outputs": tf.tensor_scatter_nd_update(best["outputs"], rows[:, None], texts),
        "scores": tf.tensor_scatter_nd_update(best["scores"], rows[:, None], scores),
    }


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
