"""MedDevKG orchestration: thin Dagster assets over meddevkg_core."""
