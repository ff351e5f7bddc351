"""Every ```python block of README.md and docs/*.md runs as it stands, alone, in a fresh
namespace, and what its `print(...)  # claim` lines claim is what they print.

A block that cannot run here (it needs a running TensorFlow Serving server, or a training
run of many minutes) is marked by an HTML comment on the line just above its fence, which
the rendered page does not show:

    <!-- not run: needs a TensorFlow Serving server -->

The pages run in one subprocess (`python tests/test_docs_blocks.py PAGE [PAGE ...]`, so
TensorFlow is imported once), one fresh namespace per block, so no block leans on another's
imports or variables; Keras' global settings (dtype policy, floatx, epsilon, image data format)
and its session are reset before each page, so no page leans on a setting another page changed.
"""

import builtins
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# `DOCS_PAGES="README.md docs/serving.md"` runs those pages only (make test-oldest: the README).
_ONLY = os.environ.get("DOCS_PAGES", "").split()
ALL_PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
PAGES = [page for page in ALL_PAGES if not _ONLY or str(page.relative_to(ROOT)) in _ONLY]
# The marker, on the line just above the fence; the reason after the colon is required.
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S[^>]*?)\s*-->\s*$")
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def blocks(text):
    """`[(line, code, reason)]` for every ```python block of `text`: the fence's line number,
    the code, and the not-run reason (None: the block runs)."""
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        found.append((line, match.group(1), marker.group(1) if marker else None))
    return found


def run_page(page):
    """Run every runnable block of `page`, each in a fresh namespace; check the claims of its
    print lines. Returns `{"ran": n, "skipped": [reasons], "checked": n}`; raises on the first
    block that fails, naming the page and the line."""
    from tests.test_readme import _claims, check_claim

    page = pathlib.Path(page)
    ran, skipped, checked = 0, [], 0
    for line, code, reason in blocks(page.read_text(encoding="utf-8")):
        if reason is not None:
            skipped.append(reason)
            continue
        printed = []

        def record(*args, _printed=printed, **kwargs):
            _printed.append((args, " ".join(str(a) for a in args)))
            builtins.print(*args, **kwargs)

        namespace = {"__name__": "__docs__", "print": record}
        where = f"{_shown(page)} line {line}"
        exec(compile(code, where, "exec"), namespace)
        wanted = _claims(code)
        assert len(printed) == len(wanted), f"{where}: prints {len(printed)}, lines {len(wanted)}"
        for claim, (args, text) in zip(wanted, printed):
            if claim:
                check_claim(claim, args, text, namespace)
                checked += 1
        ran += 1
    return {"ran": ran, "skipped": skipped, "checked": checked}


def _shown(page):
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def _reset_keras():
    """Keras' global settings back to their defaults and a fresh session (between pages)."""
    if "keras" not in sys.modules:
        return
    import keras

    keras.config.set_dtype_policy("float32")
    keras.config.set_floatx("float32")
    keras.config.set_epsilon(1e-7)
    keras.config.set_image_data_format("channels_last")
    keras.utils.clear_session()


def run_pages(pages):
    """`{page: {"report": run_page's report} or {"error": the traceback}}`, each page run after
    `_reset_keras`."""
    import traceback

    results = {}
    for page in pages:
        _reset_keras()
        try:
            results[str(page)] = {"report": run_page(page)}
        except BaseException:  # reported per page; the next page still runs
            results[str(page)] = {"error": traceback.format_exc()[-4000:]}
    return results


def _run_in_subprocess(*pages):
    """Run `pages` in one fresh interpreter -> `{page: result}` (see `run_pages`)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, __file__, *map(str, pages)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(result):
    assert "error" not in result, result.get("error")
    return result["report"]


@pytest.fixture(scope="module")
def page_results():
    return _run_in_subprocess(*PAGES)


@pytest.mark.parametrize("page", PAGES, ids=_shown)
def test_page_blocks_run_alone(page, page_results):
    report = _report(page_results[str(page)])
    assert report["ran"] == sum(reason is None for *_, reason in blocks(page.read_text()))
    if page.name == "README.md" and page.parent == ROOT:
        assert report["checked"] >= 8, report  # every claim of the quick start was checked


def test_few_blocks_are_marked_not_run():
    marked = [
        (page.name, line, reason)
        for page in ALL_PAGES
        for line, _, reason in blocks(page.read_text(encoding="utf-8"))
        if reason is not None
    ]
    total = sum(len(blocks(page.read_text(encoding="utf-8"))) for page in ALL_PAGES)
    assert total >= 40, total
    assert len(marked) <= 3, marked


@pytest.mark.parametrize(
    "page, module",
    [("data.md", "keras_attn.data"), ("tokenizers.md", "keras_attn.text"), ("models.md", None)],
)
def test_reference_pages_name_every_public_name(page, module):
    import importlib

    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    if module is None:  # keras_attn.models has no __all__: its public classes and functions
        models = importlib.import_module("keras_attn.models")
        names = [n for n, v in vars(models).items() if not n.startswith("_") and callable(v)]
    else:
        names = importlib.import_module(module).__all__
    assert len(names) >= 8, names
    missing = [name for name in names if f"`{name}" not in text]
    assert missing == [], f"docs/{page} does not document {missing}"
    assert f"({page})" in (ROOT / "docs" / "README.md").read_text(encoding="utf-8")


def test_the_extractor_sees_markers_and_fences():
    text = (
        "intro\n```python\nx = 1\n```\n\n<!-- not run: needs a TensorFlow Serving server -->\n"
        "```python\nserver()\n```\n```\nshell\n```\n<!-- a comment -->\n```python\ny = 2\n```\n"
    )
    assert blocks(text) == [
        (2, "x = 1\n", None),
        (7, "server()\n", "needs a TensorFlow Serving server"),
        (14, "y = 2\n", None),
    ]


def test_a_failing_block_fails_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nimport math\n```\n\n```python\nprint(math.pi)\n```\n")
    good = tmp_path / "good.md"
    good.write_text("```python\nimport math\n\nprint(math.pi > 3)  # True\n```\n")
    results = _run_in_subprocess(page, good)
    with pytest.raises(AssertionError, match="NameError: name 'math' is not defined"):
        _report(results[str(page)])
    assert _report(results[str(good)]) == {"ran": 1, "skipped": [], "checked": 1}


if __name__ == "__main__":
    builtins.print(json.dumps(run_pages(sys.argv[1:])))
