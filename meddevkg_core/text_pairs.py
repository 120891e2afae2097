"""Labelled (device text, patent text) pairs, the input of `meddevkg pairs-cv`: read, checked, and
split into device-grouped folds (pair_cv cross-validates on them).

Named for the texts each pair carries, unlike the corpus's `labeled_pairs` table (ids and a label,
corpus.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from meddevkg_core import schemas
from meddevkg_core.corpus import first_broken_rule, key_text, label_value, mark_duplicates, rejected_rows
from meddevkg_core.errors import InputError
from meddevkg_core.raw_files import read_raw
from meddevkg_core.text_repair import repair_texts

PAIRS = pl.Schema(
    {"fda_id": pl.String, "pat_id": pl.String, "device_text": pl.String, "patent_text": pl.String, "label": pl.Int8}
)
"""A labelled pair file: the paper's `evaluation_dataset.csv` contract (pair_eval.parquet)."""


# --- input ----------------------------------------------------------------------------------


class PairsError(InputError):
    """The labelled pairs cannot be cross-validated: a column missing, duplicates, one class only, too
    few device groups for the folds."""


@dataclass(frozen=True)
class PairsRead:
    pairs: pl.DataFrame  # PAIRS
    rejected: pl.DataFrame  # schemas.REJECTED_RECORDS
    text_repairs: pl.DataFrame  # schemas.TEXT_REPAIRS: device texts whose lost "the"s were put back


def load_pairs(path: str | Path) -> PairsRead:
    """Valid pairs plus the quarantined rows with their reason (corpus.py's rules: nothing dropped
    silently; a duplicate (fda_id, pat_id) keeps its first row)."""
    path = Path(path)
    raw = read_raw(path)
    missing = [c for c in PAIRS if c not in raw.columns]
    if missing:
        raise PairsError(f"{path}: no column(s) {missing} (columns: {', '.join(raw.columns)})")
    df = raw.with_row_index("__row__")
    reason = first_broken_rule(df, list(PAIRS), [(label_value("label").is_null(), "label is not 0 or 1")])
    df = mark_duplicates(df.with_columns(reason.alias("__reason__")), ("fda_id", "pat_id"), "duplicate pair of row ")
    key = pl.concat_str([pl.lit("pairs#"), pl.col("__row__").cast(pl.String), pl.lit(":"),
                         pl.col("fda_id").fill_null(""), pl.lit("|"), pl.col("pat_id").fill_null("")])
    good = df.filter(pl.col("__reason__").is_null()).select(
        key_text("fda_id"), key_text("pat_id"), "device_text", "patent_text",
        label_value("label"),
    )
    pairs, repairs = repair_texts(schemas.conform(good, PAIRS), "device_text")
    return PairsRead(pairs, rejected_rows(df, raw.columns, path.name, key), repairs)


def read_pairs(path: str | Path) -> pl.DataFrame:
    """The valid pairs of a parquet/csv/jsonl file; use `load_pairs` to see what was quarantined."""
    return load_pairs(path).pairs


def check_pairs(pairs: pl.DataFrame) -> pl.DataFrame:
    """`pairs` in PAIRS' schema, or a PairsError for a column missing, a null, a label not 0 or 1 or a
    duplicate pair: `load_pairs` quarantines such rows, a frame built otherwise may hold them."""
    missing = [c for c in PAIRS if c not in pairs.columns]
    if missing:
        raise PairsError(f"pairs lack column(s) {missing}")
    pairs = schemas.conform(pairs.select(list(PAIRS)), PAIRS)
    nulls = pairs.filter(pl.any_horizontal(pl.all().is_null()))
    if nulls.height:
        raise PairsError(f"{nulls.height} pair(s) with nulls, e.g. {nulls.row(0)[:2]}; read them with read_pairs")
    if not pairs["label"].is_in([0, 1]).all():
        raise PairsError("label must be 0 or 1")
    dup = pairs.filter(pl.struct("fda_id", "pat_id").is_duplicated())
    if dup.height:
        raise PairsError(f"duplicate pairs, e.g. {dup.row(0)[:2]}")
    return pairs


# --- folds ----------------------------------------------------------------------------------


def device_groups(pairs: pl.DataFrame) -> np.ndarray:
    """A group id per pair: devices joined when they share a device text, a patent id or a
    patent text. Twin device texts (old PMAs named only by product code) or one patent on two
    devices would otherwise put the same text on both sides of a split."""
    nodes: dict[tuple[str, str], int] = {}

    def node(kind: str, key: str) -> int:
        return nodes.setdefault((kind, key), len(nodes))

    rows, cols = [], []
    for fda, pat, dtext, ptext in pairs.select("fda_id", "pat_id", "device_text", "patent_text").iter_rows():
        f = node("f", fda)
        for other in (node("d", dtext), node("i", pat), node("p", ptext)):
            rows.append(f)
            cols.append(other)
    graph = sparse.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, component = connected_components(graph, directed=False)
    return component[[nodes[("f", f)] for f in pairs["fda_id"].to_list()]]


def check_folds(groups: np.ndarray, folds: int) -> None:
    """A PairsError unless 2 <= folds <= the device groups: every fold holds out a group and is scored by
    a model trained on the others. pairs-cv checks it once the pairs are read, before its models load."""
    n_groups = len(np.unique(groups))
    if folds < 2 or n_groups < folds:
        raise PairsError(f"need 2 <= folds <= device groups; got {folds} folds for {n_groups} device groups")


def check_classes(labels: np.ndarray) -> None:
    """A PairsError unless there are at least two positives and a negative: each learned scorer fits both
    classes. pairs-cv checks it once the pairs are read, before its models load."""
    positives = int(labels.sum())
    if positives < 2 or positives == len(labels):
        raise PairsError(f"need positives and negatives; got {positives} positives of {len(labels)}")


def assign_folds(groups: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold per pair from the groups alone, never from labels, so a device's out-of-fold score
    cannot depend on its own labels even through the split. Largest group first into the
    lightest fold (balanced pair counts); the seed orders groups of equal size."""
    check_folds(groups, folds)
    ids, sizes = np.unique(groups, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(ids))
    order = order[np.argsort(-sizes[order], kind="stable")]
    load = np.zeros(folds, np.int64)
    fold_of_group = np.empty(len(ids), np.int32)
    for g in order:
        k = int(np.argmin(load))
        fold_of_group[g] = k
        load[k] += sizes[g]
    return fold_of_group[np.searchsorted(ids, groups)]
