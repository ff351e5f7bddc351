"""The catalogue formats, each read, filled by a translator that answers from a table written
here by hand, and written back; what the output holds is read with the format's own library
(polib, json, ElementTree), not with our readers."""

import json
import os
import xml.etree.ElementTree as ET

import polib
import pytest

from keras_attn.catalogue import (
    FILLED,
    FUZZY,
    OBSOLETE,
    PLACEHOLDERS_LOST,
    SOURCE_COPIED,
    TRANSLATED,
    UNTRANSLATED,
    CatalogueError,
    fill_catalogue,
    read_catalogue,
    write_catalogue,
)

# The translator's answers; the last one loses a placeholder, "Empty" gets no answer.
ANSWERS = {
    "Delete %s?": "¿Borrar %s?",
    "%d file": "%d archivo",
    "%d files": "%d archivos",
    "%n file(s)": "%n archivo(s)",
    "Hello {{- name}}": "Hola {{- name}}",
    "{{count}} item": "{{count}} elemento",
    "{{count}} items": "{{count}} elementos",
    "Welcome, { $user }": "Bienvenido, { $user }",
    "<b>Bold</b> &amp; _File": "<b>Negrita</b> &amp; _Archivo",
    "Page $1 of $2": "Página $1 de",
    "Empty": "  ",
    "Firefox": "Firefox",
}


def translate(texts):
    translate.calls.append(list(texts))
    return [ANSWERS[t] for t in texts]


@pytest.fixture(autouse=True)
def calls():
    translate.calls = []
    return translate.calls


PO = """\
# A test catalogue.
msgid ""
msgstr ""
"Language: es\\n"
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\\n"

msgid "Open"
msgstr "Abrir"

#: src/main.c:12
#, c-format
msgid "Delete %s?"
msgstr ""

#, fuzzy
msgid "Save"
msgstr "Guardar?"

msgid "%d file"
msgid_plural "%d files"
msgstr[0] ""
msgstr[1] ""

msgctxt "menu"
msgid "Page $1 of $2"
msgstr ""

msgid "Empty"
msgstr ""

#~ msgid "Old"
#~ msgstr "Viejo"
"""


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_po_fills_the_untranslated_entries_and_marks_them_fuzzy(tmp_path, calls):
    source = write(tmp_path / "es.po", PO)
    catalogue = read_catalogue(source)
    assert [(e.key, e.line, e.status) for e in catalogue.entries] == [
        ("Open", 8, TRANSLATED),
        ("Delete %s?", 11, UNTRANSLATED),  # an entry's first line, its comments'
        ("Save", 16, FUZZY),
        ("%d file", 20, UNTRANSLATED),
        ("menu | Page $1 of $2", 25, UNTRANSLATED),
        ("Empty", 29, UNTRANSLATED),
        ("Old", 32, OBSOLETE),
    ]
    dry = fill_catalogue(catalogue, translate, dry_run=True)
    assert dry.counts == {TRANSLATED: 1, UNTRANSLATED: 4, FUZZY: 1, OBSOLETE: 1}
    assert calls == []  # a dry run translates nothing
    report = fill_catalogue(catalogue, translate, batch_size=2)
    assert report.counts == {
        TRANSLATED: 1,
        FILLED: 2,
        FUZZY: 1,
        PLACEHOLDERS_LOST: 1,
        "no_answer": 1,
        OBSOLETE: 1,
    }
    assert [len(c) for c in calls] == [2, 2, 1]  # five distinct texts, two a batch
    assert [(p.line, p.status) for p in report.problems] == [
        (25, PLACEHOLDERS_LOST),
        (29, "no_answer"),
    ]
    assert "line 25" in str(report.problems[0]) and "$2" in str(report.problems[0])
    out = str(tmp_path / "out.po")
    write_catalogue(catalogue, out)
    assert open(source, encoding="utf-8").read() == PO  # the input untouched
    got = {(e.msgctxt, e.msgid): e for e in polib.pofile(out)}
    assert got[(None, "Open")].msgstr == "Abrir" and "fuzzy" not in got[(None, "Open")].flags
    assert got[(None, "Save")].msgstr == "Guardar?" and got[(None, "Save")].fuzzy
    delete = got[(None, "Delete %s?")]
    assert delete.msgstr == "¿Borrar %s?" and delete.flags == ["c-format", "fuzzy"]
    assert delete.occurrences == [("src/main.c", "12")]
    plural = got[(None, "%d file")]
    assert plural.msgstr_plural == {0: "%d archivo", 1: "%d archivos"} and plural.fuzzy
    assert got[("menu", "Page $1 of $2")].msgstr == "" and not got[("menu", "Page $1 of $2")].fuzzy
    assert got[(None, "Empty")].msgstr == ""
    assert [e.msgid for e in polib.pofile(out).obsolete_entries()] == ["Old"]
    assert open(out, encoding="utf-8").read().startswith("# A test catalogue.\nmsgid")
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp")] == []


