"""The entity tiers (S, A, B) of every device-patent pair and their evidence, on hand-made mentions and,
against the implementation before the scale work, on the scale benchmark's synthetic corpus."""

import itertools

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.config import CandidateConfig
from meddevkg_core.entity_match import EntityMatcher, _s_keys, doc_keys
from meddevkg_core.ontology import load_meddevonto
from meddevkg_core.synthetic_corpus import SyntheticCorpus, synthetic_corpus
from tests.core import _stage2_before as before
from tests.core.test_candidates import DEVICE_MENTIONS, ONTO, PATENT_IDS, PATENT_MENTIONS, mention

MEDDEVONTO = load_meddevonto()


def brute_force_entity(dev_ms, pat_ms, cfg):
    """METHOD.md §2.5 written as literally as possible: the max over every pair of mentions."""
    best = 0.0
    for (dn, dc), (pn, pc) in itertools.product(dev_ms, pat_ms):
        if dn == pn:
            best = max(best, cfg.tier_s_points * ONTO.tier_s_category(dn)[1])
        if dc and dc == pc:
            best = max(best, cfg.tier_a_points * ONTO.weight(dc))
        if dc and pc and dc != pc:
            related = ONTO.parents(dc) & ONTO.parents(pc) or (
                cfg.tier_b_parent_child and (dc in ONTO.parents(pc) or pc in ONTO.parents(dc)))
            if related:
                best = max(best, cfg.tier_b_points)
    return best


@pytest.mark.parametrize("parent_child", [True, False])
def test_entity_scores_equal_the_literal_definition(parent_child):
    cfg = CandidateConfig(tier_b_parent_child=parent_child)
    matcher = EntityMatcher(doc_keys(DEVICE_MENTIONS, ONTO, cfg), doc_keys(PATENT_MENTIONS, ONTO, cfg),
                            PATENT_IDS, cfg)
    devices = ["D1", "D2", "D3", "D4", "D5"]
    scores = matcher.score_block(devices)
    for i, d in enumerate(devices):
        dm = DEVICE_MENTIONS.filter(pl.col("doc_id") == d).select("norm", "concept_id").rows()
        for j, p in enumerate(PATENT_IDS):
            pm = PATENT_MENTIONS.filter(pl.col("doc_id") == p).select("norm", "concept_id").rows()
            assert scores.score[i, j] == pytest.approx(brute_force_entity(dm, pm, cfg)), (d, p)


def test_tiers_and_evidence_follow_the_paper():
    cfg = CandidateConfig()
    matcher = EntityMatcher(doc_keys(DEVICE_MENTIONS, ONTO, cfg), doc_keys(PATENT_MENTIONS, ONTO, cfg),
                            PATENT_IDS, cfg)
    scores = matcher.score_block(["D1", "D2", "D3", "D4"])
    assert scores.score[0, 0] == 60 and scores.core[0, 0]  # Tier S anchor
    assert scores.score[1, 1] == 50  # Tier A via the DES abbreviation
    assert scores.score[1, 2] == 20  # Tier B: DES and BMS share the parent stent
    assert scores.score[2, 3] == 48 and not scores.core[2, 3]  # Tier S SENSOR 0.8
    assert scores.score[3, 4] == 30  # Tier S OTHER_LONG 0.5 (guidewire)
    assert scores.score[0, 5] == 20  # stent and catheter are siblings under medical device
    assert matcher.explain("D1", "p1") == ("S", "TierS:stent(DEVICE_TYPE,w=1.0)")
    assert matcher.explain("D2", "p2") == ("A", "TierA:C_DES(DEVICE_TYPE,w=1.0)")
    assert matcher.explain("D2", "p3") == ("B", "TierB:via_C_STENT")
    assert matcher.explain("D1", "p7") == ("none", "")


def _matcher(device_mentions: list[dict], patent_mentions: list[dict], cfg: CandidateConfig) -> EntityMatcher:
    def keys(rows):
        return doc_keys(schemas.conform(pl.DataFrame(rows), schemas.MENTIONS), ONTO, cfg)
    return EntityMatcher(keys(device_mentions), keys(patent_mentions), ["p1"], cfg)


def test_a_tier_b_relation_never_lowers_a_better_match_of_the_same_pair():
    cfg = CandidateConfig()
    # D: DES; p1: DES (Tier A, 50) and bare-metal stent (Tier B with DES via stent, 20)
    matcher = _matcher([mention("D", "DES", "C_DES")],
                       [mention("p1", "drug-eluting stent", "C_DES"), mention("p1", "bare-metal stent", "C_BMS")], cfg)
    assert matcher.score_block(["D"]).score[0, 0] == 50
    assert matcher.explain("D", "p1") == ("A", "TierA:C_DES(DEVICE_TYPE,w=1.0)")


