"""Links already known for other devices, as a reranker feature.

A company marks a product line's devices with the same patents: successive generations of a
stent, a defibrillator or an ablation catheter share some of their IP (on the benchmark, 53 of
the 426 gold links are to a patent that is gold for another device too, always of the same
company). And a patent linked to one device is, for another device of the same company, usually
the other product's IP: in the benchmark's pools of gold devices, 4,758 pairs are to another gold
device's patent and 53 of them are gold. The feature is the highest cosine between the pair's
device and another device known to be linked to the pair's patent (null when there is none), so
the classifier can weigh how alike the two devices are. Out of fold (issue 6, three seeds) it
learned mostly the second case: FPR at 90% recall fell from 11.2% to 8.5% and gold links to
patents no other device has rose, while links to a patent shared with a sibling fell in rank.

What tells the two cases apart is the product line, and the label names it (device_names): the
second feature is the idf of the rarest label-head word the pair's device shares with a device known
to be linked to the patent (high for a trade name such as NAVISTAR or LIFEPAK, low for "catheter").
Endologix's Powerlink and Ovation endografts have cosines as high as the NAVISTAR catheters' and
share no gold patent; the catheters share most of theirs.

A model knows the links of the devices it was trained on, their embeddings and names, and carries
them with it (RerankerModel.known): a fold model knows only its training devices, so a held-out device
is never scored with its own links or with another held-out device's. A training row never counts
its own device's link (leave one device out), so training sees the feature as a device outside
the model would.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from meddevkg_core.device_names import word_idf
from meddevkg_core.embeddings import l2_normalise
from meddevkg_core.text_adapter import Vectors

KNOWN_LINK_FEATURES = ("known_link_device_sim", "known_link_name_idf")
"""The highest cosine of the pair's device to another device known to be linked to its patent, and
the highest idf of a label-head word (device_names) the pair's device shares with such a device."""

_IDS = ["fda_id", "pat_id"]


