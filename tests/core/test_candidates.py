"""The admission rules and the Stage-2 pool. The hand-made ontology and mentions here (and toy_inputs) are
also what test_entity_match, test_block_scores and test_siblings score."""

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from meddevkg_core import block_scores, schemas
from meddevkg_core.baselines import TfidfScorer
from meddevkg_core.block_scores import Stage2Inputs, max_devices_per_block
from meddevkg_core.candidates import admission, generate_candidates
from meddevkg_core.config import Admission, CandidateConfig
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from meddevkg_core.ontology import Ontology, load_meddevonto, normalize_term
from meddevkg_core.synthetic_corpus import SyntheticCorpus
from tests.core import _stage2_before as before
from tests.core.conftest import synthetic_inputs

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
    _assert_same_pool(a, b, atol=1e-5)  # the float columns: BLAS rounding only


# Stage 2 on the scale benchmark's synthetic corpus, against the implementation before the scale work

MEDDEVONTO = load_meddevonto()
FLOATS = ["sim", "sim_z_device", "sim_z_patent", "lexical", "sibling_sim_margin"]


def _before_dossiers(new: pl.DataFrame) -> pl.DataFrame:
    """`new` as the implementation before dossiers, siblings and decision years wrote it: without a
    dossier scorer or decision years those columns are NaN (like `lexical` without one), and the old
    frames hold the columns they did not have as null (schemas.conform). The sibling margins are
    checked in test_siblings."""
    assert new["dossier_lexical"].is_nan().all() and new["granted_after_last_decision"].is_nan().all()
    return new.with_columns(pl.lit(None, schemas.CANDIDATES[c]).alias(c) for c in (
        "dossier_lexical", "sibling_sim_margin", "sibling_lexical_margin", "company_device_count",
        "granted_after_last_decision"))


def _assert_same_pool(a: pl.DataFrame, b: pl.DataFrame, atol: float = 0.0) -> None:
    assert a.height == b.height and a.schema == b.schema
    assert a.drop(FLOATS).equals(b.drop(FLOATS))
    for col in FLOATS:
        np.testing.assert_allclose(a[col].to_numpy(), b[col].to_numpy(), rtol=0, atol=atol, equal_nan=True)


def test_one_block_equals_many_blocks(corpus: SyntheticCorpus, monkeypatch: pytest.MonkeyPatch) -> None:
    one = CandidateConfig(device_block_size=20)
    pool = generate_candidates(synthetic_inputs(corpus, one), one)
    assert pool.height > 0
    for size in (1, 3, 7):
        cfg = CandidateConfig(device_block_size=size)
        _assert_same_pool(pool, generate_candidates(synthetic_inputs(corpus, cfg), cfg), atol=1e-5)  # BLAS rounding
    monkeypatch.setattr(block_scores, "MAX_BLOCK_PAIRS", 2 * 3_000)  # the pair budget splits blocks too
    assert max_devices_per_block(one, 3_000) == 2
    _assert_same_pool(pool, generate_candidates(synthetic_inputs(corpus, one), one), atol=1e-5)


