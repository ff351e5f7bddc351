"""Filling a catalogue's untranslated entries with a translator, whatever its format."""

from __future__ import annotations

import collections
import dataclasses
import os
import sys

from keras_attn import _checks
from keras_attn.catalogue.base import (
    FILLED,
    NO_ANSWER,
    PLACEHOLDERS_LOST,
    SOURCE_COPIED,
    UNTRANSLATED,
    CatalogueError,
    write_atomically,
)
from keras_attn.text.placeholders import extract_placeholders, placeholders_kept


@dataclasses.dataclass
class Problem:
    """An entry left untranslated: where it is, its source text and the answer refused."""

    key: str
    line: int | None
    status: str
    source: str
    answer: str

    @property
    def message(self):
        if self.status == PLACEHOLDERS_LOST:
            return (
                f"placeholders lost, left untranslated: {self.source!r} -> {self.answer!r} "
                f"(needs {extract_placeholders(self.source)})"
            )
        if self.status == SOURCE_COPIED:
            return f"the source answered unchanged, left untranslated: {self.source!r}"
        return f"no answer, left untranslated: {self.source!r}"

    def where(self, path):
        """`path:line: message` (the key where the format gives no line)."""
        return (
            f"{path}:{self.line}: {self.message}"
            if self.line
            else f"{path}: {self.key}: {self.message}"
        )

    def __str__(self):
        return f"line {self.line}: {self.message}" if self.line else f"{self.key}: {self.message}"


@dataclasses.dataclass
class FillReport:
    """`counts`: entries per status (`translated`, `fuzzy`, `obsolete` as read and kept;
    `untranslated` still so in a dry run; `filled`, `placeholders_lost`, `no_answer`,
    `source_copied` after a run); `problems`: the entries left untranslated; `texts`: the
    texts sent to the translator (each distinct source once)."""

    counts: dict
    problems: list
    texts: int

    def summary(self):
        return ", ".join(f"{n} {status}" for status, n in self.counts.items())


def fill_catalogue(
    catalogue, translate, batch_size=16, dry_run=False, progress=None, keep_copies=False
):
    """Fills the untranslated entries of `catalogue` (`read_catalogue`) in place.

    Args:
        catalogue: a `Catalogue`.
        translate: a callable, list of source texts -> list of their translations (one each),
            e.g. `translator("export/models/ui")`.
        batch_size: source texts per call of `translate`.
        dry_run: count the entries per status, translate nothing.
        progress: a callable `(done, total)` called after each batch (None: nothing).
        keep_copies: fill an entry with an answer that is its source unchanged too (default:
            left untranslated and reported as `source_copied`: an export answers the source
            where no hypothesis keeps its placeholders, and a catalogue reader such as
            `catalogue_pairs` counts a translation equal to its source as untranslated).

    Entries already translated, awaiting review or obsolete are never touched. Each distinct
    source text is translated once; an entry is filled (and marked for review where the format
    has a mark) only when every form's answer holds exactly its source's placeholders
    (`keras_attn.text.placeholders.placeholders_kept`), is not empty and, without
    `keep_copies`, is not its source unchanged; else it stays untranslated and is
    reported.

    Returns:
        A `FillReport`.
    """
    batch_size = _checks.check_int("batch_size", batch_size)
    todo = [e for e in catalogue.entries if e.status == UNTRANSLATED]
    texts = list(dict.fromkeys(s for e in todo for s in e.sources))
    if dry_run:
        counts = collections.Counter(e.status for e in catalogue.entries)
        return FillReport(dict(counts), [], len(texts))
    answers = {}
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        got = list(translate(batch))
        if len(got) != len(batch):
            raise ValueError(
                f"`translate` must answer one text per source. Received: {len(got)} answers for {len(batch)} sources"
            )
        answers.update(zip(batch, got))
        if progress is not None:
            progress(min(start + batch_size, len(texts)), len(texts))
    checks = [  # (the status of an entry one of whose forms fails, the failure), in order
        (NO_ANSWER, lambda source, answer: not answer.strip()),
        (PLACEHOLDERS_LOST, lambda source, answer: not placeholders_kept(source, answer)),
    ]
    if not keep_copies:
        checks.append((SOURCE_COPIED, source_unchanged))
    problems = []
    for entry in todo:
        forms = [answers[s] for s in entry.sources]
        status, bad = FILLED, None
        for failed, fails in checks:
            bad = next(
                (i for i, pair in enumerate(zip(entry.sources, forms)) if fails(*pair)), None
            )
            if bad is not None:
                status = failed
                break
        if status == FILLED:
            catalogue.format.fill(catalogue, entry, forms)
        else:
            problems.append(Problem(entry.key, entry.line, status, entry.sources[bad], forms[bad]))
        entry.status = status
    counts = collections.Counter(e.status for e in catalogue.entries)
    return FillReport(dict(counts), problems, len(texts))


def source_unchanged(source, answer):
    """Whether `answer` is `source` unchanged (white space at the ends aside)."""
    return answer.strip() == source.strip()


def write_catalogue(catalogue, path, overwrite_input=False):
    """Writes `catalogue` to `path` atomically (a temporary file renamed over it). Writing over
    the file it was read from needs `overwrite_input=True`."""
    same = os.path.exists(path) and os.path.samefile(path, catalogue.path)
    if same and not overwrite_input:
        raise CatalogueError(
            path, "the output is the input catalogue: name another file, or ask to overwrite it"
        )
    write_atomically(path, catalogue.format.dump(catalogue))


def progress_bar(stream=None, width=30):
    """A `progress` callable for `fill_catalogue` that draws `[#####     ] 12/40 texts` on
    `stream` (default stderr), redrawn in place, a newline when done."""
    stream = sys.stderr if stream is None else stream

    def show(done, total):
        filled = width * done // max(total, 1)
        stream.write(f"\r[{'#' * filled}{' ' * (width - filled)}] {done}/{total} texts")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show
