"""Placeholders and markup of software strings: the tokens a translation must keep unchanged.

    from keras_attn.text.placeholders import extract_placeholders, placeholders_kept

    extract_placeholders("Delete %(name)s from <b>{folder}</b>?")
    # ['%(name)s', '<b>', '{folder}', '</b>']
    placeholders_kept("Delete %s?", "¿Borrar %s?")          # True
    placeholders_kept("Delete %s?", "¿Borrar?")             # False

A placeholder is one of `SYNTAXES`, in the order the alternatives are tried at each position:

- Ruby / Rails i18n / Polyglot.js interpolation: `%{name}`, `%{smart_count}`, and Ruby's
  formatted `%<count>d`;
- printf / Python `%` formatting: `%%`, `%s`, `%d`, `%5.2f`, `%-10s`, `%ld`, `%(name)s`,
  `%(count)d`, positional `%1$s`, `%2$d`, `%*d` (flags `-+#0`; the space flag is left out so that
  prose such as "100% sure" holds no placeholder);
- Qt / KDE positional arguments: `%1`, `%2`, `%L1`, ... (a `%` and digits not followed by a
  conversion) and the count of a plural message, `%n`;
- i18next: unescaped `{{- name}}`, formatted `{{price, currency(USD)}}`, nesting `$t(key)`, and
  Handlebars' triple braces `{{{name}}}`;
- mustache / Jinja / Vue / i18next interpolation: `{{ name }}`, `{{count}}`;
- Fluent placeables: `{ $name }`, a term `{ -brand-name }`, a function `{ NUMBER($n) }`, a
  message reference `{ learn-more }`, a string literal `{ "" }`; of a select expression
  `{ $count -> [one] ... *[other] ... }` (`{ PLATFORM() -> ...`) the opening `{ $count ->`, the
  variant keys `[one]`, `*[other]` and the closing `}`, the variants' text translated (a
  served translation copies them, `icu_split`);
- ICU MessageFormat: a simple argument whole (`{count, number}`, `{when, date, short}`), and of
  a `plural` / `select` / `selectordinal` argument its structure: the opening with the first
  selector (`{count, plural, one {`, `{count, plural, =0 {`), each next selector with the
  message it closes (`} other {`), the closing of the last message and of the argument (`}}`)
  and the number sign `#`; the messages' text between them is translated. The last three are
  counted only in a text that holds an ICU (or MediaWiki) opening, so prose with `#` or `}}`
  holds none;
- Python `str.format` / brace fields: `{}`, `{0}`, `{name}`, `{user.name}`, `{0:.2f}`, `{name!r}`;
- HTML / XML character references: `&amp;`, `&nbsp;`, `&#39;`, `&#x27;`;
- shell / JavaScript template variables: `${name}`, `${user.name}`, `$name`;
- MediaWiki: parameters `$1`, `$2`; of a `{{PLURAL:$1|file|files}}` (`GENDER`, `GRAMMAR`) switch
  its opening `{{PLURAL:$1|` and closing `}}`, the forms between them translated (a language
  writes as many as it has); functions such as `{{formatnum:$1}}` whole;
- markup tags of HTML and Pango: `<b>`, `</b>`, `<br/>`, `<a href="...">`, `<span weight="bold">`
  (a fixed list of tag names, case-insensitive, so a command-line metavariable such as `<file>`,
  which translators do translate, is not a tag), numbered tags (react-i18next's `<0>`, `<1/>`)
  and namespaced XML tags (Android's `<xliff:g id="n">`);
- keyboard accelerators: the `_` of GTK's `_File` and the `&` of Qt's / Windows' `&File`; the
  letter after the marker is the translator's to choose, so the placeholder is the marker alone
  (`&&`, Qt's literal ampersand, is none). A label has one accelerator: a text where the marker
  stands before a letter more than once holds none of that marker (`canon_usb_get_dirents`,
  `get_file_func()`: identifiers, whose underscores a translation copies as it copies the
  name).

`PLACEHOLDER_PATTERN` is written in the syntax Python's `re` and RE2 share (no lookaround, no
backreferences), so that TensorFlow graphs find the same placeholders: `graph_placeholders`
does it with core TensorFlow ops (`tf.strings.regex_replace`, RE2, and `tf.strings.split`), as
the exported translators do with `keep_placeholders=True` (keras_attn.serving).
`tensorflow_text.regex_split(text, PLACEHOLDER_PATTERN, keep_delim_regex_pattern=PLACEHOLDER_PATTERN)`
also returns the matches as pieces of their own (tests/text/test_placeholders.py checks that
both engines find the same tokens). A match becomes a placeholder through `finish_placeholders`
(an accelerator's letter dropped; the ICU structure kept only beside an ICU opening), which
`graph_placeholders` does in the graph too.

`PLACEHOLDER_CHARACTERS` are the characters that open or close every kind above (`%`, `{`, `}`,
`<`, `>`, `$`, `&`, `#`, `_`, and the `[`, `]` of a Fluent variant key). A translation that holds none of them more often than its source
holds no placeholder the source lacks: `character_counts` / `graph_character_counts` count them,
and the exported translators with `keep_placeholders=True` give the search a budget of the
source's counts (`keras_attn.decoding`'s `budget_ids` / `budget_costs` / `budgets`).

To add a syntax of one's own at run time: `add_syntax(name, pattern)`. To add one to the
package: append `(name, pattern)` to `SYNTAXES` where it must be tried (a pattern tried
earlier wins at the same position; the leftmost match wins over all), in the syntax `re` and RE2
share; add the characters that open and close it to `PLACEHOLDER_CHARACTERS`; and give
tests/text/test_placeholders.py rows of real strings that hold it and of prose that must not.
"""

