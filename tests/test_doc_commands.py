"""Every command line the docs show parses with the current script's own argument parser.

Pages: README.md, docs/*.md and benchmarks/README.md. Two kinds of command are read:

- a line of a fenced block that is not Python (```, ```bash) running `python examples/X.py`,
  `python benchmarks/X.py` (also `.venv/bin/python`, after `VAR=value` assignments, `taskset -c N`
  or a `$ ` prompt) or `keras-attn ...`, joined with its continuation lines (a trailing
  backslash): it is parsed whole. In a block whose commands follow a `$ ` prompt only those
  lines are commands (the others are their output). Usage synopses (a word opening with `[`)
  are not commands.
- an inline code span opening with such a command, or with `X.py` where `examples/X.py` or
  `benchmarks/X.py` exists (`train_translator.py --init-from`): prose quotes parts of commands,
  so only its `--options` are checked, each against the script's parser (or the `keras-attn`
  subcommand's). So is a `$ ` command shown with its error (`...: error: ...` on the next line):
  the page shows it refused.

A command runs as the shell runs it (an example file as `__main__` with `sys.argv` set; a
benchmark as the module `benchmarks.X`, as a benchmark file re-runs itself; `keras_attn.cli.main(argv)`
for `keras-attn`) until argparse has parsed its command line: the
parse raises then, so nothing of the script runs but its imports and its own parsing. After
`--`, `attention_maps.py` takes `train_translator.py`'s model flags (`AFTER_DASHDASH`).
"""

import argparse
import contextlib
import io
import os
import pathlib
import re
import runpy
import shlex
import sys
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
]
SCRIPT_DIRS = ("examples", "benchmarks")
AFTER_DASHDASH = {"examples/attention_maps.py": "examples/train_translator.py"}
CLI = "keras-attn"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
PYTHON = re.compile(r"^(?:python3?|\S*/bin/python3?)$")
SCRIPT = re.compile(r"^(?:(examples|benchmarks)/)?(\w+)\.py$")
SHELL_ENDS = {";", "&", "&&", "|", "||", ">", ">>", "<", "(", ")"}
WRAPPERS = {"$", "do", "time", "nohup", "taskset", "-c"}
EXECS = ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe")


# ------------------------------------------------------------------------------ reading pages
def _tokens(line):
    """Shell words of one command line, `$var` read as 0, cut at the first `;`, `&`, `|`, ..."""
    line = re.sub(r"\$\{?\w+\}?", "0", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if word in SHELL_ENDS:
            break
        words.append(word)
    return words


def _script(word):
    """'examples/X.py' for a word naming a script of examples/ or benchmarks/, else None."""
    match = SCRIPT.match(word)
    if not match:
        return None
    folders = [match.group(1)] if match.group(1) else SCRIPT_DIRS
    for folder in folders:
        if (ROOT / folder / f"{match.group(2)}.py").exists():
            return f"{folder}/{match.group(2)}.py"
    return None


def command_of(words, inline=False):
    """`(program, argv)` of the command in `words` (program: 'examples/X.py' or 'keras-attn'),
    or None. In a fenced line only assignments and wrappers may come before it; an inline span
    must open with it."""
    for i, word in enumerate(words):
        if word == CLI:
            return CLI, words[i + 1 :]
        if PYTHON.match(word) and i + 1 < len(words) and _script(words[i + 1]):
            return _script(words[i + 1]), words[i + 2 :]
        if inline and _script(word):
            return _script(word), words[i + 1 :]
        if inline or not (re.match(r"^\w+=", word) or word in WRAPPERS or word.isdigit()):
            return None
    return None


def commands(text):
    """`[(line, kind, program, argv)]` of a page: kind "fenced" (parsed whole) or "inline"
    (options checked)."""
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) == "python":
            continue
        first = text.count("\n", 0, match.start()) + 2
        lines = match.group(2).split("\n")
        prompted = any(line.startswith("$ ") for line in lines)
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            i += 1
            if prompted and not line.startswith("$ "):
                continue
            refused = prompted and i < len(lines) and ": error:" in lines[i]
            try:
                words = _tokens(line)
            except ValueError:  # not shell (an output line with an unclosed quote)
                continue
            if any(w.startswith("[") for w in words):
                continue  # a usage synopsis
            command = command_of(words)
            if command:
                found.append((first + start, "inline" if refused else "fenced", *command))
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for match in INLINE.finditer(prose):
        try:
            words = _tokens(" ".join(match.group(1).split()))
        except ValueError:
            continue
        command = command_of(words, inline=True)
        if command:
            found.append((prose.count("\n", 0, match.start()) + 1, "inline", *command))
    return found


# ------------------------------------------------------------------------- the scripts' parsers
class _Parsed(BaseException):
    """Raised right after argparse parsed a command line, so nothing else runs (a BaseException:
    no `except Exception` of the script catches it)."""


_TOP_LEVEL = (
    "parse_args",
    "parse_known_args",
    "parse_intermixed_args",
    "parse_known_intermixed_args",
)


def _parser_classes(cls=argparse.ArgumentParser):
    yield cls
    for sub in cls.__subclasses__():
        yield from _parser_classes(sub)


@contextlib.contextmanager
def _stop_after_parsing(seen):
    """While active, the outermost argparse parse call (of any parser class) records its
    parser in `seen` and raises `_Parsed` once it has parsed; a refused command line ends as the
    script makes it end (argparse's exit with status 2, or the script's own error)."""
    originals = {
        (cls, name): cls.__dict__[name]
        for cls in _parser_classes()
        for name in _TOP_LEVEL
        if name in cls.__dict__
    }
    depth = [0]

    def wrap(original):
        def parse(self, *args, **kwargs):
            if depth[0]:
                return original(self, *args, **kwargs)
            seen.append(self)
            depth[0] += 1
            try:
                original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            raise _Parsed()

        return parse

    def no_exec(*args, **kwargs):
        raise RuntimeError("the script replaces its process (os.exec*) before parsing")

    execs = {name: getattr(os, name) for name in EXECS}
    for (cls, name), original in originals.items():
        setattr(cls, name, wrap(original))
    for name in EXECS:
        setattr(os, name, no_exec)
    try:
        yield
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
        for name, function in execs.items():
            setattr(os, name, function)


def _run(program, argv):
    """Run `program` on `argv` as its command line runs it: `keras_attn.cli.main(argv)` for
    `keras-attn`, else the script file as `__main__` with `sys.argv` set."""
    if program == CLI:
        from keras_attn import cli

        return cli.main(list(argv))
    saved_argv, saved_path, saved_env = sys.argv, list(sys.path), dict(os.environ)
    sys.argv = [str(ROOT / program), *argv]
    try:
        if program.startswith("benchmarks/"):  # `python benchmarks/X.py` runs `-m benchmarks.X`
            sys.path.insert(0, str(ROOT))
            with warnings.catch_warnings():  # a module imported before (by a sibling) runs anew
                warnings.filterwarnings("ignore", "'benchmarks", RuntimeWarning)
                return runpy.run_module(program[:-3].replace("/", "."), run_name="__main__")
        sys.path.insert(0, str((ROOT / program).parent))
        return runpy.run_path(str(ROOT / program), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()  # a script may set KERAS_BACKEND and the like for itself
        os.environ.update(saved_env)


def parse_error(program, argv):
    """None when `program` parses `argv` (a `--help` or `--version` that exits 0 parses too),
    else what it said."""
    if program == CLI:
        from keras_attn import cli  # noqa: F401  (its parser classes exist before patching)
    err = io.StringIO()
    try:
        with (
            _stop_after_parsing([]),
            contextlib.redirect_stderr(err),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            _run(program, argv)
    except _Parsed:
        return None
    except SystemExit as exit:
        if exit.code in (0, None):
            return None
        return err.getvalue().strip() or f"exit status {exit.code}"
    except Exception as error:  # the script's own way of refusing a command line
        return f"{type(error).__name__}: {error}"
    return err.getvalue().strip() or "the command line was not parsed"


def parser_of(program):
    """The `argparse.ArgumentParser` the program's command line is parsed with."""
    if program == CLI:
        from keras_attn import cli  # noqa: F401
    seen = []
    with (
        _stop_after_parsing(seen),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        try:
            _run(program, ["--help"])
        except (_Parsed, SystemExit):
            pass
    assert seen, f"{program}: no argparse parser was used"
    return seen[0]


def unknown_options(program, argv):
    """The `--options` of `argv` that `program`'s parser (or its subcommand's) does not take."""
    parser = parser_of(program)
    if argv and argv[0] in _subcommands(parser):
        parser, argv = _subcommands(parser)[argv[0]], argv[1:]
    rest = []
    if "--" in argv:
        argv, rest = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    unknown = [
        word
        for word in argv
        if word.startswith("--") and word.split("=", 1)[0] not in parser._option_string_actions
    ]
    if rest and program in AFTER_DASHDASH:
        unknown += unknown_options(AFTER_DASHDASH[program], rest)
    return unknown


def _subcommands(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def problem(program, kind, argv):
    """None, or what is wrong with a command of the docs."""
    if kind == "inline":
        unknown = unknown_options(program, argv)
        return f"options the parser does not take: {unknown}" if unknown else None
    if "--" in argv and program in AFTER_DASHDASH:
        cut = argv.index("--")
        return parse_error(program, argv[:cut]) or parse_error(
            AFTER_DASHDASH[program], argv[cut + 1 :]
        )
    return parse_error(program, argv)


# --------------------------------------------------------------------------------------- tests
def _shown(page):
    return str(page.relative_to(ROOT))


ALL = [(page, *command) for page in PAGES for command in commands(page.read_text(encoding="utf-8"))]


def test_the_docs_show_commands_of_every_kind():
    kinds = {(kind, program.split("/")[0]) for _, _, kind, program, _ in ALL}
    assert {
        ("fenced", "examples"),
        ("fenced", CLI),
        ("inline", CLI),
        ("inline", "benchmarks"),
    } <= kinds
    assert sum(kind == "fenced" for _, _, kind, *_ in ALL) >= 20, len(ALL)


@pytest.mark.parametrize("page", PAGES, ids=_shown)
def test_page_commands_parse(page):
    wrong = [
        f"{_shown(page)} line {line}: {program} {shlex.join(argv)}: {found}"
        for line, kind, program, argv in commands(page.read_text(encoding="utf-8"))
        for found in [problem(program, kind, argv)]
        if found is not None
    ]
    assert not wrong, "\n".join(wrong)


def test_a_broken_command_fails():
    """The checks themselves, on a page with each kind of command broken."""
    page = "\n".join(
        [
            "```",
            ".venv/bin/python examples/train_translator.py --corpus es --no-such-flag 1",
            "KERAS_BACKEND=jax python examples/train_translator.py --distribute nowhere",
            "keras-attn translate export/models/dates --n-best two",
            "python examples/attention_maps.py --run r --out o s -- --unitz 3",
            "python benchmarks/multi_worker_speed.py --batch-size 64 --workers 3",
            "python benchmarks/mha.py --repeats",
            "```",
            "Prose: `keras-attn export --xla-everything`, `train_translator.py --drop 0.1`.",
        ]
    )
    found = commands(page)
    assert [(line, kind) for line, kind, *_ in found] == [
        (2, "fenced"),
        (3, "fenced"),
        (4, "fenced"),
        (5, "fenced"),
        (6, "fenced"),
        (7, "fenced"),
        (9, "inline"),
        (9, "inline"),
    ], found
    for line, kind, program, argv in found:
        assert problem(program, kind, argv) is not None, (line, program, argv)
    # and the same commands, mended, parse
    assert (
        problem("examples/train_translator.py", "fenced", ["--corpus", "es", "--epochs", "1"])
        is None
    )
    assert problem(CLI, "fenced", ["translate", "export/models/dates", "--n-best", "2"]) is None
    assert problem(CLI, "inline", ["export", "--xla"]) is None
    assert problem("benchmarks/mha.py", "fenced", ["--repeats", "2"]) is None
    mended = ["--run", "r", "--out", "o", "s", "--", "--units", "3"]
    assert problem("examples/attention_maps.py", "fenced", mended) is None
