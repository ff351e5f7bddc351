import datetime

import pytest
from babel import dates as babel_dates

from keras_attn.data.dates import (
    DEFAULT_END,
    DEFAULT_START,
    FORMATS,
    HELD_OUT_LOCALES,
    LOCALES,
    DateStyle,
    ambiguous_sources,
    date_styles,
    dates_splits,
    make_dates,
)

NAMED = ("full", "long", "medium", "short")


def babel_render(date, locale, fmt):
    """The date written by babel's public API (independent of our pre-parsed patterns)."""
    if fmt in NAMED:
        return babel_dates.format_date(date, format=fmt, locale=locale)
    return babel_dates.format_skeleton(fmt, date, locale=locale)


def test_deterministic_under_seed():
    a = make_dates(300, seed=7)
    assert a == make_dates(300, seed=7)
    assert a != make_dates(300, seed=8)
    assert len(a) == 300 and all(isinstance(s, str) and isinstance(t, str) for s, t in a)


def test_targets_are_the_iso_date_of_the_source():
    examples = make_dates(400, seed=1, return_info=True)
    for source, target, info in examples:
        date = datetime.date.fromisoformat(target)
        assert target == f"{date.year:04d}-{date.month:02d}-{date.day:02d}"
        assert DEFAULT_START <= date <= DEFAULT_END
        if info["format"] == "ordinal":  # not a babel format: test_ordinals_as_people_write_them
            assert str(date.year) in source and str(date.day) in source
            continue
        assert babel_render(date, info["locale"], info["format"]) == source
    assert len({info["locale"] for _, _, info in examples}) == len(LOCALES)
    assert {info["format"] for _, _, info in examples} == set(FORMATS)


def test_numeric_four_digit_year_sources_parse_back_with_babel():
    cases = [
        ("fr", "short"),
        ("de", "medium"),
        ("ru", "short"),
        ("nl", "short"),
        ("pt_BR", "short"),
    ]
    checked = 0
    for locale, fmt in cases:
        for source, target in make_dates(30, seed=2, locales=[locale], formats=[fmt]):
            assert babel_dates.parse_date(source, locale=locale, format=fmt).isoformat() == target
            checked += 1
    assert checked == 150


def test_covers_many_locales_and_the_issue_examples():
    styles = date_styles()
    assert len({s.locale for s in styles}) >= 20
    day = datetime.date(2026, 11, 21)
    written = {s.render(day) for s in styles}
    for example in ("21 de noviembre de 2026", "2026年11月21日", "Nov 21, 2026", "21.11.26"):
        assert example in written


def stress_days():
    # Years whose two digits look like days/months (01, 12, 31),
    # every day of each: every month and weekday name, every day/month swap.
    days = []
    for year in (2001, 2012, 2031):
        d = datetime.date(year, 1, 1)
        while d.year == year:
            days.append(d)
            d += datetime.timedelta(days=1)
    return days


def test_no_source_maps_to_two_dates():
    days = stress_days()
    pairs = [(style.render(d), d.isoformat()) for style in date_styles() for d in days]
    assert len(pairs) > 200_000  # 187 styles x 1096 days
    assert ambiguous_sources(pairs) == {}


ENGLISH_SUFFIXES = {1: "st", 2: "nd", 3: "rd", 4: "th", 11: "th", 12: "th", 13: "th", 21: "st"}
ENGLISH_SUFFIXES.update({22: "nd", 23: "rd", 24: "th", 30: "th", 31: "st"})
SWEDISH_SUFFIXES = {1: "a", 2: "a", 3: "e", 11: "e", 12: "e", 21: "a", 22: "a", 23: "e", 31: "a"}


def rendered(locales, day):
    return {s.render(day) for s in date_styles(locales, ["ordinal"])}


def test_ordinals_as_people_write_them():
    day = datetime.date(2001, 3, 3)
    assert {"March 3rd, 2001", "Saturday, March 3rd, 2001", "Mar 3rd, 2001"} <= rendered(
        ["en_US"], day
    )
    assert {"3rd March 2001", "the 3rd of March 2001"} <= rendered(["en_GB"], day)
    assert {"3.º de marzo de 2001", "3º de marzo de 2001", "el 3.º de marzo de 2001"} <= rendered(
        ["es"], day
    )
    assert {"am 3. März 2001"} <= rendered(["de"], day)
    assert {"3e maart 2001"} <= rendered(["nl"], day)
    assert {"den 3:e mars 2001", "3:e mars 2001"} <= rendered(["sv"], day)
    first = datetime.date(2001, 3, 1)
    assert {"le 1er mars 2001", "1er mars 2001", "jeudi 1er mars 2001"} <= rendered(["fr"], first)
    assert {"le 14 juillet 2001"} <= rendered(["fr"], datetime.date(2001, 7, 14))
    assert {"1º marzo 2001", "il 1º marzo 2001"} <= rendered(["it"], first)
    assert {"1º de março de 2001"} <= rendered(["pt_BR"], first)
    assert {"2 de março de 2001"} <= rendered(["pt_BR"], datetime.date(2001, 3, 2))
    for n, suffix in ENGLISH_SUFFIXES.items():
        assert f"January {n}{suffix}, 2001" in rendered(["en_US"], datetime.date(2001, 1, n))
    for n, suffix in SWEDISH_SUFFIXES.items():
        assert f"{n}:{suffix} januari 2001" in rendered(["sv"], datetime.date(2001, 1, n))
    # Locales without an ordinal rule have no ordinal style; the others are in the default mix.
    assert date_styles(["ja"], ["ordinal"]) == []
    pairs = make_dates(2000, seed=4, return_info=True)
    ordinal = {info["locale"] for _, _, info in pairs if info["format"] == "ordinal"}
    assert ordinal == {"en_US", "en_GB", "de", "fr", "es", "it", "pt_BR", "pt_PT", "nl", "sv"}


