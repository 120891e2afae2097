"""`meddevkg bench-extract`: the figures of issue 4, on hand-made mentions and on the demo corpus."""

import hashlib
import json
import re

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.config import CandidateConfig
from meddevkg_core.demo import demo_corpus_dir
from meddevkg_core.entity_match import doc_keys
from meddevkg_core.errors import CorpusError
from meddevkg_core.extraction_benchmark import (
    coverage_shares,
    distinct_norm_tiers,
    llm_entity_recall,
    pair_summary,
    read_llm_entities,
    sample_random_pairs,
    score_pairs,
)
from meddevkg_core.ontology import load_meddevonto
from meddevkg_dagster.cli import main

CFG = CandidateConfig()


@pytest.fixture(scope="module")
def onto():
    return load_meddevonto()


def _mentions(rows: list[tuple[str, str, str | None, str]]) -> pl.DataFrame:
    """(doc_id, norm, concept_id, map_tier) rows as a schemas.MENTIONS frame."""
    return schemas.conform(pl.DataFrame(
        [{"doc_id": d, "mention": n, "start": 0, "end": len(n), "entity_type": "COMPONENT", "norm": n,
          "concept_id": c, "map_tier": t, "grounding": "exact"} for d, n, c, t in rows],
        schema=schemas.MENTIONS), schemas.MENTIONS)


def _sibling_pair(onto) -> tuple[str, str]:
    """Two different concepts under one parent (a Tier-B pair), found in whatever the ontology holds."""
    for parent in sorted(onto.concepts["concept_id"].to_list()):
        children = sorted(onto.children(parent))
        for i, a in enumerate(children):
            for b in children[i + 1:]:
                if onto.parents(a) & onto.parents(b) == {parent} and a not in onto.parents(b) \
                        and b not in onto.parents(a):
                    return a, b  # exactly one shared parent: one Tier-B family
    pytest.skip("the ontology has no parent with two children")


# ------------------------------------------------------------------ pairs, on hand-made mentions


def test_gold_and_random_match_shares_and_overlaps_on_a_toy_case(onto):
    stent = onto.lookup("stent")
    a, b = _sibling_pair(onto)
    devices = _mentions([("D1", "stent", stent, "exact"), ("D2", "zzqx widget", None, "none"),
                         ("D3", "sib one", a, "head_noun")])
    patents = _mentions([("P1", "stent", stent, "exact"), ("P2", "qqzx gadget", None, "none"),
                         ("P3", "sib two", b, "head_noun")])
    dk, pk = doc_keys(devices, onto, CFG), doc_keys(patents, onto, CFG)
    gold = pl.DataFrame({"fda_id": ["D1", "D2", "D3"], "pat_id": ["P1", "P2", "P3"]})
    scored = score_pairs(gold, dk, pk, ["P1", "P2", "P3"], CFG).sort("fda_id")

    _, s_weight = onto.tier_s_category("stent")
    stent_points = CFG.tier_s_points * s_weight + CFG.tier_a_points * onto.weight(stent)
    assert scored["tier_match"].to_list() == [True, False, True]
    assert scored["weighted_overlap"].to_list() == pytest.approx([stent_points, 0.0, CFG.tier_b_points])
    assert scored["s_entity"].to_list() == pytest.approx(
        [max(CFG.tier_s_points * s_weight, CFG.tier_a_points * onto.weight(stent)), 0.0, CFG.tier_b_points])
    assert scored["best_tier"].to_list()[1:] == ["none", "B"]

    summary = pair_summary(scored, "gold")
    assert summary["gold_tier_match_share"] == pytest.approx(2 / 3)
    assert summary["gold_tier_s_share"] == pytest.approx(1 / 3)
    assert summary["gold_weighted_overlap_mean"] == pytest.approx((stent_points + CFG.tier_b_points) / 3)
    assert summary["n_gold_pairs"] == 3


def test_the_same_single_concept_on_both_sides_is_not_a_tier_b_match(onto):
    a, _ = _sibling_pair(onto)
    devices = _mentions([("D1", "one name", a, "head_noun")])
    patents = _mentions([("P1", "another name", a, "head_noun")])
    scored = score_pairs(pl.DataFrame({"fda_id": ["D1"], "pat_id": ["P1"]}),
                         doc_keys(devices, onto, CFG), doc_keys(patents, onto, CFG), ["P1"], CFG)
    # Tier A only: the shared concept, not again as a family of one concept.
    assert scored["weighted_overlap"].to_list() == pytest.approx([CFG.tier_a_points * onto.weight(a)])
    assert scored["best_tier"].to_list() == ["A"]


