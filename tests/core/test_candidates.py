import itertools
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.candidates import admission, generate_candidates
from meddevkg_core.config import Admission, CandidateConfig
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from meddevkg_core.ontology import Ontology, normalize_term

ONTO = Ontology.from_frames(
    pl.DataFrame({
        "concept_id": ["C_DEV", "C_STENT", "C_DES", "C_BMS", "C_CATH", "C_PCI", "C_ELEC", "C_MAT", "C_NIT"],
        "preferred_name": ["medical device", "stent", "drug-eluting stent", "bare-metal stent", "catheter",
                           "percutaneous coronary intervention", "electrode", "material", "nitinol"],
        "tui": ["T074", "T074", "T074", "T074", "T074", "T061", "T074", "T122", "T122"],
        "category": ["DEVICE_TYPE", "DEVICE_TYPE", "DEVICE_TYPE", "DEVICE_TYPE", "DEVICE_TYPE", "PROCESS", "SENSOR",
                     "SUBSTANCE", "SUBSTANCE"],
        "weight": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8, 0.5, 0.5],
        "is_anchor": [False, True, False, False, True, True, True, False, False],
        "source": ["test"] * 9,
    }),
    pl.DataFrame({"term": ["DES", "PCI", "PTCA", "nitinol alloy"],
                  "concept_id": ["C_DES", "C_PCI", "C_PCI", "C_NIT"]}),
    pl.DataFrame({"concept_id": ["C_STENT", "C_DES", "C_BMS", "C_CATH", "C_NIT"],
                  "parent_id": ["C_DEV", "C_STENT", "C_STENT", "C_DEV", "C_MAT"]}),
)


def mention(doc, norm, concept):
    return {"doc_id": doc, "mention": norm, "start": 0, "end": len(norm), "entity_type": "COMPONENT",
            "norm": normalize_term(norm), "concept_id": concept, "map_tier": "exact" if concept else "none",
            "grounding": "exact"}


DEVICE_MENTIONS = schemas.conform(pl.DataFrame([
    mention("D1", "stent", "C_STENT"), mention("D1", "balloon", None),
    mention("D2", "DES", "C_DES"), mention("D2", "nitinol", "C_NIT"),
    mention("D3", "electrode", "C_ELEC"),
    mention("D4", "guidewire", None),
]), schemas.MENTIONS)
PATENT_MENTIONS = schemas.conform(pl.DataFrame([
    mention("p1", "stent", "C_STENT"),  # S with D1
    mention("p2", "drug-eluting stent", "C_DES"),  # A with D2 (DES), B with D1 (parent/child)
    mention("p3", "bare-metal stent", "C_BMS"),  # B with D2 (siblings), B with D1
    mention("p4", "electrode", "C_ELEC"), mention("p4", "nitinol alloy", "C_NIT"),
    mention("p5", "guidewire", None),  # S OTHER_LONG with D4
    mention("p6", "catheter", "C_CATH"),  # sibling of stent under C_DEV
]), schemas.MENTIONS)
PATENT_IDS = ["p1", "p2", "p3", "p4", "p5", "p6", "p7"]


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


def test_each_admission_rule_admits_a_pair_at_its_cut_off_and_the_first_rule_wins():
    cfg = CandidateConfig(admission_threshold=70.0, rescue_vector_points=65, rescue_anchor=True,
                          same_company_min_score=35.0)
    company = np.array([[0, 0, 0, 20, 20, 0]], np.float32)
    vector = np.array([[0, 65, 0, 0, 65, 64]], np.int16)
    entity = np.array([[70, 0, 60, 15, 60, 5.9]], np.float32)
    core = np.array([[False, False, True, False, True, False]])
    scores = SimpleNamespace(company=company, vector=vector, entity=entity, entity_core=core,
                             total=company + vector + entity)
    reason, names = admission(scores, cfg)  # type: ignore[arg-type]
    assert [names[c - 1] if c else None for c in reason[0]] == [
        Admission.THRESHOLD, Admission.RESCUE_VECTOR, Admission.RESCUE_ANCHOR, Admission.SAME_COMPANY,
        Admission.THRESHOLD, None]


def toy_inputs(cfg):
    """Stage2Inputs of five devices and seven patents over the mentions above (D1 ~ p1 by vector)."""
    rng = np.random.default_rng(0)
    dv = rng.normal(size=(5, 8)).astype(np.float32)
    pv = rng.normal(size=(7, 8)).astype(np.float32)
    pv[0] = dv[0] + 0.01  # p1 nearly identical to D1
    dv /= np.linalg.norm(dv, axis=1, keepdims=True)
    pv /= np.linalg.norm(pv, axis=1, keepdims=True)
    company = pl.DataFrame({"fda_id": ["D1", "D3", "D5"], "pat_id": ["p1", "p4", "p7"],
                            "match_kind": ["same"] * 3, "company_path": ["ACME", "ACME", "ACME"]})
    matcher = EntityMatcher(doc_keys(DEVICE_MENTIONS, ONTO, cfg), doc_keys(PATENT_MENTIONS, ONTO, cfg),
                            PATENT_IDS, cfg)
    return Stage2Inputs(["D1", "D2", "D3", "D4", "D5"], dv, PATENT_IDS, pv, company, matcher)


def test_pool_admission_rules_and_columns():
    cfg = CandidateConfig(vector_mode="absolute", device_block_size=2, same_company_min_score=35.0)
    pool = generate_candidates(toy_inputs(cfg), cfg)
    assert pool.schema == schemas.CANDIDATES
    rows = {(r["fda_id"], r["pat_id"]): r for r in pool.iter_rows(named=True)}
    d1p1 = rows[("D1", "p1")]
    assert d1p1["score_total"] == 20 + 65 + 60 and d1p1["admitted_by"] == "threshold"
    assert d1p1["company_path"] == "ACME" and d1p1["shared_terms"] == "stent"
    assert ("D2", "p2") not in rows  # Tier A alone (50) is below 70 and rescues nothing
    # same company with S = 20 + 48 reaches the same-company clause (>= 35)
    assert rows[("D3", "p4")]["admitted_by"] == "same_company"
    assert ("D5", "p7") not in rows  # same company alone (S = 20) is not enough
    for r in pool.iter_rows(named=True):
        assert r["score_total"] == r["score_company"] + r["score_vector"] + r["score_entity"]


def test_a_lone_tier_s_anchor_match_is_rescued_when_the_rescue_is_on():
    cfg = CandidateConfig(vector_mode="absolute", rescue_anchor=True)
    inputs = toy_inputs(cfg)
    far = Stage2Inputs(inputs.device_ids, -inputs.device_vectors, inputs.patent_ids, inputs.patent_vectors,
                       inputs.company_matches.filter(pl.col("fda_id") != "D1"), inputs.entities)
    rows = {(r["fda_id"], r["pat_id"]): r for r in generate_candidates(far, cfg).iter_rows(named=True)}
    assert rows[("D1", "p1")]["score_total"] == 60 and rows[("D1", "p1")]["admitted_by"] == "rescue_anchor"


def test_blocks_do_not_change_the_result():
    big = CandidateConfig(device_block_size=64)
    small = CandidateConfig(device_block_size=1)
    a, b = generate_candidates(toy_inputs(big), big), generate_candidates(toy_inputs(small), small)
    floats = ["sim", "sim_z_device", "sim_z_patent", "lexical", "sibling_sim_margin"]
    assert a.drop(floats).equals(b.drop(floats))
    for col in floats:  # BLAS rounding only
        np.testing.assert_allclose(a[col].to_numpy(), b[col].to_numpy(), atol=1e-5, equal_nan=True)
