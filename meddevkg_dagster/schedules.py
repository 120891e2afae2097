"""Weekly patent refresh: re-read the patent source, then re-link every device against it."""

from __future__ import annotations

import dagster as dg

from meddevkg_dagster.jobs import meddevkg_job
from meddevkg_dagster.partitions import pma_devices


@dg.schedule(job=meddevkg_job, cron_schedule="0 4 * * 1", default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Mondays 04:00: refresh patents (PatentsView grants of the week appear) and re-link all "
                         "device partitions in one run; embeddings are cached, so only new patents are encoded.")
def weekly_patents_refresh(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    keys = context.instance.get_dynamic_partitions(pma_devices.name)
    if not keys:
        return dg.SkipReason("no device partitions yet: run `meddevkg demo` or let new_pma_sensor add some")
    return dg.RunRequest(
        run_key=f"patents-{context.scheduled_execution_time:%Y-%m-%d}",
        tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
    )


SCHEDULES = [weekly_patents_refresh]
