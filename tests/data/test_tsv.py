import pytest

from keras_attn.data.tsv import load_tsv, split_pairs

LINES = [
    b"Go.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #4986655 (cueyayotl)",  # 1 kept, extra
    b"",  # 2 blank
    b"Hi.\tHola.",  # 3 kept
    b"   \t  ",  # 4 blank (whitespace only)
    b"no tab here",  # 5 no tab
    b"Caf\xe9\tcaf\xe9",  # 6 latin-1: undecodable as UTF-8
    "\t sólo destino".encode(),  # 7 empty source
    b"  I love you.  \t Te quiero.  \r",  # 8 kept, stripped, CRLF
    ("a" * 30 + "\tb").encode(),  # 9 too long when max_length=20
    "我爱你。\tI love you.\tx\ty".encode(),  # 10 kept, extra
]


def write(tmp_path, lines, bom=False):
    path = tmp_path / "pairs.tsv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n")
    return path


def test_counts_and_pairs(tmp_path):
    pairs, report = load_tsv(write(tmp_path, LINES, bom=True), max_length=20)
    assert pairs == [
        ("Go.", "Ve."),
        ("Hi.", "Hola."),
        ("I love you.", "Te quiero."),
        ("我爱你。", "I love you."),
    ]
    assert (report.lines, report.kept, report.blank, report.no_tab) == (10, 4, 2, 1)
    assert (report.undecodable, report.empty_field, report.too_long, report.extra_columns) == (
        1,
        1,
        1,
        2,
    )
    assert report.skipped == 6
    assert report.first_bad_lines == {
        "blank": 2,
        "no_tab": 5,
        "undecodable": 6,
        "empty_field": 7,
        "too_long": 9,
    }
    assert "4 of 10 lines kept" in str(report) and "undecodable (first at line 6)" in str(report)


def test_without_max_length_long_lines_are_kept_and_other_encodings_work(tmp_path):
    pairs, report = load_tsv(write(tmp_path, LINES))
    assert report.kept == 5 and report.too_long == 0 and ("a" * 30, "b") in pairs
    pairs, report = load_tsv(b"Caf\xe9\tcaf\xe9\n", encoding="latin-1")
    assert pairs == [("Café", "café")] and report.undecodable == 0


def test_options_and_edge_cases(tmp_path):
    pairs, _ = load_tsv(b"Go.\tVe.\n", swap=True, lowercase=True)
    assert pairs == [("ve.", "go.")]
    pairs, report = load_tsv(b"")
    assert pairs == [] and report.lines == 0
    pairs, report = load_tsv(b"only\n\n")  # no crash on a file with nothing usable
    assert pairs == [] and (report.no_tab, report.blank) == (1, 1)
    with pytest.raises(ValueError, match="max_length"):
        load_tsv(b"a\tb\n", max_length=0)
    with pytest.raises(FileNotFoundError):
        load_tsv(tmp_path / "missing.tsv")


def test_split_pairs_keeps_sources_together_and_is_deterministic():
    pairs = [(f"s{i % 50}", f"t{i}") for i in range(200)]
    train, val, test = split_pairs(pairs, val_fraction=0.2, test_fraction=0.2, seed=1)
    assert len(train) + len(val) + len(test) == 200
    assert sorted(train + val + test) == sorted(pairs)
    src = [{s for s, _ in part} for part in (train, val, test)]
    assert not src[0] & src[1] and not src[0] & src[2] and not src[1] & src[2]
    assert (len(src[1]), len(src[2])) == (10, 10)
    assert split_pairs(pairs, 0.2, 0.2, seed=1) == (train, val, test)
    assert split_pairs(pairs, 0.2, 0.2, seed=2) != (train, val, test)
    with pytest.raises(ValueError, match="val_fraction"):
        split_pairs(pairs, 0.6, 0.5)


def test_split_pairs_takes_an_empty_split_and_refuses_fractions_out_of_range():
    pairs = [(f"s{i}", f"t{i}") for i in range(20)]
    train, val, test = split_pairs(pairs, val_fraction=0.0, test_fraction=0.25)
    assert (len(train), len(val), len(test)) == (15, 0, 5)
    for val_fraction, test_fraction, name in (
        (-0.1, 0.2, "val_fraction"),
        (0.1, 1.0, "test_fraction"),
    ):
        with pytest.raises(ValueError, match=rf"`{name}` must be in \[0, 1\)\. Received: {name}="):
            split_pairs(pairs, val_fraction, test_fraction)
    with pytest.raises(ValueError, match=r"`val_fraction \+ test_fraction` must be < 1"):
        split_pairs(pairs, 0.5, 0.5)
    with pytest.raises(ValueError, match=r"`max_length` must be an integer >= 1 or None"):
        load_tsv(b"a\tb\n", max_length=2.5)
