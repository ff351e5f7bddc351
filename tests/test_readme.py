"""The claims of the docs' print lines (`print(...)  # (2, 5, 32)`) and their checker.

tests/test_docs_blocks.py runs every ```python block of README.md and docs/*.md alone and
checks each claim with `check_claim`."""

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
SHAPES = r"\((?:\d+(?:, )?)*,?\)"  # "(2, 5, 32)", "(3,)", "()"


def _blocks(text=None):
    text = README.read_text(encoding="utf-8") if text is None else text
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _claims(block):
    """The comment after every `print(...)` line of `block`, in order ("" when there is none)."""
    return [
        line.split("#", 1)[1].strip() if "#" in line else ""
        for line in block.splitlines()
        if line.lstrip().startswith("print(")
    ]


def check_claim(claim, args, text, namespace):
    """Raise AssertionError unless the printed `args` (shown as `text`) bear out `claim`.

    Claims understood: "e.g. ..." (an illustration, not checked: drawn data); a run of shapes
    ("(2, 5, 32) (2, 5, 9)"), which must be exactly what is printed; "NAME ~VALUE" for a printed
    dict (within 0.05); "best first" for a search output `out` in the namespace (scores
    non-increasing along the beam); else the claim is the printed text, exactly ("True False").
    """
    if claim.startswith("e.g. ") or claim == text:
        return
    rest = claim
    shapes = re.match(rf"((?:{SHAPES} ?)+)", claim)
    if shapes:
        assert text == shapes.group(1).strip(), (claim, text)
        rest = claim[shapes.end() :].lstrip(", ")
    for name, value in re.findall(r"(\w+) ~(-?[0-9.]+)", rest):
        (printed,) = args
        assert abs(float(printed[name]) - float(value)) <= 0.05, (claim, printed)
        rest = rest.replace(f"{name} ~{value}", "").strip(", ")
    if rest == "best first":
        scores = np.asarray(namespace["out"]["scores"])
        assert np.all(np.diff(scores, axis=-1) <= 1e-6), (claim, scores)
        rest = ""
    assert rest == "", f"a claim this test does not understand: {claim!r}"


def test_readme_has_python_examples():
    assert len(_blocks()) >= 5


def test_readme_claims_its_outputs():
    """The README's print lines carry claims (tests/test_docs_blocks.py runs the blocks and
    checks them): attention shapes, the decoders', the hard-attention accuracy and the beam
    search's shapes and order."""
    claimed = [claim for block in _blocks() for claim in _claims(block) if claim]
    assert len(claimed) >= 8, claimed


def test_a_wrong_claim_fails():
    """The checker itself: a shape, a value and an order that are not what is printed."""
    import pytest

    for claim, args, text in [
        ("(2, 5, 31)", ((2, 5, 32),), "(2, 5, 32)"),
        ("(2, 5, 32) (2, 5, 9)", ((2, 5, 32),), "(2, 5, 32)"),
        ("accuracy ~1.0", ({"accuracy": 0.5},), "{'accuracy': 0.5}"),
    ]:
        with pytest.raises(AssertionError):
            check_claim(claim, args, text, {})
    with pytest.raises(AssertionError):
        check_claim("(2, 2), best first", ((2, 2),), "(2, 2)", {"out": {"scores": [[-2.0, -1.0]]}})
    with pytest.raises(AssertionError, match="does not understand"):
        check_claim("about right", ((),), "()", {})
    with pytest.raises(AssertionError):
        check_claim("True False", (True, True), "True True", {})
    check_claim("True False", (True, False), "True False", {})
    check_claim("(2, 2), best first", ((2, 2),), "(2, 2)", {"out": {"scores": [[-1.0, -2.0]]}})


# ------------------------------------------------------------------ the results table's numbers
RESULTS = README.parent / "benchmarks" / "RESULTS.md"
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?%?")
CORPUS = {
    "en→es": ("real-size corpus en->es", "`corpus-es`"),
    "en→zh": ("real-size corpus en->zh", "`corpus-zh`"),
    "en→es, 15 min": ("real-size corpus en->es, 15 min", "`corpus-es-15`"),
    "en→es, 90 min": ("real-size corpus en->es, 90 min", "`corpus-es-90`"),
}


def results_table(text):
    """The rows `[cells]` (header and rule left out) of README's results table: the first table
    after the heading "Translating real text"."""
    section = text[text.index("### Translating real text") :]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def quality_section(text):
    return text[text.index("<!-- quality:begin -->") : text.index("<!-- quality:end -->")]


def _shows(shown, written):
    """Whether the README's `shown` number ("49.5", "6", "99.1%") is the RESULTS.md number
    `written` ("49.4681", "6", "0.9909") as the README rounds it."""
    from decimal import ROUND_HALF_UP, Decimal

    percent = shown.endswith("%")
    shown = shown.rstrip("%").replace(",", "")
    value = Decimal(written.replace(",", ""))
    if percent:
        if "." not in written:
            return False  # a percentage is written as a fraction, "0.9909"
        value *= 100
    elif "." not in shown:
        return "." not in written and value == Decimal(shown)  # counts: exactly
    step = Decimal(1).scaleb(-len(shown.split(".")[1]) if "." in shown else 0)
    return value.quantize(step, rounding=ROUND_HALF_UP) == Decimal(shown)


def missing_numbers(readme_text, results_text):
    """`[(corpus, number)]` of README's results table not in RESULTS.md's quality section, on a
    line of the same corpus (its task "real-size corpus en->es" or its command `corpus-es`)."""
    lines = quality_section(results_text).splitlines()
    missing = []
    for row in results_table(readme_text):
        corpus, cells = row[0], row[1:]
        names = CORPUS[corpus]
        written = [
            n for line in lines if any(name in line for name in names) for n in NUMBER.findall(line)
        ]
        for number in (n for cell in cells for n in NUMBER.findall(cell)):
            if not any(_shows(number, w) for w in written if not w.endswith("%")):
                missing.append((corpus, number))
    return missing


def test_results_table_numbers_are_in_results_md():
    """Every number of README's results table is a `make quality` figure of benchmarks/RESULTS.md
    (rounded as shown), on a line of the same corpus."""
    readme, results = README.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    rows = results_table(readme)
    assert [row[0] for row in rows] == list(CORPUS), rows
    assert sum(len(NUMBER.findall(cell)) for row in rows for cell in row[1:]) >= 16, rows
    assert missing_numbers(readme, results) == []


def test_a_number_not_in_results_md_fails():
    readme, results = README.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    es_row = next(line for line in readme.splitlines() if line.startswith("| en→es"))
    chrf = NUMBER.findall(es_row.split("|")[3])[0]  # the test chrF
    wrong = es_row.replace(chrf, f"{float(chrf) + 0.1:.1f}", 1)
    assert missing_numbers(readme.replace(es_row, wrong), results) == [
        ("en→es", f"{float(chrf) + 0.1:.1f}")
    ]
    # the other corpus's figure does not count for this one
    zh_row = next(line for line in readme.splitlines() if line.startswith("| en→zh"))
    zh_chrf = NUMBER.findall(zh_row.split("|")[3])[0]
    swapped = readme.replace(es_row, es_row.replace(chrf, zh_chrf, 1))
    assert ("en→es", zh_chrf) in missing_numbers(swapped, results)
    assert not _shows("99.1%", "99.1") and _shows("99.1%", "0.9909") and _shows("100%", "1.0000")
    assert not _shows("6", "6.0") and _shows("49.5", "49.4681") and not _shows("49.5", "49.4")
