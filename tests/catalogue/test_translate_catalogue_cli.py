"""`keras-attn translate-catalogue` end to end: through a REST stand-in of TensorFlow Serving
answering from a table written here, the counts it prints, what it writes, and the bad inputs
(one line naming the file and line, exit status 2, nothing written)."""

import contextlib
import io
import json
import os
import socket

import numpy as np
import polib
import pytest

from keras_attn.cli import main
from tests.catalogue.test_formats import ANSWERS, PO, TS, write


class TableRunner:
    """A served `serving_default` answering each text from `ANSWERS` (a REST double's runner)."""

    def __init__(self):
        import tensorflow as tf

        self.signatures = {"serving_default": None}
        self.specs = {"inputs": tf.TensorSpec([None], tf.string)}
        self.batches = []

    def input_specs(self, name):
        return self.specs

    def run(self, name, inputs, output_filter=()):
        texts = [t.decode("utf-8") for t in np.asarray(inputs["inputs"]).tolist()]
        self.batches.append(texts)
        outputs = np.array([ANSWERS[t].encode("utf-8") for t in texts], object)
        return {"outputs": outputs, "scores": np.zeros([len(texts)], np.float32)}


@pytest.fixture(scope="module")
def server():
    from tests.serving.doubles import rest_double

    runner = TableRunner()
    with rest_double(runner, "ui") as (url, _):
        yield f"{url}/ui", runner


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["translate-catalogue", *argv], out=out)
    return status, out.getvalue(), err.getvalue()


def test_fills_a_po_through_a_server_and_prints_the_counts(tmp_path, server):
    url, runner = server
    runner.batches.clear()
    source, out = write(tmp_path / "es.po", PO), str(tmp_path / "filled.po")
    status, printed, err = run(url, source, out, "--batch-size", "3")
    assert status == 0, err
    counts = dict(line.split("\t") for line in printed.splitlines())
    assert counts == {
        "translated": "1",
        "filled": "2",
        "fuzzy": "1",
        "placeholders_lost": "1",
        "no_answer": "1",
        "obsolete": "1",
    }
    assert [len(b) for b in runner.batches] == [3, 2]
    assert f"{source}:25: placeholders lost" in err and f"{source}:29: no answer" in err
    assert polib.pofile(out).find("Delete %s?").msgstr == "¿Borrar %s?"
    assert open(source, encoding="utf-8").read() == PO


def test_an_answer_that_is_its_source_is_reported_or_kept_with_the_flag(tmp_path, server):
    url, _ = server
    source = write(tmp_path / "es.po", 'msgid "Firefox"\nmsgstr ""\n')
    status, printed, err = run(url, source, str(tmp_path / "a.po"))
    assert status == 0 and printed == "source_copied\t1\n", err
    assert f"{source}:1: the source answered unchanged" in err
    assert polib.pofile(str(tmp_path / "a.po")).find("Firefox").msgstr == ""
    status, printed, err = run(url, source, str(tmp_path / "b.po"), "--keep-copies")
    assert status == 0 and printed == "filled\t1\n" and err == ""
    assert polib.pofile(str(tmp_path / "b.po")).find("Firefox").msgstr == "Firefox"


def test_dry_run_counts_and_writes_nothing(tmp_path, server):
    url, runner = server
    runner.batches.clear()
    source, out = write(tmp_path / "app_ru.ts", TS), str(tmp_path / "out.ts")
    status, printed, err = run(url, source, out, "--dry-run")
    assert status == 0, err
    assert printed.splitlines() == [
        "translated\t1",
        "untranslated\t5",
        "fuzzy\t1",
        "obsolete\t1",
        "texts to translate\t5",
    ]
    assert runner.batches == [] and not os.path.exists(out)


def test_json_with_its_source_catalogue(tmp_path, server):
    url, _ = server
    en = write(tmp_path / "en.json", json.dumps({"a": "Delete %s?", "b": "Welcome, { $user }"}))
    es = write(tmp_path / "es.json", json.dumps({"a": "", "c": "Sólo aquí"}))
    out = str(tmp_path / "es.out.json")
    status, printed, err = run(url, es, out, "--source", en)
    assert status == 0, err
    assert json.load(open(out, encoding="utf-8")) == {
        "a": "¿Borrar %s?",
        "c": "Sólo aquí",
        "b": "Bienvenido, { $user }",
    }


