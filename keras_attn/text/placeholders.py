"""Placeholders and markup of software strings: the tokens a translation must keep unchanged.

    from keras_attn.text.placeholders import extract_placeholders, placeholders_kept

    extract_placeholders("Delete %(name)s from <b>{folder}</b>?")
    # ['%(name)s', '<b>', '{folder}', '</b>']
    placeholders_kept("Delete %s?", "¿Borrar %s?")          # True
    placeholders_kept("Delete %s?", "¿Borrar?")             # False

A placeholder is, in the order the alternatives are tried at each position:

- printf / Python `%` formatting: `%%`, `%s`, `%d`, `%5.2f`, `%-10s`, `%ld`, `%(name)s`,
  `%(count)d`, positional `%1$s`, `%2$d`, `%*d` (flags `-+#0`; the space flag is left out so that
  prose such as "100% sure" holds no placeholder);
- Qt / KDE positional arguments: `%1`, `%2`, ... (a `%` and digits not followed by a conversion);
- mustache / Jinja / Vue interpolation: `{{ name }}`, `{{count}}`;
- Python `str.format` / brace fields: `{}`, `{0}`, `{name}`, `{user.name}`, `{0:.2f}`, `{name!r}`;
- markup tags of HTML and Pango: `<b>`, `</b>`, `<br/>`, `<a href="...">`, `<span weight="bold">`
  (a fixed list of tag names, case-insensitive, so a command-line metavariable such as `<file>`,
  which translators do translate, is not a tag).

`PLACEHOLDER_PATTERN` is written in the syntax Python's `re` and RE2 share (no lookaround, no
backreferences), so that TensorFlow graphs find the same placeholders: `graph_placeholders`
does it with core TensorFlow ops (`tf.strings.regex_replace`, RE2, and `tf.strings.split`), as
the exported translators do with `keep_placeholders=True` (keras_attn.serving).
`tensorflow_text.regex_split(text, PLACEHOLDER_PATTERN, keep_delim_regex_pattern=PLACEHOLDER_PATTERN)`
also returns the placeholders as pieces of their own (tests/text/test_placeholders.py checks that
both engines find the same tokens).

`PLACEHOLDER_CHARACTERS` are the characters that open or close every kind above (`%`, `{`, `}`,
`<`, `>`). A translation that holds none of them more often than its source holds no placeholder
the source lacks: `character_counts` / `graph_character_counts` count them, and the exported
translators with `keep_placeholders=True` give the search a budget of the source's counts
(`keras_attn.decoding`'s `budget_ids` / `budget_costs` / `budgets`).
"""

from __future__ import annotations

import collections
import math
import re

_PRINTF = (
    r"%%"
    r"|%(?:[0-9]+\$)?(?:\([A-Za-z0-9_.\-]*\))?[-+#0]*(?:[0-9]+|\*)?(?:\.(?:[0-9]+|\*))?"
    r"(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?[diouxXeEfFgGcrsaAp]"
)
_QT = r"%[0-9]+"
_MUSTACHE = r"\{\{ *[A-Za-z_][A-Za-z0-9_.]* *\}\}"
_BRACE = r"\{[A-Za-z0-9_.\[\]]*(?:![rsa])?(?::[^{}<>\s]*)?\}"
# HTML and Pango markup tag names (Pango: b big i s sub sup small tt u span).
_TAGS = (
    "a|abbr|b|big|blockquote|br|code|dd|del|div|dl|dt|em|font|h[1-6]|hr|i|img|ins|kbd|li|"
    "mark|ol|p|pre|q|s|samp|small|span|strike|strong|sub|sup|table|tbody|td|th|thead|tr|tt|u|ul|var"
)
_MARKUP = r"</?(?i:" + _TAGS + r")(?:\s[^<>]*)?/?>"

PLACEHOLDER_PATTERN = "|".join(f"(?:{p})" for p in (_PRINTF, _QT, _MUSTACHE, _BRACE, _MARKUP))
"""The placeholder regular expression (Python `re` and RE2 alike): one alternative per kind,
tried in the order printf, Qt, mustache, brace, markup."""

_COMPILED = re.compile(PLACEHOLDER_PATTERN)


