"""A real-size English -> X corpus from gettext catalogues, built offline, audited, split by domain.

    from keras_attn.data import fetch_catalogues, build_corpus

    fetch_catalogues()                          # once: wheels + Debian packages -> catalogue cache
    corpus = build_corpus("es", "corpus/es")    # filter, deduplicate, split; writes the files below
    print(corpus.report)                        # every dropped entry counted by cause
    corpus.splits["train"][:3]                  # [(english, spanish), ...]

Sources (each a *group*: one package, the unit the leave-domains-out split holds out whole):

- installed Python packages (`keras_attn.data.catalogues.DEFAULT_PACKAGES`: Django, WTForms,
  humanize, pycountry, ...);
- the packages pinned in `requirements-corpora.txt`, downloaded as wheels by
  `pip download --no-deps` (nothing installed): only their catalogue files are extracted;
- the Debian packages pinned in `corpora-debian.txt` (command-line tools, libraries, desktop and
  web applications), fetched with `apt-get download NAME=VERSION` (no root, nothing installed)
  and read with `dpkg-deb --fsys-tarfile`: only `.mo` / `.po` files under `LC_MESSAGES` are
  extracted.

Every entry of every catalogue is either kept or dropped for exactly one cause, checked in this
order (`DROP_CAUSES`): header, fuzzy, plural, empty, untranslated (target equals source),
message_id (the source is an identifier such as `label_save_button`, not English), multiline
(a tab or line break: a TSV line cannot hold it), too_long (more than `max_chars` characters a
side), length_ratio (`log((len(target) + 5) / (len(source) + 5))` further than
`log(max_ratio)` from its median over the language's candidate pairs), placeholder_mismatch
(`keras_attn.text.placeholders.placeholders_kept` fails), wrong_script (a letter of a script the
target language does not use and the source does not hold, or a Chinese target without a Han
character), duplicate (a source already kept), normalised_duplicate (a source equal to a kept one
after case folding, removing accelerator marks `_` / `&`, collapsing spaces and trailing
`:` / `.` / `…`). `kept + sum(drops) == entries`, per group and in total. With `keep_identical=True` the training
groups' identical entries that are translations (names, codes, cognates: `identical_kept`) are
kept for `train` instead of dropped as untranslated.

Splits: `test` holds whole groups that no other split sees (leave-domains-out), `val` other
whole groups; `test_in_domain` is a random sample of sentences of the training groups (in-domain,
never trained on). Groups are processed training groups first, so a test or validation source
already kept for training is dropped as a duplicate there: no source is in two splits.

`build_corpus(language, out_dir)` writes `out_dir/{train,val,test,test_in_domain}.tsv`
(source<TAB>target) and `out_dir/manifest.json` (the sources with versions and categories,
the settings, the counts by cause, per group, which groups went to which split, file hashes).
`build_names(language, out_dir)` writes `out_dir/test_names.tsv`: the held-out names, from the
Debian packages of `corpora-names.txt`, that no corpus catalogue holds.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

from keras_attn._checks import check_int, check_number
from keras_attn.data.catalogues import (
    DEFAULT_DOMAINS,
    DEFAULT_PACKAGES,
    BrokenCatalogueError,
    _catalogues_under,
    _locale_names,
    _package_dir,
    read_catalogue,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIP_REQUIREMENTS = os.path.join(ROOT, "requirements-corpora.txt")
DEBIAN_REQUIREMENTS = os.path.join(ROOT, "corpora-debian.txt")
NAMES_REQUIREMENTS = os.path.join(ROOT, "corpora-names.txt")

DROP_CAUSES = (
    "header",
    "fuzzy",
    "plural",
    "empty",
    "untranslated",
    "message_id",
    "multiline",
    "too_long",
    "length_ratio",
    "placeholder_mismatch",
    "wrong_script",
    "duplicate",
    "normalised_duplicate",
)
SPLITS = ("train", "val", "test", "test_in_domain")

# Category of the wheels of requirements-corpora.txt and of the installed packages (Debian
# packages carry theirs in corpora-debian.txt); anything else is "web".
CATEGORIES = {
    "django": "web",
    "wtforms": "library",
    "humanize": "library",
    "pycountry": "library",
    "sphinx": "cli",
    "deluge": "desktop",
    "babel": "library",
}


def default_cache_dir():
    """`$KERAS_ATTN_CORPORA` or `~/.cache/keras-attn/corpora`."""
    return os.environ.get("KERAS_ATTN_CORPORA") or os.path.join(
        os.path.expanduser("~"), ".cache", "keras-attn", "corpora"
    )


# ------------------------------------------------------------------------------ requirements
def read_requirements(path):
    """`[(name, version, category)]` of a pinned list: `NAME==VERSION` (pip) or
    `NAME=VERSION CATEGORY` (Debian) per line; `#` starts a comment."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            spec, *rest = line.split()
            if "==" in spec:
                name, version = spec.split("==", 1)
            elif "=" in spec:
                name, version = spec.split("=", 1)
            else:
                raise ValueError(f"{path}: not pinned by version: {line!r}")
            category = rest[0] if rest else CATEGORIES.get(_normalise_name(name), "web")
            rows.append((name, version, category))
    return rows


