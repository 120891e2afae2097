"""The reranker's training population: the pool of gold devices plus a sample from outside it.

The paper trains Stage 3 on pool pairs only. That is enough to filter the pool, but the
benchmark ranks every device x patent pair with the same model, and a model that never saw an
out-of-pool pair ranks those pairs by extrapolation (gold missed by Stage 2 then sinks below
thousands of easy negatives). So the training set also holds every out-of-pool gold pair and a
seeded share of out-of-pool negatives of the same gold devices. `in_pool` marks which rows the
link cut-off may be chosen on: links are only ever drawn from the pool.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from meddevkg_core import schemas
from meddevkg_core.block_scores import Stage2Inputs, score_blocks
from meddevkg_core.candidates import admission, block_frame
from meddevkg_core.config import PipelineConfig
from meddevkg_core.rerank import feature_frame

_KEYS = ["fda_id", "pat_id"]


def outside_pool_pairs(inputs: Stage2Inputs, pool: pl.DataFrame, gold: pl.DataFrame,
                       config: PipelineConfig) -> pl.DataFrame:
    """Out-of-pool pairs of gold devices: every gold pair, and negatives kept with a seeded hash."""
    rate = config.rerank.outside_pool_negative_rate
    devices = sorted(set(gold["fda_id"].unique().to_list()) & set(inputs.device_ids))
    if not devices:
        return schemas.empty(schemas.CANDIDATES)
    cut = int(round(rate * 2**32))
    frames = []
    for scores in score_blocks(inputs, config.candidates, devices):
        reason, names = admission(scores, config.candidates)
        rows, cols = np.nonzero(reason == 0)
        block = block_frame(scores, inputs.patent_ids, rows, cols, reason, names)
        keep = (block.select(pl.concat_str(_KEYS, separator="|").hash(config.rerank.seed) % 2**32)
                .to_series().to_numpy() < cut)
        is_gold = block.select(pl.struct(_KEYS).is_in(gold.select(pl.struct(_KEYS)).to_series().implode()))
        frames.append(block.filter(pl.Series(keep) | is_gold.to_series()))
    return pl.concat(frames).join(pool.select(_KEYS), on=_KEYS, how="anti")


def training_pairs(inputs: Stage2Inputs | None, pool: pl.DataFrame, ce_scores: pl.DataFrame | None,
                   gold: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    """Feature rows of gold devices with `in_pool`; the outside sample only when configured.

    `inputs` (the Stage-2 index) is only read for the outside sample; callers that have not built
    it may pass None when `outside_pool_negative_rate` is 0.

    Out-of-pool rows carry no cross-encoder score (it is only computed on the pool): a missing
    feature XGBoost already handles.
    """
    gold_devices = gold["fda_id"].unique().implode()
    inside = feature_frame(pool.filter(pl.col("fda_id").is_in(gold_devices)), ce_scores)
    frames = [schemas.conform(inside.with_columns(pl.lit(True).alias("in_pool")), schemas.TRAINING_PAIRS)]
    if config.rerank.outside_pool_negative_rate > 0 and gold.height:
        if inputs is None:
            raise ValueError("an out-of-pool training sample needs the Stage-2 inputs")
        outside = outside_pool_pairs(inputs, pool, gold, config)
        if outside.height:
            outside = feature_frame(outside, None).with_columns(pl.lit(False).alias("in_pool"))
            frames.append(schemas.conform(outside, schemas.TRAINING_PAIRS))
    return pl.concat(frames).sort("fda_id", "pat_id")
