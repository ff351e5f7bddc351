"""The gettext catalogue loader on small catalogues written here (docs/real_data.md)."""

import io

import pytest

from keras_attn.data import catalogue_pairs, catalogue_splits, find_catalogues, read_catalogue

PO = """\
# A translator comment
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=1; plural=0;\\n"

msgid "Save"
msgstr "保存"

#, fuzzy
msgid "Delete"
msgstr "删除吗"

msgid "%(count)s item"
msgid_plural "%(count)s items"
msgstr[0] "%(count)s 项"

msgid "Empty translation"
msgstr ""

msgid "Django"
msgstr "Django"

msgctxt "verb"
msgid "Save"
msgstr "存储"

msgid "Iceland"
msgstr "冰岛"

msgid "A very long message that goes past the limit"
msgstr "很长"

msgid "  Padded  "
msgstr "  填充 "
"""


def _mo_bytes(entries):
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo

    catalog = Catalog(locale="zh_Hans_CN")
    for source, target, flags in entries:
        catalog.add(source, target, flags=flags)
    buf = io.BytesIO()
    write_mo(buf, catalog)  # compiled as msgfmt does: without the fuzzy entry (a .mo has no flags)
    return buf.getvalue()


MO_ENTRIES = [
    ("Spain", "西班牙", ()),
    ("Iceland", "冰島", ()),
    ("Guess", "猜", ("fuzzy",)),
    ("Euro", "欧元", ()),
]


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "site" / "fake_catalogue_pkg"
    (root / "locale" / "zh_Hans" / "LC_MESSAGES").mkdir(parents=True)
    (root / "locale" / "es" / "LC_MESSAGES").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "locale" / "zh_Hans" / "LC_MESSAGES" / "ui.po").write_text(PO, encoding="utf-8")
    (root / "locale" / "zh_Hans" / "LC_MESSAGES" / "ui.mo").write_bytes(b"not read: the .po wins")
    (root / "locale" / "zh_Hans" / "LC_MESSAGES" / "names.mo").write_bytes(_mo_bytes(MO_ENTRIES))
    (root / "locale" / "es" / "LC_MESSAGES" / "ui.po").write_text(PO, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return root


def test_read_catalogue_kinds(package):
    entries = read_catalogue(package / "locale" / "zh_Hans" / "LC_MESSAGES" / "ui.po")
    kinds = {(s, k) for s, _, k in entries}
    assert ("", "header") in kinds and ("Delete", "fuzzy") in kinds
    assert ("%(count)s item", "plural") in kinds and ("Empty translation", "empty") in kinds
    assert ("Padded", "ok") in kinds and ("Save", "ok") in kinds
    assert ("保存" in [t for _, t, _ in entries]) and ("填充" in [t for _, t, _ in entries])
    mo = read_catalogue(package / "locale" / "zh_Hans" / "LC_MESSAGES" / "names.mo")
    assert {(s, t, k) for s, t, k in mo if k != "header"} == {
        ("Spain", "西班牙", "ok"),
        ("Iceland", "冰島", "ok"),
        ("Euro", "欧元", "ok"),
    }
    with pytest.raises(ValueError, match="`path`"):
        read_catalogue(package / "__init__.py")


def test_catalogue_pairs_skips_and_dedups(package):
    paths = find_catalogues("zh", packages=("fake_catalogue_pkg",), domains=None)
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["names.mo", "ui.po"]  # .po chosen over ui.mo
    pairs, report = catalogue_pairs(
        "zh", packages=("fake_catalogue_pkg",), domains=None, max_length=20
    )
    # names.mo first (sorted paths; a .mo holds its entries sorted by msgid): its "Iceland" wins
    # over ui.po's; the msgctxt "Save" repeats a source.
    assert pairs == [
        ("Euro", "欧元"),
        ("Iceland", "冰島"),
        ("Spain", "西班牙"),
        ("Save", "保存"),
        ("Padded", "填充"),
    ]
    assert (report.fuzzy, report.plural, report.empty, report.untranslated) == (1, 1, 1, 1)
    assert (report.too_long, report.duplicate, report.header, report.kept) == (1, 2, 2, 5)
    assert report.entries == report.kept + sum(
        getattr(report, k)
        for k in ("header", "fuzzy", "plural", "empty", "untranslated", "too_long", "duplicate")
    )
    assert report.per_package == {"fake_catalogue_pkg": 5} and "5 pairs from 2 catalogues" in str(
        report
    )
    only_ui, _ = catalogue_pairs("zh", packages=("fake_catalogue_pkg",), domains=("ui",))
    assert only_ui[0] == ("Save", "保存") and ("Spain", "西班牙") not in only_ui
    es, _ = catalogue_pairs(
        "es", packages=("fake_catalogue_pkg", "no_such_package_xyz"), domains=None
    )
    assert ("Iceland", "冰岛") in es and len(es) == 4  # only es/ui.po; a missing package is skipped
    assert catalogue_pairs("fr", packages=("fake_catalogue_pkg",))[0] == []


def test_explicit_paths_and_bad_arguments(package):
    po = package / "locale" / "es" / "LC_MESSAGES" / "ui.po"
    pairs, report = catalogue_pairs("es", paths=[po])
    assert len(pairs) == 4 and report.catalogues == [str(po)]
    for bad in ("", None, "../es"):
        with pytest.raises(ValueError, match="`language`"):
            catalogue_pairs(bad, paths=[po])
    with pytest.raises(ValueError, match="`max_length`"):
        catalogue_pairs("es", paths=[po], max_length=0)


def test_splits_are_deterministic_and_disjoint(tmp_path):
    lines = ['msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n']
    lines += [f'msgid "word {i}"\nmsgstr "palabra {i}"\n' for i in range(60)]
    po = tmp_path / "big.po"
    po.write_text("\n".join(lines), encoding="utf-8")
    a = catalogue_splits("es", paths=[po], seed=3, val_fraction=0.2, test_fraction=0.2)
    assert catalogue_splits("es", paths=[po], seed=3, val_fraction=0.2, test_fraction=0.2) == a
    assert catalogue_splits("es", paths=[po], seed=4, val_fraction=0.2, test_fraction=0.2) != a
    assert (len(a["train"]), len(a["val"]), len(a["test"])) == (36, 12, 12)
    sources = [{s for s, _ in a[k]} for k in ("train", "val", "test")]
    assert not (sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2])
    assert sorted(a["train"] + a["val"] + a["test"]) == sorted(
        (f"word {i}", f"palabra {i}") for i in range(60)
    )


