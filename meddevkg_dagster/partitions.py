"""Partitions: devices (one key per PMA number) and patents (one key per grant year).

Devices are added by the CLI or the new-approvals sensor; patent years by the CLI and the weekly
patent refresh (meddevkg_core.patent_years says why years rather than hash shards). The two are the
units of parallelism: a run targets one of them, and assets downstream of the patents read every year.
"""

import dagster as dg

pma_devices = dg.DynamicPartitionsDefinition(name="pma_devices")

DEVICE_BACKFILL = dg.BackfillPolicy.single_run()
"""All selected devices in one run: per-device work is vectorised, so many partitions stay cheap."""

patent_years = dg.DynamicPartitionsDefinition(name="patent_years")

PATENT_BACKFILL = dg.BackfillPolicy.single_run()
"""All selected years in one run: the source is read once and split by year on write."""

ALL_PATENT_YEARS = dg.AllPartitionMapping()
"""How device-level and corpus-level assets read patent-side assets: every year."""


def all_patent_years(*inputs: str) -> dict[str, dg.AssetIn]:
    """`ins=` for an asset that reads these patent-side assets whole (every year partition)."""
    return {name: dg.AssetIn(partition_mapping=ALL_PATENT_YEARS) for name in inputs}


DEVICE_CATALOGUE = dg.AllPartitionMapping()
"""How a device partition reads the other devices: every stored one (the sibling features compare
a device with its company's other products, so they need the catalogue, not the run's batch)."""


def device_catalogue(*inputs: str) -> dict[str, dg.AssetIn]:
    """`ins=` for a device-partitioned asset that reads these device-side assets for every device."""
    return {name: dg.AssetIn(partition_mapping=DEVICE_CATALOGUE) for name in inputs}