from __future__ import annotations

import collections
import math
import re

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_RUBY = (
    r"%\{[A-Za-z_][A-Za-z0-9_.]*\}"
    r"|%<" + _NAME + r">[-+#0]*(?:[0-9]+)?(?:\.[0-9]+)?[diouxXeEfFgGcrsaAp]"
)
_PRINTF = (
    r"%%"
    r"|%(?:[0-9]+\$)?(?:\([A-Za-z0-9_.\-]*\))?[-+#0]*(?:[0-9]+|\*)?(?:\.(?:[0-9]+|\*))?"
    r"(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?[diouxXeEfFgGcrsaAp]"
)
_QT = r"%L?[0-9]+|%n"
_MUSTACHE = r"\{\{ *[A-Za-z_][A-Za-z0-9_.]* *\}\}"
# i18next: unescaped `{{- name}}`, formatted `{{price, currency(USD)}}`, nesting `$t(key)`, and
# Handlebars' triple braces `{{{name}}}`
_I18NEXT = (
    r"\{\{\{ *[A-Za-z_][A-Za-z0-9_.]* *\}\}\}"
    r"|\{\{[-&] *[A-Za-z_][A-Za-z0-9_.]* *(?:,[^{}]*)?\}\}"
    r"|\{\{ *[A-Za-z_][A-Za-z0-9_.]* *,[^{}]*\}\}"
    r"|\$t\([^()]*\)"
)
# Fluent placeables: a variable `{ $name }`, `{ $addon-name }`, a term `{ -brand-name }` (an
# attribute, arguments `{ -brand-name(case: "genitive") }`), a function call `{ NUMBER($count,
# minimumFractionDigits: 2) }`, a string literal `{ "" }`, `{ "}" }`, and a message reference
# spaced as Fluent writes it, `{ learn-more }`, `{ menu-open.label }` (`{name}` is a brace
# field); a select expression opens on a variable, a term or a function call: `{ $count ->`,
# `{ PLATFORM() ->`
_FLUENT_ID = r"[A-Za-z][A-Za-z0-9_-]*"
_FLUENT_CALL = r"[A-Z][A-Z0-9_-]*\([^{}()]*\)"
_FLUENT_TERM = r"-" + _FLUENT_ID + r"(?:\." + _FLUENT_ID + r")?(?:\([^{}()]*\))?"
_FLUENT_EXPRESSION = r"\$" + _FLUENT_ID + "|" + _FLUENT_TERM + "|" + _FLUENT_CALL
_FLUENT_OPEN = r"\{\s*(?:" + _FLUENT_EXPRESSION + r")\s*->"
_FLUENT_MESSAGE = _FLUENT_ID + r"(?:\." + _FLUENT_ID + r")?"
_FLUENT = (
    f"{_FLUENT_OPEN}"
    rf'|\{{ *(?:{_FLUENT_EXPRESSION}|"(?:[^"\\]|\\.)*") *\}}'
    rf"|\{{ +{_FLUENT_MESSAGE} +\}}"
)
_ICU_SELECTOR = r"(?:=[0-9]+|" + _NAME + r")"
_ICU_OPEN = (
    r"\{\s*" + _NAME + r"\s*,\s*(?:plural|selectordinal|select)\s*,\s*"
    r"(?:offset:\s*[0-9]+\s+)?" + _ICU_SELECTOR + r"\s*\{"
)
_ICU_SIMPLE = (
    r"\{\s*" + _NAME + r"\s*,\s*(?:number|date|time|spellout|ordinal|duration)\s*(?:,[^{}]*)?\}"
)
_ICU_NEXT = r"\}\s*" + _ICU_SELECTOR + r"\s*\{"
_ICU_CLOSE = r"\}\s*\}"
_ICU_HASH = r"#"
# a Fluent select's variant keys and its closing brace (beside a Fluent select's opening)
_FLUENT_KEY = r"\*?\[[A-Za-z0-9_-]+\]"
_FLUENT_STRUCTURE = _FLUENT_KEY + r"|\}"
_BRACE = r"\{[A-Za-z0-9_.\[\]]*(?:![rsa])?(?::[^{}<>\s]*)?\}"
_ENTITY = r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});"
_SHELL = r"\$\{ *[A-Za-z_][A-Za-z0-9_.]* *\}|\$" + _NAME
# MediaWiki: parameters `$1`, the opening of a PLURAL / GENDER / GRAMMAR switch (`{{PLURAL:$1|`,
# its forms translated and closed by `}}`, structure as ICU's), and functions `{{formatnum:$1}}`
_MEDIAWIKI_OPEN = r"\{\{ *(?:PLURAL|GENDER|GRAMMAR) *:[^|{}]*\|"
_MEDIAWIKI = _MEDIAWIKI_OPEN + r"|\{\{ *[A-Za-z#][A-Za-z0-9 _#-]* *:[^{}]*\}\}" + r"|\$[0-9]+"
# HTML and Pango markup tag names (Pango: b big i s sub sup small tt u span).
_TAGS = (
    "a|abbr|b|bdi|bdo|big|blockquote|br|button|cite|code|dd|del|dfn|div|dl|dt|em|font|"
    "h[1-6]|hr|i|img|ins|kbd|label|li|mark|ol|p|pre|q|s|samp|small|span|strike|strong|sub|sup|"
    "table|tbody|td|th|thead|time|tr|tt|u|ul|var|wbr"
)
# tags of markup languages beside HTML: numbered ones (react-i18next's `<0>`, `<1/>`) and
# namespaced XML (`<xliff:g id="count">`, `<g:link>`)
_MARKUP = (
    r"</?(?i:" + _TAGS + r")(?:\s[^<>]*)?/?>"
    r"|</?[0-9]{1,2}/?>"
    r"|</?[A-Za-z][A-Za-z0-9]*:[A-Za-z][A-Za-z0-9_.-]*(?:\s[^<>]*)?/?>"
)
# `&&` and `__` (a literal ampersand / underscore in Qt / GTK) are matched so that their second
# character starts no accelerator; `finish_placeholders` drops them.
_ACCELERATOR = r"&&|__|[_&][A-Za-z0-9]"
ACCELERATOR_MARKER = "[_&]"
"""The placeholder an accelerator's match becomes (its marker alone), which a letter or digit
must follow in a translation too (the word rules' marker rule, `keras_attn.decoding.words`)."""

