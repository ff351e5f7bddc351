"""Placeholder extraction on formats found in real gettext catalogues, and the same pattern in a
TensorFlow graph (RE2, through tensorflow-text's regex_split)."""

import math
import re

import pytest

from keras_attn.text.placeholders import (
    PLACEHOLDER_CHARACTERS,
    PLACEHOLDER_PATTERN,
    SYNTAXES,
    character_counts,
    extract_placeholders,
    finish_placeholders,
    graph_character_counts,
    graph_placeholders,
    placeholder_syntax,
    placeholders_kept,
    placeholders_kept_by_syntax,
    placeholders_kept_rate,
)

# (string as it appears in a catalogue, the placeholders a translation must keep)
TABLE = [
    # Django admin / contrib (Python % with names)
    ("%(name)s object (%(pk)s)", ["%(name)s", "%(pk)s"]),
    (
        "Ensure this value has at most %(limit_value)d characters (it has %(show_value)d).",
        ["%(limit_value)d", "%(show_value)d"],
    ),
    ("The %(name)s “%(obj)s” was added successfully.", ["%(name)s", "%(obj)s"]),
    ("%(app_label)r is not a valid app", ["%(app_label)r"]),
    # coreutils / GNU C printf
    ("%s: cannot stat %s", ["%s", "%s"]),
    ("'%s' -> '%s'", ["%s", "%s"]),
    ("%-10s %5.1f%%", ["%-10s", "%5.1f", "%%"]),
    ("skipping %lu bytes of input", ["%lu"]),
    ("%*s%s", ["%*s", "%s"]),
    ("100%% done", ["%%"]),
    # positional printf (reordered by translators)
    ("Copying %1$s to %2$s (%3$d of %4$d)", ["%1$s", "%2$s", "%3$d", "%4$d"]),
    # Qt / KDE
    ("Page %1 of %2", ["%1", "%2"]),
    # str.format / Babel-style braces (humanize, Sphinx, pretix)
    ("{} ago", ["{}"]),
    ("{0} and {1}", ["{0}", "{1}"]),
    ("Please enter a value between {min} and {max}.", ["{min}", "{max}"]),
    ("Progress: {percent:.1f} %", ["{percent:.1f}"]),
    ("{user.name} replied", ["{user.name}"]),
    ("Unknown option {opt!r}", ["{opt!r}"]),
    # mustache / Jinja / Vue
    ("{{ count }} items selected", ["{{ count }}"]),
    ("Hello {{name}}", ["{{name}}"]),
    # markup: GTK Pango, HTML in web apps
    ("<b>Ctrl</b>+Click to select", ["<b>", "</b>"]),
    ('Read the <a href="%(url)s">documentation</a>.', ['<a href="%(url)s">', "</a>"]),
    ("Line one<br/>line two<br />three", ["<br/>", "<br />"]),
    ('<span weight="bold">%s</span>', ['<span weight="bold">', "%s", "</span>"]),
    ("<B>Bold</B>", ["<B>", "</B>"]),
    # Ruby / Rails i18n / Polyglot.js
    (
        "Failed to add %{smart_count} file |||| Failed to add %{smart_count} files",
        ["%{smart_count}", "%{smart_count}"],
    ),
    ("%{count} errors prohibited this %{model} from being saved", ["%{count}", "%{model}"]),
    ("Total: %<amount>.2f %{currency}", ["%<amount>.2f", "%{currency}"]),
    # Qt's localized numbers and a plural message's count
    ("%L1 files of %L2", ["%L1", "%L2"]),
    ("%n file(s) deleted", ["%n"]),
    ("Remove %n selected item(s) from %1?", ["%n", "%1"]),
    # i18next (react-i18next, i18next-scanner output)
    ("Welcome, {{- username}}!", ["{{- username}}"]),
    ("Total: {{price, currency(USD)}}", ["{{price, currency(USD)}}"]),
    ("{{count}} item, see $t(common.details)", ["{{count}}", "$t(common.details)"]),
    ("<0>Click here</0> to log in as {{{user}}}<1/>", ["<0>", "</0>", "{{{user}}}", "<1/>"]),
    # Fluent (Firefox, Thunderbird)
    ("Welcome, { $user }!", ["{ $user }"]),
    ("{ -brand-short-name } is up to date", ["{ -brand-short-name }"]),
    (
        "{ NUMBER($ratio, minimumFractionDigits: 2) } MB",
        ["{ NUMBER($ratio, minimumFractionDigits: 2) }"],
    ),
    # ... Firefox's Spanish language pack: variables with hyphens, message references, string
    # literals, and select expressions on a variable and on a function call
    (
        "{ -brand-short-name } no ha podido instalar el buscador de: { $location-url }",
        ["{ -brand-short-name }", "{ $location-url }"],
    ),
    ("Añadir { $addon-name }", ["{ $addon-name }"]),
    ("Pulse { screenshots-meta-key }-V para pegar.", ["{ screenshots-meta-key }"]),
    ("Ver { main-context-menu-back-2.tooltiptext }", ["{ main-context-menu-back-2.tooltiptext }"]),
    ('Rango temporal a limpiar:{ " " }', ['{ " " }']),
    ('{ "}" }', ['{ "}" }']),
    (
        "{ $count -> [one] { $count } contraseña *[other] { $count } contraseñas }",
        ["{ $count ->", "[one]", "{ $count }", "*[other]", "{ $count }", "}"],
    ),
    (
        "{ PLATFORM() ->\n    [macos] Opciones\n   *[other] Preferencias\n}",
        ["{ PLATFORM() ->", "[macos]", "*[other]", "}"],
    ),
    # MediaWiki messages
    ("This page has been viewed $1 times by $2.", ["$1", "$2"]),
    ("Moved [[$1]] to $3", ["$1", "$3"]),
    (
        "$1 made {{PLURAL:$2|one edit|$2 edits}} to {{GENDER:$3|his|her}} page",
        ["$1", "{{PLURAL:$2|", "$2", "}}", "{{GENDER:$3|", "}}"],
    ),
    ("{{formatnum:$1}} bytes on {{SITENAME}} #1", ["{{formatnum:$1}}", "{{SITENAME}}"]),
    ("See [[{{ns:User}}:$1|$1]], {{int:talk|$2}}", ["{{ns:User}}", "$1", "$1", "{{int:talk|$2}}"]),
    # Android resources: namespaced XML markup
    ('<xliff:g id="count">%1$d</xliff:g> songs', ['<xliff:g id="count">', "%1$d", "</xliff:g>"]),
    (
        "<strong>Warning:</strong> <code>rm -rf</code>",
        ["<strong>", "</strong>", "<code>", "</code>"],
    ),
    # shell / JavaScript template variables
    ("Install $package into ${prefix}/lib?", ["$package", "${prefix}"]),
    ("Welcome back, ${user}!", ["${user}"]),
    # ICU MessageFormat (FormatJS, Android, Java): the structure, not the messages' text
    (
        "{count, plural, one {# file} other {# files}}",
        ["{count, plural, one {", "#", "} other {", "#", "}}"],
    ),
    (
        "You have {count, plural, =0 {no messages} one {one message} other {# messages}}.",
        ["{count, plural, =0 {", "} one {", "} other {", "#", "}}"],
    ),
    (
        "{gender, select, female {She} male {He} other {They}} liked {name}'s post",
        ["{gender, select, female {", "} male {", "} other {", "}}", "{name}"],
    ),
    (
        "{host, select, female {{guests, plural, one {She invited # guest} other {She invited "
        "# guests}}} other {{guests, plural, offset:1 =0 {No guests} other {They invited # "
        "people}}}}",
        [
            "{host, select, female {",
            "{guests, plural, one {",
            "#",
            "} other {",
            "#",
            "}}",
            "} other {",
            "{guests, plural, offset:1 =0 {",
            "} other {",
            "#",
            "}}",
            "}}",
        ],
    ),
    (
        "{pos, selectordinal, one {#st} two {#nd} other {#th}} place",
        ["{pos, selectordinal, one {", "#", "} two {", "#", "} other {", "#", "}}"],
    ),
    ("Sent on {when, date, short} at {when, time}", ["{when, date, short}", "{when, time}"]),
    ("{progress, number, percent} done", ["{progress, number, percent}"]),
    # HTML / XML character references
    ("Terms &amp; Conditions", ["&amp;"]),
    ("Don&#39;t show again&#x21;", ["&#39;", "&#x21;"]),
    ("&lt;none&gt;", ["&lt;", "&gt;"]),
    # keyboard accelerators (GTK's _, Qt's and Windows' &): the marker, not the letter
    ("_File", ["_"]),
    ("Save _As…", ["_"]),
    ("E&xit", ["&"]),
    ("&Find &amp; Replace", ["&", "&amp;"]),
    ("Pr_eferences", ["_"]),
    # ... one per label: a marker before a letter twice is none (identifiers in messages)
    ("canon_usb_get_dirents: could not allocate %i bytes", ["%i"]),
    ("Internal error #1 in get_file_func() (%s line %i)", ["%s", "%i"]),
    ("R&D and P&L &Report", []),
    ("Open file_name with &Viewer", ["_", "&"]),
    # no placeholder: prose and metavariables
    ("Issue #42: C# and F# builds", []),
    ("Select other {name} later", ["{name}"]),
    ("Save && Exit, or __", []),
    ("Tom & Jerry cost 5 $", []),
    ("Tom & Jerry cost $5", ["$5"]),  # MediaWiki's $1: a translation copies a price as written
    ("100% sure, 50 % off", []),
    ("Usage: tar <file> [options]", []),
    ("a < b > c and x<y", []),
    ("Wrap {this text} please", []),
    ("", []),
]


