"""The scale benchmark's synthetic corpus and its Stage 2 inputs, shared by the tests of Stage 2's modules
(block_scores, candidates, candidate_parts, entity_match) and of the benchmark itself; and the company
resolvers shared by the tests of company_resolver and companies."""

from __future__ import annotations

import dataclasses
from datetime import date

import polars as pl
import pytest

from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.company_resolver import CompanyResolver
from meddevkg_core.config import CandidateConfig, PipelineConfig
from meddevkg_core.synthetic_corpus import SyntheticCorpus, stage2_inputs, synthetic_corpus


@pytest.fixture(scope="module")
def corpus() -> SyntheticCorpus:
    """3,000 patents and 20 devices with the real benchmark's statistics (seed 0), made once per module."""
    return synthetic_corpus(3_000, 20, seed=0)


def synthetic_inputs(corpus: SyntheticCorpus, cfg: CandidateConfig, company: pl.DataFrame | None = None
                     ) -> Stage2Inputs:
    """The corpus's Stage2Inputs under `cfg` (stage2_inputs, MedDevOnto's entity index), with `company`
    in place of the corpus's company matches when given."""
    inputs = stage2_inputs(corpus, PipelineConfig(candidates=cfg))
    return inputs if company is None else dataclasses.replace(inputs, company_matches=company)


@pytest.fixture(scope="module")
def shipped() -> CompanyResolver:
    """The resolver of the shipped company tables."""
    return CompanyResolver.default()


def toy_resolver(aliases: list[tuple[str, str]], deals: list[tuple[str, str, date]]) -> CompanyResolver:
    """A resolver of these aliases and dated deals only, without the shipped tables."""
    return CompanyResolver.from_frames(
        pl.DataFrame(aliases, schema=["alias", "canonical"], orient="row"),
        pl.DataFrame(deals, schema=["acquirer", "acquired", "close_date"], orient="row"),
    )