SYNTAXES = (
    ("ruby", _RUBY),
    ("printf", _PRINTF),
    ("qt", _QT),
    ("mediawiki", _MEDIAWIKI),
    ("i18next", _I18NEXT),
    ("mustache", _MUSTACHE),
    ("fluent", _FLUENT),
    ("icu", _ICU_OPEN + "|" + _ICU_SIMPLE),
    ("icu_structure", _ICU_NEXT + "|" + _ICU_CLOSE + "|" + _ICU_HASH + "|" + _FLUENT_STRUCTURE),
    ("brace", _BRACE),
    ("entity", _ENTITY),
    ("shell", _SHELL),
    ("markup", _MARKUP),
    ("accelerator", _ACCELERATOR),
)
"""`(name, pattern)` of every placeholder syntax, in the order they are tried at a position.
`icu_structure` (the ICU pieces after the opening) counts only in a text that holds an `icu`
opening; an `accelerator` match is its marker alone (`finish_placeholders`). A user's own
syntax is one more row: `add_syntax`."""

PLACEHOLDER_PATTERN = "|".join(f"(?:{p})" for _, p in SYNTAXES)
"""The placeholder regular expression (Python `re` and RE2 alike): one alternative per syntax
of `SYNTAXES`, tried in that order."""

_COMPILED = re.compile(PLACEHOLDER_PATTERN)
_SYNTAX_COMPILED = tuple((name, re.compile(p)) for name, p in SYNTAXES)
# What `finish_placeholders` does, as patterns for RE2 too (graph_placeholders).
_ACCELERATOR_MATCH = "^([_&])[A-Za-z0-9]$"
_LITERAL_MARKERS = ("&&", "__")
# the openings beside which `icu_structure` counts: ICU's and MediaWiki's switches
_ICU_OPENING = _ICU_OPEN + "|" + _MEDIAWIKI_OPEN + "|" + _FLUENT_OPEN
_ICU_STRUCTURE = _ICU_NEXT + "|" + _ICU_CLOSE + "|" + _ICU_HASH + "|" + _FLUENT_STRUCTURE


