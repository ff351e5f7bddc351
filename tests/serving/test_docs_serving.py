"""docs/serving.md's Python blocks run as written, in order, in one namespace."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def test_serving_page_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 2
    namespace = {"__name__": "docs"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("/dates/2")
    assert printed[1] == "(1,) True"  # one greedy answer; every warm-up request answered
