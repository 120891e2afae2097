"""Partitions: devices (one key per PMA number) and patents (one key per grant year).

Devices are added by the CLI or the new-approvals sensor; patent years by the CLI and the weekly
patent refresh (meddevkg_core.patent_years says why years rather than hash shards). The two are the
units of parallelism: a run targets one of them, and assets downstream of the patents read every year.
"""

import warnings
from collections.abc import Sequence
from typing import TypedDict

import dagster as dg

# Single-run backfills are the design (one vectorised run for any number of partitions), and
# Dagster 1.13 marks the `backfill_policy` parameter as beta: every command that loads the
# definitions (`meddevkg demo`, `dagster dev`, `dagster job execute`) printed that warning once per
# asset. The pinned version and the backfill tests stand guard; other beta warnings still show.
warnings.filterwarnings(
    "ignore", message="Parameter `backfill_policy` of function `asset`", category=dg.BetaWarning
)

PMA_DEVICES = "pma_devices"
"""The name the instance's partition calls take (Dagster types a definition's `name` as optional)."""
pma_devices = dg.DynamicPartitionsDefinition(name=PMA_DEVICES)

DEVICE_BACKFILL = dg.BackfillPolicy.single_run()
"""All selected devices in one run: per-device work is vectorised, so many partitions stay cheap."""

PATENT_YEARS = "patent_years"
patent_years = dg.DynamicPartitionsDefinition(name=PATENT_YEARS)

PATENT_BACKFILL = dg.BackfillPolicy.single_run()
"""All selected years in one run: the source is read once and split by year on write."""


class Partitioned(TypedDict):
    """`@asset` arguments of an asset partitioned by device or by grant year."""

    partitions_def: dg.DynamicPartitionsDefinition
    backfill_policy: dg.BackfillPolicy


DEVICE_PARTITIONED = Partitioned(partitions_def=pma_devices, backfill_policy=DEVICE_BACKFILL)
YEAR_PARTITIONED = Partitioned(partitions_def=patent_years, backfill_policy=PATENT_BACKFILL)

EVERY_PARTITION = dg.AllPartitionMapping()
"""How an asset reads another one whole: device-level and corpus-level assets read patent-side
assets for every year, and candidate_pool reads device-side ones for every device (the sibling
features compare a device with its company's other products: the catalogue, not the run's batch)."""


def every_partition(*inputs: str) -> dict[str, dg.AssetIn]:
    """`ins=` for an asset that reads these assets whole (every partition)."""
    return {name: dg.AssetIn(partition_mapping=EVERY_PARTITION) for name in inputs}


def range_tags(start: str, end: str) -> dict[str, str]:
    """Run tags that make one run materialise the partitions from `start` to `end` (both included)."""
    return {"dagster/asset_partition_range_start": start, "dagster/asset_partition_range_end": end}


def key_ranges(wanted: list[str], ordered: Sequence[str]) -> list[tuple[str, str]]:
    """The fewest (start, end) ranges covering exactly `wanted`, in the instance's key order.

    A dynamic partition range follows the order keys were added in, not their sort order: the keys
    2025 and 2026 may have `undated` between them, and one range from 2025 to 2026 would re-run it."""
    position = {key: i for i, key in enumerate(ordered)}
    missing = [k for k in wanted if k not in position]
    if missing:
        raise ValueError(f"not partitions of this instance: {missing}")
    ranges: list[tuple[str, str]] = []
    previous = None
    for i in sorted({position[k] for k in wanted}):
        if previous is not None and i == previous + 1:
            ranges[-1] = (ranges[-1][0], ordered[i])
        else:
            ranges.append((ordered[i], ordered[i]))
        previous = i
    return ranges


def stored_partition_tables(asset_graph, partitions_def: dg.DynamicPartitionsDefinition) -> dict[str, str]:
    """The store's tables partitioned by `partitions_def`, each with the SQL expression of its key
    (`partition_expr`). Deleting a dynamic partition removes only the key: its rows stay in these."""
    return {key.path[-1]: node.metadata["partition_expr"] for key in asset_graph.materializable_asset_keys
            if getattr((node := asset_graph.get(key)).partitions_def, "name", None) == partitions_def.name
            and "partition_expr" in node.metadata}
