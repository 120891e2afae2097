"""Small adapters between Dagster and the core: partition selection and metadata builders."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import polars as pl
from dagster._core.definitions.metadata import RawMetadataValue

from meddevkg_core.evaluation import LinkEvaluation
from meddevkg_core.progress import ThrottledReporter


def partition_keys(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> list[str]:
    """The partition keys (devices or patent years) this run materialises (all of them in a single-run backfill)."""
    return sorted(context.partition_keys) if context.has_partition_key_range or context.has_partition_key else []


def only_devices(df: pl.DataFrame, keys: list[str], col: str = "fda_id") -> pl.DataFrame:
    return df.filter(pl.col(col).is_in(keys)) if keys else df


def require_known(keys: list[str], known: pl.Series, what: str) -> None:
    """Fail loudly when a partition names a device the corpus does not have (never an empty write)."""
    missing = sorted(set(keys) - set(known.to_list()))
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise dg.Failure(f"{len(missing)} device partition(s) not in the {what}: {shown}")


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    start = time.perf_counter()
    yield out
    out["seconds"] = round(time.perf_counter() - start, 3)


def log_progress(context: dg.AssetExecutionContext, unit: str) -> ThrottledReporter:
    """Progress of a long asset body, as throttled lines in the run's log, named by its asset (by its
    step when it makes several, such as a table and its quarantine)."""
    if not context.has_assets_def:
        name = "step"
    elif len(context.assets_def.keys) == 1:
        name = context.asset_key.to_user_string()
    else:
        name = context.op_def.name
    return ThrottledReporter(name, context.log.info, unit=unit)


def stored_table(schema: pl.Schema, **metadata: object) -> dict[str, object]:
    """Definition metadata of an asset stored as a DuckDB table: `metadata` (e.g. its partition_expr)
    and its declared columns, which the UI shows on the asset once, not on every partition's event
    (the store's IO manager leaves them off a partition range's events, see io_manager)."""
    columns = [dg.TableColumn(name=name, type=str(dtype)) for name, dtype in schema.items()]
    return {**metadata, "dagster/column_schema": dg.TableSchema(columns=columns)}


def table_metadata(df: pl.DataFrame, **extra: RawMetadataValue) -> dict[str, RawMetadataValue]:
    """The output's rows and `extra`; over a partition range the store's IO manager gives each
    partition's event its own row count instead (io_manager.add_partition_metadata)."""
    meta: dict[str, RawMetadataValue] = {"dagster/row_count": df.height}
    meta.update({k: v for k, v in extra.items() if v is not None})
    return meta


def evaluation_metadata(ev: LinkEvaluation) -> dict[str, RawMetadataValue]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in ev.model_dump().items() if v is not None}
