"""The AoA cloze reader, the cloze questions and the reader's raw-text export."""

import keras
import numpy as np
import tensorflow as tf

from keras_attn.data.cloze import BLANK, N_CANDIDATES, make_questions, most_frequent_candidate
from keras_attn.data.words import WordVocabulary, split_words
from keras_attn.models import AttentionOverAttentionReader
from keras_attn.models.cloze_reader import export_reader, pointer_sum, question_ids

SENTENCES = [
    "The parser reads every argument from the command line.",
    "Each option names its destination attribute and default value.",
    "Unknown options raise an error unless partial parsing is requested.",
    "Help messages list every option with its description.",
]


def test_questions_blank_a_word_of_a_document_sentence():
    (q, *_) = make_questions([SENTENCES], np.random.default_rng(0), per_document=3)
    assert len(q.candidates) == N_CANDIDATES == len(set(q.candidates)) and q.answer in q.candidates
    words = split_words(q.query)
    i = words.index(BLANK)
    filled = words[:i] + [q.answer] + words[i + 1 :]
    assert filled in [split_words(s) for s in SENTENCES]
    assert all(c in split_words(q.document) for c in q.candidates)


def test_most_frequent_candidate_baseline():
    (q,) = make_questions([SENTENCES], np.random.default_rng(1), per_document=1)
    counts = {c: split_words(q.document).count(c) for c in q.candidates}
    assert counts[most_frequent_candidate(q)] == max(counts.values())


def test_pointer_sum_against_numpy():
    r = np.random.RandomState(0)
    s = r.uniform(size=(2, 6)).astype("float32")
    doc = np.array([[4, 5, 4, 6, 0, 0], [7, 7, 7, 8, 9, 0]], np.int32)
    cand = np.array([[4, 6, 9], [7, 9, 0]], np.int32)
    expected = np.array(
        [
            [sum(s[b, i] for i in range(6) if doc[b, i] == c and doc[b, i] != 0) for c in cand[b]]
            for b in range(2)
        ]
    )
    np.testing.assert_allclose(np.asarray(pointer_sum(s, doc, cand)), expected, atol=1e-6)


def test_reader_probabilities_save_and_export(tmp_path):
    questions = make_questions([SENTENCES], np.random.default_rng(2), per_document=3)
    vocab = WordVocabulary.build([q.document + "\n" + q.query for q in questions])
    x, y = question_ids(vocab, questions)
    model = AttentionOverAttentionReader(vocab.vocab_size, 8, 4)
    p, s = (np.asarray(t) for t in model(x, return_attention=True))
    assert p.shape == (3, N_CANDIDATES) and s.shape == x["document"].shape
    np.testing.assert_allclose(s.sum(-1), 1.0, atol=1e-5)
    assert np.all(p >= 0) and np.all(p.sum(-1) <= 1.0 + 1e-5)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy())
    assert np.isfinite(model.fit(x, y, epochs=1, verbose=0).history["loss"][0])
    path = str(tmp_path / "reader.keras")
    model.save(path)
    np.testing.assert_allclose(
        np.asarray(keras.models.load_model(path)(x)), np.asarray(model(x)), atol=1e-6
    )

    version = export_reader(model, vocab, str(tmp_path / "export"))
    served = tf.saved_model.load(version).signatures["serving_default"](
        document=tf.constant([q.document for q in questions]),
        query=tf.constant([q.query for q in questions]),
        candidates=tf.constant([" ".join(q.candidates) for q in questions]),
    )
    p = np.asarray(model(x))
    np.testing.assert_allclose(served["probabilities"].numpy(), p, atol=1e-5)
    assert [a.decode() for a in served["answer"].numpy()] == [
        q.candidates[i] for i, q in zip(p.argmax(-1), questions)
    ]
