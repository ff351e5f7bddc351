"""gettext `.po` / `.pot` through `polib`."""

from __future__ import annotations

import re

from keras_attn.catalogue import plurals
from keras_attn.catalogue.base import UNTRANSLATED, Catalogue, CatalogueError, Entry, status_of

_STRING_LINE = re.compile(
    r'^(?:(?:msgctxt|msgid|msgid_plural|msgstr(?:\[[0-9]+\])?)\s+)?"(?:[^"\\]|\\.)*"$'
)
_KEYWORD = re.compile(r"^(?:msgctxt|msgid|msgid_plural|msgstr)\b|^\"")


def _check_strings(path):
    """polib reads a string whose closing quote is missing as if it were there: every line
    of a keyword or a continued string must be one whole quoted string. Returns the number of
    the file's first line that is not blank (polib numbers a first entry there 0), or None."""
    first = None
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="replace").strip()
            if _KEYWORD.match(line) and not _STRING_LINE.match(line):
                raise CatalogueError(path, "not one whole quoted string", number)
            if first is None and line:
                first = number
    return first


class PoFormat:
    """gettext catalogues: an entry is untranslated when its `msgstr` (each `msgstr[n]` of a
    plural one) is empty and it is neither `fuzzy` nor obsolete. A filled entry is marked
    `fuzzy` (for review). A plural entry gets `nplurals` forms, read from the file's
    `Plural-Forms` header, else from the target language (the header is then written too): the
    first from `msgid`, the others from `msgid_plural` (a language with one form: from
    `msgid_plural`)."""

    name = "po"
    extensions = (".po", ".pot")

    def read(self, path, language=None, source=None):
        import polib

        if source is not None:
            raise CatalogueError(path, "a gettext catalogue holds its source texts: pass no source")
        first = _check_strings(path)
        try:
            document = polib.pofile(path, wrapwidth=78)
        except (OSError, UnicodeDecodeError, ValueError) as err:
            message = str(err)
            found = re.search(r"\(line ([0-9]+)\)", message)
            line = int(found.group(1)) if found else None
            message = re.sub(r"^Syntax error in po file .*?\(line [0-9]+\)(: )?", "", message)
            raise CatalogueError(
                path, message or "syntax error in a gettext catalogue", line
            ) from None
        language = language or document.metadata.get("Language") or None
        forms = plurals.nplurals(document.metadata.get("Plural-Forms"))
        entries = []
        for e in document:
            key = e.msgid if not e.msgctxt else f"{e.msgctxt}\x04{e.msgid}"
            status = status_of(e.obsolete, e.fuzzy, e.translated())
            line = e.linenum or first  # the first entry of a file without a header: 0
            if e.msgid_plural:
                if status == UNTRANSLATED and forms is None:
                    try:
                        forms = plurals.nplurals(plurals.plural_forms(language))
                    except ValueError as err:
                        raise CatalogueError(
                            path,
                            f"a plural entry, and no Plural-Forms header nor known language ({err})",
                            line,
                        ) from None
                n = forms or 2
                sources = (e.msgid_plural,) if n == 1 else (e.msgid,) + (e.msgid_plural,) * (n - 1)
            else:
                sources = (e.msgid,)
            entries.append(Entry(key.replace("\x04", " | "), line, sources, status, e))
        return Catalogue(str(path), self, entries, language, document)

    def fill(self, catalogue, entry, translations):
        e = entry.handle
        if e.msgid_plural:
            e.msgstr_plural = dict(enumerate(translations))
            metadata = catalogue.document.metadata
            if plurals.nplurals(metadata.get("Plural-Forms")) is None:
                metadata["Plural-Forms"] = plurals.plural_forms(catalogue.language)
        else:
            e.msgstr = translations[0]
        if "fuzzy" not in e.flags:
            e.flags.append("fuzzy")

    def dump(self, catalogue):
        document = catalogue.document
        if catalogue.language and not document.metadata.get("Language"):
            document.metadata["Language"] = catalogue.language
        text = str(document)
        if not document.header and text.startswith("#\n"):  # polib's line for no header comment
            text = text[2:]
        return (text + "\n").encode(document.encoding or "utf-8")