def add_syntax(name, pattern, before=None):
    """Adds a placeholder syntax of one's own to `SYNTAXES` (and so to `PLACEHOLDER_PATTERN`,
    `extract_placeholders`, `graph_placeholders` and every export made after the call, whose
    graph holds the pattern): `(name, pattern)` appended, or inserted before the syntax named
    `before` (a pattern tried earlier wins at the same position).

    `pattern` must be in the syntax Python's `re` and RE2 share (no lookaround, no
    backreferences, no groups that capture: write `(?:...)`), and its placeholders should open or
    close with one of `PLACEHOLDER_CHARACTERS`, the characters the served search's budget
    counts. Returns the new `SYNTAXES`.

        add_syntax("objc", r"%(?:[0-9]+\\$)?@", before="printf")  # Objective-C's %@, %1$@
    """
    global SYNTAXES, PLACEHOLDER_PATTERN, _COMPILED, _SYNTAX_COMPILED
    names = [n for n, _ in SYNTAXES]
    if not isinstance(name, str) or not name or name in names:
        raise ValueError(
            f"`name` must be a new syntax name (a non-empty str not in {names}). Received: name={name!r}"
        )
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"`pattern` must be a non-empty str. Received: pattern={pattern!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ValueError(
            f"`pattern` is not a regular expression ({err}). Received: pattern={pattern!r}"
        ) from None
    if compiled.groups or "(?<" in pattern or "(?=" in pattern or "(?!" in pattern:
        raise ValueError(
            "`pattern` must hold no capturing group and no lookaround (RE2 and `re.findall` "
            f"read it as the whole match). Received: pattern={pattern!r}"
        )
    if compiled.match(""):
        raise ValueError(
            f"`pattern` must not match the empty string. Received: pattern={pattern!r}"
        )
    if before is not None and before not in names:
        raise ValueError(f"`before` must name a syntax of {names}. Received: before={before!r}")
    at = names.index(before) if before is not None else len(names)
    SYNTAXES = SYNTAXES[:at] + ((name, pattern),) + SYNTAXES[at:]
    PLACEHOLDER_PATTERN = "|".join(f"(?:{p})" for _, p in SYNTAXES)
    _COMPILED = re.compile(PLACEHOLDER_PATTERN)
    _SYNTAX_COMPILED = tuple((n, re.compile(p)) for n, p in SYNTAXES)
    return SYNTAXES


