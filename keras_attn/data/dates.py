"""Human-written dates in many locales and formats -> ISO `YYYY-MM-DD` (a translation task;
docs/dates.md).

Sources are rendered by CLDR through `babel` ("21 de noviembre de 2026", "2026年11月21日",
"Nov 21, 2026", "21.11.26", ...); targets are `date.isoformat()`. Pure Python, nothing
downloaded, deterministic under a seed (`random.Random(seed)`).

A *style* is one (locale, CLDR pattern): the locale's `full`, `long`, `medium` and `short` date
formats and the skeletons `yMMMEd`, `yMMMd`, `yMd` (`FORMATS`), identical patterns within a locale
counted once.

`"ordinal"` (also in `FORMATS`): the day written as people write it as an ordinal, in the
locale's text-month patterns (`full`, `long`, `medium`) and a few everyday phrasings
(`ORDINAL_PATTERNS`): English "March 3rd, 2001" / "the 21st of June 2001", French "le 1er mars
2001" ("1er" for the first only, as written), Spanish "3.º de marzo de 2001" and "3º ...",
Italian and Portuguese "1º" (the first), Dutch "3e", Swedish "3:e" / "1:a" / "22:a", German
"am 3. März 2001" (its `long` pattern already writes the day "3.", as do Danish, Norwegian,
Finnish and Czech).

Year range: the dates drawn lie in `[start, end]`, by default `DEFAULT_START` .. `DEFAULT_END`
(1950-01-01 .. 2049-12-31). A model trained on them has seen no other year: the exported dates
model answers only years of that range (`keras_attn.data.date_grammar`).

No ambiguity: every source string maps to exactly one target.
- Two-digit years ("21.11.26") are unique because a date range must lie within 100 consecutive
  years (default 1950-01-01 .. 2049-12-31; `ValueError` otherwise when a `yy` style is used).
- All-numeric styles with the same literal skeleton but a different field order would collide
  ("1/2/26" is 2 January in en_US `M/d/yy`, 1 February in es `d/M/yy`). Among such styles the most
  common field order is kept and the others are dropped (`date_styles(..., return_dropped=True)`
  lists them; with the default locales: en_US `short` and `yMd`, month-first). Year-first and
  year-last styles never collide: a 4-digit year cannot be read as a day or a month.
- Month and weekday names: checked by the tests over every month of several years.

Splits (`dates_splits`):
- held out by date: the days of the range are shuffled once and cut into train / val / test
  pools; `val` and `test` dates never occur in `train`.
- held out by locale: `test_locale` renders test-pool dates in `held_out_locales`, locales never
  used in `train`, `val` or `test`.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import random

from keras_attn._checks import check_int, check_split_fractions

FORMATS = ("full", "long", "medium", "short", "yMMMEd", "yMMMd", "yMd", "ordinal")
LOCALES = (
    "en_US", "en_GB", "de", "fr", "es", "it", "pt_BR", "pt_PT", "nl", "ru", "pl", "zh", "ja", "ko",
    "ar", "hi", "tr", "sv", "da", "fi", "nb", "cs", "uk", "el", "id", "vi", "he",
)  # fmt: skip
DEFAULT_START = datetime.date(1950, 1, 1)
DEFAULT_END = datetime.date(2049, 12, 31)
HELD_OUT_LOCALES = ("en_GB", "pt_PT")

_NAMED_FORMATS = ("full", "long", "medium", "short")
_NUMERIC_FIELDS = {"d": "d", "M": "M", "L": "M", "y": "y"}
ORDINAL = "ordinal"
_DAY_MARK = "\ue000"  # stands for the day in a pattern rendered by babel, then replaced


def _english(day):
    if day % 100 in (11, 12, 13):
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def _swedish(day):
    return f"{day}:{'a' if day % 10 in (1, 2) and day % 100 not in (11, 12) else 'e'}"


# How each language writes the day as an ordinal (None: as a number; the pattern has the dot).
ORDINAL_DAYS = {
    "en": _english,
    "fr": lambda day: "1er" if day == 1 else str(day),
    "es": lambda day: f"{day}.º",
    "es_short": lambda day: f"{day}º",
    "it": lambda day: "1º" if day == 1 else str(day),
    "pt": lambda day: "1º" if day == 1 else str(day),
    "nl": lambda day: f"{day}e",
    "sv": _swedish,
    "de": str,
}
# Patterns written with an ordinal day besides the locale's own full / long / medium ones
# (language -> (ordinal rule, extra CLDR patterns); `d` is where the ordinal goes).
ORDINAL_PATTERNS = {
    "en": ("en", ("d MMMM y", "'the' d 'of' MMMM y", "EEEE 'the' d 'of' MMMM y")),
    "fr": ("fr", ("'le' d MMMM y", "'le' EEEE d MMMM y")),
    "es": ("es", ("'el' d 'de' MMMM 'de' y",)),
    "it": ("it", ("'il' d MMMM y",)),
    "pt": ("pt", ()),
    "nl": ("nl", ()),
    "sv": ("sv", ("'den' d MMMM y",)),
    "de": ("de", ("'am' d. MMMM y", "'den' d. MMMM y")),
}


@dataclasses.dataclass(frozen=True)
class DateStyle:
    """One way to write a date: a locale and a CLDR pattern (from the named `format`)."""

    locale: str
    format: str
    pattern: str
    ordinal: str = ""  # a key of ORDINAL_DAYS: the day `d` is written as that ordinal

    @property
    def two_digit_year(self):
        return any(kind == "y" and width == 2 for kind, width in _fields(self.pattern))

    def render(self, date):
        if not self.ordinal:
            return _compiled(self.locale, self.pattern)(date)
        text = _compiled(self.locale, _day_marked(self.pattern))(date)
        return text.replace(_DAY_MARK, ORDINAL_DAYS[self.ordinal](date.day))


@functools.cache
def _day_marked(pattern):
    """`pattern` with its day field replaced by a quoted marker (filled in by `render`)."""
    from babel import dates

    out, text = [], ""
    for kind, value in dates.tokenize_pattern(pattern):
        if kind == "chars" or value[0] == "d":  # literal text, run together into one quote
            text += value if kind == "chars" else _DAY_MARK
            continue
        if text:
            out.append("'" + text.replace("'", "''") + "'")
            text = ""
        out.append(value[0] * value[1])
    if text:
        out.append("'" + text.replace("'", "''") + "'")
    return "".join(out)


def _ordinal_styles(locale):
    """The ordinal styles of `locale`: its full / long / medium patterns with a text month and
    a day, and its language's `ORDINAL_PATTERNS`, the day written by its ordinal rule."""
    from babel import Locale

    language = Locale.parse(locale).language
    if language not in ORDINAL_PATTERNS:
        return []
    rule, extra = ORDINAL_PATTERNS[language]
    patterns = []
    # German writes its own patterns' days as ordinals already ("3. März"): only the extras.
    for fmt in () if rule == "de" else ("full", "long", "medium"):
        pattern = _pattern_for(locale, fmt)
        fields = {letter: width for letter, width in _fields(pattern)}
        if fields.get("M", 0) >= 3 and "d" in fields:
            patterns.append(pattern)
    patterns += list(extra)
    styles = [DateStyle(locale, ORDINAL, pattern, rule) for pattern in dict.fromkeys(patterns)]
    if language == "es":  # "3º" beside "3.º", in the long pattern
        styles.append(DateStyle(locale, ORDINAL, _pattern_for(locale, "long"), "es_short"))
    return styles


