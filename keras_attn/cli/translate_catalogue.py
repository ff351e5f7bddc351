"""`keras-attn translate-catalogue EXPORT_OR_URL IN OUT`: fill a catalogue's untranslated
entries (docs/real_data.md, "Translating a catalogue")."""

from __future__ import annotations

import os
import sys

from keras_attn.cli.parser import add_parser, int_flag, seconds


def _fail_on_server(target, err):
    """A translator's failure as the command's one-line error, naming where it went."""
    from keras_attn.serving.client import ServingError

    if isinstance(err, ServingError):
        return ValueError(f"{target}: {type(err).__name__}: {err}")
    return None


def run(args, out):
    from keras_attn.catalogue import (
        STATUSES,
        CatalogueError,
        fill_catalogue,
        progress_bar,
        read_catalogue,
        translator,
        write_catalogue,
    )
    from keras_attn.catalogue.plurals import language_of_path

    language = args.language
    if language is None and args.source is None:  # a new target file: OUT's path names it
        language = language_of_path(args.output)
    catalogue = read_catalogue(
        args.input, format=args.format, language=language, source=args.source
    )
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise CatalogueError(args.output, "its folder does not exist")
    same = os.path.exists(args.output) and os.path.samefile(args.output, args.input)
    if same and not args.overwrite:
        raise CatalogueError(
            args.output, "the output is the input catalogue: name another file, or pass --overwrite"
        )
    if args.dry_run:
        report = fill_catalogue(catalogue, None, batch_size=args.batch_size, dry_run=True)
        for status in STATUSES:
            print(f"{status}\t{report.counts.get(status, 0)}", file=out)
        print(f"texts to translate\t{report.texts}", file=out)
        return 0
    translate = translator(args.target, timeout=args.timeout)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    try:
        report = fill_catalogue(
            catalogue,
            translate,
            batch_size=args.batch_size,
            progress=progress_bar() if show else None,
            keep_copies=args.keep_copies,
        )
    except Exception as err:
        failure = _fail_on_server(args.target, err)
        if failure is None:
            raise
        raise failure from None
    write_catalogue(catalogue, args.output, overwrite_input=args.overwrite)
    for problem in report.problems:
        print(problem.where(args.input), file=sys.stderr)
    for status, count in report.counts.items():
        print(f"{status}\t{count}", file=out)
    return 0


def add(subparsers):
    p = add_parser(
        subparsers,
        "translate-catalogue",
        run,
        "fill the untranslated entries of a .po / .pot, i18next / ICU JSON or Qt .ts catalogue",
        "Translate the untranslated entries of catalogue IN with an exported translator and "
        "write the catalogue to OUT: translated entries are never touched, new ones are marked "
        "for review (gettext fuzzy, Qt unfinished), an answer that loses a placeholder of its "
        "source, or answers the source unchanged, is left untranslated and reported. Output: "
        "one line per status, tab-separated: status, entries (docs/real_data.md, Translating a "
        "catalogue).",
        export_dir=False,
    )
    p.add_argument(
        "target",
        metavar="EXPORT_OR_URL",
        help="SavedModel directory, http://HOST:PORT/MODEL (REST) or grpc://HOST:PORT/MODEL",
    )
    p.add_argument("input", metavar="IN", help="the catalogue to fill (.po, .pot, .json, .ts)")
    p.add_argument("output", metavar="OUT", help="where the filled catalogue is written")
    p.add_argument(
        "--source",
        default=None,
        help="JSON: the source-language catalogue IN translates (default: IN is itself one)",
    )
    p.add_argument(
        "--language",
        default=None,
        help="target language (es, pt_BR, ...): its plural forms (default: what IN states, "
        "else what its path names: locales/es/app.json, app_ru.ts)",
    )
    p.add_argument(
        "--format", default=None, choices=("po", "json", "ts"), help="default: from IN's extension"
    )
    p.add_argument(
        "--batch-size", type=int_flag("batch_size", 1), default=16, help="texts per request"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="count the entries per status, translate nothing"
    )
    p.add_argument(
        "--keep-copies",
        action="store_true",
        help="fill an entry whose answer is its source unchanged too (default: left "
        "untranslated and reported as source_copied)",
    )
    p.add_argument("--overwrite", action="store_true", help="allow OUT to be IN")
    p.add_argument("--timeout", type=seconds, default=30.0, help="seconds per server request")
    p.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="draw a progress bar on stderr (default: when stderr is a terminal)",
    )
