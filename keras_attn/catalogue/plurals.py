"""The plural forms a target language has: gettext's count and `Plural-Forms` expression (also
Qt Linguist's number of numerus forms) and the CLDR categories i18next keys are named after
(`_one`, `_few`, ..., as `Intl.PluralRules` gives them)."""

from __future__ import annotations

import re

_ONE = "nplurals=2; plural=(n != 1);"
_ONE_FR = "nplurals=2; plural=(n > 1);"
_NONE = "nplurals=1; plural=0;"
_SLAVIC = (
    "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || "
    "n%100>=20) ? 1 : 2);"
)
_CZ = "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;"
_PL = "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);"
_AR = (
    "nplurals=6; plural=(n==0 ? 0 : n==1 ? 1 : n==2 ? 2 : n%100>=3 && n%100<=10 ? 3 : "
    "n%100>=11 ? 4 : 5);"
)

# language: (gettext Plural-Forms, CLDR cardinal categories)
LANGUAGES = {
    "en": (_ONE, ("one", "other")),
    "de": (_ONE, ("one", "other")),
    "nl": (_ONE, ("one", "other")),
    "sv": (_ONE, ("one", "other")),
    "da": (_ONE, ("one", "other")),
    "nb": (_ONE, ("one", "other")),
    "fi": (_ONE, ("one", "other")),
    "el": (_ONE, ("one", "other")),
    "hu": (_ONE, ("one", "other")),
    "tr": (_ONE, ("one", "other")),
    "es": (_ONE, ("one", "many", "other")),
    "it": (_ONE, ("one", "many", "other")),
    "pt": (_ONE, ("one", "many", "other")),
    "ca": (_ONE, ("one", "many", "other")),
    "fr": (_ONE_FR, ("one", "many", "other")),
    "pt_BR": (_ONE_FR, ("one", "many", "other")),
    "ja": (_NONE, ("other",)),
    "zh": (_NONE, ("other",)),
    "ko": (_NONE, ("other",)),
    "vi": (_NONE, ("other",)),
    "th": (_NONE, ("other",)),
    "id": (_NONE, ("other",)),
    "ru": (_SLAVIC, ("one", "few", "many", "other")),
    "uk": (_SLAVIC, ("one", "few", "many", "other")),
    "be": (_SLAVIC, ("one", "few", "many", "other")),
    "sr": (_SLAVIC, ("one", "few", "other")),
    "hr": (_SLAVIC, ("one", "few", "other")),
    "bs": (_SLAVIC, ("one", "few", "other")),
    "pl": (_PL, ("one", "few", "many", "other")),
    "cs": (_CZ, ("one", "few", "many", "other")),
    "sk": (_CZ, ("one", "few", "many", "other")),
    "ar": (_AR, ("zero", "one", "two", "few", "many", "other")),
}

CATEGORIES = ("zero", "one", "two", "few", "many", "other")
"""The CLDR plural categories, in the order i18next and ICU write them."""


def _known(language):
    code = re.split(r"[-@.]", str(language))[0].replace("-", "_")
    for name in (code, code.split("_")[0].lower()):
        if name in LANGUAGES:
            return name
    return None


def check_language(language, name="language"):
    """`language` if the table knows it (`es`, `pt_BR`, `de-AT`), else a ValueError naming the
    argument and the languages it knows."""
    if language is None or _known(language) is None:
        raise ValueError(
            f"`{name}` must be a language whose plural forms are known ({', '.join(sorted(LANGUAGES))}). "
            f"Received: {name}={language!r}"
        )
    return language


def plural_forms(language):
    """gettext's `Plural-Forms` header value for `language`."""
    return LANGUAGES[_known(check_language(language))][0]


def nplurals(plural_forms_header):
    """The number of forms a `Plural-Forms` header value states (`nplurals=3; ...` -> 3); None
    when it states none."""
    found = re.search(r"nplurals\s*=\s*([0-9]+)", plural_forms_header or "")
    return int(found.group(1)) if found and int(found.group(1)) > 0 else None


def categories(language):
    """The CLDR cardinal categories of `language`, e.g. `("one", "few", "many", "other")`."""
    return LANGUAGES[_known(check_language(language))][1]


def known(language):
    """Whether the table knows `language`."""
    return language is not None and _known(language) is not None


def language_of_path(path):
    """The language a catalogue's path names (`locales/es/common.json`, `es.json`,
    `app_pt-BR.json`, `vorta.de.ts`): its file name's last part after `.`, `_` or `-`, else a
    folder's name, that the table knows; None where none does."""
    import os

    parts = os.path.normpath(os.fspath(path)).split(os.sep)
    stem = os.path.splitext(parts[-1])[0]
    pieces = re.split(r"[._]", stem)
    candidates = [stem, "_".join(pieces[-2:])] + pieces[::-1] + parts[-2::-1]
    for candidate in candidates:
        if candidate and known(candidate):
            return candidate
    return None