def extract_placeholders(text):
    """The placeholders and markup tags of `text`, in order of appearance (repeats kept).

    Args:
        text: a `str` (or UTF-8 `bytes`).

    Returns:
        A list of the placeholder substrings, e.g. `['%(name)s', '<b>', '</b>']`.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a str or bytes. Received: text={text!r}")
    return _COMPILED.findall(text)


def graph_placeholders(texts):
    """`extract_placeholders` in a TensorFlow graph: `tf.string [B]` -> `tf.RaggedTensor`
    string `[B, None]`, each row the placeholders of its text in order (repeats kept).

    Core TensorFlow ops only (what TensorFlow Serving runs): the placeholders are marked with
    `tf.strings.regex_replace` on `PLACEHOLDER_PATTERN` (RE2, leftmost-first alternation like
    Python's `re`), then the text is split on the marks. Invalid UTF-8 is first replaced
    (U+FFFD), as the tokenizers do.
    """
    import tensorflow as tf

    from keras_attn.text.base import clean_utf8

    texts = tf.convert_to_tensor(texts, tf.string)
    # Every placeholder between two \x01 marks (the text's own \x01 removed first): after the
    # split on \x01 the odd pieces of each row are its placeholders.
    text = tf.strings.regex_replace(clean_utf8(texts), "\x01", "")
    marked = tf.strings.regex_replace(text, PLACEHOLDER_PATTERN, "\x01\\0\x01")
    pieces = tf.strings.split(marked, "\x01")
    rows = pieces.value_rowids()
    position = tf.range(tf.size(rows, out_type=tf.int64)) - tf.gather(pieces.row_starts(), rows)
    odd = tf.equal(position % 2, 1)
    return tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(pieces.flat_values, odd),
        tf.boolean_mask(rows, odd),
        nrows=tf.shape(texts, out_type=tf.int64)[0],
    )


def graph_placeholders_kept(sources, outputs):
    """`placeholders_kept` in a TensorFlow graph: `sources` string `[B]`, `outputs` string
    `[B, K]` (K answers per source) -> bool `[B, K]`, True where the answer holds exactly the
    placeholders of its source (each as many times, none besides). Core TensorFlow ops only."""
    import tensorflow as tf

    sources = tf.convert_to_tensor(sources, tf.string)
    outputs = tf.convert_to_tensor(outputs, tf.string)
    k = tf.shape(outputs)[1]
    src = graph_placeholders(sources)  # [B, Ps]
    out = graph_placeholders(tf.reshape(outputs, [-1]))  # [B*K, Po]
    src_dense = tf.repeat(src.to_tensor(default_value=""), k, axis=0)  # [B*K, Ps]
    out_dense = out.to_tensor(default_value="")
    valid = tf.not_equal(src_dense, "")

    def counts(within):  # [B*K, Ps]: how often each source placeholder occurs in `within`
        same = (
            tf.equal(src_dense[:, :, None], within[:, None, :])
            & tf.not_equal(within, "")[:, None, :]
        )
        return tf.reduce_sum(tf.cast(same, tf.int32), axis=2)

    equal = tf.reduce_all(tf.equal(counts(src_dense), counts(out_dense)) | ~valid, axis=1)
    same_total = tf.equal(tf.repeat(src.row_lengths(), k), out.row_lengths())
    return tf.reshape(equal & same_total, tf.shape(outputs))


PLACEHOLDER_CHARACTERS = "%{}<>"
"""The characters that open or close every placeholder and markup tag of `PLACEHOLDER_PATTERN`."""


def character_counts(texts, characters=PLACEHOLDER_CHARACTERS):
    """`[len(texts), len(characters)]` int32 (NumPy): how often each of `characters` occurs in
    each text (`str` or UTF-8 `bytes`; invalid UTF-8 read as U+FFFD)."""
    import numpy as np

    rows = []
    for text in texts:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        if not isinstance(text, str):
            raise ValueError(f"`texts` must hold str or bytes. Received: {text!r}")
        rows.append([text.count(c) for c in characters])
    return np.asarray(rows, np.int32).reshape(len(rows), len(characters))


def graph_character_counts(texts, characters=PLACEHOLDER_CHARACTERS):
    """`character_counts` in a TensorFlow graph (core ops): `tf.string [B]` -> int32
    `[B, len(characters)]`. The characters must be ASCII (one byte each)."""
    import tensorflow as tf

    if any(ord(c) > 127 for c in characters):
        raise ValueError(f"`characters` must be ASCII. Received: characters={characters!r}")
    texts = tf.convert_to_tensor(texts, tf.string)
    total = tf.strings.length(texts)
    columns = [
        total - tf.strings.length(tf.strings.regex_replace(texts, re.escape(c), ""))
        for c in characters
    ]
    return tf.reshape(tf.stack(columns, axis=-1), [-1, len(characters)])


def placeholders_kept(source, output):
    """Whether `output` holds exactly the placeholders of `source`: every one as many times as
    in the source and none besides (order free: `%1$s` / `%2$s` and named fields may move).

    Returns `True` for a source without placeholders and an output without any."""
    return collections.Counter(extract_placeholders(source)) == collections.Counter(
        extract_placeholders(output)
    )


def placeholders_kept_rate(sources, outputs):
    """The fraction of the pairs whose source holds a placeholder in which `placeholders_kept`
    holds (the figure reported beside chrF); NaN when no source holds a placeholder."""
    sources, outputs = list(sources), list(outputs)
    if len(sources) != len(outputs):
        raise ValueError(
            f"`sources` and `outputs` must have the same length. Received: {len(sources)} and {len(outputs)}"
        )
    checked = [placeholders_kept(s, o) for s, o in zip(sources, outputs) if extract_placeholders(s)]
    return float(sum(checked)) / len(checked) if checked else math.nan