def _normalise_name(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def _is_catalogue(member_name):
    return "/LC_MESSAGES/" in member_name and member_name.endswith((".po", ".mo"))


# ---------------------------------------------------------------------------------- fetching
def fetch_catalogues(
    cache_dir=None,
    pip_requirements=PIP_REQUIREMENTS,
    debian_requirements=DEBIAN_REQUIREMENTS,
    names_requirements=NAMES_REQUIREMENTS,
):
    """Download the pinned wheels and Debian packages into `cache_dir` and extract their
    catalogues to `cache_dir/catalogues/{pip,debian}/<name>/...` (skipping those already there).
    `names_requirements` lists Debian packages fetched the same way for `build_names` only
    (never a corpus group). Needs the network once; everything after it reads the cache.
    Returns `cache_dir`."""
    cache_dir = cache_dir or default_cache_dir()
    os.makedirs(cache_dir, exist_ok=True)
    if pip_requirements:
        wheels = os.path.join(cache_dir, "wheels")
        for name, version, _ in read_requirements(pip_requirements):
            target = os.path.join(cache_dir, "catalogues", "pip", _normalise_name(name))
            if os.path.exists(os.path.join(target, ".done")):
                continue
            os.makedirs(wheels, exist_ok=True)
            before = set(os.listdir(wheels))
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
                + ["--only-binary=:all:", f"{name}=={version}", "-d", wheels],
                check=True,
            )
            wheel = _find_wheel(wheels, name, version, before)
            _extract_zip(wheel, target)
            print(f"[corpora] {name}=={version}: {_count(target)} catalogues", flush=True)
    debian = []
    for requirements in (debian_requirements, names_requirements):
        if requirements and os.path.exists(requirements):
            debian += read_requirements(requirements)
    if debian:
        debs = os.path.join(cache_dir, "debs")
        for name, version, _ in debian:
            target = os.path.join(cache_dir, "catalogues", "debian", name)
            if os.path.exists(os.path.join(target, ".done")):
                continue
            os.makedirs(debs, exist_ok=True)
            deb = apt_download(name, version, debs)
            _extract_deb(deb, target)
            print(f"[corpora] {name}={version}: {_count(target)} catalogues", flush=True)
    return cache_dir


