"""The pipeline as a ranker: the reranker's probability for every device x patent pair.

Pool pairs get exactly the probability their link row has; pairs outside the pool get the same
model applied to their Stage-2 components (no cross-encoder score: a missing feature), so every
device has a ranking over the whole corpus. Gold devices are scored by the fold model that never
saw them. `fuse` orders each device's top pairs as the links' `rank` does (text_adapter, or
company_contest over the pool's company-matched rows): its scores are a per-device order, not
probabilities comparable across devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import polars as pl

from meddevkg_core.baselines import ScorerRun, run_scorer_reordered
from meddevkg_core.block_scores import Stage2Inputs, score_blocks
from meddevkg_core.candidates import admission, block_frame
from meddevkg_core.company_contest import catalogue_lines, contest_order
from meddevkg_core.config import PipelineConfig
from meddevkg_core.fold_models import FoldModels
from meddevkg_core.patent_order import PatentOrder
from meddevkg_core.rerank import feature_frame
from meddevkg_core.reranked_links import uses_contest
from meddevkg_core.text_adapter import Vectors, fused_scores, similarity_of


class PipelineScorer:
    """A `baselines.Scorer` over the pipeline's out-of-fold probabilities."""

    def __init__(self, inputs: Stage2Inputs, models: FoldModels, ce_scores: pl.DataFrame | None,
                 config: PipelineConfig, candidates: pl.DataFrame | None = None):
        """`candidates`: the Stage-2 pool, whose company-matched rows the company contest reads."""
        self._inputs, self._models, self._ce, self._config = inputs, models, ce_scores, config
        self._candidates = candidates

    @property
    def n_patents(self) -> int:
        return len(self._inputs.patent_ids)

    def score_block(self, device_rows: Sequence[int]) -> np.ndarray:
        ids = [self._inputs.device_ids[r] for r in device_rows]
        out = np.zeros((len(ids), self.n_patents), np.float32)
        row_of = {d: i for i, d in enumerate(ids)}
        for scores in score_blocks(self._inputs, self._config.candidates, ids):
            reason, names = admission(scores, self._config.candidates)
            r, c = np.indices(reason.shape).reshape(2, -1)
            frame = feature_frame(block_frame(scores, self._inputs.patent_ids, r, c, reason, names), self._ce)
            prob = np.zeros(frame.height, np.float32)
            device_col = frame["fda_id"].to_numpy()
            for device in scores.device_ids:
                mask = device_col == device
                model, _ = self._models.model_for(device)
                prob[mask] = model.predict(frame.filter(pl.Series(mask)), self._vectors)
            rows = np.fromiter((row_of[d] for d in scores.device_ids), np.int64)
            out[np.repeat(rows, len(self._inputs.patent_ids)), c] = prob
        return out

    @cached_property
    def _vectors(self) -> Vectors:
        return Vectors.of_inputs(self._inputs)

    @cached_property
    def _patent_ids(self) -> np.ndarray:
        return np.asarray(self._inputs.patent_ids, dtype=object)

    @cached_property
    def _contest(self) -> tuple[pl.DataFrame, pl.DataFrame, PatentOrder]:
        """Built once for every block: the pool's company-matched feature rows (the pool features
        read each device's whole pool first), the product lines and the patents' id order."""
        if self._candidates is None:
            raise ValueError("the company contest orders a device's pairs against the pool's: pass the candidates")
        rivals = feature_frame(self._candidates, self._ce).filter(pl.col("is_same_company") == 1)
        return (rivals, catalogue_lines(self._vectors, self._config.rerank.company_contest),
                PatentOrder.of(self._inputs.patent_ids))

    def contest(self, device_ids: list[str], probabilities: np.ndarray) -> np.ndarray:
        """A block of `score_block` with each device's top pairs in their final order (company_contest)."""
        rivals, lines, order = self._contest
        return contest_order(device_ids, self._patent_ids, probabilities, rivals,
                             lambda d: self._models.model_for(d)[0], self._vectors, lines,
                             self._config.rerank.company_contest, order)

    def fuse(self, device_ids: list[str], probabilities: np.ndarray) -> np.ndarray:
        """A block of `score_block` with each device's top pairs in their final order (text_adapter)."""
        vectors, cfg, patent_ids = self._vectors, self._config.rerank.text_adapter, self._patent_ids
        out = probabilities.copy()
        for i, device in enumerate(device_ids):
            adapter = self._models.adapter_for(device)
            if adapter is not None and vectors.has_device(device):
                out[i] = fused_scores(out[i], similarity_of(adapter, vectors, device, patent_ids), cfg)[0]
        return out


def pipeline_runs(inputs: Stage2Inputs, models: FoldModels, ce_scores: pl.DataFrame | None,
                  config: PipelineConfig, gold: pl.DataFrame,
                  candidates: pl.DataFrame | None = None) -> dict[str, ScorerRun]:
    """The pipeline's rankings over every pair: `pipeline` and, with text adapters or the company
    contest (which reads the company-matched rows of `candidates`, the Stage-2 pool),
    `pipeline_probability_order`.

    With either, `pipeline` is each device's final order (R@K, MRR, top pairs) and its curve is
    the probability order's: the share of all pairs a global cut-off keeps needs scores that are
    comparable across devices.
    """
    scorer = PipelineScorer(inputs, models, ce_scores, config, candidates)
    fuse = None
    if config.rerank.text_adapter.enabled:
        fuse = scorer.fuse if models.full_adapter is not None else None
    elif uses_contest(config.rerank):
        fuse = scorer.contest
    by_probability, fused = run_scorer_reordered(scorer, fuse, inputs.device_ids, inputs.patent_ids, gold)
    if fused is None:
        return {"pipeline": by_probability}
    return {"pipeline": fused, "pipeline_probability_order": by_probability}
