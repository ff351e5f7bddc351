"""HierarchicalAttentionNetwork, its data and its raw-text export."""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_attn.data.words import WordVocabulary, split_words, tf_split_words
from keras_attn.models import HierarchicalAttentionNetwork
from keras_attn.models.han import document_ids, export_classifier, tf_document_ids

DOCS = ["Datei %s nicht gefunden.\nbonjour le monde\n\nhola", "ciao «mondo»!\nDas ist gut", "eins"]


def write_fake_locale(root, languages=("de", "fr"), n=24):
    """A locale tree of `.mo` catalogues written with babel (the format the data module reads)."""
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo

    for lang in languages:
        catalog = Catalog(locale=lang)
        for i in range(n):
            catalog.add(f"plain {i} message here", f"{lang} schlicht {i} wort satz")
            catalog.add(f"file %s number {i}", f"{lang} datei %s nummer {i}")
            catalog.add(f"ask {i} now?", f"{lang} frage {i} jetzt?")
        directory = os.path.join(root, lang, "LC_MESSAGES")
        os.makedirs(directory)
        with open(os.path.join(directory, "app.mo"), "wb") as f:
            write_mo(f, catalog)
    return root


def test_word_splitting_is_the_same_in_python_and_in_the_graph():
    texts = ["Datei «%s» nicht gefunden.", "¿Qué id (de) mensaje?", "ÉTÉ l'été… ok"]
    graph = [
        [w.decode("utf-8") for w in row] for row in tf_split_words(tf.constant(texts)).to_list()
    ]
    assert graph == [split_words(t) for t in texts]
    vocab = WordVocabulary.build(DOCS)
    np.testing.assert_array_equal(
        tf_document_ids(vocab, tf.constant(DOCS)).numpy(), document_ids(vocab, DOCS)
    )


def test_han_splits_evidence_decides_the_label(tmp_path):
    from keras_attn.data import han_splits

    root = write_fake_locale(str(tmp_path))
    splits = han_splits(20, 4, 6, languages=("de", "fr"), locale_dir=root)
    seen = {d.sentences[d.evidence] for d in splits["train"]}
    for name in ("train", "val", "test"):
        for d in splits[name]:
            assert len(d.sentences) == 4
            assert [("%" in s) for s in d.sentences].count(True) == 1 and "%" in d.sentences[
                d.evidence
            ]
            assert d.sentences[d.evidence].startswith(("de", "fr")[d.label])
            assert sum(s.startswith("de") for s in d.sentences) == 2  # languages equally present
            assert not any("?" in s for s in d.sentences)
    assert not seen & {d.sentences[d.evidence] for d in splits["test"]}  # evidence held out


def test_model_masks_attention_save_and_export(tmp_path):
    vocab = WordVocabulary.build(DOCS)
    ids = document_ids(vocab, DOCS)
    model = HierarchicalAttentionNetwork(vocab.vocab_size, 3, 8, 4, 4, 8)
    logits, words, sentences = (np.asarray(t) for t in model(ids, return_attention=True))
    assert logits.shape == (3, 3) and words.shape == ids.shape and sentences.shape == ids.shape[:2]
    real_sentence = (ids != 0).any(-1)
    np.testing.assert_allclose(sentences.sum(-1), 1.0, atol=1e-5)
    assert np.all(sentences[~real_sentence] == 0) and np.all(words[ids == 0] == 0)
    np.testing.assert_allclose(words.sum(-1)[real_sentence], 1.0, atol=1e-5)
    # Padding never matters: more padding sentences / words give the same logits.
    wider = np.zeros((3, ids.shape[1] + 2, ids.shape[2] + 3), np.int32)
    wider[:, : ids.shape[1], : ids.shape[2]] = ids
    np.testing.assert_allclose(np.asarray(model(wider)), logits, atol=1e-5)

    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [np.array(w) for w in model.trainable_weights]
    model.fit(ids, np.array([0, 1, 2]), epochs=1, verbose=0)
    assert any(not np.allclose(a, np.array(b)) for a, b in zip(before, model.trainable_weights))
    path = str(tmp_path / "han.keras")
    model.save(path)
    np.testing.assert_allclose(
        np.asarray(keras.models.load_model(path)(ids)), np.asarray(model(ids)), atol=1e-6
    )

    version = export_classifier(
        model, vocab, ["de", "fr", "es"], str(tmp_path / "export"), warmup_documents=DOCS[:1]
    )
    served = tf.saved_model.load(version).signatures["serving_default"](inputs=tf.constant(DOCS))
    logits, words, sentences = (np.asarray(t) for t in model(ids, return_attention=True))
    expected = tf.nn.softmax(logits).numpy()
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(served["sentence_attention"].numpy(), sentences, atol=1e-5)
    assert [x.decode() for x in served["label"].numpy()] == [
        ["de", "fr", "es"][i] for i in expected.argmax(-1)
    ]
