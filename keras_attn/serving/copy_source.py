"""The `copy_source` setting, a served behaviour of its own (`COPY_SOURCE`): the source text is
one more candidate of `serving_default`'s answer (docs/serving.md, "Copying the source")."""

from __future__ import annotations

import tensorflow as tf

from keras_attn.decoding import forced_search
from keras_attn.serving.behaviours import Behaviour


def source_or_best(signatures, inputs, best, config, xla):
    """`serving_default` with `copy_source`: each answer of `best` (`{"outputs",
    "scores"}`), or the source text itself where the model gives the source, tokenized as
    a target, at least the answer's log-probability per token (end token included). Both
    are scored again by the model alone (`forced_search`: no word rule, placeholder budget
    or control), so the search's own renormalised scores do not decide. A source that does
    not fit in `max_length` tokens is never the answer. Its score is the search formula's
    for the source (docs/serving.md, "Copying the source")."""
    tok = signatures.target_tokenizer
    ragged = tf.cast(tok.tokenize(tf.concat([best["outputs"], inputs], 0)), tf.int32)
    targets = ragged.to_tensor(default_value=-1)
    targets = targets[:, : tf.maximum(tf.cast(config.max_length, tf.int32) - 1, 0)]
    needed = tf.cast(ragged.row_lengths(), tf.int32) + 1
    both = tf.concat([inputs, inputs], 0)
    result, _ = signatures.decode(forced_search, both, config, {"targets": targets}, xla=xla)
    lengths = tf.cast(result["lengths"], tf.int32)
    per_token = tf.cast(result["log_probs"], tf.float32) / tf.cast(
        tf.maximum(lengths, 1), tf.float32
    )
    answer, source = tf.split(per_token, 2)
    _, whole = tf.split(tf.equal(lengths, needed), 2)  # the source scored to its end token
    _, source_scores = tf.split(tf.cast(result["scores"], tf.float32), 2)
    copy = whole & (source >= answer)
    return {
        "outputs": tf.where(copy, inputs, best["outputs"]),
        "scores": tf.where(copy, source_scores, best["scores"]),
    }


class CopySource(Behaviour):
    """The `copy_source` setting: a best-only signature's (`serving_default`'s) answer, or
    the source where the model scores it at least as well (`source_or_best`)."""

    name = "source copied"
    settings = ("copy_source",)

    def answer(self, signatures, spec, search, answer, xla):
        if not spec.best_only:
            return answer

        def copied(inputs, texts, config):
            best = answer(inputs, texts, config)
            return source_or_best(signatures, inputs, best, config, xla)

        return copied


COPY_SOURCE = CopySource()
