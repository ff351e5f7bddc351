"""Dates that exist, by construction: the ISO-date grammar applied at every decoding step.

`ValidDates(model, tokenizer)` wraps a dates translator (any model with `encode`,
`initial_decode_state`, `decode_step`, docs/decoding.md) so that every search over it — greedy,
beam, sampling, with or without the controls, in Python or in an exported SavedModel — can only
write `YYYY-MM-DD` followed by the end token, where the date exists:

- step 0-3, the year: its digits stay within `years` (default 1950..2049, the range the
  generator draws from, `keras_attn.data.dates.DEFAULT_START` .. `DEFAULT_END`); when the
  source holds a year written with four digits (one run of exactly four digits, of any
  script), the year is that one, copied digit by digit;
- step 4 and 7: "-";
- step 5-6, the month: 01..12;
- step 8-9, the day: 01..the length of that month in that year (February 29 in Gregorian leap
  years only: divisible by 4, centuries only when divisible by 400);
- step 10: the end token.

At each step the model's logits of the tokens the grammar does not allow become `-inf`; the
search ranks what is left as usual (`log_softmax` renormalizes over the allowed tokens). The
state carries the digits written so far (one int32 per row, reordered along beam parents like
any other state) and, per example, the allowed years.

No date: the answer is the empty string (the end token at step 0) when
- the source writes a four-digit year outside `years` (the model never saw that year: it does
  not guess one, it says nothing), or
- `max_length` is below 11 (no room for a whole date).
A beam's lower ranks are empty too (score `-inf`) when fewer valid dates than the beam's width
are reachable, and so is a row whose tokens the request's controls all forbid (docs/decoding.md).
So every answer of the wrapped model is a date that exists in `years`, or "".

The wrapper keeps no weights of its own (`variables` are the model's) and adds only core
TensorFlow ops to the step: it exports with `keras_attn.serving.export_text_model` as the
model would. TensorFlow backend.
"""

from __future__ import annotations

import datetime
import unicodedata

import numpy as np

from keras_attn.data.dates import DEFAULT_END, DEFAULT_START

DATE_LENGTH = 10  # "YYYY-MM-DD"; the end token is step 10
DEFAULT_YEARS = (DEFAULT_START.year, DEFAULT_END.year)
_YEAR_KEY = "date_grammar_source_year"
_DASH, _END, _OTHER = 10, 11, 12  # token classes after the digits 0-9
_DIGIT_STEPS = (0, 1, 2, 3, 5, 6, 8, 9)


def is_iso_date(text):
    """True when `text` is `YYYY-MM-DD` (ASCII digits) and that day exists."""
    if not isinstance(text, str) or len(text) != DATE_LENGTH or not text.isascii():
        return False
    if text[4] != "-" or text[7] != "-" or not (text[:4] + text[5:7] + text[8:]).isdigit():
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def source_year(text):
    """The year the grammar copies from a source string: its one run of exactly four digits
    (any script's digits, read by `unicodedata.digit`; the first run when there are several),
    or None. The reference of what the graph computes (`ValidDates.encode`)."""
    digits = [unicodedata.digit(ch, None) for ch in text]
    i = 0
    while i < len(digits):
        if digits[i] is None:
            i += 1
            continue
        j = i
        while j < len(digits) and digits[j] is not None:
            j += 1
        if j - i == 4:
            return int("".join(str(d) for d in digits[i:j]))
        i = j
    return None


