"""Key checks run inside their assets' steps, on the output, and block downstream assets when they fail."""

import dagster as dg
import polars as pl

from meddevkg_dagster.checks import keys_unique, keys_unique_spec


def test_keys_unique_counts_null_and_duplicate_keys():
    ok = keys_unique("candidate_pool", pl.DataFrame({"fda_id": ["P1", "P1"], "pat_id": ["1", "2"]}))
    assert ok.passed and ok.metadata["duplicate_keys"].value == 0
    bad = keys_unique("candidate_pool", pl.DataFrame({"fda_id": ["P1", "P1", None], "pat_id": ["1", "1", "2"]}))
    assert not bad.passed
    assert (bad.metadata["null_keys"].value, bad.metadata["duplicate_keys"].value) == (1, 1)
    assert keys_unique("patents", pl.DataFrame(schema={"pat_id": pl.String})).passed


def test_a_failed_key_check_blocks_the_downstream_asset():
    @dg.asset(name="candidate_pool", check_specs=[keys_unique_spec("candidate_pool")])
    def pool():
        df = pl.DataFrame({"fda_id": ["P1", "P1"], "pat_id": ["1", "1"]})
        yield dg.Output(df)
        yield keys_unique("candidate_pool", df)

    @dg.asset
    def links(candidate_pool: pl.DataFrame) -> int:
        return candidate_pool.height

    result = dg.materialize([pool, links], raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == "candidate_pool_keys_unique" and not evaluation.passed
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert done == {"candidate_pool"}  # stored, but nothing downstream of a failed blocking check ran
    assert not result.success