@functools.cache
def _compiled(locale, pattern):
    from babel import Locale, dates

    parsed, loc = dates.parse_pattern(pattern), Locale.parse(locale)
    return lambda date: parsed.apply(date, loc)


def _fields(pattern):
    from babel import dates

    return [value for kind, value in dates.tokenize_pattern(pattern) if kind == "field"]


def _pattern_for(locale, fmt):
    from babel import Locale, dates

    loc = Locale.parse(locale)
    if fmt in _NAMED_FORMATS:
        return str(loc.date_formats[fmt].pattern)
    key = dates.match_skeleton(fmt, loc.datetime_skeletons.keys())
    if key is None:
        return None
    return str(loc.datetime_skeletons[key].pattern)


def _numeric_shape(pattern):
    """(group key, order of the short fields) for an all-numeric pattern; None with a text month.

    Two all-numeric styles can write the same string only if their literal text is the same and
    their 4-digit years (`y`, always 4 digits from year 1000 on) sit in the same slots: the key.
    Then the 1-2 digit fields (day, month, two-digit year) must come in the same order.
    """
    from babel import dates

    key, order = [], []
    for kind, value in dates.tokenize_pattern(pattern):
        if kind == "chars":
            key.append(value)
            continue
        letter, width = value
        if letter in _NUMERIC_FIELDS and not (letter in "ML" and width > 2):
            kind = _NUMERIC_FIELDS[letter]
            if kind == "y" and width != 2:
                key.append("#YYYY")
            else:
                key.append("#")
                order.append(kind + ("y" if kind == "y" else ""))
        elif letter in "ML":
            return None
        else:  # weekday, era...: text that does not fix the order of the numbers
            key.append(f"<{letter}{width}>")
    return tuple(key), tuple(order)


