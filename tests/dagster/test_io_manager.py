"""The store's IO manager: a partition range's events stay small, reads return Dagster's rows, and writes
are atomic, by column name, and create empty tables."""

import dagster as dg
import duckdb
import polars as pl
from dagster._core.storage.db_io_manager import TablePartitionDimension, TableSlice

from meddevkg_dagster.io_manager import CompactQueryDuckDbClient, MeddevkgDuckDBIOManager

KEYS = [f"P{i:06d}" for i in range(25)]
devices = dg.DynamicPartitionsDefinition(name="devices")


@dg.asset(partitions_def=devices, metadata={"partition_expr": "fda_id"},
          backfill_policy=dg.BackfillPolicy.single_run())
def rows(context: dg.AssetExecutionContext) -> pl.DataFrame:
    keys = sorted(context.partition_keys)
    return pl.DataFrame({"fda_id": keys, "n": list(range(len(keys)))})


@dg.asset(partitions_def=devices, metadata={"partition_expr": "fda_id"},
          backfill_policy=dg.BackfillPolicy.single_run())
def counted(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.with_columns(pl.len().alias("rows_read"))


def _run(tmp_path, instance, keys):
    io = MeddevkgDuckDBIOManager(database=str(tmp_path / "t.duckdb"), schema="s")
    return dg.materialize([rows, counted], instance=instance, resources={"io_manager": io},
                          tags={"dagster/asset_partition_range_start": keys[0],
                                "dagster/asset_partition_range_end": keys[-1]})


def _metadata(result, key: str) -> list[dict]:
    return [e.materialization.metadata for e in result.get_asset_materialization_events()
            if e.asset_key == dg.AssetKey(key)]


def test_a_partition_range_records_small_events_and_reads_every_row(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    result = _run(tmp_path, instance, KEYS)
    assert result.success
    events = _metadata(result, "rows")
    assert len(events) == len(KEYS)
    for meta in events:
        assert "dataframe_columns" not in meta
        query = meta["Query"].value
        assert "... 20 more ..." in query and "'P000000'" in query and "'P000024'" in query
        assert "'P000012'" not in query
        assert meta["dagster/row_count"].value == 1 and meta["run_row_count"].value == len(KEYS)
        assert "row_count" not in meta
    # the downstream step read the whole range (loads use the full statement, not the shown one)
    with duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True) as con:
        assert con.sql("select count(*), min(rows_read), max(rows_read) from s.counted").fetchone() == (25, 25, 25)


@dg.asset(partitions_def=devices, metadata={"partition_expr": "regexp_extract(record_key, ':(.*)$', 1)"},
          backfill_policy=dg.BackfillPolicy.single_run())
def uneven(context: dg.AssetExecutionContext) -> dg.Output[pl.DataFrame]:
    keys = sorted(context.partition_keys)
    out = pl.DataFrame({"record_key": [f"#{i}:{k}" for i, k in enumerate(keys) for _ in range(i % 3)]})
    return dg.Output(out, metadata={"dagster/row_count": out.height})  # as lib.table_metadata writes it


def test_each_partition_of_a_range_counts_its_own_rows(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    io = MeddevkgDuckDBIOManager(database=str(tmp_path / "t.duckdb"), schema="s")
    result = dg.materialize([uneven], instance=instance, resources={"io_manager": io},
                            tags={"dagster/asset_partition_range_start": KEYS[0],
                                  "dagster/asset_partition_range_end": KEYS[-1]})
    events = {e.partition: e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert {k: m["dagster/row_count"].value for k, m in events.items()} == {k: i % 3 for i, k in enumerate(KEYS)}
    assert {m["run_row_count"].value for m in events.values()} == {sum(i % 3 for i in range(len(KEYS)))}


def test_one_partition_keeps_dagsters_column_schema_and_full_query(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    result = _run(tmp_path, instance, ["P000007"])
    [meta] = _metadata(result, "rows")
    assert [c.name for c in meta["dataframe_columns"].value.columns] == ["fda_id", "n"]
    assert meta["Query"].value == "SELECT * FROM s.rows WHERE\nfda_id in ('P000007')"


def test_a_short_key_list_is_shown_in_full():
    dims = [TablePartitionDimension(partition_expr="fda_id", partitions=KEYS[:10])]
    shown = CompactQueryDuckDbClient.get_select_statement(TableSlice(table="t", schema="s", partition_dimensions=dims))
    assert shown.count("'P0000") == 10 and "more" not in shown


def test_reads_return_the_same_frame_as_dagsters_handler(tmp_path):
    from types import SimpleNamespace

    from dagster_duckdb_polars.duckdb_polars_type_handler import DuckDBPolarsTypeHandler

    from meddevkg_dagster.io_manager import PartitionRangePolarsTypeHandler

    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        con.execute("create schema s")
        con.execute("create table s.t as select 'P' || (i % 7) as fda_id, i::float as sim, i % 3 = 0 as kept, "
                    "case when i % 5 = 0 then null else 'why ' || i end as evidence, "
                    "[i::float, 0.5]::float[] as embedding, date '2020-01-01' + i::int as day "
                    "from range(2000) r(i)")
        context = SimpleNamespace(asset_partition_keys=["P1", "P4"])
        for dims, columns in (([], None), ([TablePartitionDimension("fda_id", ["P1", "P4"])], None),
                              ([TablePartitionDimension("fda_id", ["P1", "P4"])], ["fda_id", "evidence"])):
            table_slice = TableSlice(table="t", schema="s", partition_dimensions=dims, columns=columns)
            ours = PartitionRangePolarsTypeHandler().load_input(context, table_slice, con)
            dagsters = DuckDBPolarsTypeHandler().load_input(context, table_slice, con)
            assert ours.height > 0 and ours.schema == dagsters.schema
            assert ours.sort(pl.all()).equals(dagsters.sort(pl.all()))
        # a run that selects no partition of the input reads nothing, as Dagster's handler does
        nothing = TableSlice(table="t", schema="s", partition_dimensions=[TablePartitionDimension("fda_id", [])])
        none = SimpleNamespace(asset_partition_keys=[])
        read = PartitionRangePolarsTypeHandler().load_input(none, nothing, con)
        assert read.shape == (0, 0) and read.equals(DuckDBPolarsTypeHandler().load_input(none, nothing, con))


def test_reads_keep_the_tables_order(tmp_path):
    """Written sorted, read sorted: Dagster's `in (...)` list is a join in DuckDB, which reordered
    these rows, and the reranker then sorted the whole pool again."""
    from types import SimpleNamespace

    from meddevkg_dagster.io_manager import PartitionRangePolarsTypeHandler

    keys = [f"P{i:04d}" for i in range(0, 600, 2)]
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        con.execute("create schema s")
        con.execute("create table s.t as select 'P' || lpad((i // 500)::varchar, 4, '0') as fda_id, i as n "
                    "from range(300000) r(i)")
        for wanted in (keys, keys[5:6], ["P0003", "P0001"]):
            table_slice = TableSlice(table="t", schema="s", partition_dimensions=[
                TablePartitionDimension("fda_id", wanted)])
            read = PartitionRangePolarsTypeHandler().load_input(SimpleNamespace(asset_partition_keys=wanted),
                                                                table_slice, con)
            assert read["n"].is_sorted() and read.height == 500 * len(wanted)
            assert set(read["fda_id"].unique()) == set(wanted)


@dg.asset(partitions_def=devices, metadata={"partition_expr": "fda_id"},
          backfill_policy=dg.BackfillPolicy.single_run())
def shaped(context: dg.AssetExecutionContext) -> pl.DataFrame:
    """Its run's `shape` tag picks the frame: the stored one, its columns reordered, an unknown
    column (the insert fails), or no rows."""
    keys = sorted(context.partition_keys)
    frame = pl.DataFrame({"fda_id": keys, "n": [len(k) for k in keys], "label": [f"v-{k}" for k in keys]})
    shape = context.run.tags.get("shape", "stored")
    if shape == "reordered":
        return frame.select("label", "n", "fda_id").with_columns(pl.col("label") + "-again")
    if shape == "unknown_column":
        return frame.rename({"label": "labels"})
    if shape == "retyped_and_dropped":  # DuckDB would store n = 0.46 as 0 and label as null
        return frame.select("fda_id", pl.lit(0.46).alias("n"))
    return frame.clear() if shape == "empty" else frame


@dg.asset(partitions_def=devices, metadata={"partition_expr": "fda_id"},
          backfill_policy=dg.BackfillPolicy.single_run())
def shaped_count(shaped: pl.DataFrame) -> pl.DataFrame:
    return pl.DataFrame({"fda_id": ["all"], "rows_read": [shaped.height]})


def _shaped(tmp_path, instance, shape: str, keys=KEYS, selection=(shaped,)):
    io = MeddevkgDuckDBIOManager(database=str(tmp_path / "t.duckdb"), schema="s")
    return dg.materialize(list(selection), instance=instance, resources={"io_manager": io}, raise_on_error=False,
                          tags={"shape": shape, "dagster/asset_partition_range_start": keys[0],
                                "dagster/asset_partition_range_end": keys[-1]})


def _stored(tmp_path) -> pl.DataFrame:
    with duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True) as con:
        return con.execute("select * from s.shaped order by fda_id").pl()


def test_a_failed_write_keeps_the_partitions_previous_rows(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    assert _shaped(tmp_path, instance, "stored").success
    before = _stored(tmp_path)
    assert before.height == len(KEYS)
    failed = _shaped(tmp_path, instance, "unknown_column", keys=KEYS[3:9])
    assert not failed.success
    [failure] = [e for e in failed.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "labels" in str(failure.step_failure_data.error)  # the column the stored table lacks
    assert _stored(tmp_path).equals(before)  # its delete was rolled back with the insert


def test_a_partition_written_by_other_code_is_refused_not_cast(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    assert _shaped(tmp_path, instance, "stored").success
    before = _stored(tmp_path)
    failed = _shaped(tmp_path, instance, "retyped_and_dropped", keys=KEYS[3:9])
    assert not failed.success
    [failure] = [e for e in failed.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "s.shaped: the stored table's columns differ from this output's (gone: label; retyped: n BIGINT -> " \
           "DOUBLE)" in str(failure.step_failure_data.error)
    assert _stored(tmp_path).equals(before)


@dg.asset
def summary(context: dg.AssetExecutionContext) -> pl.DataFrame:
    """Unpartitioned: its run's `figures` tag is the row, as JSON (a null figure has no type)."""
    import json

    return pl.DataFrame([json.loads(context.run.tags["figures"])])


def _summary(tmp_path, figures: str):
    io = MeddevkgDuckDBIOManager(database=str(tmp_path / "t.duckdb"), schema="s")
    result = dg.materialize([summary], resources={"io_manager": io}, raise_on_error=False, tags={"figures": figures})
    with duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True) as con:
        stored = con.execute("select column_name, data_type from information_schema.columns where table_name = "
                             "'summary' order by ordinal_position").fetchall()
        rows = con.execute("select * from s.summary").fetchall() if stored else []
    return result, stored, rows


def test_a_table_without_partitions_takes_the_outputs_columns_and_nulls_never_type_one(tmp_path):
    result, stored, rows = _summary(tmp_path, '{"n": 3, "recall": null}')
    assert not result.success and stored == []  # DuckDB would have made `recall` INTEGER, and 0.46 then 0
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "s.summary: column(s) ['recall'] hold only nulls" in str(failure.step_failure_data.error)
    result, stored, rows = _summary(tmp_path, '{"n": 3, "recall": 0.46}')
    assert result.success and stored == [("n", "BIGINT"), ("recall", "DOUBLE")] and rows == [(3, 0.46)]
    result, stored, rows = _summary(tmp_path, '{"n": 4, "recall": null}')  # a stored column types the nulls
    assert result.success and stored == [("n", "BIGINT"), ("recall", "DOUBLE")] and rows == [(4, None)]
    result, stored, rows = _summary(tmp_path, '{"n": 0.5, "pairs": 7}')  # rewritten whole: its columns now
    assert result.success and stored == [("n", "DOUBLE"), ("pairs", "BIGINT")] and rows == [(0.5, 7)]
    result, stored, rows = _summary(tmp_path, '{"n": 0.5, "pairs": 7, "share": null}')  # rewritten, untyped
    assert not result.success and stored == [("n", "DOUBLE"), ("pairs", "BIGINT")] and rows == [(0.5, 7)]


def test_rows_are_inserted_by_column_name(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    assert _shaped(tmp_path, instance, "stored").success
    assert _shaped(tmp_path, instance, "reordered", keys=KEYS[:2]).success
    stored = _stored(tmp_path)
    assert stored.columns == ["fda_id", "n", "label"] and stored.height == len(KEYS)
    assert stored["label"].to_list()[:3] == ["v-P000000-again", "v-P000001-again", "v-P000002"]
    assert stored["n"].to_list() == [7] * len(KEYS)


def test_an_empty_output_creates_its_typed_table_for_readers_downstream(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("devices", KEYS)
    result = _shaped(tmp_path, instance, "empty", selection=(shaped, shaped_count))
    assert result.success
    assert [m["dagster/row_count"].value for m in _metadata(result, "shaped")] == [0] * len(KEYS)
    with duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True) as con:
        assert con.execute("select column_name, data_type from information_schema.columns where table_name = "
                           "'shaped' order by ordinal_position").fetchall() == [
            ("fda_id", "VARCHAR"), ("n", "BIGINT"), ("label", "VARCHAR")]
        assert con.execute("select rows_read from s.shaped_count").fetchall() == [(0,)]
    assert _shaped(tmp_path, instance, "stored").success and _stored(tmp_path).height == len(KEYS)


def test_a_large_frame_is_written_in_batches_and_keeps_its_order(tmp_path):
    from types import SimpleNamespace

    from meddevkg_dagster.io_manager import INSERT_BATCH_ROWS, PartitionRangePolarsTypeHandler, in_batches

    n = 3 * INSERT_BATCH_ROWS + 17
    frame = pl.DataFrame({"fda_id": [f"P{i // 1000:04d}" for i in range(n)], "n": range(n)})
    batches = in_batches(frame).to_batches()
    assert len(batches) == 4 and batches[-1].num_rows == 17  # one chunk in, DuckDB can scan on every core
    assert in_batches(frame.clear()).num_rows == 0 and in_batches(frame.clear()).schema == frame.to_arrow().schema
    metadata = {}
    context = SimpleNamespace(has_asset_partitions=False, add_output_metadata=metadata.update)
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        con.execute("create schema s")
        PartitionRangePolarsTypeHandler().handle_output(context, TableSlice(table="t", schema="s"), frame, con)
        stored = con.sql("select * from s.t").pl()
    assert stored.equals(frame) and metadata["row_count"] == n
