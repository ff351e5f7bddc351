"""The README's quick start runs as written (every ```python block, in order, in one namespace),
and what its `print(...)  # claim` lines claim is what they print."""

import builtins
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

    Claims understood: a run of shapes ("(2, 5, 32) (2, 5, 9)"), which must be exactly what is
    printed; "NAME ~VALUE" for a printed dict (within 0.05); "best first" for a search output
    `out` in the namespace (scores non-increasing along the beam).
    """
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


def run_blocks(blocks):
    """Run `blocks` in one namespace; returns `[(claim, args, text)]` for every claimed print."""
    namespace = {"__name__": "readme"}
    checked = []
    for i, block in enumerate(blocks):
        printed = []

        def record(*args, **kwargs):
            printed.append((args, " ".join(str(a) for a in args)))
            builtins.print(*args, **kwargs)

        namespace["print"] = record
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
        claims = _claims(block)
        assert len(printed) == len(claims), (
            f"block {i + 1}: prints {len(printed)}, lines {len(claims)}"
        )
        for claim, (args, text) in zip(claims, printed):
            if claim:
                check_claim(claim, args, text, namespace)
                checked.append((claim, args, text))
    return checked


def test_readme_has_python_examples():
    assert len(_blocks()) >= 5


def test_readme_quick_start_runs_and_prints_what_it_claims():
    checked = run_blocks(_blocks())
    # The claims of today's README: attention shapes, the decoder's, the hard-attention
    # accuracy and the beam search's shapes and order.
    assert len(checked) >= 4, checked


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
    check_claim("(2, 2), best first", ((2, 2),), "(2, 2)", {"out": {"scores": [[-1.0, -2.0]]}})
