"""The pipeline as a ranker: the reranker's probability for every device x patent pair.

Pool pairs get exactly the probability their link row has; pairs outside the pool get the same
model applied to their Stage-2 components (no cross-encoder score: a missing feature), so every
device has a ranking over the whole corpus. Gold devices are scored by the fold model that never
saw them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from meddevkg_core.candidates import Stage2Inputs, admission, block_frame, score_blocks
from meddevkg_core.config import PipelineConfig
from meddevkg_core.rerank import FoldModels, feature_frame


class PipelineScorer:
    """A `baselines.Scorer` over the pipeline's out-of-fold probabilities."""

    def __init__(self, inputs: Stage2Inputs, models: FoldModels, ce_scores: pl.DataFrame | None,
                 config: PipelineConfig):
        self._inputs, self._models, self._ce, self._config = inputs, models, ce_scores, config

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
                prob[mask] = model.predict(frame.filter(pl.Series(mask)))
            rows = np.fromiter((row_of[d] for d in scores.device_ids), np.int64)
            out[np.repeat(rows, len(self._inputs.patent_ids)), c] = prob
        return out
