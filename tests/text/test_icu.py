"""ICU messages split into their skeleton and their texts (keras_attn.text.placeholders:
`icu_split`, `icu_join`, `icu_structure_kept` and their graph twins), against pieces written
out by hand."""

import pytest
import tensorflow as tf

from keras_attn.text.placeholders import (
    graph_icu_join,
    graph_icu_split,
    icu_join,
    icu_split,
    icu_structure_kept,
)

# (message, its skeleton, its texts), written out by hand
CASES = [
    (
        "{n, plural, one {# file} other {# files}} deleted",
        ["{n, plural, one {", "} other {", "}}"],
        ["", "# file", "# files", " deleted"],
    ),
    (
        "{gender, select, male {He} female {She} other {They}} left {count, plural, =0 {nothing}"
        " other {# {thing}s}}",
        ["{gender, select, male {", "} female {", "} other {", "}}"]
        + ["{count, plural, =0 {", "} other {", "}}"],
        ["", "He", "She", "They", " left ", "nothing", "# {thing}s", ""],
    ),
    (
        "{n, selectordinal, one {#st} other {#th}}",
        ["{n, selectordinal, one {", "} other {", "}}"],
        ["", "#st", "#th", ""],
    ),
    ("Delete {name}?", [], ["Delete {name}?"]),  # no ICU opening: not split
    ("Item #3 }}", [], ["Item #3 }}"]),  # prose with `#` and `}}`
    ("%d of {n, plural, one {#} other {#}}", [], ["%d of {n, plural, one {#} other {#}}"]),
    ("", [], [""]),
]


@pytest.mark.parametrize("message, skeleton, texts", CASES)
def test_split_and_join(message, skeleton, texts):
    assert icu_split(message) == (skeleton, texts)
    assert icu_join(skeleton, texts) == message


def test_the_graph_splits_and_joins_as_python():
    messages = [m for m, _, _ in CASES]
    skeleton, texts = graph_icu_split(tf.constant(messages))
    assert [[p.decode() for p in row] for row in skeleton.to_list()] == [s for _, s, _ in CASES]
    assert [[t.decode() for t in row] for row in texts.to_list()] == [t for _, _, t in CASES]
    translated = texts.with_flat_values(tf.strings.upper(texts.flat_values))
    joined = [j.decode() for j in graph_icu_join(skeleton, translated).numpy()]
    assert joined == [icu_join(s, [t.upper() for t in x]) for _, s, x in CASES]


def test_structure_kept():
    source = "{n, plural, one {# file} other {# files}}"
    assert icu_structure_kept(source, "{n, plural, one {# archivo} other {# archivos}}")
    for broken in (
        "{n, plural, one {archivo} other {# # archivos}}",  # a `#` moved to the next text
        "{n, plural, one {# archivo}} other {# archivos}",  # closing before the next selector
        "{n, plural, other {# archivos} one {# archivo}}",  # selectors swapped
        "{n, plural, one {# archivo} other {# archivos}",  # closing lost
        "# archivos",
    ):
        assert not icu_structure_kept(source, broken), broken
    assert icu_structure_kept("Delete {name}?", "anything")


def test_bad_input():
    with pytest.raises(ValueError, match="text"):
        icu_split(3)
    with pytest.raises(ValueError, match="texts"):
        icu_join(["}}"], ["a"])
