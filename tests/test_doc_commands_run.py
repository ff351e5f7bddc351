"""Every shell command of README.md and docs/*.md runs here, or is marked with why it cannot.

tests/test_doc_commands.py checks that each command line parses; this file runs them. The
commands of a page's fenced shell blocks are read in order (a `\\` or an open quote joins the
next line; in a block with `$ ` prompts only the prompted lines are commands, the lines after
them their output); a block with a loop or a job sent to the background (`&`) is one command,
run whole by bash. Each command matches one rule of `RULES`, which says how it runs:

- `run`: as written, by bash, in one scratch directory shared by every page (so a page's later
  command finds what its earlier one wrote, `runs/es` before `--init-from runs/es`), with
  `.venv/bin` first on `PATH` (`python`, `keras-attn`) and `HOME` in the scratch directory;
  it must exit 0. A prompted command shown with an error must end with that error line.
- `smoke`: a training of minutes: as written, with the run scripts' own `--smoke` switch added
  after each `examples/*.py` (a few hundred pairs, one epoch unless `--epochs` says) and its
  `--steps-per-epoch` dropped (an epoch is then one pass over those pairs); it must exit 0.
- `notf`: as written, in the environment without TensorFlow (`.venv-notf`), where the page
  shows what it prints there: its error line must be the page's.
- `tested`: run by the `processes` test file the rule names, with its own smoke sizes and
  stronger checks (the trainings over several processes, and the JAX runs resumed and exported
  on TensorFlow): the fast check below holds that the file is such a test and passes each of the
  command's `--flags` and `--distribute` mode, so the page and the test stay the same command.
- not run, with the reason the rule gives: `setup` (the Makefile makes these environments and
  runs these targets before the tests), `server` (needs TensorFlow Serving listening where the
  command points), `cluster` (needs the machines it names), `bench` (a benchmark of minutes of
  both cores: `make bench`), `download` (fetches packages from the package index), `other`
  (shows what an environment that no Makefile target makes prints).

The pages run side by side, two at a time, in the one scratch directory: a page's commands in
order, and a command that names a path another page's earlier command writes (its `--out`,
`--export`, `--export-dir`, a copy's or an export's target, a training script's default `--out`)
waits for that command, so every command sees what it would see run in page order. A command
written the same way on an earlier page runs once.

The scratch directory stands in for a user's: `pairs.tsv` / `my_pairs.tsv` (UI strings written
here), a built corpus in `~/.cache/keras-attn/corpora` where `make corpora` would write it (the
same files, a few hundred pairs), the catalogues `keras-attn translate-catalogue` reads, and
`EXPORT` (the placeholder of docs/serving.md) linked to the text export README's command makes.
"""

import functools
import os
import pathlib
import re
import shlex
import subprocess
import sys
import threading
import time
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
NOT_SHELL = {"python", "json", "text", "yaml", "toml", "proto", "po", "xml"}
PROGRAMS = {
    "for",
    "make",
    "pip",
    "python",
    "python3",
    ".venv/bin/python",
    "keras-attn",
    "cp",
    "export",
}
WRAPPERS = {"taskset", "-c", "time", "nohup"}

SETUP = "the Makefile makes this environment and runs this target before the tests"
SERVER = "needs TensorFlow Serving listening at the address it names"
CLUSTER = "needs the machines its TF_CONFIG, coordinator address or /shared path names"
BENCH = "a benchmark of minutes of both cores (make bench)"
OTHER_ENV = "shows TensorFlow without tensorflow-serving-api: an environment no target makes"
DOWNLOAD = "fetches packages from the package index (make corpora / make catalogue-samples)"

