"""Offline datasets (nothing is downloaded): dates, digit strips, the TSV corpus loader and
real English -> X pairs from gettext catalogues: installed packages' (`catalogues`), and a
real-size corpus from pinned wheels and Debian packages (`corpora`; docs/real_data.md).

`dates` and `catalogues` need `babel` and `digits` needs `scikit-learn`; all are imported when
first used.
"""

from keras_attn.data.catalogues import (
    BrokenCatalogueError,
    CatalogueReport,
    catalogue_pairs,
    catalogue_splits,
    find_catalogues,
    read_catalogue,
)
from keras_attn.data.cloze import ClozeQuestion, cloze_splits, most_frequent_candidate
from keras_attn.data.corpora import (
    Corpus,
    CorpusReport,
    build_corpus,
    build_names,
    corpus_groups,
    fetch_catalogues,
    identical_kept,
    load_corpus,
)
from keras_attn.data.dates import ambiguous_sources, date_styles, dates_splits, make_dates
from keras_attn.data.digits import (
    DigitStrips,
    digit_strips_splits,
    make_digit_strips,
    split_digit_pools,
)
from keras_attn.data.han_documents import HanDocument, han_splits
from keras_attn.data.tsv import TsvReport, load_tsv, split_pairs

__all__ = [
    "BrokenCatalogueError",
    "CatalogueReport",
    "ClozeQuestion",
    "Corpus",
    "CorpusReport",
    "DigitStrips",
    "HanDocument",
    "TsvReport",
    "ambiguous_sources",
    "build_corpus",
    "build_names",
    "catalogue_pairs",
    "catalogue_splits",
    "cloze_splits",
    "corpus_groups",
    "date_styles",
    "dates_splits",
    "digit_strips_splits",
    "fetch_catalogues",
    "find_catalogues",
    "han_splits",
    "identical_kept",
    "load_corpus",
    "load_tsv",
    "make_dates",
    "make_digit_strips",
    "most_frequent_candidate",
    "read_catalogue",
    "split_digit_pools",
    "split_pairs",
]