def test_an_answer_that_is_its_source_is_reported_unless_copies_are_kept(tmp_path):
    # An export answers the source where no hypothesis keeps its placeholders: such an
    # answer (here of one plural form) must not be written as a translation by default.
    po = write(
        tmp_path / "es.po",
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        '"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'
        'msgid "Firefox"\nmsgstr ""\n\n'
        'msgid "%d item"\nmsgid_plural "%d items"\nmsgstr[0] ""\nmsgstr[1] ""\n\n'
        'msgid "Open"\nmsgstr ""\n',
    )
    answers = {"Firefox": " Firefox", "%d item": "%d elemento", "%d items": "%d items"}
    answers["Open"] = "Abrir"

    def copy_some(texts):
        return [answers[t] for t in texts]

    catalogue = read_catalogue(po)
    report = fill_catalogue(catalogue, copy_some)
    assert report.counts == {FILLED: 1, SOURCE_COPIED: 2}
    assert [(p.line, p.source) for p in report.problems] == [(6, "Firefox"), (9, "%d items")]
    assert "source answered unchanged" in str(report.problems[1])
    write_catalogue(catalogue, str(tmp_path / "out.po"))
    got = {e.msgid: e for e in polib.pofile(str(tmp_path / "out.po"))}
    assert got["Firefox"].msgstr == "" and got["%d item"].msgstr_plural[0] == ""
    assert got["Open"].msgstr == "Abrir" and got["Open"].fuzzy

    kept = read_catalogue(po)
    report = fill_catalogue(kept, copy_some, keep_copies=True)
    assert report.counts == {FILLED: 3} and report.problems == []


def test_a_pot_gets_the_plural_forms_of_the_language_given(tmp_path):
    pot = write(
        tmp_path / "app.pot",
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "%d file"\nmsgid_plural "%d files"\nmsgstr[0] ""\nmsgstr[1] ""\n',
    )
    with pytest.raises(CatalogueError, match=r"app\.pot:5: .*Plural-Forms.*language"):
        read_catalogue(pot)
    for language, forms in [
        ("ru", ["%d archivo", "%d archivos", "%d archivos"]),
        ("ja", ["%d archivos"]),
    ]:
        catalogue = read_catalogue(pot, language=language)
        fill_catalogue(catalogue, translate)
        out = str(tmp_path / f"{language}.po")
        write_catalogue(catalogue, out)
        written = polib.pofile(out)
        assert [written[0].msgstr_plural[i] for i in range(len(forms))] == forms
        assert len(written[0].msgstr_plural) == len(forms)
        assert written.metadata["Plural-Forms"].startswith(f"nplurals={len(forms)};")
        assert written.metadata["Language"] == language


EN = {
    "greeting": "Hello {{- name}}",
    "menu": {"delete": "Delete %s?", "open": "Open", "pages": "Page $1 of $2"},
    "items_one": "{{count}} item",
    "items_other": "{{count}} items",
}


def test_json_fills_missing_and_empty_messages_from_the_source_catalogue(tmp_path):
    en = write(tmp_path / "en.json", json.dumps(EN, indent=2))
    ru_text = json.dumps(
        {"menu": {"open": "Открыть", "delete": ""}, "extra": "Только здесь"},
        indent=4,
        ensure_ascii=False,
    )
    ru = write(tmp_path / "ru.json", ru_text)
    assert read_catalogue(ru, source=en).language == "ru"  # the file's name names it
    catalogue = read_catalogue(ru, source=en, language="ru")
    statuses = {e.key: e.status for e in catalogue.entries}
    assert statuses == {
        "greeting": UNTRANSLATED,
        "menu.delete": UNTRANSLATED,
        "menu.open": TRANSLATED,
        "menu.pages": UNTRANSLATED,
        "items_one": UNTRANSLATED,
        "items_few": UNTRANSLATED,
        "items_many": UNTRANSLATED,
        "items_other": UNTRANSLATED,
    }
    lines = {e.key: e.line for e in catalogue.entries}
    assert lines["menu.open"] == 3 and lines["greeting"] == 2  # in ru.json, else in en.json
    report = fill_catalogue(catalogue, translate)
    assert report.counts == {FILLED: 6, TRANSLATED: 1, PLACEHOLDERS_LOST: 1}
    out = str(tmp_path / "out" / "ru.json")
    os.makedirs(os.path.dirname(out))
    write_catalogue(catalogue, out)
    written = json.load(open(out, encoding="utf-8"))
    assert written == {
        "menu": {"open": "Открыть", "delete": "¿Borrar %s?"},
        "extra": "Только здесь",
        "greeting": "Hola {{- name}}",
        "items_one": "{{count}} elemento",
        "items_few": "{{count}} elementos",
        "items_many": "{{count}} elementos",
        "items_other": "{{count}} elementos",
    }
    assert open(out, encoding="utf-8").read().startswith('{\n    "menu"')  # the file's indent
    assert open(ru, encoding="utf-8").read() == ru_text


