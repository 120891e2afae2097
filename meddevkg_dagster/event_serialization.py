"""Serialising a batch of per-partition asset events once per asset, not once per partition.

A single-run backfill records, for each asset, one planned and one materialisation event per
partition, and within an asset these events differ only in the partition key and the timestamp.
Dagster's serialiser walks each event's whole record tree (metadata, data-version tags, handles),
which made it the largest single cost of storing a 434-device backfill. Here the first event of a
run of such events is serialised with sentinels in those two places, and the others are that text
with their own two values put in. An event is only templated when it equals the template's event
in every other field; anything else (partition-scoped metadata, another asset) is serialised as
Dagster does, so the text is always exactly `serialize_value(event)`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from dagster import EventLogEntry
from dagster._core.events import AssetMaterializationPlannedData, StepMaterializationData
from dagster._serdes import serialize_value

PARTITION_SENTINEL = "\x00meddevkg-partition\x00"
TIMESTAMP_SENTINEL = 1.2345678901234567e-300
"""Values no real event carries; a template must contain each exactly once to be used."""
_PARTITION_JSON, _TIMESTAMP_JSON = json.dumps(PARTITION_SENTINEL), json.dumps(TIMESTAMP_SENTINEL)
_SENTINELS = re.compile(f"{re.escape(_PARTITION_JSON)}|{re.escape(_TIMESTAMP_JSON)}")


def _with_sentinels(event: EventLogEntry) -> tuple[EventLogEntry, str] | None:
    """The event with its partition and timestamp replaced by the sentinels, and its partition;
    None for an event that is not a partition's planned or materialisation event."""
    dagster_event = event.dagster_event
    data = dagster_event.event_specific_data if dagster_event else None
    if isinstance(data, StepMaterializationData) and data.materialization.partition is not None:
        partition = data.materialization.partition
        data = data._replace(materialization=data.materialization._replace(partition=PARTITION_SENTINEL))
    elif isinstance(data, AssetMaterializationPlannedData) and data.partition is not None:
        partition = data.partition
        data = data._replace(partition=PARTITION_SENTINEL)
    else:
        return None
    shape = event._replace(timestamp=TIMESTAMP_SENTINEL,
                           dagster_event=dagster_event._replace(event_specific_data=data))
    return shape, partition


def serialize_events(events: Sequence[EventLogEntry]) -> list[str]:
    """`serialize_value(event)` for each event, in order."""
    out: list[str] = []
    shape: EventLogEntry | None = None
    pieces: list[str] = []  # the template's text around its two sentinels
    slots: list[str] = []  # which sentinel comes first
    for event in events:
        templated = _with_sentinels(event)
        if templated is None:
            out.append(serialize_value(event))
            continue
        event_shape, partition = templated
        if event_shape != shape:
            text = serialize_value(event_shape)
            found = _SENTINELS.findall(text)
            if sorted(found) != sorted([_PARTITION_JSON, _TIMESTAMP_JSON]):
                shape = None
                out.append(serialize_value(event))
                continue
            shape, pieces, slots = event_shape, _SENTINELS.split(text), found
        values = {_PARTITION_JSON: json.dumps(partition), _TIMESTAMP_JSON: json.dumps(event.timestamp)}
        out.append(pieces[0] + values[slots[0]] + pieces[1] + values[slots[1]] + pieces[2])
    return out