# (pattern searched in the command, how, why): the first match decides.
RULES = [
    (r"^make (test|install)\b", "setup", SETUP),
    (r"^make corpora\b", "setup", "the scratch corpus stands in for what `make corpora` builds"),
    (r"^make demo\b", "smoke", "its recipe `examples/demo.py`, with `--smoke`"),
    (r"^pip install\b", "setup", SETUP),
    (r"10\.0\.0\.\d|/shared/", "cluster", CLUSTER),
    (r"https?://localhost|grpc://localhost", "server", SERVER),
    (r"benchmarks/multi_worker_speed\.py", "bench", BENCH),
    (r"catalogue_samples\.py fetch", "download", DOWNLOAD),
    (r"catalogue_samples\.py (count|measure)", "download", "reads the samples `fetch` downloads"),
    (r"benchmarks\.corpus_answers", "bench", "scores the held-out names of a full corpus run"),
    (r"^keras-attn check export/models/dates/1\b", "other", OTHER_ENV),
    (r"^keras-attn translate export/models/dates/1\b", "notf", "as the page shows it"),
    (r"--distribute multi-worker", "tested", "tests/examples/test_multi_worker.py"),
    (r"--distribute data-parallel", "tested", "tests/examples/test_jax_training.py"),
    (r"--out runs/jax\b", "tested", "tests/examples/test_jax_training.py"),
    (
        r"^(KERAS_BACKEND=\w+ )?keras-attn export runs/(jax|en-es)\b",
        "tested",
        "tests/test_jax_only_recipe.py",
    ),
    (r"--out runs/en-es\b", "tested", "tests/test_jax_only_recipe.py"),
    (r"examples/attention_maps\.py", "smoke", "the maps of the smoke run above: its model flags"),
    (r"examples/\w+\.py", "smoke", "a training of minutes"),
    (r"^(cp|keras-attn|KERAS_BACKEND=\w+ (python|keras-attn))\b", "run", "runs as written"),
]
RUNS = {"run", "smoke", "notf"}


# ------------------------------------------------------------------------------ reading pages
def _words(line):
    """The shell words of a line, or None while a quote is still open."""
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return None


def _is_command(words):
    """Whether a line's words are a shell command (after assignments and wrappers)."""
    for word in words:
        if re.match(r"^\w+=", word) or word in WRAPPERS or word.isdigit():
            continue
        return word in PROGRAMS
    return False


def commands(text):
    """`[(line number, command, error line shown or None)]` of a page's shell blocks."""
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) in NOT_SHELL:
            continue
        first = text.count("\n", 0, match.start()) + 2
        body = match.group(2)
        if re.search(r"^\s*for |&\s*$|&\s*\\?\n", body, flags=re.M):
            words = _words(body.replace("\\\n", " "))
            if words and _is_command(words):
                found.append((first, body, None))
            continue
        lines = body.split("\n")
        prompted = any(line.startswith("$ ") for line in lines)
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            i += 1
            while (line.rstrip().endswith("\\") or _words(line) is None) and i < len(lines):
                line = line.rstrip()[:-1] if line.rstrip().endswith("\\") else line + "\n"
                line += " " + lines[i]
                i += 1
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            words = _words(line)
            if not words or not _is_command(words) or any(w.startswith("[") for w in words):
                continue
            shown = lines[i] if prompted and i < len(lines) and ": error:" in lines[i] else None
            found.append((first + start, line, shown))
    return found


def rule_of(command):
    """`(how, why)` of the first rule whose pattern the command holds, or None."""
    flat = " ".join(command.split())
    for pattern, how, why in RULES:
        if re.search(pattern, flat, flags=re.M):
            return how, why
    return None


def every_command():
    return [
        (page, line, command, shown)
        for page in PAGES
        for line, command, shown in commands(page.read_text(encoding="utf-8"))
    ]


def test_every_shell_command_of_the_docs_has_a_rule():
    found = every_command()
    assert len(found) >= 40, "the reader lost the pages' commands"
    missing = [f"{p.name}:{line}: {c}" for p, line, c, _ in found if rule_of(c) is None]
    assert not missing, "commands the docs show that no rule runs or marks:\n" + "\n".join(missing)
    kinds = {rule_of(c)[0] for _, _, c, _ in found}
    assert {"run", "smoke", "notf"} <= kinds