@pytest.mark.parametrize("text, expected", TABLE)
def test_extracts_the_placeholders_of_real_formats(text, expected):
    assert extract_placeholders(text) == expected
    assert extract_placeholders(text.encode("utf-8")) == expected


def test_the_pattern_is_re2_and_finds_the_same_tokens_in_a_graph():
    import tensorflow as tf
    import tensorflow_text as tf_text

    # RE2 rejects what Python accepts beyond their shared syntax (lookbehind, backreferences).
    assert "(?<" not in PLACEHOLDER_PATTERN and not re.search(r"\\[1-9]", PLACEHOLDER_PATTERN)
    texts = [t for t, _ in TABLE if t]
    pieces = tf_text.regex_split(
        tf.constant(texts), PLACEHOLDER_PATTERN, keep_delim_regex_pattern=PLACEHOLDER_PATTERN
    )
    for text, row in zip(texts, pieces.to_list()):
        row = [p.decode("utf-8") for p in row]
        assert "".join(row) == text  # the placeholders are kept as pieces, nothing is lost
        found = [p for p in row if re.fullmatch(PLACEHOLDER_PATTERN, p)]
        assert found == re.findall(PLACEHOLDER_PATTERN, text), text
        assert finish_placeholders(found) == extract_placeholders(text), text