def apt_download(name, version, directory):
    """`apt-get download NAME=VERSION` into `directory` (nothing installed); returns the
    `.deb`'s path. Where the machine's package index predates the pinned version (no
    `apt-get update` since the pin), the index is updated once, as root, and the download
    tried again; else the error says so."""
    command = ["apt-get", "download", "-q", f"{name}={version}"]

    def download():  # apt's note on downloading unsandboxed as root stays out of the output
        return subprocess.run(
            command, cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    done = download()
    if done.returncode != 0 and "not found" in done.stderr and os.geteuid() == 0:
        subprocess.run(
            ["apt-get", "update", "-q"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        done = download()
    if done.returncode != 0:
        error = " ".join(line for line in done.stderr.splitlines() if line.startswith("E:"))
        raise RuntimeError(
            f"apt-get download {name}={version} failed: {error or done.stderr.strip()} "
            "(a package index older than the pin: run apt-get update)"
        )
    return _find_deb(directory, name, version)


def _find_wheel(directory, name, version, before):
    new = sorted(set(os.listdir(directory)) - before)
    candidates = new or [
        f
        for f in os.listdir(directory)
        if _normalise_name(f.split("-")[0]) == _normalise_name(name) and f"-{version}-" in f
    ]
    if not candidates:
        raise RuntimeError(f"pip download left no wheel for {name}=={version} in {directory}")
    return os.path.join(directory, candidates[0])


def _find_deb(directory, name, version):
    version = version.split(":", 1)[-1]  # the epoch is written %3a or left out in file names
    for f in sorted(os.listdir(directory)):
        if f.startswith(name + "_") and f.endswith(".deb"):
            file_version = f[len(name) + 1 :].rsplit("_", 1)[0].replace("%3a", ":").split(":")[-1]
            if file_version == version:
                return os.path.join(directory, f)
    raise RuntimeError(f"apt-get download left no .deb for {name}={version} in {directory}")


def _extract_zip(path, target):
    os.makedirs(target, exist_ok=True)
    with zipfile.ZipFile(path) as z:
        for member in z.namelist():
            if _is_catalogue(member):
                _write_member(target, member, z.read(member))
    open(os.path.join(target, ".done"), "w").close()


def _extract_deb(path, target):
    os.makedirs(target, exist_ok=True)
    data = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", path], check=True, stdout=subprocess.PIPE
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile() and _is_catalogue(member.name):
                _write_member(target, member.name, tar.extractfile(member).read())
    open(os.path.join(target, ".done"), "w").close()


def _write_member(target, name, data):
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    path = os.path.join(target, *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _count(directory):
    return len(glob.glob(os.path.join(directory, "**", "*.[mp]o"), recursive=True))


# ------------------------------------------------------------------------------ the sources
@dataclasses.dataclass
class Group:
    """One package's catalogues of the language: the unit the domain split holds out."""

    name: str
    kind: str  # "installed" | "pip" | "debian" | "given"
    version: str
    category: str
    paths: list


def language_catalogues(directory, language, domains=None):
    """The catalogue paths of `language` under `directory` (every `<lang>/LC_MESSAGES` found:
    the first existing of the language's locale names, as `find_catalogues`), sorted."""
    return sorted(_catalogues_under(directory, _locale_names(language), domains))


def corpus_groups(
    language,
    cache_dir=None,
    installed=DEFAULT_PACKAGES,
    pip_requirements=PIP_REQUIREMENTS,
    debian_requirements=DEBIAN_REQUIREMENTS,
):
    """The groups with catalogues of `language`: installed packages, then the fetched wheels,
    then the fetched Debian packages (a package not fetched or without the language is left
    out). A wheel whose package is also installed is read once (from the wheel)."""
    cache_dir = cache_dir or default_cache_dir()
    groups, seen = [], set()
    fetched = []
    for kind, requirements in (("pip", pip_requirements), ("debian", debian_requirements)):
        if not requirements or not os.path.exists(requirements):
            continue
        for name, version, category in read_requirements(requirements):
            key = _normalise_name(name) if kind == "pip" else name
            directory = os.path.join(cache_dir, "catalogues", kind, key)
            if os.path.isdir(directory):
                paths = language_catalogues(directory, language)
                if paths:
                    fetched.append(Group(name, kind, version, category, paths))
                    seen.add(_normalise_name(name))
    import importlib.metadata

    for package in installed or ():
        root = _package_dir(package)
        if root is None:
            continue
        distribution = _distribution_of(package)
        if _normalise_name(distribution or package) in seen or _normalise_name(package) in seen:
            continue
        paths = language_catalogues(root, language, DEFAULT_DOMAINS)
        if paths:
            try:
                version = importlib.metadata.version(distribution or package)
            except importlib.metadata.PackageNotFoundError:
                version = ""
            category = CATEGORIES.get(package, "web")
            groups.append(Group(package, "installed", version, category, paths))
    return groups + fetched


def _distribution_of(package):
    import importlib.metadata

    names = importlib.metadata.packages_distributions().get(package)
    return names[0] if names else None


# ------------------------------------------------------------------------------- filtering
# Scripts of a target language's letters (Unicode ranges); a letter outside them that the source
# does not hold marks a catalogue of another language. Languages not listed are not checked.
_LATIN = ((0x41, 0x5A), (0x61, 0x7A), (0xAA, 0xAA), (0xB5, 0xB5), (0xBA, 0xBA), (0xC0, 0x24F),
          (0x1E00, 0x1EFF))  # fmt: skip
_HAN = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
_KANA = ((0x3040, 0x30FF), (0x31F0, 0x31FF))
_CYRILLIC = ((0x400, 0x52F),)
SCRIPTS = {
    "es": (_LATIN, False),
    "fr": (_LATIN, False),
    "de": (_LATIN, False),
    "it": (_LATIN, False),
    "pt": (_LATIN, False),
    "zh": (_LATIN + _HAN, True),  # (letters allowed, a Han character required)
    "ja": (_LATIN + _HAN + _KANA, True),
    "ru": (_LATIN + _CYRILLIC, False),
}
_MESSAGE_ID = re.compile(r"[a-z][a-z0-9]*(?:[_.\-][a-z0-9]+)+")
_ACCELERATOR = re.compile(r"[_&](?=\w)")
_TRAILING = re.compile(r"[\s:.…]+$")
_SPACES = re.compile(r"\s+")


def _in(ranges, code):
    return any(lo <= code <= hi for lo, hi in ranges)


def wrong_script(language, source, target):
    """Whether `target` holds a letter of a script `language` does not use (and `source` does
    not hold), or, for Chinese / Japanese, no Han character."""
    rule = SCRIPTS.get(language.split("_")[0])
    if rule is None:
        return False
    allowed, needs_han = rule
    if needs_han and not any(_in(_HAN, ord(c)) for c in target):
        return True
    return any(c.isalpha() and not _in(allowed, ord(c)) and c not in source for c in target)


def normalise(text):
    """The key of normalised duplicates: case folded, accelerator marks removed, spaces
    collapsed, trailing `:` / `.` / `…` removed."""
    text = _ACCELERATOR.sub("", text.casefold())
    return _TRAILING.sub("", _SPACES.sub(" ", text)).strip()


def _length_logratio(source, target):
    return math.log((len(target) + 5) / (len(source) + 5))


@dataclasses.dataclass
class CorpusReport:
    """What `build_corpus` read and dropped. `kept + sum(drops.values()) == entries`."""

    language: str = ""
    entries: int = 0
    kept: int = 0
    drops: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(DROP_CAUSES, 0))
    per_group: dict = dataclasses.field(default_factory=dict)  # name -> {entries, kept, drops}
    split_sizes: dict = dataclasses.field(default_factory=dict)
    split_groups: dict = dataclasses.field(default_factory=dict)
    length_ratio_median: float = 0.0
    # catalogues skipped whole (not well-formed; `catalogues.BrokenCatalogueError`): their
    # entries are not counted in `entries`
    unreadable: list = dataclasses.field(default_factory=list)  # [(path, reason)]

    def drop(self, group, cause):
        self.drops[cause] += 1
        self.per_group[group]["drops"][cause] += 1

    def __str__(self):
        lines = [
            f"{self.language}: {self.kept} pairs kept of {self.entries} entries in "
            f"{len(self.per_group)} packages; dropped: "
            + ", ".join(f"{k} {v}" for k, v in self.drops.items() if v)
        ]
        if self.unreadable:
            lines.append(
                f"{len(self.unreadable)} unreadable catalogues skipped: "
                + "; ".join(f"{path}: {reason}" for path, reason in self.unreadable)
            )
        lines.append(
            "splits: "
            + ", ".join(
                f"{k} {self.split_sizes.get(k, 0)} ({len(self.split_groups.get(k, []))} packages)"
                if k in ("train", "val", "test")
                else f"{k} {self.split_sizes.get(k, 0)}"
                for k in SPLITS
            )
        )
        return "\n".join(lines)


@dataclasses.dataclass
class Corpus:
    splits: dict  # split -> [(source, target)]
    report: CorpusReport
    manifest: dict
    out_dir: str = None


def build_corpus(
    language,
    out_dir=None,
    groups=None,
    cache_dir=None,
    max_chars=200,
    max_ratio=3.0,
    test_pairs=3000,
    val_pairs=1000,
    test_in_domain_pairs=2000,
    max_group_share=0.5,
    seed=0,
    keep_identical=False,
):
    """Read, filter, deduplicate and split the catalogues of `language`.

    Args:
        language: a locale code (`"es"`, `"zh"`, ...; as `catalogue_pairs`).
        out_dir: if given, the directory the split files and `manifest.json` are written to.
        groups: `[Group]` or `{name: [paths]}` to read instead of `corpus_groups(language)`.
        cache_dir: the catalogue cache of `fetch_catalogues` (default `default_cache_dir()`).
        max_chars: drop pairs with a side longer than this many characters.
        max_ratio: the length-ratio bound around the median (see the module's docstring).
        test_pairs, val_pairs: about how many pairs the held-out groups of `test` / `val` hold
            (whole groups are added, in a seeded order alternating the categories, until the
            candidate pairs reach it; a group larger than `max_group_share` of it is never held out).
        test_in_domain_pairs: pairs drawn at random from the training groups' pairs.
        seed: the seed of the group order and of the in-domain sample.
        keep_identical: also train on the training groups' entries whose target is their
            source where that is the translation (`identical_kept`: names, codes, units,
            words the language writes alike), not only on pairs that differ. The held-out
            splits and the in-domain sample are the same as without it; only `train` grows.

    Returns:
        A `Corpus`: `.splits` (`train`, `val`, `test`, `test_in_domain` lists of pairs),
        `.report` (`CorpusReport`), `.manifest` (the dict written as `manifest.json`).
    """
    max_chars = check_int("max_chars", max_chars)
    max_ratio = check_number("max_ratio", max_ratio, low=1, low_open=True)
    _locale_names(language)
    if groups is None:
        groups = corpus_groups(language, cache_dir)
    elif isinstance(groups, dict):
        groups = [Group(name, "given", "", "given", list(paths)) for name, paths in groups.items()]
    report = CorpusReport(language=language)
    identical = {}
    candidates = _entry_filters(groups, report, max_chars, identical if keep_identical else None)
    median = _pair_filters(language, groups, candidates, report, max_ratio)
    held = _hold_out(groups, candidates, seed, test_pairs, val_pairs, max_group_share)
    kept, seen = _deduplicate(groups, candidates, held, report)
    extra = _identical(groups, candidates, held, identical, seen, report)
    splits = _splits(groups, kept, held, seed, test_in_domain_pairs, report, extra)
    assert report.kept + sum(report.drops.values()) == report.entries
    settings = {
        "max_chars": max_chars,
        "max_ratio": max_ratio,
        "length_ratio_median": median,
        "test_pairs": test_pairs,
        "val_pairs": val_pairs,
        "test_in_domain_pairs": test_in_domain_pairs,
        "max_group_share": max_group_share,
        "seed": seed,
        "keep_identical": keep_identical,
    }
    manifest = _manifest(language, settings, groups, held, report, cache_dir)
    corpus = Corpus(splits, report, manifest)
    if out_dir is not None:
        write_corpus(corpus, out_dir)
    return corpus


def _entry_filters(groups, report, max_chars, identical=None):
    """Pass 1: every entry of each group through the per-entry causes (header to too_long);
    `{group name: [(source, target)]}` of the candidates left. With `identical` (a dict), the
    entries whose target is their source and that pass the later per-entry causes are set
    aside there by group, neither kept nor dropped yet (`_identical` decides)."""
    candidates = {}
    for group in groups:
        stats = {"entries": 0, "kept": 0, "drops": dict.fromkeys(DROP_CAUSES, 0)}
        report.per_group[group.name] = stats
        rows = []
        for path in group.paths:
            try:
                entries = read_catalogue(path)
            except BrokenCatalogueError as error:
                report.unreadable.append((path, error.reason))
                continue
            for source, target, kind in entries:
                report.entries += 1
                stats["entries"] += 1
                if kind != "ok":
                    report.drop(group.name, kind)
                elif source == target:
                    if identical is not None and _entry_cause(source, target, max_chars) is None:
                        identical.setdefault(group.name, []).append((source, target))
                    else:
                        report.drop(group.name, "untranslated")
                elif cause := _entry_cause(source, target, max_chars):
                    report.drop(group.name, cause)
                else:
                    rows.append((source, target))
        candidates[group.name] = rows
    return candidates


def _entry_cause(source, target, max_chars):
    """The per-entry cause after `untranslated` that drops a pair (message_id, multiline,
    too_long, checked in that order), or None."""
    if _MESSAGE_ID.fullmatch(source):
        return "message_id"
    if any(c in source or c in target for c in "\t\n\r"):
        return "multiline"
    if max(len(source), len(target)) > max_chars:
        return "too_long"
    return None


_WORD = re.compile(r"[^\W\d_]{2,}")


def _words(text):
    """The words of `text` (2 or more letters) outside its placeholders, case folded."""
    from keras_attn.text.placeholders import PLACEHOLDER_PATTERN, placeholder_syntax

    text = re.sub(
        PLACEHOLDER_PATTERN,
        lambda m: m.group(0) if placeholder_syntax(m.group(0)) == "accelerator" else " ",
        text,
    )
    return {w.casefold() for w in _WORD.findall(text)}


def identical_kept(pairs, min_count=3, min_kept=0.5):
    """A test for entries whose target equals their source: `keep(text) -> bool`, True where
    that is the translation, judged by `pairs` (`[(source, target)]` that differ). A word (2
    or more letters) is one the language translates when it is in the sources of
    at least `min_count` of `pairs` and fewer than `min_kept` of their targets hold it too
    (case folded, placeholders left out); an identical entry is kept when none of its words
    is. So names, codes, units and words the language writes alike stay (`Albania`,
    `MPEG-PS`, `22050 Hz`, `General` in Spanish), a string left in English goes (`Open File`:
    Spanish translates "open" and "file")."""
    seen, kept = collections.Counter(), collections.Counter()
    for source, target in pairs:
        in_target = _words(target)
        for word in _words(source):
            seen[word] += 1
            kept[word] += word in in_target
    translated = {w for w, n in seen.items() if n >= min_count and kept[w] < min_kept * n}

    def keep(text):
        return not (_words(text) & translated)

    return keep


def _identical(groups, candidates, held, identical, seen, report):
    """The set-aside identical entries (`_entry_filters`) kept for training: `[(source,
    source)]` of the training groups' that `identical_kept` (judged by the training groups'
    candidates) keeps and that no kept source (`seen`, `_deduplicate`'s) holds. Every other
    one is dropped as untranslated (held-out groups' all: their splits stay as without them)."""
    if not identical:
        return []
    keep = identical_kept([p for g in groups if g.name not in held for p in candidates[g.name]])
    added = []
    for group in groups:
        rows = []
        for pair in identical.get(group.name, ()):
            if group.name in held or not keep(pair[0]):
                report.drop(group.name, "untranslated")
            else:
                rows.append(pair)
        added += _unique(group.name, rows, seen, report)
    return added


def _pair_filters(language, groups, candidates, report, max_ratio):
    """The causes that look at a pair as a whole (length_ratio, placeholder_mismatch,
    wrong_script), in place on `candidates`; returns the median length log-ratio."""
    from keras_attn.text.placeholders import placeholders_kept

    ratios = sorted(_length_logratio(s, t) for rows in candidates.values() for s, t in rows)
    median = ratios[len(ratios) // 2] if ratios else 0.0
    report.length_ratio_median = median
    bound = math.log(max_ratio)
    for group in groups:
        rows = []
        for source, target in candidates[group.name]:
            if abs(_length_logratio(source, target) - median) > bound:
                report.drop(group.name, "length_ratio")
            elif not placeholders_kept(source, target):
                report.drop(group.name, "placeholder_mismatch")
            elif wrong_script(language, source, target):
                report.drop(group.name, "wrong_script")
            else:
                rows.append((source, target))
        candidates[group.name] = rows
    return median


def _deduplicate(groups, candidates, held, report):
    """Pass 2: exact and normalised duplicates, training groups first (so a held-out source
    already kept for training is dropped there); `{group name: [(source, target)]}` kept."""
    order = [g for g in groups if g.name not in held]
    order += [g for g in groups if held.get(g.name) == "val"]
    order += [g for g in groups if held.get(g.name) == "test"]
    seen = (set(), set())
    kept = {name: [] for name in candidates}
    for group in order:
        kept[group.name] = _unique(group.name, candidates[group.name], seen, report)
    return kept, seen


def _unique(name, rows, seen, report):
    """The pairs of `rows` (group `name`) whose source, and its normalised form, `seen` (two
    sets, updated) does not hold yet, counted kept; the others dropped as duplicates."""
    sources, normal = seen
    out = []
    for source, target in rows:
        key = normalise(source)
        if source in sources:
            report.drop(name, "duplicate")
        elif key in normal:
            report.drop(name, "normalised_duplicate")
        else:
            sources.add(source)
            normal.add(key)
            out.append((source, target))
            report.kept += 1
            report.per_group[name]["kept"] += 1
    return out


def _splits(groups, kept, held, seed, test_in_domain_pairs, report, extra=()):
    """The four splits: held-out groups whole, `test_in_domain` a seeded sample of training.
    `extra`: training pairs never drawn for `test_in_domain` (the identical entries of
    `_identical`), so that sample is the one drawn without them."""
    train = [p for g in groups if g.name not in held for p in kept[g.name]]
    rng = random.Random(seed)
    index = list(range(len(train)))
    rng.shuffle(index)
    in_domain = set(index[: min(test_in_domain_pairs, len(train) // 10)])
    splits = {
        "train": [p for i, p in enumerate(train) if i not in in_domain] + list(extra),
        "val": [p for g in groups if held.get(g.name) == "val" for p in kept[g.name]],
        "test": [p for g in groups if held.get(g.name) == "test" for p in kept[g.name]],
        "test_in_domain": [train[i] for i in sorted(in_domain)],
    }
    report.split_sizes = {k: len(v) for k, v in splits.items()}
    report.split_groups = {
        "train": [g.name for g in groups if g.name not in held],
        "val": [g.name for g in groups if held.get(g.name) == "val"],
        "test": [g.name for g in groups if held.get(g.name) == "test"],
    }
    return splits


def _manifest(language, settings, groups, held, report, cache_dir):
    """The dict written as `manifest.json`."""
    return {
        "language": language,
        "settings": settings,
        "entries": report.entries,
        "kept": report.kept,
        "drops": report.drops,
        "unreadable": [[_short_path(p, cache_dir), why] for p, why in report.unreadable],
        "split_sizes": report.split_sizes,
        "split_groups": report.split_groups,
        "sources": [
            {
                "name": g.name,
                "kind": g.kind,
                "version": g.version,
                "category": g.category,
                "split": held.get(g.name, "train"),
                "catalogues": [_short_path(p, cache_dir) for p in g.paths],
                **report.per_group[g.name],
            }
            for g in groups
        ],
    }


def _hold_out(groups, candidates, seed, test_pairs, val_pairs, max_group_share):
    """`{group name: "test" | "val"}`: for each split, categories in turn, each giving its next
    group (seeded order) not yet held out and small enough, until the split's target is met."""
    by_category = collections.defaultdict(list)
    for g in groups:
        by_category[g.category].append(g)
    rng = random.Random(seed)
    queues = []
    for category in sorted(by_category):
        members = sorted(by_category[category], key=lambda g: g.name)
        rng.shuffle(members)
        queues.append(members)
    held = {}
    for split, target in (("test", test_pairs), ("val", val_pairs)):
        size, limit = 0, max_group_share * target
        while size < target:
            added = False
            for queue in queues:
                if size >= target:
                    break
                for g in queue:
                    n = len(candidates[g.name])
                    # At least one group always trains: never hold out every group.
                    if g.name in held or n == 0 or n > limit or len(held) + 1 >= len(groups):
                        continue
                    held[g.name] = split
                    size += n
                    added = True
                    break
            if not added:
                break
    return held


def _short_path(path, cache_dir):
    cache_dir = cache_dir or default_cache_dir()
    for root in (cache_dir, sys.prefix):
        try:
            if os.path.commonpath(
                [os.path.abspath(root), os.path.abspath(path)]
            ) == os.path.abspath(root):
                return os.path.relpath(path, root)
        except ValueError:
            pass
    return os.path.basename(path)


def build_names(language, out_dir=None, cache_dir=None, groups=None, max_chars=200):
    """The held-out names of `language`: `[(source, target)]` from the catalogues of the
    Debian packages of `corpora-names.txt` (the ISO names of countries and their regions,
    currencies, scripts and languages), each source once, that no catalogue of the corpus
    holds in any entry (kept or dropped, so no corpus built from them has seen it, its
    case-folded form neither). Names that stay as they are (`Aguascalientes`, `Baht`) and
    names the language writes otherwise (`Abruzzo` -> `Abruzos`) alike: where copying is
    the answer and where it is not. With `out_dir`, written to `out_dir/test_names.tsv`.

    `groups`: the corpus groups (default `corpus_groups(language, cache_dir)`)."""
    cache_dir = cache_dir or default_cache_dir()
    if groups is None:
        groups = corpus_groups(language, cache_dir)
    known = set()
    for group in groups:
        for path in group.paths:
            try:
                known.update(source for source, _, _ in read_catalogue(path))
            except BrokenCatalogueError:
                continue
    known_normal = {normalise(s) for s in known}
    pairs = []
    for name, _, _ in read_requirements(NAMES_REQUIREMENTS):
        directory = os.path.join(cache_dir, "catalogues", "debian", name)
        for path in language_catalogues(directory, language):
            for source, target, kind in read_catalogue(path):
                key = normalise(source)
                if kind != "ok" or source in known or key in known_normal:
                    continue
                if _entry_cause(source, target, max_chars):
                    continue
                known.add(source)
                known_normal.add(key)
                pairs.append((source, target))
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        write_tsv(pairs, os.path.join(out_dir, NAMES_FILE))
    return pairs


NAMES_FILE = "test_names.tsv"


def write_tsv(pairs, path):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for source, target in pairs:
            f.write(f"{source}\t{target}\n")


def write_corpus(corpus, out_dir):
    """`out_dir/{train,val,test,test_in_domain}.tsv` and `out_dir/manifest.json` (with the
    files' line counts and SHA-256)."""
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    for split in SPLITS:
        path = os.path.join(out_dir, f"{split}.tsv")
        write_tsv(corpus.splits[split], path)
        with open(path, "rb") as f:
            files[f"{split}.tsv"] = {
                "pairs": len(corpus.splits[split]),
                "sha256": hashlib.sha256(f.read()).hexdigest(),
            }
    corpus.manifest["files"] = files
    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(corpus.manifest, f, indent=1, ensure_ascii=False)
    corpus.out_dir = out_dir
    return out_dir


def load_corpus(directory):
    """The splits and manifest written by `build_corpus(..., out_dir=directory)`."""
    from keras_attn.data.tsv import load_tsv

    splits = {}
    for split in SPLITS:
        path = os.path.join(directory, f"{split}.tsv")
        splits[split] = load_tsv(path)[0] if os.path.exists(path) else []
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return splits, manifest


def copy_corpus(source_dir, out_dir):
    """Copy a built corpus's files (the split TSVs and `manifest.json`) into `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    for name in [f"{s}.tsv" for s in SPLITS] + [NAMES_FILE, "manifest.json"]:
        path = os.path.join(source_dir, name)
        if os.path.exists(path):
            shutil.copyfile(path, os.path.join(out_dir, name))
    return out_dir


def main(argv=None):
    """`python -m keras_attn.data.corpora [--fetch] [--language es zh] [--out DIR]`."""
    import argparse

    p = argparse.ArgumentParser(description="Build the gettext-catalogue corpora.")
    p.add_argument("--fetch", action="store_true", help="download and extract the catalogues")
    p.add_argument("--language", nargs="*", default=["es", "zh"])
    p.add_argument("--cache", default=None, help="catalogue cache (default: %(default)s)")
    p.add_argument("--out", default=None, help="corpus directory (default: CACHE/built/LANG)")
    p.add_argument("--max-chars", type=int, default=200)
    p.add_argument(
        "--keep-identical",
        action="store_true",
        help="also train on identical entries that are the translation (build_corpus)",
    )
    args = p.parse_args(argv)
    cache = args.cache or default_cache_dir()
    if args.fetch:
        fetch_catalogues(cache)
    for language in args.language:
        out = (
            os.path.join(args.out, language)
            if args.out
            else built_dir(language, cache, args.keep_identical)
        )
        corpus = build_corpus(
            language,
            out,
            cache_dir=cache,
            max_chars=args.max_chars,
            keep_identical=args.keep_identical,
        )
        print(corpus.report, flush=True)
        names = build_names(language, out, cache_dir=cache, max_chars=args.max_chars)
        print(f"{language}: {len(names)} held-out names ({NAMES_FILE})", flush=True)
        print(f"wrote {out}", flush=True)


def built_dir(language, cache_dir=None, keep_identical=False):
    """Where `make corpora` writes the corpus of `language`: `CACHE/built/LANG`, and with
    `keep_identical` (`build_corpus`'s) `CACHE/built-identical/LANG`."""
    root = "built-identical" if keep_identical else "built"
    return os.path.join(cache_dir or default_cache_dir(), root, language)


if __name__ == "__main__":
    main()