@dataclass(frozen=True)
class KnownLinks:
    """The gold links among a model's training rows and their devices' unit embeddings."""

    links: tuple[tuple[str, str], ...] = ()
    device_ids: tuple[str, ...] = ()
    vectors_b64: str = ""
    """float32 rows of `device_ids`, base64: a model is stored as JSON text."""
    names: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    """(fda_id, its label-head words with their idf) of the linked devices whose label was given."""

    @staticmethod
    def of(labeled: pl.DataFrame, vectors: Vectors | None) -> KnownLinks:
        """The distinct positives of a labelled frame, with their devices' vectors when given and
        their label-head words, each with its idf over the devices of `vectors` (the catalogue)."""
        positives = labeled.filter(pl.col("label") == 1).select(_IDS).unique().sort(_IDS)
        links = tuple(positives.iter_rows())
        if vectors is None:
            return KnownLinks(links)
        linked = positives["fda_id"].unique().sort().to_list()
        devices = tuple(d for d in linked if vectors.has_device(d))
        matrix = l2_normalise(vectors.devices(devices)) if devices else np.zeros((0, 0), np.float32)
        words, idf = vectors.device_words, word_idf(vectors.device_words)
        names = tuple((d, tuple((w, idf[w]) for w in sorted(words[d]))) for d in linked if d in words)
        return KnownLinks(links, devices, base64.b64encode(np.ascontiguousarray(matrix).tobytes()).decode("ascii"),
                          names)

    @cached_property
    def _matrix(self) -> np.ndarray:
        flat = np.frombuffer(base64.b64decode(self.vectors_b64), np.float32)
        return flat.reshape(len(self.device_ids), -1) if self.device_ids else flat.reshape(0, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"links": [list(link) for link in self.links], "device_ids": list(self.device_ids),
                "vectors_b64": self.vectors_b64, "names": {d: dict(words) for d, words in self.names}}

    @staticmethod
    def from_dict(data: dict[str, Any] | None) -> KnownLinks:
        data = data or {}
        return KnownLinks(tuple((f, p) for f, p in data.get("links", ())), tuple(data.get("device_ids", ())),
                          data.get("vectors_b64", ""),
                          tuple((d, tuple(words.items())) for d, words in data.get("names", {}).items()))

    def features(self, pairs: pl.DataFrame, vectors: Vectors | None) -> pl.DataFrame:
        """`pairs` with KNOWN_LINK_FEATURES (columns of those names are replaced).

        `vectors` must hold the pairs' devices when these links come with vectors, and their label
        words when they come with names; a model trained without them cannot compare devices
        (null), in training and scoring alike, and neither can it for a device it is not given."""
        similarity, name_idf = KNOWN_LINK_FEATURES
        columns = [pl.Series(similarity, self._best_similarity(pairs, vectors), pl.Float32).fill_nan(None),
                   pl.Series(name_idf, self._rarest_shared_word(pairs, vectors), pl.Float32).fill_nan(None)]
        return pairs.drop(KNOWN_LINK_FEATURES, strict=False).with_columns(columns)

    @staticmethod
    def _matches(pairs: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
        """(fda_id, pat_id, _row, _other, ...): each of `links` to a pair's patent from another device."""
        return (pairs.select(_IDS).with_row_index("_row").join(links, on="pat_id", how="inner")
                .filter(pl.col("_other") != pl.col("fda_id")))

    @cached_property
    def _links(self) -> pl.DataFrame:
        return pl.DataFrame(list(self.links), schema={"_other": pl.String, "pat_id": pl.String}, orient="row")

    @cached_property
    def _name_idf(self) -> dict[str, dict[str, float]]:
        """`names` as {fda_id: {word: idf}}. Built once per model: the ranking scores device by device."""
        return {d: dict(words) for d, words in self.names}

    @cached_property
    def _links_with_names(self) -> pl.DataFrame:
        """(_other, pat_id): the links whose device's names are known. Built once per model."""
        return self._links.filter(pl.col("_other").is_in(list(self._name_idf)))

    def _rarest_shared_word(self, pairs: pl.DataFrame, vectors: Vectors | None) -> np.ndarray:
        """Per pair, the highest idf of a word its device shares with a known device linked to its
        patent (0: none shared), over those devices; NaN without such a device."""
        best = np.full(pairs.height, np.nan, np.float32)
        if not self.names:
            return best
        if vectors is None or not vectors.device_words:
            raise ValueError("this reranker compares the devices' product-line names: pass their label texts "
                             "to score (Vectors.of(..., devices))")
        names, words = self._name_idf, vectors.device_words
        matches = self._matches(pairs, self._links_with_names)
        device_pairs = matches.select("fda_id", "_other").unique().filter(pl.col("fda_id").is_in(list(words)))
        if device_pairs.height == 0:
            return best
        idf = [max((names[o][w] for w in words[d].intersection(names[o])), default=0.0)
               for d, o in device_pairs.iter_rows()]
        shared = (matches.join(device_pairs.with_columns(pl.Series("_idf", idf, pl.Float32)),
                               on=["fda_id", "_other"], how="inner")
                  .group_by("_row").agg(pl.col("_idf").max()))
        best[shared["_row"].to_numpy()] = shared["_idf"].to_numpy()
        return best

    @cached_property
    def _links_with_vectors(self) -> pl.DataFrame:
        """(_other, pat_id, _k): the links whose device has a vector, `_k` its row of `_matrix`.
        Built once per model: the benchmark's ranking scores device by device."""
        rows = pl.DataFrame({"_other": list(self.device_ids), "_k": list(range(len(self.device_ids)))},
                            schema={"_other": pl.String, "_k": pl.Int64})
        return self._links.join(rows, on="_other", how="inner")

    def _best_similarity(self, pairs: pl.DataFrame, vectors: Vectors | None) -> np.ndarray:
        best = np.full(pairs.height, np.nan, np.float32)
        if not self.device_ids:
            return best
        if vectors is None:
            raise ValueError("this reranker compares devices by their embeddings: pass the device vectors to score")
        matches = self._matches(pairs, self._links_with_vectors)
        devices = [d for d in matches["fda_id"].unique().to_list() if vectors.has_device(d)]
        matches = matches.filter(pl.col("fda_id").is_in(devices))
        if matches.height == 0:
            return best
        query_row = {d: i for i, d in enumerate(devices)}
        query = l2_normalise(vectors.devices(devices))
        q = query[[query_row[d] for d in matches["fda_id"].to_list()]]
        k = self._matrix[matches["_k"].to_numpy()]
        cosine = pl.DataFrame({"_row": matches["_row"], "cosine": (q * k).sum(axis=1)})
        top = cosine.group_by("_row").agg(pl.col("cosine").max())
        best[top["_row"].to_numpy()] = top["cosine"].to_numpy()
        return best
