"""Qt Linguist `.ts` (XML, through the standard library's expat and ElementTree)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.parsers import expat

from keras_attn.catalogue import plurals
from keras_attn.catalogue.base import UNTRANSLATED, Catalogue, CatalogueError, Entry, status_of


def _parse(path):
    """The document's root, each element with the line it starts on (`.line`)."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate("utf-8")
    lines = []

    def start(tag, attributes):
        lines.append((builder.start(tag, attributes), parser.CurrentLineNumber))

    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.buffer_text = True
    try:
        with open(path, "rb") as f:
            parser.ParseFile(f)
    except expat.ExpatError as err:
        raise CatalogueError(path, f"not XML: {expat.ErrorString(err.code)}", err.lineno) from None
    root = builder.close()
    return root, dict((id(e), line) for e, line in lines)


class TsFormat:
    """Qt Linguist catalogues: a message is untranslated when its `<translation>` is empty (each
    `<numerusform>` of a plural one) and not `vanished` / `obsolete`; one with text marked
    `type="unfinished"` awaits review and is kept. A filled message is marked
    `type="unfinished"`. A plural message (`numerus="yes"`) gets one `<numerusform>` per form of
    the target language (the `<TS language="...">` attribute, else the language given), each
    from its `<source>`."""

    name = "ts"
    extensions = (".ts",)

    def read(self, path, language=None, source=None):
        if source is not None:
            raise CatalogueError(path, "a Qt catalogue holds its source texts: pass no source")
        root, lines = _parse(path)
        if root.tag != "TS":
            raise CatalogueError(
                path, f"a Qt catalogue's root is <TS>, not <{root.tag}>", lines[id(root)]
            )
        language = language or root.get("language") or None
        entries = []
        for context in root.iter("context"):
            name = context.findtext("name", "")
            for message in context.iter("message"):
                line = lines[id(message)]
                source_text = message.find("source")
                translation = message.find("translation")
                if source_text is None:
                    raise CatalogueError(path, "a <message> without <source>", line)
                if translation is None:
                    translation = ET.SubElement(message, "translation", type="unfinished")
                kind = translation.get("type")
                forms = translation.findall("numerusform")
                texts = [f.text or "" for f in forms] if forms else [translation.text or ""]
                obsolete = kind in ("vanished", "obsolete")
                status = status_of(obsolete, all(texts) and kind == "unfinished", all(texts))
                count = 1
                if message.get("numerus") == "yes":
                    if status == UNTRANSLATED and not plurals.known(language):
                        raise CatalogueError(
                            path,
                            "a plural message, and no known target language (<TS language=...>): "
                            f"pass a language ({', '.join(sorted(plurals.LANGUAGES))})",
                            line,
                        )
                    count = (
                        plurals.nplurals(plurals.plural_forms(language))
                        if plurals.known(language)
                        else len(forms)
                    )
                key = f"{name} | {source_text.text or ''}"
                sources = (source_text.text or "",) * max(count, 1)
                entries.append(Entry(key, line, sources, status, (message, translation)))
        return Catalogue(str(path), self, entries, language, root)

    def fill(self, catalogue, entry, translations):
        message, translation = entry.handle
        translation.set("type", "unfinished")
        if message.get("numerus") == "yes":
            for form in list(translation):
                translation.remove(form)
            translation.text = None
            for text in translations:
                ET.SubElement(translation, "numerusform").text = text
        else:
            translation.text = translations[0]

    def dump(self, catalogue):
        root = catalogue.document
        if catalogue.language and not root.get("language"):
            root.set("language", catalogue.language)
        body = ET.tostring(root, encoding="unicode")
        return ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE TS>\n' + body + "\n").encode(
            "utf-8"
        )
