"""What every catalogue format shares: the entry a reader hands over, the error that names
the file and line, and the atomic write."""

from __future__ import annotations

import dataclasses
import os
import tempfile

# An entry's status as read; `fill_catalogue` adds the outcome of the untranslated ones.
TRANSLATED = "translated"  # a translation is there: never touched
UNTRANSLATED = "untranslated"  # to be filled
FUZZY = "fuzzy"  # a translation awaits review (gettext `fuzzy`, Qt `unfinished`): kept
OBSOLETE = "obsolete"  # gettext `#~` / Qt `vanished` or `obsolete`: kept
STATUSES = (TRANSLATED, UNTRANSLATED, FUZZY, OBSOLETE)
# What filling makes of an untranslated entry.
FILLED = "filled"  # given the translator's answer, marked for review
PLACEHOLDERS_LOST = "placeholders_lost"  # the answer does not hold exactly the source's
# placeholders: left untranslated and reported
NO_ANSWER = "no_answer"  # the translator answered empty text: left untranslated
SOURCE_COPIED = "source_copied"  # the answer is its source unchanged (an export answers the
# source where no hypothesis keeps its placeholders): left untranslated and reported, unless
# `keep_copies`


def status_of(obsolete, fuzzy, translated):
    """An entry's status from what its format marks, in every format's order: obsolete
    first, then awaiting review, then translated; else untranslated."""
    if obsolete:
        return OBSOLETE
    if fuzzy:
        return FUZZY
    return TRANSLATED if translated else UNTRANSLATED


class CatalogueError(ValueError):
    """A catalogue that cannot be read or written: `str()` is one line naming the file and,
    where the error is at one, its line (`path:line: message`)."""

    def __init__(self, path, message, line=None):
        self.path, self.line, self.message = os.fspath(path), line, message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


@dataclasses.dataclass
class Entry:
    """One message of a catalogue, as a reader hands it over.

    `key`: how the user finds it (a gettext msgid and context, a JSON key path, a Qt context
    and source); `line`: its line in the file (1-based; None where the format gives none);
    `sources`: the source text to translate for each form the translation must have, one for a
    plain message, one per plural form of the target language for a plural one; `status`: one
    of `STATUSES`; `handle`: the format's own object the writer fills."""

    key: str
    line: int | None
    sources: tuple
    status: str
    handle: object = None

    @property
    def plural(self):
        return len(self.sources) > 1


@dataclasses.dataclass
class Catalogue:
    """A catalogue read by its format: the entries in file order, the target language
    (a code such as `es` or `pt_BR`; None where neither the file nor the caller gives it) and
    the format's document the writer saves."""

    path: str
    format: object
    entries: list
    language: str | None
    document: object


def write_atomically(path, data):
    """Writes `data` (bytes) to `path` through a temporary file in the same folder renamed over
    it: a reader of `path` sees the old file or the new one whole, never a part."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path):
            os.chmod(temp, os.stat(path).st_mode & 0o777)
        else:
            os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise
