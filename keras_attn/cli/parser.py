"""The parsers every `keras-attn` command shares: one-line usage errors, intermixed arguments,
the help formatter, the flag types, and the export's limits read for `--help`."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys


def resolve_version_dir(path):
    """`path` itself if it holds a saved_model.pb, else its highest numeric subdirectory that does."""
    from keras_attn.serving.client import resolve_version_dir as resolve

    return resolve(path)


def decoding_config():
    """`keras_attn.decoding.config`, its table (ranges, defaults, help) the translate flags
    are made and checked from, and the table of search modes it reads
    (`keras_attn.decoding.modes`), imported without running `keras_attn.decoding`'s `__init__`
    (which imports Keras and TensorFlow), so parsing and `--help` import neither. Each module
    is registered under its own name: when a command imports `keras_attn.decoding`, the
    package uses these same modules."""
    light_module("modes")
    return light_module("config")


def light_module(stem):
    """`keras_attn.decoding.<stem>`, a module that imports neither Keras nor TensorFlow, run
    from its file without the package's `__init__` (see `decoding_config`)."""
    name = f"keras_attn.decoding.{stem}"
    if name in sys.modules or "keras_attn.decoding" in sys.modules:
        import importlib

        return importlib.import_module(name)
    import importlib.util

    import keras_attn

    path = os.path.join(os.path.dirname(keras_attn.__file__), "decoding", f"{stem}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class LateHelp(str):
    """A flag's help made only when the help is printed (`make()`): the parameter flags read
    theirs from the served table, which parsing alone does not import."""

    def __new__(cls, make):
        text = super().__new__(cls, "(read when the help is printed)")
        text.make = make
        return text


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default; a `LateHelp` is made when the help is
    printed."""

    def _get_help_string(self, action):
        text = action.help or ""
        if isinstance(text, LateHelp):
            return text.make().replace("%", "%%")
        if callable(action.default) or "default: " in text or action.option_strings == []:
            return text
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        if action.default is False:
            return text + " (default: off)"
        return text + " (default: %(default)s)"


def number(text):
    """A parameter flag's value: an int when it reads as one, else a float (the table checks
    it)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def int_flag(name, minimum):
    """The argparse type of an integer flag >= `minimum` (`_checks`' message)."""
    from keras_attn import _checks

    def parse(text):
        try:
            return _checks.check_int(name, number(text), minimum=minimum)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = name
    return parse


def seconds(text):
    """`--timeout`: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"`timeout` must be a finite number of seconds > 0. Received: timeout={text}"
        )
    return value


class UsageError(Exception):
    """A command line argparse refuses; `prog` is the (sub)command's name."""

    def __init__(self, prog, message):
        super().__init__(message)
        self.prog = prog


class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one line, `prog: error: message` (the flag named as
    `--flag: ...`), raised as `UsageError` for `main` to print: no usage block."""

    def error(self, message):
        raise UsageError(self.prog, re.sub(r"^argument ([^:]+): ", r"\1: ", message))


def export_limits(export_dir):
    """`{"max_length": 24, "beam_size": 64}`: the largest values a request to the export may ask
    for, read from the messages of the range assertions in its saved_model.pb (bytes, no
    TensorFlow); {} when there is no export or none is found."""
    path = os.fspath(export_dir)
    if not os.path.isfile(os.path.join(path, "saved_model.pb")) and os.path.isdir(path):
        versions = [e for e in os.listdir(path) if e.isdigit()]
        versions = [v for v in versions if os.path.isfile(os.path.join(path, v, "saved_model.pb"))]
        if versions:
            path = os.path.join(path, max(versions, key=int))
    try:
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            data = f.read()
    except OSError:
        return {}
    limits = {}
    pattern = rb"`(max_length|beam_size)` must be an integer in \[(\d+), (\d+)\]"
    for found in re.finditer(pattern, data):
        limits[found.group(1).decode()] = int(found.group(3))
    return limits


def limits_help(export_dir=None):
    """The help's paragraph on an export's limits: read from `export_dir` when given."""
    limits = export_limits(export_dir) if export_dir else {}
    if limits:
        asked = " and ".join(f"{name} up to {value}" for name, value in sorted(limits.items()))
        head = f"Limits of {export_dir}: a request may ask for {asked}."
    else:
        head = (
            "An export's limits (the largest max_length and beam_size a request may ask for) "
            "are shown here when EXPORT_DIR comes before --help."
        )
    return (
        f"{head} Longer inputs are cut to the export's max_input_length (set at export: "
        "keras-attn export --max-input-length)."
    )


class Subcommand(OneLineParser):
    """A subcommand's parser: arguments intermixed (positionals may follow flags, as in
    `translate DIR --greedy "le 3 mars 1999"`), and a help that states the export's limits
    when the EXPORT_DIR given before `--help` is readable."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        takes_export = any(a.dest == "export_dir" for a in self._get_positional_actions())
        if takes_export and {"-h", "--help"} & set(args):
            given = [a for a in args if not a.startswith("-") and os.path.isdir(a)]
            self.epilog = limits_help(given[0] if given else None)
        if self._intermixing:  # the inner passes of parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


EXPORT_DIR_HELP = "version directory or base directory of the export"


def add_parser(subparsers, name, func, help, description, export_dir=True):
    """The subcommand `name` running `func(args, out)`, its first argument EXPORT_DIR."""
    p = subparsers.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=HelpFormatter,
        epilog=limits_help() if export_dir else None,
    )
    if export_dir:
        p.add_argument("export_dir", help=EXPORT_DIR_HELP)
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's own log lines (hidden otherwise)",
    )
    p.set_defaults(func=func)
    return p
