"""Catalogues of software strings filled by a translator: gettext `.po` / `.pot`, i18next /
ICU MessageFormat JSON and Qt Linguist `.ts`, one reader/writer pair per format behind one
interface (`read`, `fill`, `dump`).

    from keras_attn.catalogue import fill_catalogue, read_catalogue, translator, write_catalogue

    catalogue = read_catalogue("po/es.po")                 # the format from the file's extension
    report = fill_catalogue(catalogue, translator("export/models/ui"), batch_size=16)
    write_catalogue(catalogue, "po/es.filled.po")           # atomically; never over the input
    print(report.summary())      # 120 translated, 37 filled, 2 placeholders_lost, 3 fuzzy

The command is `keras-attn translate-catalogue EXPORT_OR_URL IN OUT` (docs/real_data.md,
"Translating a catalogue"). Nothing here imports TensorFlow: the translator does, when it
reaches a SavedModel directory or a TensorFlow Serving client.
"""

from __future__ import annotations

import os
import re

from keras_attn.catalogue.base import (
    FILLED,
    FUZZY,
    NO_ANSWER,
    OBSOLETE,
    PLACEHOLDERS_LOST,
    SOURCE_COPIED,
    STATUSES,
    TRANSLATED,
    UNTRANSLATED,
    Catalogue,
    CatalogueError,
    Entry,
)
from keras_attn.catalogue.fill import (
    FillReport,
    fill_catalogue,
    progress_bar,
    write_catalogue,
)
from keras_attn.catalogue.json_format import JsonFormat
from keras_attn.catalogue.po import PoFormat
from keras_attn.catalogue.ts import TsFormat

FORMATS = {f.name: f for f in (PoFormat(), JsonFormat(), TsFormat())}
"""`{name: format}`: every catalogue format, each a reader/writer pair (`read`, `fill`, `dump`)."""


def format_for(path, format=None):
    """The format named `format`, else the one `path`'s extension names."""
    if format is not None:
        if format not in FORMATS:
            raise ValueError(
                f"`format` must be one of {sorted(FORMATS)}. Received: format={format!r}"
            )
        return FORMATS[format]
    extension = os.path.splitext(os.fspath(path))[1].lower()
    for f in FORMATS.values():
        if extension in f.extensions:
            return f
    known = sorted(e for f in FORMATS.values() for e in f.extensions)
    raise CatalogueError(
        path, f"unknown catalogue format (known: {', '.join(known)}; or pass a format)"
    )


def read_catalogue(path, format=None, language=None, source=None):
    """Reads the catalogue at `path` (format from its extension unless `format` is given).

    `language`: the target language where the file does not state it (gettext `Language` /
    `Plural-Forms`, Qt `<TS language>`), needed for plural entries; `source`: for JSON, the
    source-language catalogue whose messages the file translates (docs/real_data.md).
    Raises `CatalogueError` (a `ValueError` whose text names the file and line)."""
    fmt = format_for(path, format)
    for name in (path,) + (() if source is None else (source,)):
        if not os.path.isfile(name):
            raise CatalogueError(name, "no such file")
    return fmt.read(os.fspath(path), language=language, source=source)


def translator(target, timeout=None):
    """`texts -> translations` through an exported translator's `serving_default`: `target` is a
    SavedModel directory (a version directory or its base directory), a TensorFlow Serving REST
    address `http://HOST:PORT/MODEL` (or `.../v1/models/MODEL[/versions/N]`) or a gRPC one
    `grpc://HOST:PORT/MODEL[/versions/N]`."""
    from keras_attn.serving.client import DEFAULT_TIMEOUT

    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    found = re.fullmatch(
        r"(https?|grpc)://([^/]+)/(?:v1/models/)?([^/]+?)(?:/versions/([0-9]+))?/?", str(target)
    )
    if found:
        scheme, address, model, version = found.groups()
        version = None if version is None else int(version)
        if scheme == "grpc":
            from keras_attn.serving.client import GrpcClient

            client = GrpcClient(address, model, version=version, timeout=timeout)
        else:
            from keras_attn.serving.client import RestClient

            client = RestClient(f"{scheme}://{address}", model, version=version, timeout=timeout)
    elif re.match(r"^[a-z]+://", str(target)):
        raise ValueError(
            "`target` must be a SavedModel directory, http://HOST:PORT/MODEL or "
            f"grpc://HOST:PORT/MODEL. Received: target={target!r}"
        )
    else:
        if not os.path.isdir(target):
            raise ValueError(
                f"`target` is not a directory nor a server address. Received: target={target!r}"
            )
        from keras_attn.serving.client import SavedModelClient

        client = SavedModelClient(target)

    def translate(texts):
        return [text for text, _ in client.translate(list(texts))]

    translate.client = client
    return translate


__all__ = [
    "FILLED",
    "FORMATS",
    "FUZZY",
    "NO_ANSWER",
    "OBSOLETE",
    "PLACEHOLDERS_LOST",
    "SOURCE_COPIED",
    "STATUSES",
    "TRANSLATED",
    "UNTRANSLATED",
    "Catalogue",
    "CatalogueError",
    "Entry",
    "FillReport",
    "fill_catalogue",
    "format_for",
    "progress_bar",
    "read_catalogue",
    "translator",
    "write_catalogue",
]
