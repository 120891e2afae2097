"""Weekly patent refresh: re-read this year's grants, then (sensor) re-link every device against them."""

from __future__ import annotations

import dagster as dg

from meddevkg_core.patent_years import current_year_keys
from meddevkg_dagster.jobs import meddevkg_job, patents_job
from meddevkg_dagster.partitions import PATENT_YEARS, PMA_DEVICES, key_ranges, range_tags

RELINK_TAG = "meddevkg/relink_after"


@dg.schedule(job=patents_job, cron_schedule="0 4 * * 1", default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Mondays 04:00: re-read the current grant year from the patent source (PatentsView "
                         "publishes each Tuesday's grants), extracting and encoding only that year; "
                         "relink_after_patent_refresh then re-links the devices.")
def weekly_patents_refresh(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
    keys = current_year_keys(context.scheduled_execution_time.date())
    known = set(context.instance.get_dynamic_partitions(PATENT_YEARS))
    if missing := [k for k in keys if k not in known]:
        # Schedules cannot return partition requests; adding a key twice is impossible, so this is idempotent.
        context.instance.add_dynamic_partitions(PATENT_YEARS, missing)
    ranges = key_ranges(keys, context.instance.get_dynamic_partitions(PATENT_YEARS))
    day = f"{context.scheduled_execution_time:%Y-%m-%d}"
    # One run when the years are neighbours in the instance's order, else one per year: a range
    # spanning other keys would re-extract and re-encode them.
    return [dg.RunRequest(run_key=f"patents-{day}" if len(ranges) == 1 else f"patents-{day}-{start}",
                          tags=range_tags(start, end)) for start, end in ranges]


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[patents_job], request_job=meddevkg_job,
                      default_status=dg.DefaultSensorStatus.STOPPED,
                      description="After a successful patents_job run, re-link every device partition in one run "
                                  "(Stage 2 is cheap; embeddings and entities of old patents are reused).")
def relink_after_patent_refresh(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
    keys = context.instance.get_dynamic_partitions(PMA_DEVICES)
    if not keys:
        return dg.SkipReason("no device partitions yet: run `meddevkg demo` or let new_pma_sensor add some")
    run_id = context.dagster_run.run_id
    return dg.RunRequest(run_key=f"relink-{run_id}", tags={RELINK_TAG: run_id, **range_tags(keys[0], keys[-1])})


SCHEDULES = [weekly_patents_refresh]
RUN_STATUS_SENSORS = [relink_after_patent_refresh]
