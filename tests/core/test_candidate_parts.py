"""The pool's compact parts: both ways CandidateParts makes the pool give the same frame."""

from __future__ import annotations

import polars as pl

from meddevkg_core import candidate_parts, candidates, schemas
from meddevkg_core.config import CandidateConfig
from meddevkg_core.synthetic_corpus import SyntheticCorpus
from tests.core.conftest import synthetic_inputs


def test_pool_from_arrays_equals_pool_from_frames(corpus: SyntheticCorpus) -> None:
    """The two ways CandidateParts makes the pool (columns straight from the blocks' arrays; block
    frames cut by device and stacked, the way before) give the same frame, bit for bit."""
    cfg = CandidateConfig(device_block_size=7)
    inputs = synthetic_inputs(corpus, cfg)
    direct = candidates.collect_candidates(inputs, cfg).to_frame()
    again = candidates.collect_candidates(inputs, cfg)
    assert all(isinstance(e, candidate_parts.BlockPart) for e in again._entries)
    assert direct.height > 100 and direct.equals(again._by_frames(again._entries))
    assert direct.schema == pl.Schema(schemas.CANDIDATES) and direct["company_path"].null_count() > 0