def test_the_reader_finds_joined_lines_blocks_and_prompts():
    text = (
        "```\nmake demo   # a comment\n$X = formula\n```\n"
        "```bash\nexport A='{\"x\":\n   1}'\npython examples/demo.py \\\n  --smoke\n```\n"
        "```\nfor i in 0 1; do\n  python examples/demo.py &\ndone; wait\n```\n"
        "```\n$ keras-attn check DIR\nkeras-attn check: error: no\nplain output\n```\n"
        "```python\nkeras-attn --version\n```\n"
    )
    found = commands(text)
    assert [(line, " ".join(c.split())) for line, c, _ in found] == [
        (2, "make demo   # a comment".replace("   ", " ")),
        (6, "export A='{\"x\": 1}'"),
        (8, "python examples/demo.py --smoke"),
        (12, "for i in 0 1; do python examples/demo.py & done; wait"),
        (17, "keras-attn check DIR"),
    ]
    assert found[-1][2] == "keras-attn check: error: no"
    assert rule_of("python examples/demo.py --smoke")[0] == "smoke"
    assert rule_of("keras-attn export a b")[0] == "run"
    assert rule_of("rm -rf /") is None


# ---------------------------------------------------------------------------- the scratch home
WORDS = [
    ("Open", "Abrir"), ("Close", "Cerrar"), ("Save", "Guardar"), ("Delete", "Eliminar"),
    ("Print", "Imprimir"), ("Copy", "Copiar"), ("Move", "Mover"), ("Rename", "Renombrar"),
]  # fmt: skip
THINGS = [
    ("the file", "el archivo"), ("the folder", "la carpeta"), ("the window", "la ventana"),
    ("the document", "el documento"), ("the image", "la imagen"), ("the page", "la página"),
    ("the project", "el proyecto"), ("the message", "el mensaje"),
]  # fmt: skip
FORMS = [
    ("{v} {t}", "{v} {t}"), ("{v} {t} %s", "{v} {t} %s"), ("Cannot {lv} {t}", "No se puede {lv} {t}"),
    ("{v} {t} %(name)s?", "¿{v} {t} %(name)s?"), ("Could not {lv} {t}: permission denied", "No se pudo {lv} {t}: permiso denegado"), ("{v} {t} {{count}}", "{v} {t} {{count}}"),
]  # fmt: skip


def ui_pairs():
    """UI strings with their Spanish: a few hundred pairs, placeholders of several syntaxes."""
    pairs = []
    for form_en, form_es in FORMS:
        for verb, verbo in WORDS:
            for thing, cosa in THINGS:
                source = form_en.format(v=verb, lv=verb.lower(), t=thing)
                target = form_es.format(v=verbo, lv=verbo.lower(), t=cosa)
                pairs.append((source, target[0].upper() + target[1:]))
    return pairs


def _write_tsv(path, pairs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")


def _write_corpus(directory, pairs):
    from keras_attn.data import corpora

    splits = {"train": pairs[:-60], "val": pairs[-60:-30], "test": pairs[-30:]}
    splits["test_in_domain"] = pairs[:20]
    corpora.write_corpus(types.SimpleNamespace(splits=splits, manifest={}), str(directory))


CATALOGUES = {
    "po/es.po": 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
    '"Language: es\\n"\n\nmsgid "Open the file %s"\nmsgstr ""\n\n'
    'msgid "Save"\nmsgstr "Guardar"\n',
    "po/app.pot": 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
    'msgid "Close the window"\nmsgstr ""\n',
    "locales/en/app.json": '{"open": "Open the file {{name}}"}\n',
    "locales/es/app.json": "{}\n",
    "translations/app_ru.ts": '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE TS>\n'
    '<TS version="2.1" language="ru"><context><name>Main</name><message>'
    '<source>Open the file %1</source><translation type="unfinished"></translation>'
    "</message></context></TS>\n",
}


@functools.cache
def scratch(base):
    """The user's directory every page's commands run in (built once per test session)."""
    base = pathlib.Path(base)
    for name in ("examples", "benchmarks", "tools", ".venv"):
        (base / name).symlink_to(ROOT / name)
    (base / "docs").mkdir()
    pairs = ui_pairs()
    _write_tsv(base / "pairs.tsv", pairs)
    _write_tsv(base / "my_pairs.tsv", pairs[::-1])
    cache = base / "home" / ".cache" / "keras-attn" / "corpora"
    for built in ("built/es", "built/zh", "built-identical/es"):
        _write_corpus(cache / built, pairs)
    for name, text in CATALOGUES.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text, encoding="utf-8")
    (base / "EXPORT").symlink_to(base / "export" / "models" / "mt")
    return base