OPEN_ENDED_PATTERN = r"\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9]+|%L?[0-9]+"
"""The placeholders that text glued after them changes (`$name` + `x` is `$namex`, `%1` + `u`
is printf's `%1u`): shell variables without braces and Qt arguments. Python `re` and RE2."""

GLUE_PATTERN = r"[A-Za-z0-9_$]"
"""A character that, written right after an open-ended placeholder (`OPEN_ENDED_PATTERN`),
changes how it reads. A search keeps such placeholders by banning, right after one, the
pieces whose text starts with it (`keras_attn.decoding.words.glue_ban`)."""


def open_ended(placeholder):
    """Whether text glued after `placeholder` changes it (`OPEN_ENDED_PATTERN`)."""
    return re.fullmatch(OPEN_ENDED_PATTERN, placeholder) is not None


def glue_pieces(vocabulary):
    """`[V]` bool (NumPy): the pieces whose text starts with `GLUE_PATTERN` when written right
    after other text (SentencePiece's word-start `▁` is a space: those pieces do not glue)."""
    import numpy as np

    glue = re.compile(GLUE_PATTERN)

    def text(piece):  # a byte piece (`<0x41>`) is its byte
        match = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece)
        return chr(int(match.group(1), 16)) if match else piece

    return np.array([bool(glue.match(text(piece))) for piece in vocabulary], bool)


def placeholder_syntax(placeholder):
    """The name of the `SYNTAXES` entry a placeholder (as `extract_placeholders` returns it)
    belongs to, e.g. `"printf"` for `%s`; `None` for a string that is none."""
    for name, pattern in _SYNTAX_COMPILED:
        if pattern.fullmatch(placeholder) or (name == "accelerator" and placeholder in ("_", "&")):
            return name
    return None


def finish_placeholders(matches):
    """The placeholders of a text from its matches of `PLACEHOLDER_PATTERN` (in order): an
    accelerator's letter dropped (`_F` -> `_`), the literal `&&` and `__` dropped, a marker
    that stands before a letter more than once dropped (a label has one accelerator: those are
    identifiers, `a_b_c`), and the ICU structure (`} other {`, `}}`, `#`) dropped unless the
    text holds an ICU opening (`{count, plural, one {`)."""
    matches = list(matches)
    icu = any(re.fullmatch(_ICU_OPENING, m) for m in matches)
    markers = collections.Counter(m[0] for m in matches if re.fullmatch(_ACCELERATOR_MATCH, m))
    out = []
    for m in matches:
        if m in _LITERAL_MARKERS:
            continue
        if re.fullmatch(_ACCELERATOR_MATCH, m):
            if markers[m[0]] > 1:
                continue
            m = m[0]
        elif not icu and re.fullmatch(_ICU_STRUCTURE, m):
            continue
        out.append(m)
    return out


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
    return finish_placeholders(_COMPILED.findall(text))


