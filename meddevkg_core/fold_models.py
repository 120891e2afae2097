"""Stage 3's device-grouped fold models: one classifier per fold of the gold devices.

A gold device is scored by the fold model that never saw it, every other device by the model
trained on every gold device (rerank.train_reranker), so every probability reported for a gold
device is out-of-fold. fit_fold_models refuses gold that cannot train them, naming its devices;
apply_fold_models scores a pool in chunks of rows without copying it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.config import RerankConfig
from meddevkg_core.rerank import RerankerModel, device_folds, label_pairs, train_reranker
from meddevkg_core.text_adapter import TextAdapter, Vectors, fit_text_adapter, training_groups


@dataclass(frozen=True)
class FoldModels:
    """One model per device-grouped fold plus the model trained on every gold device.

    A gold device is always scored by the fold model that did not see it; every other device
    by the full model. The text adapters (text_adapter; None when not trained) follow the same
    folds. Stored as a table by the `reranker_model` asset.
    """

    full: RerankerModel
    folds: tuple[tuple[tuple[str, ...], RerankerModel], ...]
    full_adapter: TextAdapter | None = None
    fold_adapters: tuple[TextAdapter | None, ...] = ()

    def model_for(self, fda_id: str) -> tuple[RerankerModel, bool]:
        for devices, model in self.folds:
            if fda_id in devices:
                return model, True
        return self.full, False

    def adapter_for(self, fda_id: str) -> TextAdapter | None:
        for i, (devices, _) in enumerate(self.folds):
            if fda_id in devices:
                return self.fold_adapters[i] if i < len(self.fold_adapters) else None
        return self.full_adapter

    def to_frame(self) -> pl.DataFrame:
        adapters = [self.full_adapter, *self.fold_adapters, *[None] * (len(self.folds) - len(self.fold_adapters))]
        rows: list[dict[str, object]] = [{"model": "full", "held_out_devices": [], "model_json": self.full.to_json()}]
        rows += [{"model": f"fold_{i}", "held_out_devices": list(devices), "model_json": m.to_json()}
                 for i, (devices, m) in enumerate(self.folds)]
        for row, adapter in zip(rows, adapters, strict=True):
            row["text_adapter"] = adapter.to_bytes() if adapter is not None else None
        return pl.DataFrame(rows, schema=schemas.RERANKER_MODELS)

    @staticmethod
    def from_frame(df: pl.DataFrame) -> FoldModels:
        if "text_adapter" not in df.columns:  # stored before the text adapter existed
            df = df.with_columns(pl.lit(None, pl.Binary).alias("text_adapter"))

        def adapter(data: bytes | None) -> TextAdapter | None:
            return TextAdapter.from_bytes(data) if data is not None else None

        full = df.filter(pl.col("model") == "full").row(0, named=True)
        rows = list(df.filter(pl.col("model") != "full").sort("model").iter_rows(named=True))
        folds = tuple((tuple(r["held_out_devices"]), RerankerModel.from_json(r["model_json"])) for r in rows)
        return FoldModels(RerankerModel.from_json(full["model_json"]), folds,
                          adapter(full["text_adapter"]), tuple(adapter(r["text_adapter"]) for r in rows))


MIN_GOLD_DEVICES = 2
"""Stage 3 is trained on gold and scores each gold device with a model that never saw it: that takes
two devices with gold at the least (one to hold out, one to learn from)."""


class RerankerTrainingError(ValueError):
    """The gold cannot train Stage 3 (no positives and negatives in the pool, or too few devices)."""


SHOWN_DEVICES = 5


def require_both_classes(labeled: pl.DataFrame, model: str) -> None:
    """Refuse a training set of one label, naming `model` and its devices, and what would fix it.

    XGBoost given gold links alone stops with "Invalid classes inferred from unique values of y",
    naming neither model nor pairs, and given no gold link it learns a model of nothing."""
    positives = int((labeled["label"] == 1).sum())
    negatives = labeled.height - positives
    if positives and negatives:
        return
    devices = labeled["fda_id"].unique().sort().to_list()
    shown = ", ".join(devices[:SHOWN_DEVICES]) + (f" and {len(devices) - SHOWN_DEVICES} more"
                                                   if len(devices) > SHOWN_DEVICES else "")
    if negatives == 0:
        what = (f"{positives} gold links and no other pair", "give the corpus patents that are not gold links of "
                "these devices (more patents than gold links), or more gold devices")
    else:
        what = (f"{negatives} pairs and no gold link", "give gold links of these devices that the Stage-2 pool "
                "holds, or more gold devices")
    raise RerankerTrainingError(
        f"cannot train the reranker's {model}: its training pairs, of {len(devices)} "
        f"device{'s' if len(devices) != 1 else ''} ({shown}), are {what[0]}, and XGBoost learns from both; {what[1]}")


def fit_fold_models(features: pl.DataFrame, gold: pl.DataFrame, cfg: RerankConfig,
                    vectors: Vectors | None = None) -> FoldModels:
    """Train the full model and one model per device-grouped fold of the gold devices.

    With `vectors` (and the text adapter enabled), a text adapter per fold and a full one too; the
    models then also know their training devices' embeddings (KNOWN_LINK_FEATURES), and scoring
    with them needs the devices' vectors.
    """
    labeled = label_pairs(features, gold)
    if labeled.height == 0:
        raise RerankerTrainingError("cannot train the reranker: the pool holds no gold positives and negatives "
                                    f"({gold.height} gold links of {gold['fda_id'].n_unique()} devices given)")
    require_both_classes(labeled, "full model")
    groups = labeled["fda_id"].unique().sort().to_numpy()
    if len(groups) < MIN_GOLD_DEVICES:
        raise RerankerTrainingError(
            f"cannot train the reranker: device-grouped folds need gold links in the pool for at least "
            f"{MIN_GOLD_DEVICES} devices; the pool holds gold for {len(groups)} ({', '.join(groups.tolist())})")
    splits = list(device_folds(min(cfg.folds, len(groups)), cfg.fold_seed).split(groups, groups=groups))
    fold_sets = []
    for i, (train_idx, test_idx) in enumerate(splits):  # every set is checked before any model is fitted
        train = labeled.filter(pl.col("fda_id").is_in(groups[train_idx]))
        require_both_classes(train, f"fold {i + 1} of {len(splits)} (held out: {', '.join(groups[test_idx])})")
        fold_sets.append(train)
    inner = min(3, cfg.folds)
    full = train_reranker(labeled, cfg, inner_folds=inner, vectors=vectors)

    def adapter(devices: np.ndarray) -> TextAdapter | None:
        if vectors is None or not cfg.text_adapter.enabled:
            return None
        keep = pl.col("fda_id").is_in(devices.tolist())
        return fit_text_adapter(training_groups(labeled.filter(keep), gold.filter(keep), vectors,
                                                cfg.text_adapter.hard_negatives), vectors, cfg.text_adapter)

    folds, fold_adapters = [], []
    for (train_idx, test_idx), train in zip(splits, fold_sets, strict=True):
        model = train_reranker(train, cfg, inner_folds=inner, vectors=vectors)
        folds.append((tuple(sorted(groups[test_idx].tolist())), model))
        fold_adapters.append(adapter(groups[train_idx]))
    return FoldModels(full, tuple(folds), adapter(groups), tuple(fold_adapters))


def apply_fold_models(features: pl.DataFrame, models: FoldModels, vectors: Vectors | None = None) -> pl.DataFrame:
    """Probabilities for every candidate, out-of-fold for gold devices (see FoldModels); `vectors`
    holds the devices' embeddings when the models were trained with them.

    The result is `features` with three columns added, sorted by pair. Each model predicts from
    the feature columns of its rows only, and the pool is not copied (a Stage-2 pool is already
    sorted by pair); with folds that share a device, or repeated pairs, the rows are assembled per
    model as before.
    """
    fold_sets = [set(devices) for devices, _ in models.folds]
    ordered = is_sorted_by_pair(features)
    if sum(map(len, fold_sets)) != len(set().union(*fold_sets)) or not _unique_pairs(features, ordered):
        return _apply_fold_models_by_parts(features, models, vectors)
    n = features.height
    prob = np.zeros(n, np.float32)
    threshold = np.full(n, models.full.threshold, np.float32)
    out_of_fold = np.zeros(n, bool)
    fda_id = features["fda_id"]
    for devices, model in models.folds:
        rows = np.flatnonzero(fda_id.is_in(list(devices)).to_numpy())
        prob[rows] = _predict(model, features, rows, vectors)
        threshold[rows] = model.threshold
        out_of_fold[rows] = True
    rest = np.flatnonzero(~out_of_fold)
    prob[rest] = _predict(models.full, features, rest, vectors)
    out = features.with_columns(chunked_like(features, [pl.Series("probability", prob, pl.Float32),
                                                        pl.Series("threshold", threshold, pl.Float32),
                                                        pl.Series("out_of_fold", out_of_fold, pl.Boolean)]))
    return out if ordered else out.sort("fda_id", "pat_id")


def chunked_like(features: pl.DataFrame, columns: list[pl.Series]) -> list[pl.Series]:
    """New columns cut at the chunk boundaries of `features` (zero-copy slices).

    A frame whose columns are chunked differently is realigned, every column copied, by the next
    `with_columns` with an expression (reranked_links.decide): at 16M pool rows that was a second pool in memory.
    """
    counts = features.n_chunks("all")
    if not counts or max(counts) == 1 or min(counts) != max(counts):
        return columns
    lengths = [c.len() for c in features.get_column(features.columns[0]).get_chunks()]
    starts = np.cumsum([0, *lengths[:-1]]).tolist()
    return [pl.concat([s.slice(a, n) for a, n in zip(starts, lengths, strict=True)], rechunk=False)
            for s in columns]


PREDICT_ROWS = 1 << 20
"""Rows per prediction call: the feature matrix of 16M pool rows would take GBs; each row's
probability depends on that row only, so the chunking changes no value."""


def _predict(model: RerankerModel, features: pl.DataFrame, rows: np.ndarray, vectors: Vectors | None) -> np.ndarray:
    out = np.empty(len(rows), np.float32)
    columns = model.columns_of(features)
    for start in range(0, len(rows), PREDICT_ROWS):
        part = rows[start:start + PREDICT_ROWS]
        out[start:start + len(part)] = model.predict(columns[part], vectors)
    return out


def _unique_pairs(features: pl.DataFrame, ordered: bool | None = None) -> bool:
    """No null id and no pair twice (then sorting by pair gives one order, whatever the input order).

    `ordered`: `is_sorted_by_pair(features)` when the caller has it already."""
    if features["fda_id"].null_count() or features["pat_id"].null_count():
        return False
    if is_sorted_by_pair(features) if ordered is None else ordered:
        return True
    return bool(features.select(pl.struct("fda_id", "pat_id").is_unique().all()).item())


def is_sorted_by_pair(features: pl.DataFrame, chunk_rows: int = PREDICT_ROWS) -> bool:
    """Strictly increasing (fda_id, pat_id) from row to row.

    In slices of `chunk_rows` + 1 rows (each shares its last row with the next), so the shifted
    copies of the id columns stay small."""
    f, p = pl.col("fda_id"), pl.col("pat_id")
    nf, np_ = f.shift(-1), p.shift(-1)
    ok = ((f < nf) | ((f == nf) & (p < np_))).fill_null(True)
    ids = features.select(f, p)
    return all(ids.slice(start, chunk_rows + 1).select(ok.all()).item()
               for start in range(0, max(ids.height - 1, 1), chunk_rows))


def _apply_fold_models_by_parts(features: pl.DataFrame, models: FoldModels, vectors: Vectors | None) -> pl.DataFrame:
    parts = []
    for devices, model in models.folds:
        part = features.filter(pl.col("fda_id").is_in(devices))
        parts.append(_scored(part, model, True, vectors))
    held_out = [d for devices, _ in models.folds for d in devices]
    parts.append(_scored(features.filter(~pl.col("fda_id").is_in(held_out)), models.full, False, vectors))
    return pl.concat(parts, how="vertical_relaxed").sort("fda_id", "pat_id")


def _scored(features: pl.DataFrame, model: RerankerModel, out_of_fold: bool, vectors: Vectors | None) -> pl.DataFrame:
    return features.with_columns(pl.Series("probability", model.predict(features, vectors), pl.Float32),
                                 pl.lit(model.threshold, pl.Float32).alias("threshold"),
                                 pl.lit(out_of_fold).alias("out_of_fold"))
