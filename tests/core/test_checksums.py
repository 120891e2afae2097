"""A release's SHA256SUMS: files whose bytes are not the listed ones are refused as they are read."""

from __future__ import annotations

import hashlib

import pytest

from meddevkg_core.checksums import MANIFEST, listed_digests
from meddevkg_core.corpus import read_corpus
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import read_fingerprinted

DEVICES = b"fda_id,text\nP1,stent\nP2,valve\n"
PATENTS = b"pat_id,text\n1,stent\n2,valve\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _release(root, manifest: str | None = None):
    root.mkdir()
    (root / "devices.csv").write_bytes(DEVICES)
    (root / "patents.csv").write_bytes(PATENTS)
    (root / MANIFEST).write_text(manifest if manifest is not None else
                                 f"{_sha(DEVICES)}  devices.csv\n{_sha(PATENTS)} *./patents.csv\n")
    return root


def test_the_manifest_is_read_as_sha256sum_writes_it_text_or_binary_marked(tmp_path):
    root = _release(tmp_path / "release", f"{_sha(DEVICES).upper()}  devices.csv\n\n{_sha(PATENTS)} *./patents.csv\n"
                                          f"{_sha(PATENTS)}  patents.csv\n")  # listed twice alike: fine
    assert listed_digests(root / MANIFEST) == {"devices.csv": _sha(DEVICES), "patents.csv": _sha(PATENTS)}
    corpus = read_corpus(root)
    assert corpus.devices.height == 2 and corpus.inputs["devices"].sha256 == _sha(DEVICES)


@pytest.mark.parametrize(("manifest", "message"), [
    ("md5 devices.csv\n", r":1: not a line of sha256sum's output \(64 hex digits, two spaces, the file name\)$"),
    (f"{_sha(DEVICES)}  devices.csv\n{_sha(PATENTS)}  devices.csv\n", r":2: devices.csv is listed before with "
                                                                     "another digest$"),
])
def test_a_manifest_line_of_another_form_is_named_with_its_number(tmp_path, manifest, message):
    root = _release(tmp_path / "release", manifest)
    with pytest.raises(CorpusError, match=rf"^{root}/{MANIFEST}{message}"):
        read_corpus(root)


def test_a_file_whose_bytes_are_not_the_listed_ones_is_refused_before_it_is_parsed(tmp_path):
    root = _release(tmp_path / "release")
    (root / "devices.csv").write_bytes(DEVICES.replace(b"P2", b"P3"))  # the same size, still a valid table
    parsed = []
    with pytest.raises(CorpusError) as refusal:
        read_fingerprinted(root / "devices.csv", parsed.append)
    assert not parsed
    found = _sha(DEVICES.replace(b"P2", b"P3"))
    assert str(refusal.value) == (f"{root}/devices.csv: its SHA-256 {found[:12]}... is not {_sha(DEVICES)[:12]}..., "
                                  f"the digest {root}/{MANIFEST} lists: the file is damaged, or not the release's")


def test_every_file_read_beside_a_manifest_must_be_listed_and_none_is_checked_without_one(tmp_path):
    root = _release(tmp_path / "release", f"{_sha(DEVICES)}  devices.csv\n")
    with pytest.raises(CorpusError, match=rf"^{root}/patents.csv: not listed in {root}/{MANIFEST}, so its bytes "
                                          rf"cannot be checked; list it \(sha256sum patents.csv >> {MANIFEST}\) "
                                          "or remove the manifest$"):
        read_corpus(root)
    (root / MANIFEST).unlink()
    (root / "devices.csv").write_bytes(DEVICES.replace(b"P2", b"P3"))
    assert read_corpus(root).devices["fda_id"].to_list() == ["P1", "P3"]


def test_a_manifest_that_cannot_be_read_is_named(tmp_path):
    root = _release(tmp_path / "release")
    (root / MANIFEST).write_bytes(b"\xff\xfe not text")
    with pytest.raises(CorpusError, match=rf"^{root}/{MANIFEST}: cannot be read as a checksum manifest: "):
        read_corpus(root)