def test_random_pairs_are_seeded_non_gold_and_per_device():
    gold = pl.DataFrame({"fda_id": ["D1", "D1", "D2"], "pat_id": ["P1", "P2", "P3"]})
    patents = [f"P{i}" for i in range(1, 11)]
    pairs = sample_random_pairs(gold, patents, 4, seed=7)
    assert pairs.equals(sample_random_pairs(gold, patents, 4, seed=7))
    assert pairs.group_by("fda_id").len().sort("fda_id")["len"].to_list() == [4, 4]
    assert pairs.join(gold, on=["fda_id", "pat_id"], how="semi").height == 0
    assert pairs.unique().height == pairs.height
    assert sample_random_pairs(gold, patents, 50, seed=7).group_by("fda_id").len().sort("fda_id")["len"].to_list() \
        == [8, 9]  # every non-gold patent when fewer than asked


def test_coverage_by_mention_and_by_distinct_norm():
    m = _mentions([("A", "stent", "C1", "exact"), ("B", "stent", "C1", "exact"),
                   ("A", "stent thing", "C1", "head_noun"), ("A", "widget", None, "none")])
    assert coverage_shares(m) == pytest.approx({"exact": 0.5, "head_noun": 0.25, "none": 0.25})
    third = 1 / 3
    distinct = coverage_shares(distinct_norm_tiers(m))
    assert distinct == pytest.approx({"exact": third, "head_noun": third, "none": third})
    assert coverage_shares(m.head(0)) == {"exact": None, "head_noun": None, "none": None}


def test_llm_recall_counts_each_document_name_once_by_string_and_by_concept(onto):
    stent, balloon = onto.lookup("stent"), onto.lookup("balloon")
    devices = _mentions([("D1", "stent", stent, "exact")])
    patents = _mentions([("P1", "coronary stent thing", stent, "head_noun"), ("P2", "balloon", balloon, "exact")])
    gold = pl.DataFrame({"fda_id": ["D1", "D1"], "pat_id": ["P1", "P2"]})
    llm = pl.DataFrame({"fda_id": ["D1", "D1", "D9"], "pat_id": ["P1", "P2", "P1"],
                        "ent_names_d": ["Stent|||balloon", "Stent|||balloon", "stent"],
                        "ent_names_p": ["stent", "balloon|||zzqx", "stent"]})
    r = llm_entity_recall(llm, gold, devices, patents, onto)
    assert r["llm_pairs"] == 2  # (D9, P1) is not a gold pair
    assert (r["n_llm_strings_devices"], r["n_llm_strings_patents"]) == (2, 3)
    # devices: stent hit, balloon miss; patents: P1 "stent" misses by string but hits by concept,
    # P2 "balloon" hits both ways, "zzqx" maps to nothing.
    assert r["llm_entity_recall_devices"] == pytest.approx(1 / 2)
    assert r["llm_entity_recall_patents"] == pytest.approx(1 / 3)
    assert r["llm_entity_recall"] == pytest.approx(2 / 5)
    assert r["llm_concept_recall"] == pytest.approx(3 / 5)
    assert r["llm_strings_mapped_share"] == pytest.approx(4 / 5)


# ------------------------------------------------------------------ the CLI on the demo corpus

REQUIRED = ("docs_per_second", "device_docs_per_second", "n_patents", "n_devices", "coverage", "coverage_distinct",
            "gold_tier_match_share", "random_tier_match_share", "gold_weighted_overlap_mean",
            "random_weighted_overlap_mean", "gold_s_entity_mean", "random_s_entity_mean", "llm_entity_recall",
            "llm_concept_recall")
SHARES = ("gold_tier_match_share", "random_tier_match_share", "gold_tier_s_share", "random_tier_s_share",
          "coverage_mapped", "coverage_distinct_mapped", "llm_entity_recall", "llm_concept_recall",
          "llm_entity_recall_devices", "llm_entity_recall_patents", "llm_strings_mapped_share")
PAIR_KEYS = ("n_{}_pairs", "{}_tier_match_share", "{}_tier_s_share", "{}_weighted_overlap_mean", "{}_s_entity_mean",
             "{}_best_tier_shares")
SPACY_KEYS = (
    "n_patents", "n_devices", "docs_per_second", "docs_per_second_n_process", "docs_per_second_by_n_process",
    "patent_extraction_seconds_by_n_process", "timing_runs", "parallel_mentions_identical", "device_docs_per_second",
    "device_extraction_seconds", "n_mentions_patents", "n_mentions_devices", "n_rejected_patents",
    "n_rejected_devices", "coverage", "coverage_mapped", "coverage_patents", "coverage_devices", "n_distinct_norms",
    "coverage_distinct", "coverage_distinct_mapped", "n_gold_devices", "random_pairs_per_device", "seed",
    *(k.format("gold") for k in PAIR_KEYS), *(k.format("random") for k in PAIR_KEYS), "weighted_overlap_definition",
    "llm_pairs", "n_llm_strings", "n_llm_strings_devices", "n_llm_strings_patents", "llm_entity_recall",
    "llm_entity_recall_devices", "llm_entity_recall_patents", "llm_concept_recall", "llm_concept_recall_devices",
    "llm_concept_recall_patents", "llm_strings_mapped_share", "inputs")