class ValidDates:
    """A dates translator whose every answer is a valid ISO date or "" (module docstring).

    Args:
        model: the translator (`encode`, `initial_decode_state`, `decode_step`).
        tokenizer: its target tokenizer (`vocabulary`, `end_id`); the vocabulary must hold the
            single-character tokens "0".."9" and "-". Also read for the source's digits (a
            shared vocabulary, as the dates translator has).
        years: `(first, last)` years the answers may have, `1 <= first <= last <= 9999`;
            default the generator's default range (1950, 2049). Give the range the model was
            trained on.
    """

    def __init__(self, model, tokenizer, years=DEFAULT_YEARS):
        from keras_attn.decoding.protocol import check_model

        check_model(model)
        try:
            first, last = (int(y) for y in years)
        except (TypeError, ValueError):
            first = last = None
        if first is None or not 1 <= first <= last <= 9999:
            raise ValueError(
                "`years` must be (first, last) with 1 <= first <= last <= 9999. "
                f"Received: years={years!r}"
            )
        vocabulary = list(getattr(tokenizer, "vocabulary", None) or [])
        if not vocabulary or not hasattr(tokenizer, "end_id"):
            raise ValueError(
                "`tokenizer` must be a keras_attn.text tokenizer (vocabulary, end_id). "
                f"Received: tokenizer={tokenizer!r}"
            )
        token_class = np.full(len(vocabulary), _OTHER, np.int32)
        source_digit = np.full(len(vocabulary), -1, np.int32)
        for i, token in enumerate(vocabulary):
            if len(token) == 1 and token in "0123456789":
                token_class[i] = int(token)
            elif token == "-":
                token_class[i] = _DASH
            if len(token) == 1 and unicodedata.digit(token, None) is not None:
                source_digit[i] = unicodedata.digit(token)
        token_class[int(tokenizer.end_id)] = _END
        missing = [c for c in "0123456789-" if c not in vocabulary]
        if missing:
            raise ValueError(
                "The tokenizer's vocabulary must hold the characters of ISO dates. "
                f"Received: a vocabulary without {missing!r}"
            )
        self.model = model
        self.years = (first, last)
        self._token_class = token_class
        self._source_digit = source_digit

    # What the exporter reads of a model besides the protocol.
    @property
    def variables(self):
        return self.model.variables

    def _flatten_layers(self, *args, **kwargs):
        flatten = getattr(self.model, "_flatten_layers", None)
        return flatten(*args, **kwargs) if flatten is not None else iter(())

    # ---- the protocol ----------------------------------------------------------------------
    def encode(self, source_ids):
        import tensorflow as tf

        outputs = dict(self.model.encode(source_ids))
        outputs[_YEAR_KEY] = self._source_years(tf.cast(source_ids, tf.int32))
        return outputs

    def _source_years(self, ids):
        """`[B]` int32: the year written with exactly four digits in each source, or -1."""
        import tensorflow as tf

        digit = tf.gather(tf.constant(self._source_digit), ids)  # [B, S], -1: not a digit
        width = tf.shape(ids)[1]
        padded = tf.pad(digit, [[0, 0], [1, 4]], constant_values=-1)  # [B, S + 5]

        def column(offset):  # padded[:, offset : offset + S]
            return padded[:, offset : offset + width]

        a0, a1, a2, a3 = (column(k) for k in (1, 2, 3, 4))
        run = (column(0) < 0) & (a0 >= 0) & (a1 >= 0) & (a2 >= 0) & (a3 >= 0) & (column(5) < 0)
        first = run & (tf.cumsum(tf.cast(run, tf.int32), axis=1) == 1)
        year = a0 * 1000 + a1 * 100 + a2 * 10 + a3
        found = tf.reduce_any(run, axis=1)
        return tf.where(found, tf.reduce_sum(tf.where(first, year, 0), axis=1), -1)

    def initial_decode_state(self, encoder_outputs, max_length):
        import tensorflow as tf

        inner = {k: v for k, v in encoder_outputs.items() if k != _YEAR_KEY}
        state = self.model.initial_decode_state(inner, max_length)
        year = tf.cast(encoder_outputs[_YEAR_KEY], tf.int32)
        first, last = self.years
        written = year >= 0
        no_date = written & ((year < first) | (year > last))
        if max_length is not None:
            no_date |= tf.cast(max_length, tf.int32) < DATE_LENGTH + 1
        grammar = {
            "first": tf.where(written, year, first),
            "last": tf.where(written, year, last),
            "no_date": no_date,
            "digits": tf.zeros_like(year),  # the digits written so far, as one number
        }
        return {"model": state, "grammar": grammar}

    def decode_step(self, tokens, state, step):
        import tensorflow as tf

        logits, model_state, attention = self.model.decode_step(tokens, state["model"], step)
        grammar = dict(state["grammar"])
        digits, allowed_classes = self._advance(tokens, grammar, step)
        grammar["digits"] = digits
        allowed = tf.gather(
            tf.pad(allowed_classes, [[0, 0], [0, 1]]),  # class _OTHER: never
            tf.constant(self._token_class),
            axis=1,
        )
        logits = tf.where(allowed, logits, tf.constant(float("-inf"), logits.dtype))
        return logits, {"model": model_state, "grammar": grammar}, attention

    def _advance(self, tokens, grammar, step):
        """The digits after `tokens` (the token of step - 1) and the `[N, 12]` classes allowed
        at `step` (digits 0-9, "-", end)."""
        import tensorflow as tf

        t = tf.cast(step, tf.int32)
        value = tf.gather(tf.constant(self._token_class), tf.cast(tokens, tf.int32))
        previous_is_digit = tf.reduce_any(tf.equal(t - 1, _DIGIT_STEPS))
        digits = grammar["digits"]
        digits = tf.where(previous_is_digit & (value < 10), digits * 10 + value, digits)

        # The field being written: its digits so far, how many digits follow this one, its range.
        in_year = t < 4
        in_month = (t == 5) | (t == 6)
        second = (t == 6) | (t == 9)  # the second digit of the month or of the day
        prefix = tf.where(in_year, digits, tf.where(second, digits % 10, tf.zeros_like(digits)))
        after = tf.where(in_year, 3 - t, tf.where(second, 0, 1))
        year_month = tf.where(t == 9, digits // 10, digits)  # YYYYMM at the day's steps
        year, month = year_month // 100, tf.clip_by_value(year_month % 100, 1, 12)
        leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
        month_days = tf.gather(
            tf.constant([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]), month - 1
        )
        month_days += tf.cast(leap & (month == 2), tf.int32)
        low = tf.where(in_year, grammar["first"], tf.ones_like(digits))
        high = tf.where(in_year, grammar["last"], tf.where(in_month, 12, month_days))
        # Digit d is allowed when some value of the field starts with prefix * 10 + d.
        scale = tf.pow(10, tf.maximum(after, 0))
        start = (prefix[:, None] * 10 + tf.range(10)[None, :]) * scale
        digit_ok = (start <= high[:, None]) & (start + scale - 1 >= low[:, None])

        is_digit_step = tf.reduce_any(tf.equal(t, _DIGIT_STEPS))
        is_dash_step = (t == 4) | (t == 7)
        is_end_step = t >= DATE_LENGTH
        rows = tf.shape(digits)[0]
        no_date = grammar["no_date"]
        classes = tf.concat(
            [
                digit_ok & is_digit_step,
                tf.fill([rows, 1], is_dash_step),
                tf.fill([rows, 1], is_end_step),
            ],
            axis=1,
        )
        end_only = tf.tile(
            tf.one_hot(_END, _END + 1, on_value=True, off_value=False)[None], [rows, 1]
        )
        # A row that cannot write a date, or (a row the search has already emptied or ended)
        # one with nothing left: the end token, never a row without a token.
        keep = ~no_date & tf.reduce_any(classes, axis=1)
        return digits, tf.where(keep[:, None], classes, end_only)
