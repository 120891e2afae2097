"""Fingerprints of the files a run reads: what tells runs on different data apart (compare-runs)."""

from __future__ import annotations

import hashlib
import os

import pytest

from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import InputFile, fingerprint, inputs_json, inputs_line, read_fingerprinted

DEVICES = b"fda_id,text\nP1,stent\n"


def test_a_fingerprint_is_the_size_and_sha256_of_the_files_bytes_at_its_absolute_path(tmp_path, monkeypatch):
    big = bytes(range(256)) * 9000  # over two of the chunks it is hashed in
    (tmp_path / "devices.csv").write_bytes(DEVICES)
    (tmp_path / "patents.parquet").write_bytes(big)
    monkeypatch.chdir(tmp_path)
    assert fingerprint("devices.csv") == InputFile(path=str(tmp_path / "devices.csv"), size=len(DEVICES),
                                                   sha256=hashlib.sha256(DEVICES).hexdigest())
    assert fingerprint("patents.parquet").sha256 == hashlib.sha256(big).hexdigest()


def test_the_same_bytes_give_the_same_digest_wherever_they_are_and_one_changed_byte_another(tmp_path):
    first, copy = tmp_path / "a" / "devices.csv", tmp_path / "b" / "devices.csv"
    for path in (first, copy):
        path.parent.mkdir()
        path.write_bytes(DEVICES)
    assert fingerprint(copy).sha256 == fingerprint(first).sha256 and fingerprint(copy).path != fingerprint(first).path
    copy.write_bytes(DEVICES.replace(b"stent", b"stant"))  # the same size
    assert fingerprint(copy).size == fingerprint(first).size and fingerprint(copy).sha256 != fingerprint(first).sha256


def test_a_file_is_fingerprinted_as_read_and_refused_when_it_changes_during_the_read(tmp_path):
    path = tmp_path / "devices.csv"
    path.write_bytes(DEVICES)
    text, found = read_fingerprinted(path, lambda p: p.read_text())
    assert text == DEVICES.decode() and found == fingerprint(path)

    def rewritten(p):
        p.write_bytes(DEVICES + b"P2,valve\n")
        return p.read_text()

    def replaced(p):  # another file of the same size renamed over it, as atomic writers do
        (tmp_path / "new.csv").write_bytes(DEVICES.replace(b"stent", b"stant"))
        (tmp_path / "new.csv").replace(p)

    def rewritten_in_place_unseen_by_stat(p):  # same inode, size and modification time: only the bytes tell
        stat = p.stat()
        with p.open("r+b") as handle:
            handle.write(b"fda_id,text\nP1,stant\n")
        os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert p.stat().st_mtime_ns == stat.st_mtime_ns and p.stat().st_size == stat.st_size
        return p.read_text()

    for change in (rewritten, replaced, rewritten_in_place_unseen_by_stat):
        path.write_bytes(DEVICES)
        with pytest.raises(CorpusError, match=rf"^{path}: changed while it was read \(replaced or rewritten\)"):
            read_fingerprinted(path, change)
    with pytest.raises(FileNotFoundError):  # the reader's own error names a missing file
        read_fingerprinted(tmp_path / "gone.csv", lambda p: p.read_text())


def test_the_reports_hold_the_inputs_by_name_and_markdown_shows_12_digits_of_each(tmp_path):
    (tmp_path / "devices.csv").write_bytes(DEVICES)
    found = fingerprint(tmp_path / "devices.csv")
    recorded = inputs_json({"devices": found})
    assert recorded == {"devices": {"path": found.path, "size": len(DEVICES), "sha256": found.sha256}}
    assert inputs_line(recorded) == f"Inputs (SHA-256): devices `{found.sha256[:12]}`."
    assert inputs_line({}) == "Inputs: not recorded."
