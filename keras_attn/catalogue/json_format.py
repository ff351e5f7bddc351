"""i18next / ICU MessageFormat JSON: an object of messages, nested objects as key paths
(`{"menu": {"open": "Open"}}` is `menu.open`)."""

from __future__ import annotations

import copy
import json
import re

from keras_attn.catalogue import plurals
from keras_attn.catalogue.base import (
    FILLED,
    TRANSLATED,
    UNTRANSLATED,
    Catalogue,
    CatalogueError,
    Entry,
)

_PLURAL_KEY = re.compile(r"^(.*)_(" + "|".join(plurals.CATEGORIES) + r")$")


def _load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as err:
        raise CatalogueError(path, f"not UTF-8 ({err.reason} at byte {err.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CatalogueError(
            path, f"not JSON: {err.msg} (column {err.colno})", err.lineno
        ) from None
    if not isinstance(data, dict):
        raise CatalogueError(
            path, f"a JSON catalogue must be an object of messages, not a {type(data).__name__}", 1
        )
    return text, data


def _line_of(text, path):
    """The line of key path `path` in the JSON text (its last key after its parents')."""
    at = 0
    for key in path:
        found = re.compile(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:").search(
            text, at
        )
        if found is None:
            return None
        at = found.start()
    return text.count("\n", 0, at) + 1


def _messages(file, text, data, prefix=()):
    """`{key path: text}` of the messages, in file order (nested objects walked)."""
    out = {}
    for key, value in data.items():
        path = prefix + (key,)
        if isinstance(value, dict):
            out.update(_messages(file, text, value, path))
        elif isinstance(value, str):
            out[path] = value
        else:
            raise CatalogueError(
                file,
                f"the message {'.'.join(path)!r} must be a string or an object of messages, "
                f"not {json.dumps(value)[:40]}",
                _line_of(text, path),
            )
    return out


class JsonFormat:
    """i18next and ICU MessageFormat JSON (react-intl / FormatJS) catalogues.

    The file filled is a target-language catalogue; its messages' source texts are those of the
    source-language catalogue passed as `source` (same keys). A message is untranslated when the
    source has it and the target's is missing or empty; every other target message is kept. With
    no `source`, the file is itself the source-language catalogue and every message is
    untranslated (the output is a new target-language file).

    i18next plural keys (`items_one`, `items_other`) become the target language's categories
    (`items_one`, `items_few`, `items_many`, `items_other` for Russian), each translated from the
    source's key of the same category, else its `_other`. JSON has no review mark: the filled
    messages are listed in the report."""

    name = "json"
    extensions = (".json",)

    def read(self, path, language=None, source=None):
        text, data = _load(path)
        if language is None and source is not None:  # a target file's path names its language
            language = plurals.language_of_path(path)
        messages = _messages(path, text, data)
        if source is None:
            sources, target, source_text = messages, {}, text
        else:
            source_text, source_data = _load(source)
            sources, target = _messages(source, source_text, source_data), messages
        wanted = dict(sources)  # key path -> source text, plural keys as the target needs them
        groups = {}
        for key in sources:
            found = _PLURAL_KEY.match(key[-1])
            if found:
                groups.setdefault(key[:-1] + (found.group(1),), {})[found.group(2)] = key
        for base, keys in groups.items():
            if "other" not in keys:
                continue
            if not plurals.known(language):
                raise CatalogueError(
                    source or path,
                    f"the plural message {'.'.join(base)!r} needs the target language's plural "
                    f"categories: pass a language ({', '.join(sorted(plurals.LANGUAGES))}). "
                    f"Received: language={language!r}",
                    _line_of(source_text, keys["other"]),
                )
            forms = plurals.categories(language)
            for category, key in keys.items():
                if category not in forms:  # a form the target language does not have
                    del wanted[key]
            for category in forms:
                name = base[:-1] + (f"{base[-1]}_{category}",)
                wanted[name] = sources[keys.get(category, keys["other"])]
        entries = []
        for key, source_message in wanted.items():
            translated = bool(target.get(key))
            line = _line_of(text, key) if key in target else _line_of(source_text, key)
            status = TRANSLATED if translated else UNTRANSLATED
            entries.append(Entry(".".join(key), line, (source_message,), status, key))
        # the target file's messages, or for a source file its shape (its messages replaced)
        document = copy.deepcopy(data)
        indent = re.search(r"\n([ \t]+)\"", text)
        catalogue = Catalogue(str(path), self, entries, language, document)
        catalogue.indent = indent.group(1) if indent else "  "
        catalogue.replace_all = source is None
        return catalogue

    def fill(self, catalogue, entry, translations):
        node = catalogue.document
        for key in entry.handle[:-1]:
            node = node.setdefault(key, {})
        node[entry.handle[-1]] = translations[0]

    def dump(self, catalogue):
        document = catalogue.document
        if catalogue.replace_all:  # a source file's messages left untranslated are left out
            filled = {e.handle for e in catalogue.entries if e.status in (TRANSLATED, FILLED)}
            document = _only(document, filled)
        text = json.dumps(document, ensure_ascii=False, indent=catalogue.indent)
        return (text + "\n").encode("utf-8")


def _only(data, keep, prefix=()):
    out = {}
    for key, value in data.items():
        path = prefix + (key,)
        if isinstance(value, dict):
            inner = _only(value, keep, path)
            if inner:
                out[key] = inner
        elif path in keep:
            out[key] = value
    return out
