"""docs/decoding.md's example runs as written (its asserts are the page's claims)."""

import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "decoding.md"


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Overrides the shared Keras reset (slow): the example builds no Keras objects."""
    yield


def test_decoding_page_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert blocks
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/decoding.md python block {i + 1}", "exec"), {})
