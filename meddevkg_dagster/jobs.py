"""Jobs: the whole graph in one run, and the per-device slice used by refreshes."""

import dagster as dg

from meddevkg_dagster.partitions import pma_devices

ALL_ASSETS = dg.AssetSelection.all()

meddevkg_job = dg.define_asset_job(
    name="meddevkg_job", selection=ALL_ASSETS,
    description="Materialise the whole MedDevKG graph (every device partition in one run).",
)

DEVICE_ASSETS = dg.AssetSelection.assets(
    "pma_documents", "pma_quarantine", "device_entities", "device_embeddings", "candidate_pool", "cross_encoder_scores",
    "reranked_links",
)

device_links_job = dg.define_asset_job(
    name="device_links_job", selection=DEVICE_ASSETS, partitions_def=pma_devices,
    description="Link the selected device partitions against the current patents and reranker.",
)