@functools.cache
def _styles(locales, formats):
    seen, styles = set(), []
    for locale in locales:
        for fmt in formats:
            if fmt == ORDINAL:
                styles.extend(_ordinal_styles(locale))
                continue
            pattern = _pattern_for(locale, fmt)
            if pattern is None or (locale, pattern) in seen:
                continue
            seen.add((locale, pattern))
            styles.append(DateStyle(locale, fmt, pattern))
    # All-numeric styles sharing a skeleton must agree on the field order.
    groups = collections.defaultdict(list)
    for style in styles:
        shape = _numeric_shape(style.pattern)
        if shape is not None:
            groups[shape[0]].append((shape[1], style))
    rank = {"d": 0, "M": 1, "yy": 2}
    dropped = []
    for skeleton, members in groups.items():
        if any(a.startswith("#") and b.startswith("#") for a, b in zip(skeleton, skeleton[1:])):
            # The digits of two fields would run together.
            dropped.extend(style for _, style in members)
            continue
        counts = collections.Counter(order for order, _ in members)
        keep = min(counts, key=lambda order: (-counts[order], [rank[k] for k in order]))
        dropped.extend(style for order, style in members if order != keep)
    kept = tuple(style for style in styles if style not in dropped)
    return kept, tuple(dropped)


def date_styles(locales=None, formats=None, return_dropped=False):
    """The `DateStyle`s used for `locales` x `formats` (defaults: `LOCALES`, `FORMATS`).

    With `return_dropped=True`, also the styles left out because they would make a source string
    ambiguous (see module docstring).
    """
    locales = _check_names("locales", locales, LOCALES)
    formats = _check_names("formats", formats, FORMATS)
    for fmt in formats:
        if fmt not in _NAMED_FORMATS + (ORDINAL,) and ("y" not in fmt or "d" not in fmt):
            raise ValueError(
                "Each format must be one of 'full', 'long', 'medium', 'short', 'ordinal' or a CLDR skeleton "
                f"with a year and a day (e.g. 'yMMMd'). Received: formats containing {fmt!r}"
            )
    for locale in locales:
        try:
            from babel import Locale

            Locale.parse(locale)
        except Exception as err:  # babel raises UnknownLocaleError / ValueError
            raise ValueError(
                f"Unknown locale. Received: locales containing {locale!r} ({err})"
            ) from err
    kept, dropped = _styles(locales, formats)
    return (list(kept), list(dropped)) if return_dropped else list(kept)


def _check_names(arg, value, default):
    if value is None:
        return tuple(default)
    if isinstance(value, str):
        value = (value,)
    value = tuple(value)
    if not value:
        raise ValueError(f"`{arg}` must not be empty. Received: {arg}={value!r}")
    return value


def _check_range(start, end, styles):
    start, end = _as_date("start", start), _as_date("end", end)
    if start.year < 1000:
        raise ValueError(f"`start` must be in year 1000 or later. Received: start={start}")
    if end < start:
        raise ValueError(f"`end` must not be before `start`. Received: start={start}, end={end}")
    if end.year - start.year >= 100 and any(s.two_digit_year for s in styles):
        raise ValueError(
            "Two-digit-year formats are ambiguous over 100 years or more: narrow the range or "
            f"leave out those formats. Received: start={start}, end={end}"
        )
    return start, end


def _as_date(arg, value):
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise ValueError(
        f"`{arg}` must be a datetime.date or an ISO date string. Received: {arg}={value!r}"
    )


def _draw(rng, n, days, styles, unique, return_info):
    by_locale = collections.defaultdict(list)
    for style in styles:
        by_locale[style.locale].append(style)
    locales = sorted(by_locale, key=lambda loc: [s.locale for s in styles].index(loc))
    out, seen, attempts = [], set(), 0
    while len(out) < n:
        attempts += 1
        if attempts > 20 * n + 1000:
            raise ValueError(
                f"Cannot draw {n} distinct examples from {len(days)} dates and {len(styles)} styles; "
                f"ask for fewer. Received: n={n}"
            )
        date = days[rng.randrange(len(days))]
        style = rng.choice(by_locale[rng.choice(locales)])
        source = style.render(date)
        if unique:
            if source in seen:
                continue
            seen.add(source)
        target = date.isoformat()
        if return_info:
            out.append(
                (
                    source,
                    target,
                    {"locale": style.locale, "format": style.format, "pattern": style.pattern},
                )
            )
        else:
            out.append((source, target))
    return out


