"""The text files a run trains on: read as UTF-8, and what was not UTF-8 is said."""
from fastbptt.corpus import read_files


def test_utf8_files_are_read_as_they_are(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("naïve café \ufffd ", encoding="utf-8")     # U+FFFD of its own: not a fault
    b.write_text("ok", encoding="utf-8")
    corpus = read_files([a, b])
    assert corpus.text == "naïve café \ufffd ok"
    assert corpus.description == "a.txt, b.txt: 15 characters"


def test_bytes_that_are_not_utf8_are_counted_per_file(tmp_path):
    latin1, good, binary = tmp_path / "latin1.txt", tmp_path / "good.txt", tmp_path / "x.bin"
    latin1.write_bytes("café naïve".encode("latin-1"))
    good.write_text("plain text", encoding="utf-8")
    binary.write_bytes(b"\xff")
    corpus = read_files([latin1, good, binary])
    assert corpus.text == "caf\ufffd na\ufffdveplain text\ufffd"
    assert corpus.description == (
        "latin1.txt, good.txt, x.bin: 21 characters (not UTF-8: 2 undecodable byte sequences "
        "in latin1.txt, 1 undecodable byte sequence in x.bin, each read as U+FFFD; convert "
        "other encodings to UTF-8, e.g. with iconv)")
