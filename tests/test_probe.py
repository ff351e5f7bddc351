"""Bad and extreme input on the newest surfaces, kept as regression tests: broken gettext
catalogues, constrained decoding at its edges, the served signatures outside their buckets,
the ring cache and chunked prefill, `--init-from` a run that does not match.

The rule checked: bad input gets a clear error naming the argument (or the file), or a
sensible documented answer; never a NaN, a silent wrong answer, a hang or a crash.
"""

import io
import json
import struct

import pytest

from keras_attn.data import BrokenCatalogueError, catalogue_pairs, read_catalogue
from keras_attn.data.corpora import build_corpus

# ------------------------------------------------------------------ broken gettext catalogues
HEADER = (
    'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
    '"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'
)
GOOD = [("Open file", "Abrir archivo"), ("Close window", "Cerrar ventana"), ("Save", "Guardar")]
PO = HEADER + "".join(f'msgid "{s}"\nmsgstr "{t}"\n\n' for s, t in GOOD)


def _mo(pairs, plural=None):
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo

    catalog = Catalog(locale="es")
    for source, target in pairs:
        catalog.add(source, target)
    if plural:
        catalog.add(*plural)
    buf = io.BytesIO()
    write_mo(buf, catalog)
    return buf.getvalue()


def _mo_field(data, table_field, index, value):
    """`data` with the (length, offset) of string `index` of the table named by header field
    `table_field` (3: msgids, 4: msgstrs) replaced by `value`."""
    data = bytearray(data)
    table = struct.unpack("<I", data[4 * table_field : 4 * table_field + 4])[0]
    data[table + 8 * index : table + 8 * index + 8] = struct.pack("<2I", *value)
    return bytes(data)


def _mo_string(data, table_field, index):
    table = struct.unpack("<I", data[4 * table_field : 4 * table_field + 4])[0]
    return struct.unpack("<2I", data[table + 8 * index : table + 8 * index + 8])


GOOD_MO = _mo(GOOD)
_LAST = _mo_string(GOOD_MO, 4, 3)  # the msgstr stored last in the file (msgid order: sorted)

# (id, file name, bytes, words the reason holds): each must be refused whole, named.
BROKEN = [
    ("mo-empty", "empty.mo", b"", ("0 bytes", "too short")),
    ("mo-header-cut", "cut.mo", GOOD_MO[:12], ("12 bytes", "too short")),
    ("mo-table-cut", "table.mo", GOOD_MO[:30], ("table", "past the end")),
    # the last translation cut in the middle: its first bytes must not become a pair
    ("mo-truncated", "trunc.mo", GOOD_MO[: _LAST[1] + 4], ("msgstr", "past the end")),
    ("mo-bad-magic", "magic.mo", b"\0\0\0\0" + GOOD_MO[4:], ("magic number",)),
    (
        "mo-huge-count",
        "count.mo",
        GOOD_MO[:8] + struct.pack("<I", 10**9) + GOOD_MO[12:],
        ("1000000000",),
    ),
    (
        "mo-offset-past-end",
        "offset.mo",
        _mo_field(GOOD_MO, 4, 1, (14, len(GOOD_MO) + 100)),
        ("msgstr 1", "past the end"),
    ),
    # a length running over the NUL terminator into the next strings
    (
        "mo-length-huge",
        "length.mo",
        _mo_field(GOOD_MO, 4, 1, (10**6, _mo_string(GOOD_MO, 4, 1)[1])),
        ("msgstr 1",),
    ),
    ("po-nul-in-string", "nul.po", PO.replace("Guardar", "Guar\0dar").encode(), ("NUL",)),
    ("po-utf16", "utf16.po", PO.encode("utf-16"), ("NUL",)),
    (
        "po-unclosed-quote",
        "quote.po",
        PO.replace('"Cerrar ventana"', '"Cerrar ventana').encode(),
        ("line 10", "quoted string"),
    ),
    (
        "po-missing-quote",
        "open.po",
        PO.replace('msgid "Save"', 'msgid Save"').encode(),
        ("line 12",),
    ),
    (
        "po-latin1-declared-utf8",
        "latin1.po",
        PO.replace("Guardar", "Guardar\xe9").encode("latin-1"),
        ("charset",),
    ),
]


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_catalogue_is_refused_naming_the_file_and_skipped_among_good_ones(case, tmp_path):
    _, name, data, words = case
    path = _write(tmp_path, name, data)
    with pytest.raises(BrokenCatalogueError) as info:
        read_catalogue(path)
    message = str(info.value)
    assert "`path`" in message and path in message
    for word in words:
        assert word in info.value.reason
    assert isinstance(info.value, ValueError)
    # among good catalogues: skipped whole, listed with its reason, the others read
    bad = path
    good_po = _write(tmp_path, "good.po", PO.encode())
    other = [("Print", "Imprimir"), ("Quit", "Salir")]
    good_mo = _write(tmp_path, "other.mo", _mo(other))
    pairs, report = catalogue_pairs("es", paths=[good_po, bad, good_mo], packages=())
    assert pairs == GOOD + other
    assert [p for p, _ in report.unreadable] == [bad] and name in str(report)
    assert report.catalogues == [good_po, good_mo]
    assert report.entries == 2 + len(GOOD) + len(other)  # two headers
    corpus = build_corpus(
        "es",
        groups={"a": [good_po], "b": [bad, good_mo]},
        test_pairs=1,
        val_pairs=1,
        test_in_domain_pairs=0,
    )
    assert [p for p, _ in corpus.report.unreadable] == [bad]
    assert corpus.report.entries == report.entries
    assert sorted(p for split in corpus.splits.values() for p in split) == sorted(GOOD + other)
    assert json.loads(json.dumps(corpus.manifest))["unreadable"][0][1] == report.unreadable[0][1]
    assert bad in str(corpus.report)


