"""Parallel corpus from a TSV file: `source<TAB>target` per line.

The Tatoeba / ManyThings "Anki" export format (`Go.<TAB>Ve.<TAB>CC-BY 2.0 (France) Attribution:
...`): columns after the second are ignored. Bad lines are skipped and counted, never fatal:
blank lines, lines without a tab, lines that are not valid in the file's encoding (UTF-8 by
default; a file with mixed encodings keeps its valid lines), lines whose source or target is
empty after stripping, and lines longer than `max_length`. Byte-order marks and "\\r\\n" line
ends are accepted.
"""

from __future__ import annotations

import dataclasses
import os
import random

from keras_attn._checks import check_int, check_split_fractions
from keras_attn.data.skips import SkipReport


@dataclasses.dataclass
class TsvReport(SkipReport):
    """What `load_tsv` read. `kept + blank + no_tab + undecodable + empty_field + too_long == lines`."""

    lines: int = 0
    kept: int = 0
    blank: int = 0
    no_tab: int = 0
    undecodable: int = 0
    empty_field: int = 0
    too_long: int = 0
    extra_columns: int = 0  # kept lines that had more than two columns (not a skip reason)
    first_bad_lines: dict = dataclasses.field(
        default_factory=dict
    )  # reason -> first 1-based line number

    REASONS = ("blank", "no_tab", "undecodable", "empty_field", "too_long")

    @property
    def skipped(self):
        return self.lines - self.kept

    def _skip(self, reason, line_no):
        super()._skip(reason)
        self.first_bad_lines.setdefault(reason, line_no)

    def _reason_part(self, reason, count):
        first = self.first_bad_lines[reason]
        return f"{super()._reason_part(reason, count)} (first at line {first})"

    def __str__(self):
        parts = [f"{self.kept} of {self.lines} lines kept", *self._skip_parts()]
        if self.extra_columns:
            parts.append(f"{self.extra_columns} with extra columns ignored")
        return "; ".join(parts)


def load_tsv(path, max_length=None, encoding="utf-8", swap=False, lowercase=False):
    """Read `(source, target)` pairs from a TSV file.

    Args:
        path: file path (or a bytes object holding the file's content).
        max_length: if given, drop pairs whose source or target has more characters than this.
        encoding: the encoding lines must be valid in; others are skipped as undecodable.
        swap: return `(target, source)` (translate the other way).
        lowercase: lowercase both sides.

    Returns:
        `(pairs, report)`: a list of `(source, target)` str tuples (stripped) and a `TsvReport`.
    """
    max_length = check_int("max_length", max_length, allow_none=True)
    if isinstance(path, (bytes, bytearray)):
        data = bytes(path)
    else:
        with open(os.fspath(path), "rb") as f:
            data = f.read()
    report, pairs = TsvReport(), []
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the final newline does not start a line
    for line_no, raw in enumerate(raw_lines, start=1):
        report.lines += 1
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            line = raw.decode(encoding)
        except UnicodeDecodeError:
            report._skip("undecodable", line_no)
            continue
        line = line.lstrip("\ufeff")  # byte-order mark (first line, or files joined with cat)
        if not line.strip():
            report._skip("blank", line_no)
            continue
        columns = line.split("\t")
        if len(columns) < 2:
            report._skip("no_tab", line_no)
            continue
        source, target = columns[0].strip(), columns[1].strip()
        if not source or not target:
            report._skip("empty_field", line_no)
            continue
        if max_length is not None and max(len(source), len(target)) > int(max_length):
            report._skip("too_long", line_no)
            continue
        if len(columns) > 2:
            report.extra_columns += 1
        if lowercase:
            source, target = source.lower(), target.lower()
        pairs.append((target, source) if swap else (source, target))
        report.kept += 1
    return pairs, report


def split_pairs(pairs, val_fraction=0.1, test_fraction=0.1, seed=0):
    """Shuffle with `random.Random(seed)` and cut into (train, val, test) lists.

    Pairs with the same source land in the same split, so no test source is seen in training
    (Tatoeba lists many translations of one sentence).
    """
    check_split_fractions(val_fraction, test_fraction, allow_zero=True)
    sources = sorted({source for source, _ in pairs})
    random.Random(seed).shuffle(sources)
    n_test = int(round(test_fraction * len(sources)))
    n_val = int(round(val_fraction * len(sources)))
    test_sources = set(sources[:n_test])
    val_sources = set(sources[n_test : n_test + n_val])
    train, val, test = [], [], []
    for pair in pairs:
        (test if pair[0] in test_sources else val if pair[0] in val_sources else train).append(pair)
    return train, val, test
