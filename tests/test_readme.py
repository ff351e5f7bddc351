"""The README's quick start runs as written: every ```python block, in order, in one namespace."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_examples():
    assert len(_blocks()) >= 5


def test_readme_quick_start_runs():
    namespace = {"__name__": "readme"}
    for i, block in enumerate(_blocks()):
        code = compile(block, f"README.md python block {i + 1}", "exec")
        exec(code, namespace)  # noqa: S102 - the README is ours
