"""The `keras-attn` command: inspect, try, check and export TensorFlow Serving models.

    keras-attn --version
    keras-attn inspect EXPORT_DIR [--json]
        signatures (names, dtypes, shapes), the ops of the graph (TF Text ops used, ops
        TensorFlow Serving lacks), assets and the warm-up records of an exported model.
        Exit status 1 when the graph uses an op the server does not have.
    keras-attn translate EXPORT_DIR [TEXT ...] [--n-best N] [--greedy | --sample] [--json]
            [--beam-size K] [--max-length N] [--length-penalty A] [--coverage-penalty B]
            [--min-length N] [--no-repeat-ngram-size N] [--repetition-penalty P]
            [--temperature T] [--top-k K] [--top-p P] [--seed S]
            [--prefix TEXT] [--constraint PHRASE ...]
        translate TEXTs (or stdin lines) with the SavedModel's signatures, routed the way the
        clients route them (`keras_attn.serving.client.SavedModelClient`); one line per
        hypothesis: input number, rank, score, output (docs/serving.md, "Command line").
        `--prefix` / `--constraint` (repeatable) go to `beam_search_constrained`.
    keras-attn check EXPORT_DIR [--timeout S]
        load the export in a fresh process the way TensorFlow Serving does (tensorflow and
        tensorflow_text only) and replay its warm-up requests; exit status 1 if one fails or
        the export has no warm-up file.
    keras-attn export MODEL.keras TOKENIZER_FILE EXPORT_DIR [--version N] [--beam-size K] [--xla]
            [--keep-placeholders] ...
        export a saved text model with `keras_attn.serving.export_text_model`.

EXPORT_DIR is a version directory (`.../dates/1`) or a model's base directory, in which case the
highest numeric version is used. Subcommands are registered in `COMMANDS`; each parses its
arguments intermixed (`translate DIR --greedy "text"`: texts may follow flags). The translate
flags are the served request parameters (`keras_attn.serving.specs`), the export flags the settings'
(`keras_attn.serving.settings.add_setting_flags`); every numeric flag is checked while the
command line is parsed, before anything loads, with the Python API's message.

Every failure is one line on stderr, `keras-attn COMMAND: error: ...`, exit status 2: a bad
flag, a missing directory, a package the command needs (one pip command naming all of them,
`keras_attn._pins.install_command`), an export TensorFlow cannot read. TensorFlow's own logs
(its C++ library writes them to file descriptor 2) are kept off the terminal unless
`--verbose`. Neither Keras nor TensorFlow is imported until a command runs: `--help` and
`--version` stay fast, and work without them.
"""

from __future__ import annotations

import sys

from keras_attn.cli import check, export, inspect, translate, translate_catalogue
from keras_attn.cli.errors import check_ready, graph_error_message, missing_extra, quiet_tensorflow
from keras_attn.cli.parser import (
    HelpFormatter,
    OneLineParser,
    Subcommand,
    UsageError,
    decoding_config,
)

# Each adds one subcommand to the parser; other modules may append theirs.
COMMANDS = [inspect.add, translate.add, check.add, export.add, translate_catalogue.add]

DESCRIPTION = (
    "Inspect, try, check and export keras-attn translators and captioners served by "
    "TensorFlow Serving (docs/serving.md)."
)


def build_parser():
    from keras_attn import __version__

    decoding_config()
    parser = OneLineParser(
        prog="keras-attn", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"keras-attn {__version__}",
        help="print the package's version and exit",
    )
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Subcommand
    )
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv=None, out=None):
    out = out or sys.stdout
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as err:
        print(f"{err.prog}: error: {err}", file=sys.stderr)
        return 2
    prog = f"keras-attn {args.command}"
    with quiet_tensorflow(getattr(args, "verbose", False)):
        try:
            check_ready(args)
            return args.func(args, out)
        except (ValueError, FileNotFoundError) as err:
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
        except ModuleNotFoundError as err:
            message = missing_extra(err)
            if message is None:
                raise
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 2
        except Exception as err:  # a TensorFlow error from the model
            if type(err).__module__.startswith("tensorflow"):
                message = graph_error_message(getattr(err, "message", str(err)))
                print(f"{prog}: error: {type(err).__name__}: {message}", file=sys.stderr)
                return 2
            raise