def graph_placeholders(texts, glued=False):
    """`extract_placeholders` in a TensorFlow graph: `tf.string [B]` -> `tf.RaggedTensor`
    string `[B, None]`, each row the placeholders of its text in order (repeats kept). With
    `glued=True` also a bool `tf.RaggedTensor` of the same rows: whether the text goes on
    right after the placeholder with a character of `GLUE_PATTERN` (`%8U`, `$a$b`), the
    text glued to it by the source itself.

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
    flat = pieces.flat_values
    # the text after each placeholder: the piece after it, and where that piece is empty
    # (placeholders side by side) the next placeholder, if its row goes on
    at = tf.where(odd)[:, 0]
    limits = tf.gather(pieces.row_limits(), tf.boolean_mask(rows, odd))
    later = tf.gather(flat, tf.minimum(at + 2, tf.maximum(tf.size(flat, tf.int64) - 1, 0)))
    after = tf.strings.join([tf.gather(flat, at + 1), tf.where(at + 2 < limits, later, "")])
    glue = tf.strings.regex_full_match(after, "(?s)" + GLUE_PATTERN + ".*")
    found, rows = tf.boolean_mask(flat, odd), tf.boolean_mask(rows, odd)
    nrows = tf.shape(texts, out_type=tf.int64)[0]
    # finish_placeholders: the ICU structure only beside an ICU opening of its row, the
    # literal markers dropped, an accelerator its marker alone
    opening = tf.math.unsorted_segment_max(
        tf.cast(tf.strings.regex_full_match(found, _ICU_OPENING), tf.int32), rows, nrows
    )
    keep = tf.logical_not(tf.strings.regex_full_match(found, _ICU_STRUCTURE)) | tf.equal(
        tf.gather(opening, rows), 1
    )
    for marker in _LITERAL_MARKERS:
        keep &= tf.not_equal(found, marker)
    accelerator = tf.strings.regex_full_match(found, _ACCELERATOR_MATCH)
    for marker in "_&":  # a marker before a letter more than once in its text: none counts
        mine = accelerator & tf.equal(tf.strings.substr(found, 0, 1), marker)
        count = tf.math.unsorted_segment_sum(tf.cast(mine, tf.int32), rows, nrows)
        keep &= ~(mine & (tf.gather(count, rows) > 1))
    found = tf.strings.regex_replace(tf.boolean_mask(found, keep), _ACCELERATOR_MATCH, "\\1")
    rows = tf.boolean_mask(rows, keep)
    found = tf.RaggedTensor.from_value_rowids(found, rows, nrows=nrows)
    if glued:
        return found, tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(glue, keep), rows, nrows=nrows
        )
    return found


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


PLACEHOLDER_CHARACTERS = "%{}<>$&#_[]"
"""The characters that open or close every placeholder of `PLACEHOLDER_PATTERN` (an
accelerator's marker, an entity's `&`, ICU's `#`, a Fluent variant key's brackets included): the
resources of the budget `keep_placeholders` exports give each source."""


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
    `[B, len(characters)]`. Invalid UTF-8 reads as U+FFFD, as in `character_counts` and the
    tokenizers, so `characters` may hold U+FFFD (or any other character) to count it too:
    `PLACEHOLDER_CHARACTERS + "\ufffd"` is a budget in which no answer holds a replacement
    character its source lacks."""
    import tensorflow as tf

    from keras_attn.text.base import clean_utf8

    if not isinstance(characters, str) or len(set(characters)) != len(characters):
        raise ValueError(
            f"`characters` must be a str of distinct characters. Received: characters={characters!r}"
        )
    texts = tf.convert_to_tensor(texts, tf.string)
    if any(ord(c) > 127 for c in characters):
        texts = clean_utf8(texts)  # ASCII bytes are never part of an invalid sequence
    total = tf.strings.length(texts)
    columns = [
        (total - tf.strings.length(tf.strings.regex_replace(texts, re.escape(c), "")))
        // len(c.encode("utf-8"))
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


def placeholders_by_syntax(text):
    """`{syntax name: collections.Counter of placeholders}` of `text` (`extract_placeholders`
    grouped by `placeholder_syntax`). A switch's opening and its structure are one syntax:
    `icu`, `fluent` for a select expression, `mediawiki` for a `{{PLURAL:$1|...}}`."""
    groups = collections.defaultdict(collections.Counter)
    found = extract_placeholders(text)
    icu = any(re.fullmatch(_ICU_OPEN, p) for p in found)
    fluent = any(re.fullmatch(_FLUENT_OPEN, p) for p in found)
    for p in found:
        name = placeholder_syntax(p)
        if name == "icu_structure":  # the structure belongs to the switch that opens it
            name = "icu" if icu else "fluent" if fluent else "mediawiki"
        groups[name][p] += 1
    return dict(groups)


def placeholders_kept_by_syntax(sources, outputs):
    """`{syntax name: rate}`: for each syntax of `SYNTAXES` some source holds a placeholder of,
    the fraction of those pairs whose output holds exactly the source's placeholders of that
    syntax (each as many times, none besides). A switch's opening and its structure count as
    one syntax: `icu`, or `mediawiki` for a `{{PLURAL:$1|...}}`."""
    sources, outputs = list(sources), list(outputs)
    if len(sources) != len(outputs):
        raise ValueError(
            f"`sources` and `outputs` must have the same length. Received: {len(sources)} and {len(outputs)}"
        )

    kept = collections.defaultdict(list)
    for source, output in zip(sources, outputs):
        wanted, got = placeholders_by_syntax(source), placeholders_by_syntax(output)
        for name, counts in wanted.items():
            kept[name].append(got.get(name, collections.Counter()) == counts)
    return {name: float(sum(v)) / len(v) for name, v in kept.items()}


# ------------------------------------------------------------ ICU messages: skeleton and texts
# The pieces of an ICU `plural` / `select` message that a translation copies as they are: the
# opening with its first selector, each next selector, the closings (a lone `}` among them);
# and those of a Fluent select expression: its opening (`{ $count ->`), its variant keys
# (`[one]`, `*[other]`) and its closing `}`.
_SWITCH_OPEN = _ICU_OPEN + "|" + _FLUENT_OPEN
_ICU_SKELETON = _SWITCH_OPEN + "|" + _ICU_NEXT + "|" + _ICU_CLOSE + r"|\}|" + _FLUENT_KEY
ICU_NUMBER_STAND_IN = "%d"
"""What an ICU message's number sign `#` reads as while its texts are translated one by one
(`icu_split`): a printf placeholder, which translators keep as they keep `#`, and which the
answer's `#` is read back from. A message that holds it itself is not split."""


def _icu_splits(text, matches):
    """Whether a text with these `PLACEHOLDER_PATTERN` matches is split (`icu_split`)."""
    return ICU_NUMBER_STAND_IN not in text and any(re.fullmatch(_SWITCH_OPEN, m) for m in matches)


def icu_split(text):
    """`(skeleton, texts)` of an ICU `plural` / `select` / `selectordinal` message or a Fluent
    select expression: its skeleton (`{n, plural, one {`, `} other {`, `}}`; `{ $n ->`,
    `[one]`, `*[other]`, `}`; in order) and the texts around and between them,
    `len(texts) == len(skeleton) + 1`, so that `text == texts[0] + skeleton[0] +
    texts[1] + ... + texts[-1]`. A text without an ICU or Fluent select opening, or that holds
    `ICU_NUMBER_STAND_IN` itself, is `([], [text])`. The placeholders are found as
    `extract_placeholders` finds them (a brace field's `}` is no closing)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a str or bytes. Received: text={text!r}")
    found = list(_COMPILED.finditer(text))
    if not _icu_splits(text, [m.group(0) for m in found]):
        return [], [text]
    skeleton, texts, at = [], [], 0
    for m in found:
        if re.fullmatch(_ICU_SKELETON, m.group(0)):
            texts.append(text[at : m.start()])
            skeleton.append(m.group(0))
            at = m.end()
    texts.append(text[at:])
    return skeleton, texts


def icu_join(skeleton, texts):
    """The message `icu_split` split: `texts[0] + skeleton[0] + texts[1] + ...`."""
    if len(texts) != len(skeleton) + 1:
        raise ValueError(
            "`texts` must hold one more text than `skeleton` has pieces. Received: "
            f"{len(skeleton)} pieces and {len(texts)} texts"
        )
    out = [texts[0]]
    for piece, part in zip(skeleton, texts[1:]):
        out += [piece, part]
    return "".join(out)


# The spaces a split message's texts keep aside around what is translated: what `\s` matches in
# a TensorFlow graph's regex (RE2), so that the graph (`keras_attn.serving.kept_answers`) and
# `icu_query` / `icu_answer` strip alike.
ICU_SPACES = "\t\n\f\r "


def icu_query(text):
    """What a text of a split ICU message (`icu_split`) is translated as: the text without the
    spaces around it (`ICU_SPACES`), its number signs `#` read as `ICU_NUMBER_STAND_IN`; None
    for a text without a letter (only spaces, digits and marks), which is copied as it is."""
    core = text.strip(ICU_SPACES)
    if not any(c.isalpha() for c in core):
        return None
    return core.replace("#", ICU_NUMBER_STAND_IN)


def icu_answer(text, answer):
    """The translation `answer` of `icu_query(text)` put back in the message: the spaces around
    `text` kept, each `ICU_NUMBER_STAND_IN` read back as `#`."""
    lead = text[: len(text) - len(text.lstrip(ICU_SPACES))]
    trail = text[len(text.rstrip(ICU_SPACES)) :]
    return lead + answer.replace(ICU_NUMBER_STAND_IN, "#") + trail


def icu_structure_kept(source, output):
    """Whether `output` holds the ICU structure of `source` as it is: the same skeleton in
    the same order (`icu_split`) and, between each two of its pieces, as many number signs
    `#` as the source. True for a source without an ICU message."""
    skeleton, texts = icu_split(source)
    if not skeleton:
        return True
    got, got_texts = icu_split(output)
    return got == skeleton and [t.count("#") for t in got_texts] == [t.count("#") for t in texts]


def graph_icu_split(texts):
    """`icu_split` in a TensorFlow graph (core ops): `tf.string [B]` -> `(skeleton, texts)`,
    string `tf.RaggedTensor`s `[B, None]`, each row of `texts` one longer than its row of
    `skeleton` (a row not split: no skeleton and the text whole)."""
    import tensorflow as tf

    from keras_attn.text.base import clean_utf8

    texts = tf.convert_to_tensor(texts, tf.string)
    text = tf.strings.regex_replace(clean_utf8(texts), "\x01", "")
    pieces = tf.strings.split(
        tf.strings.regex_replace(text, PLACEHOLDER_PATTERN, "\x01\\0\x01"), "\x01"
    )
    rows = pieces.value_rowids()
    nrows = tf.shape(texts, out_type=tf.int64)[0]
    position = tf.range(tf.size(rows, out_type=tf.int64)) - tf.gather(pieces.row_starts(), rows)
    odd = tf.equal(position % 2, 1)
    flat = pieces.flat_values
    opening = odd & tf.strings.regex_full_match(flat, _SWITCH_OPEN)
    split = tf.math.unsorted_segment_max(tf.cast(opening, tf.int32), rows, nrows) > 0
    split &= ~tf.strings.regex_full_match(text, "(?s).*" + re.escape(ICU_NUMBER_STAND_IN) + ".*")
    skeleton = odd & tf.strings.regex_full_match(flat, _ICU_SKELETON) & tf.gather(split, rows)
    # each other piece joins the text after the skeleton pieces before it in its row
    counts = tf.math.unsorted_segment_sum(tf.cast(skeleton, tf.int64), rows, nrows)
    before = tf.cumsum(tf.cast(skeleton, tf.int64), exclusive=True)
    before -= tf.gather(tf.cumsum(counts, exclusive=True), rows)
    offsets = tf.cumsum(counts + 1, exclusive=True)
    ids = tf.gather(offsets, rows) + before
    parts = tf.strings.unsorted_segment_join(
        tf.boolean_mask(flat, ~skeleton),
        tf.boolean_mask(ids, ~skeleton),
        tf.reduce_sum(counts + 1),
    )
    return (
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(flat, skeleton), tf.boolean_mask(rows, skeleton), nrows=nrows
        ),
        tf.RaggedTensor.from_row_lengths(parts, counts + 1),
    )


def graph_icu_join(skeleton, texts):
    """`icu_join` in a TensorFlow graph: the ragged `(skeleton, texts)` of `graph_icu_split`
    (`texts` with the same row lengths, their strings replaced) -> `tf.string [B]`."""
    import tensorflow as tf

    # texts[j] goes to 2j of its row, skeleton[j] to 2j + 1
    text_rows, piece_rows = texts.value_rowids(), skeleton.value_rowids()
    starts = tf.cumsum(texts.row_lengths() + skeleton.row_lengths(), exclusive=True)
    text_at = tf.gather(starts, text_rows) + 2 * (
        tf.range(tf.size(text_rows, out_type=tf.int64)) - tf.gather(texts.row_starts(), text_rows)
    )
    piece_at = (
        tf.gather(starts, piece_rows)
        + 1
        + 2
        * (
            tf.range(tf.size(piece_rows, out_type=tf.int64))
            - tf.gather(skeleton.row_starts(), piece_rows)
        )
    )
    merged = tf.dynamic_stitch(
        [tf.cast(text_at, tf.int32), tf.cast(piece_at, tf.int32)],
        [texts.flat_values, skeleton.flat_values],
    )
    joined = tf.RaggedTensor.from_row_lengths(merged, texts.row_lengths() + skeleton.row_lengths())
    return tf.strings.reduce_join(joined, axis=1)
