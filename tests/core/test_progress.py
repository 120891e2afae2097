"""Throttled progress lines: few, informative, always the last one."""

from meddevkg_core.progress import ThrottledReporter


def test_reports_are_throttled_and_the_end_is_always_reported():
    now = [0.0]
    lines: list[str] = []
    report = ThrottledReporter("patent_embeddings", lines.append, unit="texts", every_seconds=10,
                               clock=lambda: now[0])
    for done in range(0, 1001, 10):
        now[0] = done / 20  # 20 texts/s: 50 s in all
        report(done, 1000)
    assert len(lines) == 5  # at 10, 20, 30, 40 s and the end
    assert lines[0].startswith("patent_embeddings: 200/1,000 texts (20%), 20.0 texts/s, ~40s left")
    assert lines[-1] == "patent_embeddings: 1,000/1,000 texts (100%), 20.0 texts/s"


def test_long_stages_report_progress_as_they_go():
    import polars as pl

    from meddevkg_core.embeddings import HashingEncoder, embed_documents

    calls: list[tuple[int, int]] = []
    docs = pl.DataFrame({"doc_id": [f"d{i}" for i in range(5)], "text": [f"stent number {i}" for i in range(5)]})
    embed_documents(docs, HashingEncoder(), progress=lambda done, total: calls.append((done, total)), chunk_size=2)
    assert calls == [(2, 5), (4, 5), (5, 5)]