"""spaCy's report, key by key in its order: what the LLM extractor's measurement added must leave it as it was."""
SPACY_SUMMARY = ("extraction benchmark: ", "  throughput (patents)      ", "  throughput (devices)      ",
                 "  mentions                  ", "  coverage (mentions)       ", "  coverage (distinct norms) ",
                 "  tier S/A/B match share    ", "  weighted overlap mean     ", "  S_entity mean (max)       ",
                 "  LLM entity recall         ")


def test_bench_extract_cli_prints_a_summary_and_last_a_json_line(tmp_path, capsys):
    gold = pl.read_csv(demo_corpus_dir() / "gold_links.csv", infer_schema=False).select("fda_id", "pat_id")
    llm = gold.with_columns(pl.lit("stent|||catheter|||percutaneous coronary intervention").alias("ent_names_d"),
                            pl.lit("stent|||balloon").alias("ent_names_p"))
    llm.write_parquet(tmp_path / "llm.parquet")

    assert main(["bench-extract", "--corpus", str(demo_corpus_dir()), "--llm-entities", str(tmp_path / "llm.parquet"),
                 "--runs", "1", "--n-process", "1", "--random-pairs", "5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("weighted overlap" in line for line in lines[:-1])
    r = json.loads(lines[-1])

    assert set(REQUIRED) <= set(r) and tuple(r) == SPACY_KEYS
    assert len(lines) == len(SPACY_SUMMARY) + 1 and all(map(str.startswith, lines, SPACY_SUMMARY))
    assert re.fullmatch(r" +throughput \(patents\) +[\d.]+ docs/s best \(n_process=1: [\d.]+/s; median of 1 "
                        r"run\(s\)\); target >= 400", lines[1])
    assert r["docs_per_second"] > 0 and r["docs_per_second_by_n_process"].keys() == {"1"}
    assert r["n_patents"] == 420 and r["n_gold_pairs"] == gold.unique().height
    assert r["n_random_pairs"] == 5 * r["n_gold_devices"]
    for cov in (r["coverage"], r["coverage_distinct"], r["coverage_patents"], r["coverage_devices"]):
        assert cov.keys() == {"exact", "head_noun", "none"}
        assert all(0 <= v <= 1 for v in cov.values()) and sum(cov.values()) == pytest.approx(1)
    for key in SHARES:
        assert 0 <= r[key] <= 1, key
    assert r["llm_pairs"] == gold.unique().height
    assert r["gold_tier_match_share"] > r["random_tier_match_share"]
    assert r["gold_weighted_overlap_mean"] >= r["gold_s_entity_mean"] >= 0
    # the files measured, with their bytes' digest (lineage), as a benchmark's report.json records them
    read = {"devices": "devices.jsonl", "patents": "patents.csv", "gold_links": "gold_links.csv",
            "labeled_pairs": "labeled_pairs.csv"}
    files = {name: demo_corpus_dir() / file for name, file in read.items()}
    files["llm_entities"] = tmp_path / "llm.parquet"
    assert r["inputs"] == {name: {"path": str(path.resolve()), "size": path.stat().st_size,
                                  "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
                           for name, path in files.items()}


def test_llm_entity_ids_are_trimmed_as_the_corpus_trims_them(tmp_path, onto):
    (tmp_path / "llm.csv").write_text("fda_id,pat_id,ent_names_d,ent_names_p\nD1 , P1,stent,stent\n")
    llm = read_llm_entities(tmp_path / "llm.csv")
    assert llm.select("fda_id", "pat_id").row(0) == ("D1", "P1")
    gold = pl.DataFrame({"fda_id": ["D1"], "pat_id": ["P1"]})
    stent = onto.lookup("stent")
    r = llm_entity_recall(llm, gold, _mentions([("D1", "stent", stent, "exact")]),
                          _mentions([("P1", "stent", stent, "exact")]), onto)
    assert (r["llm_pairs"], r["llm_entity_recall"]) == (1, 1.0)


def test_an_llm_entity_file_with_a_record_that_cannot_be_read_as_written_is_refused_naming_it(tmp_path):
    (tmp_path / "llm.csv").write_text("fda_id,pat_id,ent_names_d,ent_names_p\nD0,P0,lead,lead\n"
                                      "D1,P1,stent,stent,catheter\nD2,P2,valve,valve\n")
    with pytest.raises(CorpusError, match=r"llm\.csv: 1 record.*\(row 2: line 3: 5 fields where the header has 4\)"):
        read_llm_entities(tmp_path / "llm.csv")