def test_month_first_numeric_style_is_dropped_because_it_would_collide():
    kept, dropped = date_styles(["en_US", "es", "it"], ["short"], return_dropped=True)
    assert [(s.locale, s.pattern) for s in dropped] == [("en_US", "M/d/yy")]
    assert {s.locale for s in kept} == {"es", "it"}
    # The reason, checked by brute force on the raw patterns: "1/2/26" is two dates.
    both = [DateStyle("en_US", "short", "M/d/yy"), DateStyle("es", "short", "d/M/yy")]
    clash = ambiguous_sources([(s.render(d), d.isoformat()) for s in both for d in stress_days()])
    assert clash["1/2/12"] == ["2012-01-02", "2012-02-01"]
    # Year-first and year-last numeric styles are kept together: a 4-digit year is never a day.
    kept = date_styles(["sv", "nl"], ["short"])
    assert {(s.locale, s.pattern) for s in kept} == {("sv", "y-MM-dd"), ("nl", "dd-MM-y")}


def test_two_digit_years_need_a_range_under_a_century():
    with pytest.raises(ValueError, match="Two-digit"):
        make_dates(5, start="1900-01-01", end="2049-12-31")
    # Without two-digit-year styles the long range is fine.
    pairs = make_dates(50, start="1800-01-01", end="2099-12-31", formats=["long"], seed=3)
    assert all("1800-01-01" <= t <= "2099-12-31" for _, t in pairs)
    with pytest.raises(ValueError, match="end"):
        make_dates(5, start="2000-01-02", end="2000-01-01")
    with pytest.raises(ValueError, match="start"):
        make_dates(5, start="yesterday")


def test_bad_names_are_rejected():
    with pytest.raises(ValueError, match="locale"):
        make_dates(3, locales=["xx_NOPE"])
    with pytest.raises(ValueError, match="formats"):
        make_dates(3, formats=["yMMM"])  # no day
    with pytest.raises(ValueError, match="held_out_locales"):
        dates_splits(3, 3, 3, held_out_locales=["xx"])


@pytest.fixture(scope="module")
def splits():
    return dates_splits(3000, 300, 300, seed=5, return_info=True)


def test_splits_held_out_by_date_and_by_locale(splits):
    assert {k: len(v) for k, v in splits.items()} == {
        "train": 3000,
        "val": 300,
        "test": 300,
        "test_locale": 300,
    }
    dates = {name: {t for _, t, _ in rows} for name, rows in splits.items()}
    assert not dates["train"] & dates["val"]
    assert not dates["train"] & dates["test"]
    assert not dates["train"] & dates["test_locale"]
    assert not dates["val"] & dates["test"]
    locales = {name: {info["locale"] for _, _, info in rows} for name, rows in splits.items()}
    assert locales["test_locale"] == set(HELD_OUT_LOCALES)
    assert locales["train"] == set(LOCALES) - set(HELD_OUT_LOCALES)
    assert not (locales["val"] | locales["test"]) & set(HELD_OUT_LOCALES)
    for rows in splits.values():
        sources = [s for s, _, _ in rows]
        assert len(set(sources)) == len(sources)


def test_splits_deterministic_and_independent_of_other_sizes(splits):
    again = dates_splits(3000, 300, 300, seed=5, return_info=True)
    assert again == splits
    other = dates_splits(10, 300, 300, seed=5, return_info=True)
    assert other["test"] == splits["test"] and other["val"] == splits["val"]
    assert dates_splits(10, 10, 10, seed=6)["test"] != dates_splits(10, 10, 10, seed=5)["test"]
    assert dates_splits(5, 5, 5, held_out_locales=())["test_locale"] == []


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: make_dates(-1), r"`n` must be an integer >= 0\. Received: n=-1"),
        (lambda: make_dates(2.5), r"`n` must be an integer >= 0\. Received: n=2\.5"),
        (lambda: dates_splits(4, -2, 2), r"`n_val` must be an integer >= 0\. Received: n_val=-2"),
        (lambda: dates_splits(4, 2, 2, n_test_locale=True), r"`n_test_locale` must be an integer"),
    ],
)
def test_counts_are_checked_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
