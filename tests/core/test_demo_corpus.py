"""The bundled demo corpus: plain-polars checks of its files, of every signal it must exercise, and of
the generator's determinism. Deliberately independent of the project's corpus reader."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import sys
from datetime import date
from pathlib import Path

import polars as pl
import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "meddevkg_core" / "data" / "demo"
SCRIPT = REPO / "scripts" / "build_demo_corpus.py"
FILES = ("devices.jsonl", "patents.csv", "gold_links.csv", "labeled_pairs.csv", "acquisitions.csv", "README.md")
ANCHORS = ("stent", "catheter", "valve", "pacemaker", "defibrillator", "lead", "electrode", "balloon", "occluder",
           "graft")
SUFFIXES = {"INC", "INCORPORATED", "CORP", "CORPORATION", "LLC", "LTD", "LIMITED", "GMBH", "AG", "CO", "COMPANY",
            "SA", "BV", "PLC", "LP"}


def canonical(name: str) -> str:
    """Independent re-implementation of the README rule: upper, & -> AND, no punctuation, no legal suffix."""
    tokens = re.sub(r"[^\w\s]", "", name.upper().replace("&", " AND ")).split()
    while len(tokens) > 1 and tokens[-1] in SUFFIXES:
        tokens.pop()
    return " ".join(tokens)


def companies(assignee: str) -> set[str]:
    return {canonical(part) for part in assignee.split("; ") if part.strip()}


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower().replace("-", " "))


def has_term(text: str, term: str) -> bool:
    return re.search(rf"\b{re.escape(norm(term))}s?\b", norm(text)) is not None


def tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b)


# ---- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device_records() -> list[dict]:
    return [json.loads(line) for line in (DEMO / "devices.jsonl").read_text(encoding="utf-8").splitlines() if line]


@pytest.fixture(scope="module")
def devices(device_records) -> pl.DataFrame:
    """Valid devices only (the malformed record without `text` is left out)."""
    df = pl.DataFrame([r for r in device_records if r.get("text")], infer_schema_length=None)
    return df.with_columns(pl.col("decision_date").str.to_date("%Y-%m-%d"))


@pytest.fixture(scope="module")
def raw_patents() -> pl.DataFrame:
    return pl.read_csv(DEMO / "patents.csv", infer_schema=False)


@pytest.fixture(scope="module")
def patents(raw_patents) -> pl.DataFrame:
    """Valid patents only, with `text` = title + " " + abstract and parsed dates."""
    df = raw_patents.with_columns(pl.col("grant_date").str.to_date("%Y-%m-%d", strict=False).alias("granted"),
                                  pl.col("filing_date").str.to_date("%Y-%m-%d", strict=False).alias("filed"))
    return df.filter(pl.col("pat_id").is_not_null() & pl.col("granted").is_not_null()).with_columns(
        pl.concat_str([pl.col("title"), pl.col("abstract")], separator=" ").alias("text"))


@pytest.fixture(scope="module")
def gold() -> pl.DataFrame:
    return pl.read_csv(DEMO / "gold_links.csv", infer_schema=False)


@pytest.fixture(scope="module")
def labeled() -> pl.DataFrame:
    return pl.read_csv(DEMO / "labeled_pairs.csv", infer_schema=False)


@pytest.fixture(scope="module")
def acquisitions() -> pl.DataFrame:
    return pl.read_csv(DEMO / "acquisitions.csv", infer_schema=False)


@pytest.fixture(scope="module")
def pairs(gold, devices, patents) -> list[dict]:
    """Gold pairs joined to both texts, companies and dates."""
    joined = gold.join(devices.select("fda_id", pl.col("text").alias("d_text"), "applicant", "decision_date"),
                       on="fda_id").join(patents.select("pat_id", pl.col("text").alias("p_text"), "assignee"),
                                         on="pat_id")
    return joined.to_dicts()


def load_generator():
    spec = importlib.util.spec_from_file_location("build_demo_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    previous, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in scripts/
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = previous
    return module


# ---- files, counts, ids, formats ----------------------------------------------------------------


def test_all_files_are_shipped():
    assert [f for f in FILES if not (DEMO / f).is_file()] == []


def test_column_names(device_records, raw_patents, gold, labeled, acquisitions):
    expected_device_keys = {"fda_id", "applicant", "trade_name", "generic_name", "product_code", "decision_date",
                            "text"}
    assert all(set(r) <= expected_device_keys for r in device_records)
    assert raw_patents.columns == ["pat_id", "title", "abstract", "assignee", "grant_date", "filing_date", "cpc_codes"]
    assert gold.columns == ["fda_id", "pat_id"]
    assert labeled.columns == ["fda_id", "pat_id", "label"]
    assert acquisitions.columns == ["acquirer", "acquired", "close_date", "source"]


def test_counts_in_stated_ranges(device_records, devices, raw_patents, gold, labeled):
    assert 28 <= len(device_records) <= 32
    assert 400 <= raw_patents.height <= 450
    assert 130 <= gold.height <= 170
    per_device = gold.group_by("fda_id").len()
    assert 20 <= per_device.height <= 24
    assert per_device["len"].min() >= 3 and per_device["len"].max() <= 12
    negatives = labeled.filter(pl.col("label") == "0").height
    assert 1.5 * gold.height <= negatives <= 2.5 * gold.height


def test_ids_unique_and_well_formed(device_records, raw_patents):
    fda_ids = [r["fda_id"] for r in device_records]
    assert len(fda_ids) == len(set(fda_ids))
    assert all(re.fullmatch(r"P\d{6}", f) for f in fda_ids)
    pat_ids = raw_patents["pat_id"].drop_nulls().to_list()
    assert len(pat_ids) == len(set(pat_ids))
    assert all(re.fullmatch(r"95\d{5,6}", p) for p in pat_ids)


def test_dates_and_cpc_codes(devices, patents):
    assert devices["decision_date"].null_count() == 0
    assert patents["filed"].null_count() == 0
    assert (patents["filed"] < patents["granted"]).all()
    codes = [c for s in patents["cpc_codes"].to_list() for c in s.split(" ")]
    assert all(re.fullmatch(r"[A-H]\d{2}[A-Z]\d{1,4}/\d{2,6}", c) for c in codes), codes[:5]


def test_text_lengths(devices, patents):
    lengths = devices["text"].str.len_chars()
    assert lengths.min() >= 150 and lengths.max() <= 1200
    assert lengths.max() >= 1000  # the length range is actually used
    lengths = patents["text"].str.len_chars()
    assert lengths.min() >= 300 and lengths.max() <= 1100


def test_malformed_rows_are_exactly_the_documented_ones(device_records, raw_patents):
    assert raw_patents.filter(pl.col("pat_id").is_null() | (pl.col("pat_id").str.strip_chars() == "")).height == 1
    bad_dates = raw_patents.filter(pl.col("grant_date").str.to_date("%Y-%m-%d", strict=False).is_null())
    assert bad_dates["grant_date"].to_list() == ["2019-13-45"]
    assert [r["fda_id"] for r in device_records if "text" not in r] == ["P909030"]
    assert all(r.get("text") for r in device_records if "text" in r)
    readme = (DEMO / "README.md").read_text(encoding="utf-8")
    assert "2019-13-45" in readme and "pat_id empty" in readme and "P909030" in readme


def test_gold_and_labels_reference_valid_ids(gold, labeled, devices, patents):
    valid_devices = set(devices["fda_id"])
    valid_patents = set(patents["pat_id"])
    for df in (gold, labeled):
        assert set(df["fda_id"]) <= valid_devices
        assert set(df["pat_id"]) <= valid_patents
        assert df.select("fda_id", "pat_id").is_duplicated().sum() == 0
    assert set(labeled["label"]) == {"0", "1"}
    positives = labeled.filter(pl.col("label") == "1").select("fda_id", "pat_id")
    assert sorted(positives.rows()) == sorted(gold.rows())


# ---- the signals -----------------------------------------------------------------------------


def test_company_spellings_vary_but_normalise(devices, patents, pairs):
    same = [p for p in pairs if canonical(p["applicant"]) in companies(p["assignee"])]
    assert len(same) >= 0.8 * len(pairs)
    assert any(p["applicant"] != p["assignee"] for p in same)  # a raw string match is not enough
    helix = {a for a in patents["assignee"] if "HELIX" in a.upper() and "; " not in a}
    assert len(helix) >= 2 and {canonical(a) for a in helix} == {"HELIX VASCULAR"}
    assert canonical("Corvessa Heart & Vascular, Inc.") == "CORVESSA HEART AND VASCULAR"
    assert any("&" in a for a in patents["assignee"])


def test_joint_assignees(patents, gold):
    joint = patents.filter(pl.col("assignee").str.contains("; ", literal=True))
    assert joint.height >= 2
    assert set(joint["pat_id"]) & set(gold["pat_id"])


def test_acquisition_signal(acquisitions, devices, pairs):
    row = acquisitions.row(0, named=True)
    assert (row["acquirer"], row["acquired"]) == ("MERIDIAN CARDIAC", "PULSEWAVE MEDICAL")
    assert row["source"] == "demo corpus (fictional)"
    close = date.fromisoformat(row["close_date"])
    across = [p for p in pairs if canonical(p["applicant"]) == row["acquirer"] and p["decision_date"] > close
              and companies(p["assignee"]) == {row["acquired"]}]
    assert len(across) >= 3
    acquired_before = devices.filter(pl.col("applicant").map_elements(canonical, return_dtype=pl.String)
                                     == row["acquired"])
    assert (acquired_before["decision_date"] < close).any()
    acquirer_before = devices.filter((pl.col("applicant").map_elements(canonical, return_dtype=pl.String)
                                      == row["acquirer"]) & (pl.col("decision_date") < close))
    assert acquirer_before.height >= 1  # the acquisition must not apply to this one


def test_every_anchor_term_is_shared_by_some_gold_pair(pairs):
    missing = [t for t in ANCHORS if not any(has_term(p["d_text"], t) and has_term(p["p_text"], t) for p in pairs)]
    assert missing == []


@pytest.mark.parametrize("long, head", [("bi-directional steerable ablation catheter", "catheter"),
                                        ("balloon-expandable cobalt chromium stent", "stent")])
def test_head_noun_matches(pairs, long, head):
    assert any(has_term(p["p_text"], long) and has_term(p["d_text"], head) and not has_term(p["d_text"], long)
               for p in pairs)


@pytest.mark.parametrize("abbr, expansion", [("ICD", "implantable cardioverter defibrillator"),
                                             ("TAVR", "transcatheter aortic valve replacement"),
                                             ("PTCA", "percutaneous transluminal coronary angioplasty"),
                                             ("PTA", "percutaneous transluminal angioplasty")])
def test_synonym_and_abbreviation_matches(pairs, abbr, expansion):
    def only(text: str, present: str, absent: str) -> bool:
        return has_term(text, present) and not has_term(text, absent)

    assert any((only(p["d_text"], abbr, expansion) and only(p["p_text"], expansion, abbr))
               or (only(p["d_text"], expansion, abbr) and only(p["p_text"], abbr, expansion)) for p in pairs)


def test_near_duplicate_continuations(patents, gold):
    rows = patents.select("pat_id", "text", "assignee").rows()
    toks = {pid: tokens(text) for pid, text, _ in rows}
    owner = {pid: frozenset(companies(a)) for pid, _, a in rows}
    near = [(a, b) for a, b in itertools.combinations(toks, 2) if jaccard(toks[a], toks[b]) >= 0.8]
    assert len(near) >= 3
    assert all(owner[a] == owner[b] for a, b in near)  # only continuation families are near-duplicates
    gold_of = gold.group_by("pat_id").agg("fda_id").rows()
    gold_map = {pid: set(fids) for pid, fids in gold_of}
    assert any(gold_map.get(a, set()) & gold_map.get(b, set()) for a, b in near)  # both gold for one device
    assert any(a not in gold_map and b not in gold_map for a, b in near)  # and among distractors


def test_devices_without_gold(devices, gold, patents):
    without = devices.filter(~pl.col("fda_id").is_in(gold["fda_id"].implode()))
    assert without.height >= 5
    assignee_keys = {k for a in patents["assignee"] for k in companies(a)}
    no_patents = without.filter(~pl.col("applicant").map_elements(canonical, return_dtype=pl.String)
                                .is_in(list(assignee_keys)))
    assert no_patents.height >= 5


def test_distractors(devices, patents, gold, pairs):
    non_gold = patents.filter(~pl.col("pat_id").is_in(gold["pat_id"].implode()))
    assert non_gold.height >= 200
    non_gold_keys = [companies(a) for a in non_gold["assignee"]]
    gold_companies = {canonical(p["applicant"]) for p in pairs}
    # same company, other device family
    assert all(any(c in keys for keys in non_gold_keys) for c in gold_companies)
    # other companies on the same family: a non-gold patent of another company shares a CPC group
    cpc = dict(zip(patents["pat_id"], (set(s.split(" ")) for s in patents["cpc_codes"]), strict=True))
    other = dict(zip(non_gold["pat_id"], non_gold_keys, strict=True))
    for fda_id in gold["fda_id"].unique():
        applicant = canonical(devices.filter(pl.col("fda_id") == fda_id)["applicant"][0])
        codes = set().union(*(cpc[p] for p in gold.filter(pl.col("fda_id") == fda_id)["pat_id"]))
        assert any(applicant not in keys and cpc[pid] & codes for pid, keys in other.items()), fda_id
    # not cardiovascular at all
    def count(prefixes: tuple[str, ...]) -> int:
        return sum(any(c.startswith(prefixes) for c in s.split(" ")) for s in patents["cpc_codes"])

    assert count(("A61C",)) >= 10
    assert count(("A61F2/44", "A61F2/38", "A61F2/30", "A61F2/32", "A61B17/86", "A61B17/80", "A61B17/70")) >= 10
    assert count(("G06T", "A61B6/", "G01S")) + sum(
        any(c.startswith("A61B8/") and c != "A61B8/12" for c in s.split(" ")) for s in patents["cpc_codes"]) >= 10


# ---- the generator ---------------------------------------------------------------------------


def test_generator_is_deterministic_and_matches_shipped_files(tmp_path):
    generator = load_generator()
    first, second = tmp_path / "a", tmp_path / "b"
    generator.build(first)
    generator.build(second)
    for name in FILES:
        built = (first / name).read_bytes()
        assert built == (second / name).read_bytes(), f"{name} differs between two builds"
        assert built == (DEMO / name).read_bytes(), f"{name} differs from the shipped file: rebuild the demo corpus"


def test_generator_company_rule_matches_readme():
    generator = load_generator()
    for company in generator.COMPANIES.values():
        for raw in [company["fda"], *company["variants"]]:
            assert generator.canonical_company(raw) == canonical(raw) == canonical(company["fda"])


def test_no_text_copied_from_the_real_benchmark(benchmark_dir, devices, patents):
    """No 8-word run of the demo texts occurs in the benchmark, apart from the one approval-order
    formula the project brief gave as the model sentence."""
    def shingles(text: str, n: int = 8) -> set[str]:
        words = re.findall(r"[a-z0-9]+", text.lower())
        return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}

    real: set[str] = set()
    for name in ("devices", "patents"):
        for text in pl.read_parquet(benchmark_dir / f"{name}.parquet")["text"].drop_nulls():
            real |= shingles(text)
    allowed = shingles("The device is indicated for improving coronary luminal diameter in patients with")
    ours = devices["text"].to_list() + patents["text"].to_list()
    copied = set().union(*(shingles(t) & real for t in ours)) - allowed
    assert copied == set()
