"""The answer checks of the corpus report (benchmarks/corpus_answers.py): cut words, the pairs
where copying a name is the answer, invalid text, loops."""

from keras_attn.train.evaluate import (
    copied_words_pairs,
    cut_words,
    loop_rate,
    replacement_answers,
)


def test_a_name_cut_short_is_found_and_a_whole_one_is_not():
    sources = ["Loti", "Currency: Loti", "Open Chiriquí", "Open the file"]
    references = ["Loti", "Moneda: Loti", "Abrir Chiriquí", "Abrir el archivo"]
    answers = ["Lo", "Moneda: Loti", "Abrir Chi", "Abrir el Op"]
    assert cut_words(sources, references, answers) == [(0, "Loti", "Lo"), (2, "Chiriquí", "Chi")]


def test_a_prefix_is_a_cut_only_where_the_reference_keeps_the_word():
    # "Open" is not in the reference: an answer word that starts it is a translation, not a cut.
    assert cut_words(["Open"], ["Abrir"], ["Op"]) == []
    # Case is kept: "lo" is not a cut of "Loti"; a one-letter word is never counted.
    assert cut_words(["Loti"], ["Loti"], ["lo L"]) == []


def test_names_and_codes_are_the_pairs_whose_reference_keeps_them():
    pairs = [
        ("Pay in Euro", "Pagar en Euro"),  # a capitalised word kept
        ("Port 8080 closed", "Puerto 8080 cerrado"),  # a code kept
        ("Save the file", "Guardar el archivo"),  # nothing kept
        ("Files", "Files"),  # only the first word: a capital says nothing there
    ]
    assert copied_words_pairs(pairs) == pairs[:2]


def test_replacement_characters_count_only_where_the_source_has_none():
    sources = ["Mode", "Bad \ufffd input", "Mode"]
    answers = ["Modo \ufffd", "Mal \ufffd entrada", "Modo"]
    assert replacement_answers(sources, answers) == [0]


def test_loop_rate_counts_a_token_three_times_in_a_row():
    assert loop_rate(["a a a b", "a b a b a", "x y"]) == 1 / 3
    assert loop_rate(["%s de %s"]) == 0.0


def test_the_names_table_counts_exact_answers_names_kept_whole_and_cuts():
    from benchmarks.corpus_answers import name_scores

    pairs = [("Loti", "Loti"), ("Abruzzo", "Abruzos"), ("Baht", "Baht"), ("Kayah Li", "Kayah Li")]
    answers = ["Loti", "Abruzzo", "Ba", "Kayah Li"]
    out = name_scores(pairs, answers)
    assert out["same"] == 3 and out["whole"] == 2 / 3  # Baht -> Ba: not kept whole
    assert out["exact"] == 2 / 4  # Abruzzo is no answer for Abruzos
    assert out["cut"] == 1
    assert name_scores(pairs, [s for s, _ in pairs])["whole"] == 1.0
    assert 0 < out["chrf"] < name_scores(pairs, [t for _, t in pairs])["chrf"] == 100.0