def test_graph_placeholders_finds_the_table():
    import tensorflow as tf

    texts = [t for t, _ in TABLE]
    got = graph_placeholders(tf.constant(texts)).to_list()
    assert [[p.decode("utf-8") for p in row] for row in got] == [e for _, e in TABLE]


def test_every_syntax_has_rows_and_is_named():
    names = {placeholder_syntax(p) for _, expected in TABLE for p in expected}
    assert names == {name for name, _ in SYNTAXES}
    assert placeholder_syntax("%{smart_count}") == "ruby"
    assert placeholder_syntax("_") == placeholder_syntax("&") == "accelerator"
    assert placeholder_syntax("} other {") == "icu_structure"
    assert placeholder_syntax("plain") is None
    # every syntax opens with one of the budget's characters (a Fluent default key after its `*`)
    for _, expected in TABLE:
        for p in expected:
            assert p[0] in PLACEHOLDER_CHARACTERS or p.startswith("*["), p


def test_placeholders_kept():
    assert placeholders_kept("Delete %s?", "¿Borrar %s?")
    assert placeholders_kept("Copy %1$s to %2$s", "Copiar a %2$s desde %1$s")  # reordered
    assert placeholders_kept("No placeholder", "Sin marcador")
    assert not placeholders_kept("Delete %s?", "¿Borrar?")  # dropped
    assert not placeholders_kept("%s and %s", "%s y")  # once instead of twice
    assert not placeholders_kept("Delete", "Borrar %s")  # one invented
    assert not placeholders_kept("%(name)s", "%(nombre)s")  # renamed
    assert not placeholders_kept("<b>Ctrl</b>+Click", "<b>+++++++++Click")  # tag lost
    assert not placeholders_kept("{count} files", "{cuenta} archivos")
    assert placeholders_kept("Failed to add %{n} files", "No se pudieron añadir %{n} archivos")
    assert not placeholders_kept("Failed to add %{n} files", "Falló al añadir{n} archivos")
    assert placeholders_kept("_Open", "_Abrir") and placeholders_kept("&Open", "A&brir")
    assert not placeholders_kept("_Open", "Abrir") and not placeholders_kept("Open", "_Abrir")
    icu = "{n, plural, one {# file} other {# files}}"
    assert placeholders_kept(icu, "{n, plural, one {# archivo} other {# archivos}}")
    assert not placeholders_kept(icu, "{n, plural, one {# archivo} otro {# archivos}}")
    assert not placeholders_kept(icu, "{n, plural, one {un archivo} other {# archivos}}")
    assert placeholders_kept("Tom &amp; Jerry", "Tom &amp; Jerry")
    assert not placeholders_kept("Tom &amp; Jerry", "Tom & Jerry")


