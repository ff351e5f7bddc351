"""The loop check of the served answers (keras_attn.serving.kept_answers): a word three times
in a row that the source does not write so, in Python and in a TensorFlow graph, against
answers written out by hand."""

import tensorflow as tf

from keras_attn.serving.kept_answers import graph_new_loops, tripled_words

# (source, [(answer, whether it loops where its source does not)])
CASES = [
    (
        "Reinicie para actualizar { -brand-shorter-name }",
        [
            ("Reinicie { -brand-shorter-name }--ter--ter--ter--", True),
            ("Reinicie para actualizar { -brand-shorter-name }", False),
            ("de de la de de", False),
        ],
    ),
    ("Tom Tom Tom is a name", [("Tom tom TOM es un nombre", False), ("es es es", True)]),
    ("Contraseña", [("contraseña CONTRASEÑA Contraseña", True), ("contraseña, contraseña", False)]),
    ("", [("", False), ("a_b a_b a_b", True)]),
]


def test_tripled_words_by_hand():
    assert tripled_words("la la la") == {"la"}
    assert tripled_words("--ter--ter--ter, x x") == {"ter"}
    assert tripled_words("Ñu ñu ÑU") == {"ñu"}
    assert tripled_words("la la, le la") == set()


def test_new_loops_in_python_and_in_a_graph():
    expected = [[loops for _, loops in row] for _, row in CASES]
    python = [[bool(tripled_words(a) - tripled_words(s)) for a, _ in row] for s, row in CASES]
    assert python == expected
    width = max(len(row) for _, row in CASES)
    answers = [[a for a, _ in row] + [""] * (width - len(row)) for _, row in CASES]
    got = graph_new_loops(tf.constant([s for s, _ in CASES]), tf.constant(answers)).numpy()
    assert [list(r[: len(row)]) for r, (_, row) in zip(got.tolist(), CASES)] == expected
