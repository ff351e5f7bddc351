"""examples/demo.py (what `make demo` runs) end to end on a tiny run: trains, exports behind the
date grammar, prints the n-best of every demo date through the exported beam_search signature,
writes the heat map. One epoch on 256 examples translates badly; the answers are still dates
that exist, in the source's year, or "" for a year outside 1950-2049."""

import datetime
import re

from babel.dates import format_date

from keras_attn.data.date_grammar import is_iso_date, source_year
from tests.examples.helpers import is_png, run_script

# The demo's inputs: 21 November 2026 written the way these CLDR locales and styles write it,
# then dates as people write them with ordinals, and a year before the range trained on.
STYLES = [
    ("es", "long"),
    ("zh", "long"),
    ("en_US", "medium"),
    ("de", "short"),
    ("fr", "full"),
    ("ru", "long"),
    ("en_GB", "medium"),
]
WRITTEN = [
    ("March 3rd, 2001", "2001-03-03"),
    ("le 1er mai 1968", "1968-05-01"),
    ("29 de febrero de 2024", "2024-02-29"),
    ("le 14 juillet 1789", ""),
]


def test_demo_smoke_prints_nbest_and_heatmap(tmp_path):
    export = tmp_path / "export" / "dates"
    log = run_script(
        "demo.py",
        "--smoke",
        "--beam-size",
        "2",
        "--export-dir",
        str(export),
        "--out",
        str(tmp_path / "run"),
        verbose=False,
    )
    assert (export / "1" / "saved_model.pb").exists()
    assert "beam_search signature, beam_size=2" in log
    day = datetime.date(2026, 11, 21)
    examples = [(format_date(day, format=fmt, locale=loc), "2026-11-21") for loc, fmt in STYLES]
    examples += WRITTEN
    # Each input, then its 2 ranked hypotheses "  1. <text> <score>" and "  2. ...".
    blocks = re.findall(
        r"^(.*)    \(right answer: (.*)\)\n {4}1\. (\S+) +(\S+)\n {4}2\. (\S+) +(\S+)$",
        log,
        flags=re.M,
    )
    assert [(source, answer) for source, answer, *_ in blocks] == [
        (source, answer or '""') for source, answer in examples
    ]
    right = 0
    for (source, answer), (_, _, first, s1, second, s2) in zip(examples, blocks):
        assert float(s1) >= float(s2)  # best first
        for text in (first, second):
            if answer == "":  # a year outside the range: no date
                assert text == '""', source
            elif text != '""':  # "": a lower rank with no date left
                assert is_iso_date(text) and 1950 <= int(text[:4]) <= 2049, (source, text)
                if source_year(source):  # a year written with four digits is the answer's
                    assert int(text[:4]) == source_year(source), (source, text)
        assert first != '""' or answer == ""
        right += first == (answer or '""')
    assert f"Right at rank 1: {right} of {len(examples)}" in log.splitlines()
    (png,) = re.findall(r"Attention heat map of .*: (\S+\.png)$", log, flags=re.M)
    assert is_png(png)