def test_graph_placeholders_kept_agrees_with_python():
    """The graph twin used by the export answers as `placeholders_kept` on every pair of
    sources and candidate answers (the table's texts crossed with each other, plus doubles)."""
    import tensorflow as tf

    from keras_attn.text.placeholders import graph_placeholders_kept

    texts = [t for t, _ in TABLE] + ["%s and %s", "%s y", "%s %s %s", "<b>x</b> <b>y</b>"]
    sources = texts
    answers = [[texts[(i + j) % len(texts)] for j in range(len(texts))] for i in range(len(texts))]
    answers = [row + [src] for row, src in zip(answers, sources)]  # each source's own text last
    got = graph_placeholders_kept(tf.constant(sources), tf.constant(answers)).numpy()
    expected = [[placeholders_kept(s, a) for a in row] for s, row in zip(sources, answers)]
    assert got.tolist() == expected
    assert got[:, -1].all()  # a text keeps its own placeholders
    assert not got.all() and got.any()


def test_placeholders_kept_rate():
    sources = ["Delete %s", "{n} files", "plain", "<b>x</b>"]
    outputs = ["Borrar %s", "archivos", "llano", "<b>x</b>"]
    assert placeholders_kept_rate(sources, outputs) == pytest.approx(2 / 3)  # "plain" not counted
    assert math.isnan(placeholders_kept_rate(["plain"], ["llano"]))
    with pytest.raises(ValueError, match="same length"):
        placeholders_kept_rate(["a"], [])
    with pytest.raises(ValueError, match="text"):
        extract_placeholders(3)


