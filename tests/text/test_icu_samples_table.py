"""The rows `tools/catalogue_samples.py measure` prints, from answers written out by hand: the
placeholders kept per syntax, the ICU structure kept, the answers that loop."""

import importlib.util
import pathlib
import sys

SPEC = importlib.util.spec_from_file_location(
    "catalogue_samples",
    pathlib.Path(__file__).resolve().parents[2] / "tools" / "catalogue_samples.py",
)
samples = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("catalogue_samples", samples)  # its dataclasses look it up
SPEC.loader.exec_module(samples)


def test_rows():
    texts = [
        "{n, plural, one {# file} other {# files}}",
        "{n, plural, one {# file} other {# files}}",
        "Delete %s?",
        "Open %s and %s",
        "Page $1",
    ]
    answers = [
        "{n, plural, one {# archivo} other {# archivos}}",  # kept
        "{n, plural, one {archivo} other {# # archivos}}",  # the pieces kept, a `#` moved
        "¿Borrar?",  # %s lost
        "Abrir %s y y y %s",  # kept, and a loop
        " Page $1",  # the source back unchanged
    ]
    rows = {row[1]: row[2:] for row in samples.sample_rows("s", texts, answers)}
    assert rows["(ICU structure)"] == (2, "50.0%")
    assert rows["printf"] == (2, "50.0%")
    assert rows["icu"] == (2, "100.0%")  # every piece there, as often, in any order
    assert rows["(a word three times in a row)"] == (5, 1)
    assert rows["(answered with the source)"] == (5, 1)
    assert "(ICU structure)" not in {r[1] for r in samples.sample_rows("s", texts[2:], answers[2:])}
