"""The one Definitions object of the MedDevKG code location."""

import dagster as dg

from meddevkg_dagster.assets import features, linking, outputs, sources
from meddevkg_dagster.checks import CHECKS
from meddevkg_dagster.executors import executor_from_env
from meddevkg_dagster.jobs import device_links_job, meddevkg_job, patents_job
from meddevkg_dagster.resources import build_resources
from meddevkg_dagster.schedules import RUN_STATUS_SENSORS, SCHEDULES
from meddevkg_dagster.sensors import SENSORS


def build_definitions(executor: str | None = None) -> dg.Definitions:
    """The code location; `executor` (else MEDDEVKG_EXECUTOR, else in_process) says where steps run."""
    return dg.Definitions(
        assets=dg.load_assets_from_modules([sources, features, linking, outputs]),
        asset_checks=CHECKS,
        jobs=[patents_job, meddevkg_job, device_links_job],
        resources=build_resources(),
        sensors=[*SENSORS, *RUN_STATUS_SENSORS],
        schedules=SCHEDULES,
        executor=executor_from_env(executor),
    )


defs = build_definitions()
