"""examples/demo.py (what `make demo` runs) end to end on a tiny run: trains, exports, prints the
n-best of every demo date through the exported beam_search signature, writes the heat map."""

import datetime
import re

from babel.dates import format_date

from tests.examples.helpers import is_png, run_script

# The demo's inputs: 21 November 2026 written the way these CLDR locales and styles write it.
STYLES = [
    ("es", "long"),
    ("zh", "long"),
    ("en_US", "medium"),
    ("de", "short"),
    ("fr", "full"),
    ("ru", "long"),
    ("en_GB", "medium"),
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
    # 7 demo dates, each with 2 ranked hypotheses "  1. <text> <score>" and "  2. ...".
    ranks = re.findall(r"^ {4}([12])\. .* +(-?[0-9.]+|-inf)$", log, flags=re.M)
    assert [r for r, _ in ranks] == ["1", "2"] * 7
    scores = [float(s) for _, s in ranks]
    assert all(a >= b for a, b in zip(scores[0::2], scores[1::2]))  # best first
    # Each input is a real rendering of 2026-11-21, and the verdict counts the rank-1 answers
    # that equal its ISO form.
    day = datetime.date(2026, 11, 21)
    sources = [format_date(day, format=fmt, locale=loc) for loc, fmt in STYLES]
    lines = log.splitlines()
    for source in sources:
        assert source in lines
    top = re.findall(r"^ {4}1\. (.*?) +(?:-?[0-9.]+|-inf)$", log, flags=re.M)
    assert len(top) == 7
    right = sum(text == "2026-11-21" for text in top)
    assert f"Right at rank 1: {right} of 7 (the answer is 2026-11-21)" in lines
    (png,) = re.findall(r"Attention heat map of .*: (\S+\.png)$", log, flags=re.M)
    assert is_png(png)