@pytest.mark.parametrize("cfg", [
    CandidateConfig(),
    CandidateConfig(entity_weighting="uniform_low", tier_b_parent_child=False, device_block_size=3),
    CandidateConfig(vector_mode="absolute", device_block_size=7),
])
def test_results_identical_to_the_implementation_before_the_scale_work(corpus: SyntheticCorpus,
                                                                       cfg: CandidateConfig) -> None:
    # company matches listed twice with different kinds: the later row must win, as before (as strings,
    # the pipeline's dtype, which the old implementation was written for)
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    company = pl.concat([strings, strings.head(50).with_columns(
        pl.when(pl.col("match_kind") == "same").then(pl.lit("acquired")).otherwise(pl.lit("same"))
        .alias("match_kind"))])
    old_matcher = before.EntityMatcher(before.doc_keys(corpus.device_mentions, MEDDEVONTO, cfg),
                                       before.doc_keys(corpus.patent_mentions, MEDDEVONTO, cfg), corpus.patent_ids,
                                       cfg)
    old_inputs = before.Stage2Inputs(corpus.device_ids, corpus.device_vectors, corpus.patent_ids,
                                     corpus.patent_vectors, company, old_matcher, corpus.lexical)
    old = before.generate_candidates(old_inputs, cfg)
    new = _before_dossiers(generate_candidates(synthetic_inputs(corpus, cfg, company), cfg))
    z = ["sim_z_device", "sim_z_patent"]
    assert old.height > 100 and old.drop(z).equals(new.drop(z))  # every other column bit for bit
    for col in z:  # the moments now go through BLAS instead of a naive einsum: float32 rounding only
        np.testing.assert_allclose(old[col].to_numpy(), new[col].to_numpy(), rtol=1e-5, atol=1e-4)
    # the entity scores of a block, every array
    block = corpus.device_ids[:7]
    a, b = old_matcher.score_block(block), synthetic_inputs(corpus, cfg).entities.score_block(block)
    for field in ("score", "core", "tier_s", "matches"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_patents_in_any_order_give_the_pool_as_before(corpus: SyntheticCorpus) -> None:
    """Columns not in pat_id order: each block's rows are ordered by patent id before it is cut."""
    cfg = CandidateConfig(device_block_size=7)
    perm = np.random.default_rng(1).permutation(len(corpus.patent_ids))
    ids = [corpus.patent_ids[i] for i in perm]
    vectors = corpus.patent_vectors[perm]
    lexical = TfidfScorer(devices=corpus.lexical.devices, patents=corpus.lexical.patents.tocsr()[perm])
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    dm, pm = corpus.device_mentions, corpus.patent_mentions
    old_matcher = before.EntityMatcher(before.doc_keys(dm, MEDDEVONTO, cfg), before.doc_keys(pm, MEDDEVONTO, cfg), ids,
                                       cfg)
    old = before.generate_candidates(before.Stage2Inputs(corpus.device_ids, corpus.device_vectors, ids, vectors,
                                                         strings, old_matcher, lexical), cfg)
    matcher = EntityMatcher(doc_keys(dm, MEDDEVONTO, cfg), doc_keys(pm, MEDDEVONTO, cfg), ids, cfg)
    new = _before_dossiers(generate_candidates(Stage2Inputs(corpus.device_ids, corpus.device_vectors, ids, vectors,
                                                            corpus.company_matches, matcher, lexical), cfg))
    z = ["sim_z_device", "sim_z_patent"]
    assert old.height > 100 and old.drop(z).equals(new.drop(z))
    for col in z:
        np.testing.assert_allclose(old[col].to_numpy(), new[col].to_numpy(), rtol=1e-5, atol=1e-4)


def test_compact_corpus_tables_give_the_same_pool(corpus: SyntheticCorpus) -> None:
    """Categorical company columns and coded mentions are only a storage form: the pool is that of
    the string tables, in one chunk per column."""
    cfg = CandidateConfig(device_block_size=7)
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    assert corpus.patent_mentions.schema == pl.Schema({"doc_id": pl.String, "norm": pl.String,
                                                       "concept_id": pl.String})
    a = generate_candidates(synthetic_inputs(corpus, cfg), cfg)
    b = generate_candidates(synthetic_inputs(corpus, cfg, strings), cfg)
    assert a.height > 100 and a.equals(b)
    assert set(a.n_chunks("all")) == {1}


@pytest.mark.parametrize("twice", [False, True])
def test_devices_in_any_order_or_asked_twice_give_the_pool_as_before(corpus: SyntheticCorpus,
                                                                    twice: bool) -> None:
    """The pool is assembled column by column from the blocks' arrays (devices in id order whatever
    order they are asked in); a device asked for twice goes through the frames, as before."""
    cfg = CandidateConfig(device_block_size=3)
    wanted = [corpus.device_ids[i] for i in np.random.default_rng(2).permutation(len(corpus.device_ids))[:11]]
    if twice:
        wanted += wanted[:2]
    strings = corpus.company_matches.with_columns(pl.col("match_kind", "company_path").cast(pl.String))
    dm, pm = corpus.device_mentions, corpus.patent_mentions
    old_matcher = before.EntityMatcher(before.doc_keys(dm, MEDDEVONTO, cfg), before.doc_keys(pm, MEDDEVONTO, cfg),
                                       corpus.patent_ids, cfg)
    old = before.generate_candidates(before.Stage2Inputs(corpus.device_ids, corpus.device_vectors, corpus.patent_ids,
                                                         corpus.patent_vectors, strings, old_matcher, corpus.lexical),
                                     cfg, wanted)
    new = generate_candidates(synthetic_inputs(corpus, cfg), cfg, wanted)
    assert old.height > 100 and set(new.n_chunks("all")) == {1}
    new = _before_dossiers(new)
    # a device asked for twice lands in other blocks than in one pass: BLAS rounding of the cosine only
    _assert_same_pool(old, new, atol=1e-4)