# (id, bytes): files read as the plain catalogue `PO` reads
SAME_AS_PLAIN = [
    ("bom", b"\xef\xbb\xbf" + PO.encode()),
    ("crlf", PO.replace("\n", "\r\n").encode()),
    ("bom-crlf", b"\xef\xbb\xbf" + PO.replace("\n", "\r\n").encode()),
    # a template's header left as generated: babel cannot parse it, and it is not read
    (
        "template-header",
        PO.replace("nplurals=2; plural=(n != 1);", "nplurals=INTEGER; plural=EXPRESSION;")
        .replace('"Content-Type', '"Language: farsi/persian\\n"\n"Content-Type')
        .encode(),
    ),
]


@pytest.mark.parametrize("case", SAME_AS_PLAIN, ids=[c[0] for c in SAME_AS_PLAIN])
def test_bom_crlf_and_template_headers_read_as_the_plain_file(case, tmp_path):
    entries = read_catalogue(_write(tmp_path, "x.po", case[1]))
    assert entries == [("", "", "header")] + [(s, t, "ok") for s, t in GOOD]


def test_empty_po_and_mismatched_plural_forms_are_counted(tmp_path):
    assert read_catalogue(_write(tmp_path, "empty.po", b"")) == [("", "", "header")]
    extra = (
        'msgid "one file"\nmsgid_plural "%d files"\nmsgstr[0] "un archivo"\n'
        'msgstr[1] "%d archivos"\nmsgstr[2] "x"\nmsgstr[3] "y"\n\n'
        'msgid "one dir"\nmsgid_plural "%d dirs"\nmsgstr[0] "un dir"\n'
    )
    path = _write(tmp_path, "plural.po", (PO + extra).encode())
    mo = _write(
        tmp_path,
        "plural.mo",
        _mo([("Print", "Imprimir")], (("a page", "%d pages"), ("una", "%d", "x"))),
    )
    pairs, report = catalogue_pairs("es", paths=[path, mo], packages=())
    assert pairs == GOOD + [("Print", "Imprimir")]
    assert report.plural == 3 and report.header == 2 and not report.unreadable
    assert report.kept + report.plural + report.header == report.entries