def test_under_a_uniform_weighting_a_pair_is_explained_by_the_match_that_scored_it():
    # uniform_low gives every tier 6 points; the evidence compared the configured Tier-B points (20)
    # with the Tier-A match's 6 and named the Tier-B relation, though the tie goes to Tier A
    cfg = CandidateConfig(entity_weighting="uniform_low")
    matcher = _matcher([mention("D", "DES", "C_DES")],
                       [mention("p1", "drug-eluting stent", "C_DES"), mention("p1", "bare-metal stent", "C_BMS")], cfg)
    assert matcher.score_block(["D"]).score[0, 0] == 6
    assert matcher.explain("D", "p1")[0] == "A"


def test_an_empty_norm_is_no_tier_s_match():
    cfg = CandidateConfig()
    matcher = _matcher([{**mention("D", "x", None), "norm": ""}], [{**mention("p1", "y", None), "norm": ""}], cfg)
    assert matcher.score_block(["D"]).score[0, 0] == 0 and matcher.explain("D", "p1") == ("none", "")


@pytest.mark.parametrize("cfg", [CandidateConfig(), CandidateConfig(entity_weighting="uniform_mid",
                                                                    tier_b_parent_child=False)])
def test_doc_keys_identical_to_before(corpus: SyntheticCorpus, cfg: CandidateConfig) -> None:
    def plain(dk):
        return ({d: {(k.tier, k.key, k.points, k.label, k.core) for k in ks} for d, ks in dk.keys.items()},
                dk.family)

    for mentions in (corpus.patent_mentions, corpus.device_mentions):
        assert plain(before.doc_keys(mentions, MEDDEVONTO, cfg)) == plain(doc_keys(mentions, MEDDEVONTO, cfg))


def test_explain_block_equals_explain_for_every_pair() -> None:
    """explain_block, and explain / shared_terms (now read from the patent matrices), against the
    per-pair implementation before the scale work, which read the patents' key sets."""
    small = synthetic_corpus(400, 12, seed=3, lexical=False)
    for cfg in (CandidateConfig(), CandidateConfig(tier_b_parent_child=False, entity_weighting="uniform_low")):
        dm, pm = small.device_mentions, small.patent_mentions
        matcher = EntityMatcher(doc_keys(dm, MEDDEVONTO, cfg), doc_keys(pm, MEDDEVONTO, cfg), small.patent_ids, cfg)
        old = before.EntityMatcher(before.doc_keys(dm, MEDDEVONTO, cfg), before.doc_keys(pm, MEDDEVONTO, cfg),
                                   small.patent_ids, cfg)
        rng = np.random.default_rng(0)
        rows, cols = np.nonzero(rng.random((12, 400)) < 0.5)  # any pairs, in or out of a pool
        tier, detail, shared = matcher.explain_block(small.device_ids, rows, cols)
        for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
            d, p = small.device_ids[r], small.patent_ids[c]
            assert (tier[i], detail[i]) == old.explain(d, p) == matcher.explain(d, p), (d, p)
            assert shared[i] == "|".join(old.shared_terms(d, p)), (d, p)
            assert matcher.shared_terms(d, p) == old.shared_terms(d, p), (d, p)
        assert set(tier.to_list()) >= {"S", "A", "none"}
        assert matcher.explain(small.device_ids[0], "not a patent") == ("none", "")


def test_tier_s_shortcut_gives_the_ontology_answer(corpus: SyntheticCorpus) -> None:
    norms = pl.concat([corpus.patent_mentions["norm"], corpus.device_mentions["norm"]]).unique().to_list()
    norms += ["guidewire", "scaffold", "a", "delivery catheter", "Stent-Graft", "crohn's", "stent  graft", "x_y",
              "électrode", "valve repair", "zzzz qqqq"]
    keys = _s_keys(pl.Series(norms), MEDDEVONTO, CandidateConfig(), None)
    assert keys["key"].to_list() == norms
    for norm, category, weight in keys.select("key", "category", "weight").iter_rows():
        assert (category, weight) == MEDDEVONTO.tier_s_category(norm), norm


def test_one_doc_keys_for_both_sides_scores_as_before() -> None:
    """text_pair_features indexes devices and patents in one DocKeys and passes it twice."""
    small = synthetic_corpus(400, 12, seed=5, lexical=False)
    both = pl.concat([small.device_mentions, small.patent_mentions])
    cfg = CandidateConfig()
    new = EntityMatcher(*[doc_keys(both, MEDDEVONTO, cfg)] * 2, small.patent_ids, cfg)
    old = before.EntityMatcher(*[before.doc_keys(both, MEDDEVONTO, cfg)] * 2, small.patent_ids, cfg)
    a, b = old.score_block(small.device_ids), new.score_block(small.device_ids)
    for field in ("score", "core", "tier_s", "matches"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.score.max() > 0
    rows, cols = np.nonzero(a.score > 0)
    tier, detail, shared = new.explain_block(small.device_ids, rows, cols)
    for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        assert (tier[i], detail[i]) == old.explain(small.device_ids[r], small.patent_ids[c])
        assert shared[i] == "|".join(old.shared_terms(small.device_ids[r], small.patent_ids[c]))