def test_flask_translations_directory_and_simplified_chinese_first(tmp_path, monkeypatch):
    # Flask-style packages keep catalogues under `translations/`, not `locale/`; a bare `zh`
    # directory may be Traditional, so `zh_Hans` is read where a package has both.
    root = tmp_path / "site" / "fake_flask_pkg"
    for name, text in (("zh", "冰島"), ("zh_Hans", "冰岛")):
        messages = root / "translations" / name / "LC_MESSAGES"
        messages.mkdir(parents=True)
        (messages / "messages.po").write_text(
            f'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
            f'msgid "Iceland"\nmsgstr "{text}"\n',
            encoding="utf-8",
        )
    only_zh = tmp_path / "site" / "fake_flask_pkg2" / "translations" / "zh" / "LC_MESSAGES"
    only_zh.mkdir(parents=True)
    (only_zh / "messages.po").write_text(
        'msgid "Spain"\nmsgstr "西班牙"\n',
        encoding="utf-8",
    )
    for package in ("fake_flask_pkg", "fake_flask_pkg2"):
        (tmp_path / "site" / package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    pairs, report = catalogue_pairs(
        "zh", packages=("fake_flask_pkg", "fake_flask_pkg2"), domains=("messages",)
    )
    assert pairs == [("Iceland", "冰岛"), ("Spain", "西班牙")]
    assert report.per_package == {"fake_flask_pkg": 1, "fake_flask_pkg2": 1}
