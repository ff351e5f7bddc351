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