def make_dates(
    n,
    seed=0,
    locales=None,
    formats=None,
    start=DEFAULT_START,
    end=DEFAULT_END,
    unique=False,
    return_info=False,
):
    """`n` (source, target) pairs: a date drawn uniformly from `[start, end]`, a locale uniformly
    from `locales`, a style uniformly from that locale's styles.

    Args:
        n: number of examples.
        seed: seed of the `random.Random` that draws them (same seed, same list).
        locales, formats: see `date_styles`.
        start, end: inclusive date range (`datetime.date` or ISO string).
        unique: draw distinct sources only.
        return_info: return `(source, target, info)` with info = {"locale", "format", "pattern"}.
    """
    n = check_int("n", n, 0)
    styles = date_styles(locales, formats)
    start, end = _check_range(start, end, styles)
    days = [start + datetime.timedelta(days=i) for i in range((end - start).days + 1)]
    return _draw(random.Random(seed), n, days, styles, unique, return_info)


def dates_splits(
    n_train,
    n_val,
    n_test,
    seed=0,
    n_test_locale=None,
    held_out_locales=HELD_OUT_LOCALES,
    locales=None,
    formats=None,
    start=DEFAULT_START,
    end=DEFAULT_END,
    val_fraction=0.1,
    test_fraction=0.1,
    return_info=False,
):
    """Train / validation / test splits held out by date, plus a split held out by locale.

    The days of `[start, end]` are shuffled with `seed` and cut into pools: `test_fraction` of them
    for test, `val_fraction` for validation, the rest for training. Returns a dict of lists of
    (source, target) pairs, each list without repeated sources:

    - "train": train-pool dates in the training locales (`locales` minus `held_out_locales`);
    - "val": val-pool dates, training locales;
    - "test": test-pool dates, training locales (held out by date);
    - "test_locale": test-pool dates in `held_out_locales` only (held out by locale and date);
      `n_test_locale` examples (default `n_test`; empty if no locale is held out).
    """
    train_locales, held_out = _split_locales(locales, held_out_locales)
    check_split_fractions(val_fraction, test_fraction)
    train_styles = date_styles(train_locales, formats)
    held_styles = date_styles(held_out, formats) if held_out else []
    start, end = _check_range(start, end, train_styles + held_styles)
    train_days, val_days, test_days = _day_pools(start, end, seed, val_fraction, test_fraction)
    n_test_locale = n_test if n_test_locale is None else n_test_locale
    out = {}
    for name, n, pool, styles, offset in (
        ("train", n_train, train_days, train_styles, 1),
        ("val", n_val, val_days, train_styles, 2),
        ("test", n_test, test_days, train_styles, 3),
        ("test_locale", n_test_locale if held_out else 0, test_days, held_styles, 4),
    ):
        n = check_int(f"n_{name}", n, 0)
        # One generator per split: a split's content does not depend on the other splits' sizes.
        out[name] = (
            _draw(random.Random(f"{seed}/{offset}"), n, pool, styles, True, return_info)
            if n
            else []
        )
    return out


def _split_locales(locales, held_out_locales):
    """`(train_locales, held_out)`: `locales` (all by default) without the held-out ones,
    which must be among them; some locale must be left for training."""
    all_locales = _check_names("locales", locales, LOCALES)
    if isinstance(held_out_locales, str):
        held_out_locales = (held_out_locales,)
    held_out = tuple(held_out_locales or ())
    unknown = [loc for loc in held_out if loc not in all_locales]
    if unknown:
        raise ValueError(
            f"`held_out_locales` must be among `locales`. Received: held_out_locales={held_out_locales!r}"
        )
    train_locales = tuple(loc for loc in all_locales if loc not in held_out)
    if not train_locales:
        raise ValueError(
            f"Every locale is held out. Received: held_out_locales={held_out_locales!r}"
        )
    return train_locales, held_out


def _day_pools(start, end, seed, val_fraction, test_fraction):
    """`(train_days, val_days, test_days)`: the days of `[start, end]` shuffled with `seed`
    and cut into pools, each sorted."""
    days = [start + datetime.timedelta(days=i) for i in range((end - start).days + 1)]
    random.Random(seed).shuffle(days)
    n_test_days = max(1, int(round(test_fraction * len(days))))
    n_val_days = max(1, int(round(val_fraction * len(days))))
    test_days = sorted(days[:n_test_days])
    val_days = sorted(days[n_test_days : n_test_days + n_val_days])
    train_days = sorted(days[n_test_days + n_val_days :])
    if not train_days:
        raise ValueError(
            f"The date range is too short to split. Received: start={start}, end={end}"
        )
    return train_days, val_days, test_days


def ambiguous_sources(pairs):
    """The sources among `pairs` that map to more than one target: {source: sorted targets}."""
    targets = collections.defaultdict(set)
    for pair in pairs:
        targets[pair[0]].add(pair[1])
    return {s: sorted(t) for s, t in targets.items() if len(t) > 1}