def test_placeholders_kept_by_syntax():
    sources = ["Delete %s", "%{n} files", "%{n} of %s", "_Open", "plain", icu_text()]
    outputs = ["Borrar %s", "{n} archivos", "%{n} de %s", "Abrir", "llano", icu_text("es")]
    rates = placeholders_kept_by_syntax(sources, outputs)
    assert rates == {"printf": 1.0, "ruby": 0.5, "accelerator": 0.0, "icu": 1.0}
    wiki = "{{PLURAL:$1|one file|$1 files}}"
    rates = placeholders_kept_by_syntax(
        [wiki, wiki], ["{{PLURAL:$1|un archivo|$1 archivos}}", "{{PLURAL:$1|un archivo"]
    )
    assert rates == {"mediawiki": 0.5}
    with pytest.raises(ValueError, match="same length"):
        placeholders_kept_by_syntax(["a"], [])


def icu_text(language="en"):
    words = {"en": ("file", "files"), "es": ("archivo", "archivos")}[language]
    return "{n, plural, one {# %s} other {# %s}}" % words


def test_character_counts_in_python_and_in_a_graph():
    import numpy as np
    import tensorflow as tf

    texts = [
        "Delete %(name)s from <b>{folder}</b>?",
        "100% sure, {{ user }}",
        "¿Borrar «%s» de la carpeta? ½ {0}",
        "",
        "no placeholders here",
        "Save _As ${dir} &amp; {n, plural, other {# x}",
        "*[other] [[$1]]",
    ]
    raw = [t.encode("utf-8") for t in texts] + [b"\xff%\xfe<"]  # invalid UTF-8 around ASCII
    expected = np.array(
        [
            [
                sum(1 for ch in t.decode("utf-8", "replace") if ch == c)
                for c in PLACEHOLDER_CHARACTERS
            ]
            for t in raw
        ]
    )
    assert PLACEHOLDER_CHARACTERS == "%{}<>$&#_[]"
    assert expected[0].tolist() == [1, 1, 1, 2, 2, 0, 0, 0, 0, 0, 0]  # rows read off by hand
    assert expected[5].tolist() == [0, 3, 2, 0, 0, 1, 1, 1, 1, 0, 0]
    assert expected[6].tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 3]
    np.testing.assert_array_equal(character_counts(raw), expected)
    np.testing.assert_array_equal(graph_character_counts(tf.constant(raw)).numpy(), expected)
    assert character_counts([]).shape == (0, 11)
    assert graph_character_counts(tf.constant([], tf.string)).numpy().shape == (0, 11)
    # any character, U+FFFD included (what invalid bytes read as)
    wide = PLACEHOLDER_CHARACTERS + "\ufffd«"
    np.testing.assert_array_equal(
        graph_character_counts(tf.constant(raw), wide).numpy(), character_counts(raw, wide)
    )
    assert character_counts(raw, wide)[-1, -2:].tolist() == [2, 0]  # \xff and \xfe
    assert character_counts(raw, wide)[2, -1] == 1  # one «
    with pytest.raises(ValueError, match="characters"):
        graph_character_counts(tf.constant(["x"]), characters="%%")


def test_open_ended_placeholders_and_the_pieces_that_glue_to_them():
    import tensorflow as tf

    from keras_attn.text.placeholders import OPEN_ENDED_PATTERN, glue_pieces, open_ended

    found = sorted({p for _, expected in TABLE for p in expected})
    ends = [p for p in found if open_ended(p)]
    assert ends == ["$1", "$2", "$3", "$5", "$package", "%1", "%2", "%L1", "%L2"]
    # text glued after them changes them; after a closed one it does not
    standalone = [p for p in found if extract_placeholders(p) == [p]]  # not ICU pieces, markers
    assert len(standalone) > 30
    for p in standalone:
        changed = any(extract_placeholders(p + g)[:1] != [p] for g in ("x", "2", "u", "$d"))
        assert changed == open_ended(p), p
    graph = tf.strings.regex_full_match(tf.constant(found), OPEN_ENDED_PATTERN).numpy()
    assert graph.tolist() == [open_ended(p) for p in found]
    pieces = ["<pad>", "\u2581x", "x", "_y", "$", "9", ".", "<0x41>", "<0x20>", "é"]
    assert glue_pieces(pieces).tolist() == [0, 0, 1, 1, 1, 1, 0, 1, 0, 0]


