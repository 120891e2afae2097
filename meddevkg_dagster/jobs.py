"""Jobs: patents by grant year, then everything else by device; and the per-device refresh slice.

A run targets one partitions definition, so the whole graph is two runs: `patents_job` over the
patent years, then `meddevkg_job` over the devices (it reads every patent year). Each is a single
run however many partitions it covers (backfill policy single_run).
"""

import dagster as dg

from meddevkg_dagster.partitions import patent_years, pma_devices

PATENT_ASSETS = dg.AssetSelection.assets("patents", "patent_quarantine", "patent_entities", "patent_entity_quarantine",
                                         "patent_embeddings")
"""Partitioned by grant year: adding a year extracts and encodes that year only."""

ONTOLOGY_ASSETS = dg.AssetSelection.assets("meddevonto", "ontology_quarantine")
"""The ontology the patents' extraction reads, and what its licensed releases quarantined (one step)."""

patents_job = dg.define_asset_job(
    name="patents_job", selection=PATENT_ASSETS | ONTOLOGY_ASSETS,
    partitions_def=patent_years,
    description="Read, extract and encode the selected patent years (and the ontology the extraction uses).",
)

# The ontology is patents_job's alone: the devices are then extracted against the ontology the patents
# were, and a licensed UMLS release is parsed once per refresh, not again by the re-link.
meddevkg_job = dg.define_asset_job(
    name="meddevkg_job", selection=dg.AssetSelection.all() - PATENT_ASSETS - ONTOLOGY_ASSETS,
    partitions_def=pma_devices,
    description="Materialise the graph over every device partition in one run, against all patent years "
                "(run patents_job first).",
)

DEVICE_ASSETS = dg.AssetSelection.assets(
    "pma_documents", "pma_quarantine", "pma_supplements", "device_entities", "device_entity_quarantine",
    "device_embeddings", "candidate_pool", "cross_encoder_scores", "reranked_links",
)

device_links_job = dg.define_asset_job(
    name="device_links_job", selection=DEVICE_ASSETS, partitions_def=pma_devices,
    description="Link the selected device partitions against the current patents and reranker.",
)
