import duckdb

from meddevkg_core.schemas import fingerprint
from meddevkg_dagster.cli import ensure_store_schema, main


def test_a_store_from_other_schemas_is_rebuilt_and_a_current_one_kept(tmp_path, capsys):
    db = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("create schema meddevkg; create table meddevkg.candidate_pool (fda_id varchar)")
    ensure_store_schema(db)
    assert "rebuilding" in capsys.readouterr().out
    with duckdb.connect(str(db)) as con:
        tables = "select count(*) from information_schema.tables where table_schema='meddevkg'"
        assert con.execute(tables).fetchone()[0] == 0
        assert con.execute("select schema_fingerprint from meddevkg_meta.store").fetchone()[0] == fingerprint()
        con.execute("create schema meddevkg; create table meddevkg.kept (x int)")
    ensure_store_schema(db)
    with duckdb.connect(str(db)) as con:
        assert con.execute("select count(*) from meddevkg.kept").fetchone()[0] == 0  # still there


def test_benchmark_refuses_a_corpus_without_gold(tmp_path):
    (tmp_path / "devices.csv").write_text("fda_id,text\nP1,stent\n")
    (tmp_path / "patents.csv").write_text("pat_id,text\n1,stent\n")
    try:
        main(["benchmark", "--corpus", str(tmp_path), "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        assert "no gold_links" in str(exc)
    else:
        raise AssertionError("expected a clear refusal")
