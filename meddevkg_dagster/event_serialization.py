"""Serialising a batch of per-partition asset events once per asset, not once per partition.

A single-run backfill records, for each asset, one planned and one materialisation event per
partition, and within an asset these events differ only in the partition key, the timestamp and
the partition's row count (`dagster/row_count`, see io_manager). Dagster's serialiser walks each
event's whole record tree (metadata, data-version tags, handles), which made it the largest single
cost of storing a 434-device backfill. Here the first event of a run of such events is serialised
with sentinels in those places, and the others are that text with their own values put in. An
event is only templated when it equals the template's event in every other field; anything else
(other partition-scoped metadata, another asset) is serialised as Dagster does, so the text is
always exactly `serialize_value(event)`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from dagster import EventLogEntry, IntMetadataValue
from dagster._core.events import AssetMaterializationPlannedData, StepMaterializationData
from dagster._serdes import serialize_value

PARTITION_SENTINEL = "\x00meddevkg-partition\x00"
TIMESTAMP_SENTINEL = 1.2345678901234567e-300
ROW_COUNT_SENTINEL = -918273645546372819
"""Values no real event carries; a template must contain each of its own exactly once to be used."""
ROW_COUNT = "dagster/row_count"
_PARTITION_JSON, _TIMESTAMP_JSON = json.dumps(PARTITION_SENTINEL), json.dumps(TIMESTAMP_SENTINEL)
_ROW_COUNT_JSON = json.dumps(ROW_COUNT_SENTINEL)
_SENTINELS = re.compile("|".join(re.escape(s) for s in (_PARTITION_JSON, _TIMESTAMP_JSON, _ROW_COUNT_JSON)))


def _with_sentinels(event: EventLogEntry) -> tuple[EventLogEntry, dict[str, str]] | None:
    """The event with its partition, timestamp and (a materialisation's) row count replaced by the
    sentinels, and the JSON of its own values by sentinel; None for an event that is not a
    partition's planned or materialisation event."""
    dagster_event = event.dagster_event
    if dagster_event is None:
        return None
    data = dagster_event.event_specific_data
    values = {_TIMESTAMP_JSON: json.dumps(event.timestamp)}
    if isinstance(data, StepMaterializationData) and data.materialization.partition is not None:
        materialization = data.materialization
        values[_PARTITION_JSON] = json.dumps(materialization.partition)
        metadata = materialization.metadata
        if isinstance(rows := metadata.get(ROW_COUNT), IntMetadataValue) and isinstance(rows.value, int):
            values[_ROW_COUNT_JSON] = json.dumps(rows.value)
            metadata = {**metadata, ROW_COUNT: IntMetadataValue(ROW_COUNT_SENTINEL)}
        data = data._replace(materialization=materialization._replace(partition=PARTITION_SENTINEL,
                                                                      metadata=metadata))
    elif isinstance(data, AssetMaterializationPlannedData) and data.partition is not None:
        values[_PARTITION_JSON] = json.dumps(data.partition)
        data = data._replace(partition=PARTITION_SENTINEL)
    else:
        return None
    shape = event._replace(timestamp=TIMESTAMP_SENTINEL,
                           dagster_event=dagster_event._replace(event_specific_data=data))
    return shape, values


def serialize_events(events: Sequence[EventLogEntry]) -> list[str]:
    """`serialize_value(event)` for each event, in order."""
    out: list[str] = []
    shape: EventLogEntry | None = None
    pieces: list[str] = []  # the template's text around its sentinels
    slots: list[str] = []  # which sentinel comes where
    for event in events:
        templated = _with_sentinels(event)
        if templated is None:
            out.append(serialize_value(event))
            continue
        event_shape, values = templated
        if event_shape != shape:
            text = serialize_value(event_shape)
            found = _SENTINELS.findall(text)
            if sorted(found) != sorted(values):
                shape = None
                out.append(serialize_value(event))
                continue
            shape, pieces, slots = event_shape, _SENTINELS.split(text), found
        out.append(pieces[0] + "".join(values[slot] + piece for slot, piece in zip(slots, pieces[1:], strict=True)))
    return out
