"""Shared fixtures: where the shared benchmark data lives, and tiny in-memory corpora."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
BENCHMARK = SHARED_DATA / "bridge-meddevkg"


NO_SKIPS = "MEDDEVKG_NO_SKIPS"
"""Set by .ci/run, which installs everything the tests need: a skip there means a broken environment
(the shared data missing, Chromium or PostgreSQL not installed), so it fails the run instead."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(NO_SKIPS) and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped while {NO_SKIPS} is set: {reason}"


CURRENT_TEST = "PYTEST_CURRENT_TEST"
"""pytest's own variable, naming the phase of the running test: not part of the test's environment."""


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """os.environ after each test as it was before: a variable the code under test sets (the CLI's DAGSTER_HOME,
    the event log's DAGSTER_EVENT_BATCH_SIZE) after `monkeypatch.delenv(..., raising=False)` found it unset is
    not monkeypatch's to restore, and later tests saw it. Session and module fixtures are set up before this
    one, so what they set stays."""
    before = {name: value for name, value in os.environ.items() if name != CURRENT_TEST}
    yield
    for name in os.environ.keys() - before.keys() - {CURRENT_TEST}:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _own_meddevkg_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """MEDDEVKG_HOME in a directory of the test's own. Unset, it is ./.meddevkg of pytest's directory, the
    clone: assets that write there (graph_export, the evaluation's plots, an embedding cache) left files in
    the clone, which the next run's tests read, and which two pytest-xdist workers shared. A test that sets
    or removes it itself still does."""
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path_factory.mktemp("meddevkg_home")))


OTHER_RUN = textwrap.dedent("""
    import sys
    from meddevkg_core import atomic_files

    out, until = sys.argv[1:]

    def pause():  # say where it stopped, then wait for a line on stdin
        print(until, flush=True)
        sys.stdin.readline()

    if until == "claimed":  # a command's long work: its --out claimed, nothing written yet
        with atomic_files.claimed_directory(out):
            pause()
    else:
        move_in = atomic_files._move_in
        if until == "moving":  # its stage marked complete, before its renames
            atomic_files._move_in = lambda directory: (pause(), move_in(directory))
        with atomic_files.replaced_files(out) as stage:
            (stage / "links.parquet").write_text("first")
            if until == "writing":
                pause()
            (stage / "report.json").write_text("first")
""")


@pytest.fixture
def other_run() -> Iterator[Callable[[Path, str], subprocess.Popen[str]]]:
    """Start another process writing its outputs (links.parquet and report.json, "first") into a
    directory, stopped `until` "claimed" (a command's long work: atomic_files.claimed_directory),
    "writing" (inside replaced_files, links.parquet staged) or "moving" (its stage marked, before the
    renames); a line on its stdin lets it go on (`proc.communicate("\\n")`). Killed at teardown."""
    started: list[subprocess.Popen[str]] = []

    def start(out: Path, until: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", OTHER_RUN, str(out), until], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == f"{until}\n", proc.communicate()[1]
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="session")
def benchmark_dir() -> Path:
    if not (BENCHMARK / "devices.parquet").is_file():
        pytest.skip(f"shared benchmark data not found at {BENCHMARK}")
    return BENCHMARK


@pytest.fixture
def fake_source():
    """A real HTTP server on 127.0.0.1 with scripted routes and faults (tests/fake_source_server.py)."""
    from tests.fake_source_server import FakeSourceServer

    with FakeSourceServer() as server:
        yield server


TINY_BERT_WORDS = ["stent", "balloon", "catheter", "coronary", "valve", "dental", "implant", "the", "a", "with",
                   "lead"]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BERT sequence classifier (num_labels=1) saved like a hub checkpoint, so the
    real cross-encoder loading code runs offline."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast  # type: ignore[attr-defined]

    path = tmp_path_factory.mktemp("tiny_bert")
    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_BERT_WORDS])}
    # transformers 5 ignores vocab_file= for the fast tokenizer; vocab= builds it in memory.
    tokenizer = BertTokenizerFast(vocab=vocab, model_max_length=512)
    torch.manual_seed(0)
    config = BertConfig(  # type: ignore[call-arg]
        vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def damaged_parquet() -> Callable[[Path], Path]:
    """Writes at a path a Parquet file damaged so that polars panics reading it: a PanicException, a
    BaseException that `except Exception` lets through. It checks that polars still does."""
    import polars as pl

    def write(path: Path) -> Path:
        pl.DataFrame({"fda_id": [f"P{i}" for i in range(100)], "text": ["stent", "valve", None, "lead"] * 25}
                     ).write_parquet(path, compression="uncompressed", statistics=False)
        data = bytearray(path.read_bytes())
        at = data.rindex(b"lead") + 26  # past the text dictionary's last value and the data page's header
        data[at:at + 4] = b"\xff" * 4  # its definition levels (which rows are null)
        path.write_bytes(bytes(data))
        with pytest.raises(pl.exceptions.PanicException):
            pl.read_parquet(path)
        return path

    return write


PANICKED_ON_IT = r"polars panicked on it \(a damaged file\?\): [^\n]+"
"""The reason (a pattern) a file the `damaged_parquet` fixture writes is refused for."""
WOULD_ABORT_ON_IT = (r"column 'fda_id', row group 0: the page header at byte \d+ gives num_values -101 \(a damaged "
                     r"file, on which polars may abort the process\)")
"""The reason (a pattern) a file the `aborting_parquet` fixture writes is refused for."""


@pytest.fixture(scope="session")
def _aborting_parquet_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A Parquet file polars writes, its first data page header counting -101 values instead of 100
    (the low bit of the count's first byte is its sign): polars aborts the process reading it, which
    a subprocess checks once."""
    import polars as pl

    path = tmp_path_factory.mktemp("aborting") / "table.parquet"
    pl.DataFrame({"fda_id": [f"P{i}" for i in range(100)], "text": ["stent", "valve", None, "lead"] * 25}
                 ).write_parquet(path, compression="uncompressed", statistics=False)
    data = bytearray(path.read_bytes())
    data[data.index(b"\x2c\x15\xc8\x01") + 2] |= 1  # data_page_header (field 5), num_values 200 zigzag: 100
    path.write_bytes(bytes(data))
    read = subprocess.run([sys.executable, "-c", f"import polars; polars.read_parquet({str(path)!r})"],
                          capture_output=True, text=True)
    assert read.returncode == -signal.SIGABRT, read.stderr[:300]
    return bytes(data)


@pytest.fixture
def aborting_parquet(_aborting_parquet_bytes: bytes) -> Callable[[Path], Path]:
    """Writes at a path a Parquet file polars aborts the process on (SIGABRT, no exception to catch):
    a data page header counting fewer than no values."""
    def write(path: Path) -> Path:
        path.write_bytes(_aborting_parquet_bytes)
        return path

    return write