def test_json_without_a_source_is_a_source_catalogue_translated_whole(tmp_path):
    en = write(tmp_path / "en.json", json.dumps(EN))
    with pytest.raises(CatalogueError, match=r"items.*language"):
        read_catalogue(en)
    catalogue = read_catalogue(en, language="ja")
    assert sorted(e.key for e in catalogue.entries) == sorted(
        ["greeting", "menu.delete", "menu.open", "menu.pages", "items_other"]
    )
    ANSWERS["Open"] = "開く"
    fill_catalogue(catalogue, translate)
    del ANSWERS["Open"]
    write_catalogue(catalogue, str(tmp_path / "ja.json"))
    written = json.load(open(tmp_path / "ja.json", encoding="utf-8"))
    # the message that lost a placeholder is left out: i18next falls back to the source's
    assert written == {
        "greeting": "Hola {{- name}}",
        "menu": {"delete": "¿Borrar %s?", "open": "開く"},
        "items_other": "{{count}} elementos",
    }


TS = """\
<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="ru_RU">
<context>
    <name>MainWindow</name>
    <message>
        <location filename="main.cpp" line="10"/>
        <source>Open</source>
        <translation>Открыть</translation>
    </message>
    <message>
        <source>Delete %s?</source>
        <translation type="unfinished"></translation>
    </message>
    <message>
        <source>Save</source>
        <translation type="unfinished">Сохранить?</translation>
    </message>
    <message numerus="yes">
        <source>%n file(s)</source>
        <translation type="unfinished">
            <numerusform></numerusform>
            <numerusform></numerusform>
        </translation>
    </message>
    <message>
        <source>Page $1 of $2</source>
        <translation type="unfinished"></translation>
    </message>
    <message>
        <source>&lt;b&gt;Bold&lt;/b&gt; &amp;amp; _File</source>
        <translation type="unfinished"></translation>
    </message>
    <message>
        <source>Old</source>
        <translation type="vanished">Старый</translation>
    </message>
    <message>
        <source>Hello {{- name}}</source>
        <translation></translation>
    </message>
</context>
</TS>
"""


def test_ts_fills_the_unfinished_messages_and_every_numerus_form(tmp_path):
    path = write(tmp_path / "app_ru.ts", TS)
    catalogue = read_catalogue(path)
    assert catalogue.language == "ru_RU"
    assert [(e.line, e.status, len(e.sources)) for e in catalogue.entries] == [
        (6, TRANSLATED, 1),
        (11, UNTRANSLATED, 1),
        (15, FUZZY, 1),
        (19, UNTRANSLATED, 3),  # Russian has three forms; the file held two
        (26, UNTRANSLATED, 1),
        (30, UNTRANSLATED, 1),
        (34, OBSOLETE, 1),
        (38, UNTRANSLATED, 1),  # empty, not marked unfinished: untranslated all the same
    ]
    assert catalogue.entries[5].sources == ("<b>Bold</b> &amp; _File",)  # the XML read
    report = fill_catalogue(catalogue, translate)
    assert report.counts == {
        TRANSLATED: 1,
        FILLED: 4,
        FUZZY: 1,
        PLACEHOLDERS_LOST: 1,
        OBSOLETE: 1,
    }
    out = str(tmp_path / "out.ts")
    write_catalogue(catalogue, out)
    root = ET.parse(out).getroot()
    messages = {m.findtext("source"): m.find("translation") for m in root.iter("message")}
    assert messages["Open"].text == "Открыть" and messages["Open"].get("type") is None
    assert (
        messages["Delete %s?"].text == "¿Borrar %s?"
        and messages["Delete %s?"].get("type") == "unfinished"
    )
    assert messages["Save"].text == "Сохранить?"
    forms = [f.text for f in messages["%n file(s)"].findall("numerusform")]
    assert forms == ["%n archivo(s)"] * 3
    assert messages["Page $1 of $2"].text is None
    assert messages["<b>Bold</b> &amp; _File"].text == "<b>Negrita</b> &amp; _Archivo"
    assert messages["Old"].get("type") == "vanished"
    hello = messages["Hello {{- name}}"]
    assert hello.text == "Hola {{- name}}" and hello.get("type") == "unfinished"
    assert (
        open(out, encoding="utf-8")
        .read()
        .startswith('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE TS>\n<TS')
    )
    assert "&lt;b&gt;Negrita&lt;/b&gt; &amp;amp; _Archivo" in open(out, encoding="utf-8").read()


def test_the_language_a_path_names():
    from keras_attn.catalogue.plurals import language_of_path

    cases = {
        "locales/es/common.json": "es",
        "i18n/ts/vorta.de.ts": "de",
        "app_pt_BR.json": "pt_BR",
        "translations/app_ru.ts": "ru",
        "de-AT.json": "de-AT",
        "common.json": None,
        "po/messages.pot": None,
    }
    assert {path: language_of_path(path) for path in cases} == cases


def test_fill_refuses_a_bad_batch_size_and_a_translator_that_answers_too_few(tmp_path):
    catalogue = read_catalogue(write(tmp_path / "es.po", PO))
    with pytest.raises(ValueError, match=r"batch_size.*Received: batch_size=0"):
        fill_catalogue(catalogue, translate, batch_size=0)
    with pytest.raises(ValueError, match="one text per source"):
        fill_catalogue(catalogue, lambda texts: list(texts)[1:])
    assert all(e.status != FILLED for e in catalogue.entries)
