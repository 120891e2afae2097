"""When FDA last decided on a device, and patents granted long after it.

A PMA device on the market keeps changing: new models, materials, suppliers and labels, each an
approved supplement. A device whose latest decision (its approval or a supplement) is years old is
no longer changed and often no longer sold; a patent granted years after that is not one its maker
marks on it, however well its text fits. On the benchmark (FDA records to 2026-08) none of the 426
gold pairs has a patent granted after its device's latest decision (each was granted at least two
years before it), while 11 of the non-gold pairs in the gold devices' top 10s do (seed 42):
P970002, last decided in 1998, had 9 patents granted in 2007 or later in its top 10 and its one gold
patent at rank 12.

Only with the devices' supplements (FDA records read): without them every device would look as
old as its approval. A device with no supplement in the records counts from its approval date
when the device table carries one (openFDA's PMA documents do); else it is undated, as the
benchmark's 20 devices without supplements are (its device table has no dates).

The same latest decision bounds a device's time on the market for the company match
(with_last_decision, company_resolver.Reach.holds): a deal counts for a device still changed after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from meddevkg_core.applications import patent_years

GRANTED_AFTER_LAST_DECISION = "granted_after_last_decision"
"""Pool column: the patent's grant year minus the device's latest FDA decision year (NaN when
either is unknown)."""

DORMANT_FACTOR = 1e-3
"""What a dormant pair's probability is multiplied by (RerankConfig.dormant_device_years): as good
as rejected, but above zero, so the model's order among such pairs stays readable."""


LAST_DECISION_DATE = "last_decision_date"
"""Device column (company_match_table): the date of the device's latest FDA decision."""


def last_decision_dates(devices: pl.DataFrame, supplements: pl.DataFrame) -> pl.DataFrame:
    """fda_id, last_decision_date: per device that has either, the latest of its own
    `decision_date` (when the devices carry one) and its supplements' decision dates."""
    def dates(frame: pl.DataFrame) -> pl.DataFrame:
        if "decision_date" not in frame.columns:
            return pl.DataFrame(schema={"fda_id": pl.String, LAST_DECISION_DATE: pl.Date})
        return frame.select(pl.col("fda_id").cast(pl.String),
                            pl.col("decision_date").cast(pl.Date, strict=False).alias(LAST_DECISION_DATE))

    return (pl.concat([dates(devices), dates(supplements)]).drop_nulls()
            .group_by("fda_id").agg(pl.col(LAST_DECISION_DATE).max()).sort("fda_id"))


def with_last_decision(devices: pl.DataFrame, supplements: pl.DataFrame | None) -> pl.DataFrame:
    """The devices with LAST_DECISION_DATE (null when unknown); unchanged without supplements.

    A deal's date window in the company match (company_resolver.Reach.holds) then covers the years the
    device was on the market, not only its approval day."""
    if supplements is None:
        return devices
    latest = last_decision_dates(devices, supplements)
    return devices.drop(LAST_DECISION_DATE, strict=False).join(latest, on="fda_id", how="left",
                                                                maintain_order="left")


def last_decision_years(devices: pl.DataFrame, supplements: pl.DataFrame,
                        device_ids: Sequence[str]) -> np.ndarray:
    """Per device of `device_ids` (float32, NaN when unknown): the year of its latest FDA decision,
    its own `decision_date` (when the devices carry one) or a supplement's."""
    wanted = pl.DataFrame({"fda_id": list(device_ids)}, schema={"fda_id": pl.String})
    latest = last_decision_dates(devices, supplements)
    out = wanted.join(latest, on="fda_id", how="left", maintain_order="left")[LAST_DECISION_DATE].dt.year()
    return out.cast(pl.Float32).fill_null(np.nan).to_numpy()


def grant_years_of(patents: pl.DataFrame, patent_ids: Sequence[str]) -> np.ndarray:
    """Per patent of `patent_ids` (float32, NaN when unknown): its grant year, from its grant date
    or else its number (applications.patent_years)."""
    years = patent_years(patents)
    wanted = pl.DataFrame({"pat_id": list(patent_ids)}, schema={"pat_id": pl.String})
    out = wanted.join(years.select("pat_id", "grant_year"), on="pat_id", how="left", maintain_order="left")
    return out["grant_year"].cast(pl.Float32).fill_null(np.nan).to_numpy()


def dormant(granted_after: np.ndarray, years: int | None) -> np.ndarray:
    """Pairs whose patent was granted more than `years` after the device's latest decision (none
    when `years` is None; NaN, unknown, is never dormant)."""
    if years is None:
        return np.zeros(granted_after.shape, bool)
    return np.nan_to_num(granted_after, nan=-np.inf) > years