def _with_smoke(command):
    """The command with `--smoke` after each example script (`make demo`: its recipe)."""
    command = re.sub(
        r"^make demo\b.*$",
        "python examples/demo.py --export-dir export/models/dates --out runs/demo",
        command,
        flags=re.M,
    )
    if "examples/attention_maps.py" in command:  # the run's model flags follow `--`
        return command.replace(" -- ", " -- --smoke ", 1)
    command = re.sub(r"(examples/\w+\.py)", r"\1 --smoke", command)
    return re.sub(r"--steps-per-epoch \d+ ?", "", command)


def _environment(base, venv):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERAS_", "TF_CONFIG"))}
    env.update(
        HOME=str(base / "home"),
        PATH=f"{ROOT / venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    return env


WRITES = re.compile(r"^--(out|export|export-dir)$")
PAGES_AT_ONCE = 2


def _writes(script):
    """The paths a command names that it writes: its `--out` / `--export` / `--export-dir`, the
    target of `cp` and of `keras-attn export`."""
    words = shlex.split(script.replace("\\\n", " "), comments=True)
    written = {b for a, b in zip(words, words[1:]) if WRITES.match(a)}
    for i, word in enumerate(words):
        if word == "cp" or words[i : i + 2] == ["keras-attn", "export"]:
            written.add(words[-1])
    return written


def _default_outs(script):
    """The training scripts a command runs without `--out`: each writes its default directory,
    which no command names, so two of them only must not run at once."""
    words = shlex.split(script.replace("\\\n", " "), comments=True)
    return sorted({w for w in words if re.match(r"examples/\w+\.py$", w) and "--out" not in words})


def _names(script):
    words = set(shlex.split(script.replace("\\\n", " "), comments=True)) | _writes(script)
    return words | ({"export/models/mt"} if "EXPORT" in words else set())


def _overlap(paths, names):
    return any(n == p or n.startswith(p.rstrip("/") + "/") for p in paths for n in names)


def schedule(found):
    """`[(page, line, script, how, shown, waits_for, same_as)]`: each runnable command with the
    earlier commands of other pages it must wait for (it names what they write, or they name
    what it writes), and the earlier one written the same way."""
    plan = []
    for page, line, command, shown in found:
        how, _ = rule_of(command)
        if how not in RUNS:
            continue
        script = _with_smoke(command) if how == "smoke" else command
        flat = " ".join(script.split())
        waits, same_as = [], None
        for i, (other, other_line, other_script, *_rest) in enumerate(plan):
            if other == page:
                continue
            if " ".join(other_script.split()) == flat:
                same_as = same_as if same_as is not None else i
            if _overlap(_writes(other_script), _names(script)) or _overlap(
                _writes(script), _names(other_script)
            ):
                waits.append(i)
        plan.append((page, line, script, how, shown, waits, same_as))
    return plan


def test_the_tested_commands_run_in_the_tests_they_name():
    tested = [(c, rule_of(c)[1]) for _, _, c, _ in every_command() if rule_of(c)[0] == "tested"]
    assert len(tested) >= 8, "the pages lost their multi-process and resumed JAX runs"
    for command, test in tested:
        source = (ROOT / test).read_text(encoding="utf-8")
        assert "pytest.mark.processes" in source, test
        words = shlex.split(command.replace("\\\n", " "), comments=True)
        flags = [w.split("=")[0] for w in words if w.startswith("--") and not w.startswith("--xla")]
        flags += [w for w in ("multi-worker", "data-parallel") if w in words]
        absent = [f for f in flags if f'"{f}"' not in source]
        assert not absent, f"{test} does not pass {absent} of: {' '.join(command.split())}"


def test_the_schedule_orders_what_pages_share():
    found = [
        (ROOT / "a.md", 1, "python examples/x.py --out runs/es --export e/es", None),
        (ROOT / "b.md", 1, "python examples/x.py --out runs/es --export e/es", None),
        (ROOT / "b.md", 2, "keras-attn translate e/es/1 hi", None),
        (ROOT / "c.md", 1, "keras-attn translate EXPORT hi", None),
        (ROOT / "c.md", 2, "python examples/x.py --data pairs.tsv", None),
        (ROOT / "d.md", 1, "python examples/x.py --data pairs.tsv --export export/models/mt", None),
    ]
    plan = schedule(found)
    assert [_default_outs(p[2]) for p in plan][3:] == [[], ["examples/x.py"], ["examples/x.py"]]
    assert [(p[5], p[6]) for p in plan] == [
        ([], None),
        ([0], 0),
        ([0], None),
        ([], None),
        ([], None),
        ([3], None),
    ]


def _run_one(base, step):
    page, line, script, how, shown, _, _ = step
    start = time.time()
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=base,
        env=_environment(base, ".venv-notf" if how == "notf" else ".venv"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(f"{time.time() - start:6.1f} s  {page.name}:{line} ({how})", flush=True)
    where = f"{page.relative_to(ROOT)}:{line}: {' '.join(script.split())}"
    last = (done.stderr.strip().splitlines() or [""])[-1]
    if shown is not None:
        return None if last == shown else f"{where}\n  printed: {last}\n  the page: {shown}"
    if done.returncode != 0:
        return f"{where}\n  exit {done.returncode}: {done.stderr[-1500:]}"
    return None


@pytest.mark.processes
def test_the_docs_commands_run(tmp_path_factory):
    """Every `run` / `smoke` / `notf` command, pages side by side, in one scratch directory."""
    base = scratch(str(tmp_path_factory.mktemp("user")))
    plan = schedule(every_command())
    finished = [threading.Event() for _ in plan]
    pages = list(dict.fromkeys(step[0] for step in plan))
    failed, ran, lock = [], [], threading.Lock()
    outs = {name: threading.Lock() for step in plan for name in _default_outs(step[2])}

    def run_pages():
        while True:
            with lock:
                if not pages:
                    return
                page = pages.pop(0)
            for i, step in enumerate(plan):
                if step[0] != page:
                    continue
                try:
                    for j in step[5]:
                        finished[j].wait()
                    if step[6] is None:
                        held = [outs[name] for name in _default_outs(step[2])]
                        for out in held:
                            out.acquire()
                        try:
                            problem = _run_one(base, step)
                        finally:
                            for out in held:
                                out.release()
                        with lock:
                            ran.append(i)
                            failed.extend([problem] if problem else [])
                except Exception as error:  # a timeout: reported, the other pages go on
                    with lock:
                        failed.append(f"{page.name}:{step[1]}: {error!r}")
                finally:
                    finished[i].set()

    workers = [threading.Thread(target=run_pages) for _ in range(PAGES_AT_ONCE)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(ran) >= 25
    assert not failed, "\n".join(failed)


if __name__ == "__main__":  # a page's commands by hand: python tests/test_doc_commands_run.py
    for page, line, command, shown in every_command():
        print(f"{page.name}:{line} {rule_of(command)}: {' '.join(command.split())[:100]}")
    sys.exit(0)