def test_a_syntax_of_ones_own_is_one_more_row(monkeypatch):
    """`add_syntax`: Objective-C's `%@` and `%1$@`, read as none and as Qt's `%1` before the
    row is added and whole after it, in Python and in a graph; the table itself is restored
    after."""
    import tensorflow as tf

    from keras_attn.text import placeholders

    for name in ("SYNTAXES", "PLACEHOLDER_PATTERN", "_COMPILED", "_SYNTAX_COMPILED"):
        monkeypatch.setattr(placeholders, name, getattr(placeholders, name))
    text = "Move %@ to %1$@?"
    assert extract_placeholders(text) == ["%1"]
    placeholders.add_syntax("objc", r"%(?:[0-9]+\$)?@", before="printf")
    assert [n for n, _ in placeholders.SYNTAXES][:3] == ["ruby", "objc", "printf"]
    assert placeholders.extract_placeholders(text) == ["%@", "%1$@"]
    assert extract_placeholders(text) == ["%@", "%1$@"]  # a function imported before reads it
    assert placeholder_syntax("%1$@") == "objc"
    got = placeholders.graph_placeholders(tf.constant([text, "Save _As"])).to_list()
    assert got == [[b"%@", b"%1$@"], [b"_"]]
    assert placeholders.placeholders_kept(text, "¿Mover %@ a %1$@?")
    assert not placeholders.placeholders_kept(text, "¿Mover a %1$@?")
    for bad, match in [
        (dict(name="printf", pattern="x+"), "name"),
        (dict(name="x", pattern="("), "pattern"),
        (dict(name="x", pattern="(a)"), "capturing"),
        (dict(name="x", pattern="a*"), "empty"),
        (dict(name="x", pattern="a", before="nope"), "before"),
    ]:
        with pytest.raises(ValueError, match=match):
            placeholders.add_syntax(**bad)


# (Fluent select expression, its skeleton, its texts), written out by hand
FLUENT_SELECTS = [
    (
        "{ $count -> [one] { $count } contraseña *[other] { $count } contraseñas }",
        ["{ $count ->", "[one]", "*[other]", "}"],
        ["", " ", " { $count } contraseña ", " { $count } contraseñas ", ""],
    ),
    (
        "Abrir { PLATFORM() ->\n    [macos] Opciones\n   *[other] Preferencias\n}.",
        ["{ PLATFORM() ->", "[macos]", "*[other]", "}"],
        ["Abrir ", "\n    ", " Opciones\n   ", " Preferencias\n", "."],
    ),
    ("Añadir { $addon-name }", [], ["Añadir { $addon-name }"]),  # no select: not split
]


def test_a_fluent_select_splits_at_its_skeleton_in_python_and_in_a_graph():
    """A Fluent select keeps its structure as an ICU message does: the opening, the variant
    keys and the closing are copied, the variants' texts translated (`icu_split`)."""
    import tensorflow as tf

    from keras_attn.text.placeholders import graph_icu_join, graph_icu_split, icu_join, icu_split

    for message, skeleton, texts in FLUENT_SELECTS:
        assert icu_split(message) == (skeleton, texts)
        assert icu_join(skeleton, texts) == message
    got_skeleton, got_texts = graph_icu_split(tf.constant([m for m, _, _ in FLUENT_SELECTS]))
    assert [[p.decode() for p in row] for row in got_skeleton.to_list()] == [
        s for _, s, _ in FLUENT_SELECTS
    ]
    assert [[t.decode() for t in row] for row in got_texts.to_list()] == [
        t for _, _, t in FLUENT_SELECTS
    ]
    joined = graph_icu_join(got_skeleton, got_texts).numpy()
    assert [j.decode() for j in joined] == [m for m, _, _ in FLUENT_SELECTS]
