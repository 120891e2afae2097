"""Device partitions: one key per PMA number, added by the CLI or the new-approvals sensor."""

import dagster as dg

pma_devices = dg.DynamicPartitionsDefinition(name="pma_devices")

DEVICE_BACKFILL = dg.BackfillPolicy.single_run()
"""All selected devices in one run: per-device work is vectorised, so many partitions stay cheap."""
