"""tools/catalogue_samples.py reads each format's message texts (files written here, no
download) and counts the placeholders of each syntax in them."""

import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tool():
    spec = importlib.util.spec_from_file_location(
        "catalogue_samples", ROOT / "tools" / "catalogue_samples.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses read their module
    spec.loader.exec_module(module)
    return module


FILES = {
    "airflow-ui/locales/en/common.json": json.dumps(
        {"dag": {"runs_one": "{{count}} run", "runs_other": "{{count}} runs"}, "ok": "OK"}
    ),
    "mediawiki/languages/i18n/en.json": json.dumps(
        {"@metadata": {"authors": ["A", "B"]}, "edits": "{{PLURAL:$1|one edit|$1 edits}}"}
    ),
    "firefox-es/es-ES/browser/a.ftl": (
        "# a comment\n"
        "hello = Hola, { $user }\n"
        "count =\n"
        "    { $n ->\n"
        "        [one] un archivo\n"
        "       *[other] { $n } archivos\n"
        "    }\n"
        "button =\n"
        "    .label = Abrir\n"
        "    .accesskey = A\n"
    ),
    "activemodel/active_model/locale/en.yml": (
        "en:\n"
        "  errors:\n"
        '    format: "%{attribute} %{message}"\n'
        "    messages:\n"
        "      too_long:\n"
        "        one: is too long (maximum is 1 character)\n"
        "        other: is too long (maximum is %{count} characters)\n"
        "      blank: can't be blank\n"
    ),
    "vorta/i18n/ts/vorta.es.ts": (
        '<TS version="2.1" language="es"><context><name>A</name>'
        "<message><source>%1 of %2</source><translation/></message>"
        "<message><source>&amp;Open</source><translation/></message></context></TS>"
    ),
}


def test_each_format_reads_its_messages_and_the_counts_name_the_syntaxes(tmp_path, capsys):
    t = tool()
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    by_name = {s.name: s for s in t.SAMPLES}
    read = {name: t.messages(by_name[name], str(tmp_path)) for name in by_name}
    assert read["airflow-ui"] == ["{{count}} run", "{{count}} runs", "OK"]
    assert read["mediawiki"] == ["{{PLURAL:$1|one edit|$1 edits}}"]  # @metadata left out
    assert read["firefox-es"] == [
        "Hola, { $user }",
        "{ $n -> [one] un archivo *[other] { $n } archivos }",
        "Abrir",
        "A",
    ]
    assert read["activemodel"] == [
        "%{attribute} %{message}",
        "is too long (maximum is 1 character)",
        "is too long (maximum is %{count} characters)",
        "can't be blank",
    ]
    assert read["vorta"] == ["%1 of %2", "&Open"]
    assert read["sphinx-rtd-theme"] == []
    t.count(str(tmp_path))
    rows = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()}
    assert rows["firefox-es"][2:] == ["4", "2", "fluent 2"]
    assert rows["mediawiki"][2:] == ["1", "1", "mediawiki 1"]
    assert rows["activemodel"][2:] == ["4", "2", "ruby 2"]
    assert rows["vorta"][2:] == ["2", "2", "qt 1, accelerator 1"]