def test_json_source_file_to_a_target_file_whose_path_names_the_language(tmp_path, server):
    url, _ = server
    en = write(
        tmp_path / "en.json",
        json.dumps({"items_one": "{{count}} item", "items_other": "{{count}} items"}),
    )
    status, printed, err = run(url, en, str(tmp_path / "locales" / "ru.json"))
    assert status == 2 and "folder does not exist" in err
    (tmp_path / "ru").mkdir()
    status, printed, err = run(url, en, str(tmp_path / "ru" / "app.json"))
    assert status == 0, err
    written = json.load(open(tmp_path / "ru" / "app.json", encoding="utf-8"))
    assert sorted(written) == ["items_few", "items_many", "items_one", "items_other"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BROKEN_PO = 'msgid "Open"\nmsgstr "Abrir"\n\nmsgid "Save\nmsgstr ""\n'


@pytest.mark.parametrize(
    "name, text, extra, message",
    [
        ("broken.po", BROKEN_PO, [], r"broken\.po:4: not one whole quoted string"),
        ("keyword.po", 'msgid "a"\nmsgstr ""\n\nnot gettext\n', [], r"keyword\.po:4: "),
        ("quote.po", 'msgid "a"b"\nmsgstr ""\n', [], r"quote\.po:1: not one whole quoted string"),
        ("list.json", '[\n"a"\n]', [], r"list\.json:1: .*object of messages, not a list"),
        ("shape.json", '{\n "a": "x",\n "b": 3\n}', [], r"shape\.json:3: .*'b' must be a string"),
        ("bad.json", '{\n "a": "x",\n "b" 3\n}', [], r"bad\.json:3: not JSON"),
        ("bad.ts", "<TS>\n<context>\n</TS>\n", [], r"bad\.ts:3: not XML: mismatched tag"),
        ("root.ts", "<xliff>\n</xliff>\n", [], r"root\.ts:1: .*root is <TS>"),
        ("strings.xml", "<resources/>", [], r"strings\.xml: unknown catalogue format"),
        (
            "es.po",
            PO,
            ["--format", "ts"],
            r"es\.po:1: .*root is <TS>, not <msgid>|es\.po:1: not XML",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_file_and_line_and_nothing_is_written(
    tmp_path, server, name, text, extra, message
):
    import re

    url, _ = server
    path, out = write(tmp_path / name, text), str(tmp_path / "out")
    status, printed, err = run(url, path, out, *extra)
    assert status == 2 and printed == ""
    assert err.count("\n") == 1 and err.startswith("keras-attn translate-catalogue: error: ")
    assert re.search(message, err), err
    assert not os.path.exists(out)


def test_unreachable_server_missing_files_and_the_input_as_output(tmp_path):
    source = write(tmp_path / "es.po", PO)
    out = str(tmp_path / "out.po")
    url = f"http://127.0.0.1:{free_port()}/ui"
    status, _, err = run(url, source, out, "--timeout", "5")
    assert status == 2 and err.count("\n") == 1, err
    assert url in err and "ServingUnavailableError" in err
    assert not os.path.exists(out)
    status, _, err = run(url, str(tmp_path / "none.po"), out)
    assert status == 2 and "none.po: no such file" in err
    status, _, err = run(str(tmp_path / "no-export"), source, out)
    assert status == 2 and "no-export" in err and not os.path.exists(out)
    status, _, err = run(url, source, source)
    assert status == 2 and "the output is the input" in err
    assert open(source, encoding="utf-8").read() == PO
    status, _, err = run(url, source, str(tmp_path / "no" / "dir" / "out.po"))
    assert status == 2 and "folder does not exist" in err
    status, _, err = run("ftp://host/ui", source, out)
    assert status == 2 and "target" in err
