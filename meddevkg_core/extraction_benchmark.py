"""`meddevkg bench-extract`: how fast, how well grounded in the ontology, and how discriminative
the entity extractor is on a corpus (issue 4's figures). Measurement only; nothing is tuned here.

Figures (all in one flat-ish dict, `None` where a figure is undefined, e.g. no gold pairs):

- Throughput: patent documents per second of the extractor's `extract_mentions` alone (corpus
  reading, keying and scoring are not timed). spaCy: the median of `timing_runs` runs per
  `n_process` value, after a small warm-up call; `docs_per_second` is the best of the `n_process`
  values measured; each is also reported. Another extractor (the LLM) is timed in one run without
  warm-up, since a second run or a warm-up would read replies it already has, and its `n_process`
  figures are None (not applicable); `entity_extraction` then names it and its model and counts, per
  domain, the documents answered from the reply cache (`llm_cache_hits`) and those sent to the
  endpoint (`llm_requests`): a rate over cached replies is not the endpoint's. Device documents are
  timed once (spaCy: with `n_process=1`).
- Coverage: shares of extracted mentions (devices and patents together) by `map_tier`
  (`exact`, `head_noun`, `none`), and the same over distinct norms, a norm counted at the best
  tier it received anywhere. The paper's 82.9% is over distinct entities: compare
  `coverage_distinct_mapped`.
- Discrimination: for gold pairs and for random non-gold pairs of the same gold devices
  (`random_pairs_per_device` per device, sampled with `seed` among the corpus's patents):
  * `*_tier_match_share`: share of pairs with any Tier S/A/B match, i.e. `EntityMatcher`'s
    `matches > 0` (the same pairs as `score > 0` unless a concept has weight 0);
  * `*_s_entity_mean`: mean S_entity, the best single match (METHOD §2.5, capped at 60);
  * `*_weighted_overlap_mean`: mean WEIGHTED OVERLAP, this project's reading of the paper's
    "weighted overlap" (47.3 vs 12.1), which the paper does not define: the SUM over all shared
    match keys of their tier points, i.e. every shared normalised term (Tier S, 60 x w), every
    shared concept (Tier A, 50 x w) and every shared parent under which the two documents hold
    different concepts (Tier B, 20). Uncapped, so it grows with the number of shared entities.
- Agreement with the paper's LLM entities (gold pairs of `llm_entities` that are gold pairs of the
  corpus): each LLM name, normalised with `normalize_term`, counted once per (document, name)
  (so a device's names are not counted again for each of its gold patents), micro-averaged over
  those strings. `llm_entity_recall`: our mentions of the same document include that norm.
  `llm_concept_recall`: the name maps to a concept (`map_phrase`: exact, then head noun) that one
  of our mentions of the document also maps to. Device names are checked against the device
  text, patent names against the patent text.
- Inputs: the files measured (the corpus tables and the LLM entity file), each with its absolute
  path, size and SHA-256 (lineage), as a benchmark's report.json records them.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from meddevkg_core.concept_mapping import map_phrase
from meddevkg_core.config import UNIFORM_ENTITY_POINTS, CandidateConfig
from meddevkg_core.corpus import Corpus, key_text
from meddevkg_core.entities import ExtractionResult, extract_mentions
from meddevkg_core.entity_match import DocKeys, EntityMatcher, doc_keys
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import InputFile, inputs_json
from meddevkg_core.llm_extraction import DOMAINS, Domain, EntityExtractor, SpacyEntityExtractor
from meddevkg_core.ontology import Ontology, normalize_term
from meddevkg_core.progress import Progress, no_progress, stage_reporter
from meddevkg_core.raw_files import read_raw
from meddevkg_core.report import entities_line, percent

MAP_TIERS = ("exact", "head_noun", "none")
LLM_SEPARATOR = "|||"
LLM_COLUMNS = ("fda_id", "pat_id", "ent_names_d", "ent_names_p")
WEIGHTED_OVERLAP_DEFINITION = (
    "sum over shared match keys of their tier points: Tier S shared norms (60 x w), Tier A shared "
    "concepts (50 x w), Tier B shared parents with different concepts under them (20 each); uncapped"
)
_WARMUP_DOCS = 16


# ------------------------------------------------------------------ throughput


def time_extraction(docs: pl.DataFrame, ontology: Ontology, extractor: EntityExtractor, *,
                    runs: int = 1, progress: Progress = no_progress) -> tuple[float, ExtractionResult]:
    """Median wall-clock seconds of `runs` calls of `extractor.extract_mentions` on `docs`, the pipeline's
    Stage-1 call, and the first result."""
    seconds: list[float] = []
    first: ExtractionResult | None = None
    for _ in range(max(1, runs)):
        start = time.perf_counter()
        result = extractor.extract_mentions(docs, ontology, progress)
        seconds.append(time.perf_counter() - start)
        if first is None:
            first = result
    assert first is not None
    return statistics.median(seconds), first


def _reporter(stage: str, emit: Callable[[str], None] | None) -> Progress:
    return no_progress if emit is None else stage_reporter(stage, emit, "documents")


def supports_n_process() -> bool:
    return "n_process" in inspect.signature(extract_mentions).parameters


def _rate(n: int, seconds: float) -> float | None:
    return round(n / seconds, 2) if seconds > 0 and n else None


def _timed(extractor: EntityExtractor, batch_size: int, n_process: int = 1) -> EntityExtractor:
    """spaCy's extractor with the benchmark's batch size and process count; any other as it is."""
    if isinstance(extractor, SpacyEntityExtractor):
        return replace(extractor, batch_size=batch_size, n_process=n_process)
    return extractor


def spacy_throughput(docs: pl.DataFrame, ontology: Ontology, spacy: SpacyEntityExtractor, n_process: Sequence[int],
                     timing_runs: int, batch_size: int) -> tuple[dict[str, Any], ExtractionResult]:
    """spaCy's figures over its `n_process` values (see the module docstring), and the result of the first."""
    _timed(spacy, batch_size).extract_mentions(docs.head(_WARMUP_DOCS), ontology)  # lazy model init
    settings = sorted({n for n in n_process if n >= 1} | {1})
    if not supports_n_process():
        settings = [1]
    seconds: dict[str, float] = {}
    first: ExtractionResult | None = None
    parallel_identical: bool | None = None
    for n in settings:
        secs, result = time_extraction(docs, ontology, _timed(spacy, batch_size, n), runs=timing_runs)
        seconds[str(n)] = secs
        if first is None:
            first = result
        else:
            parallel_identical = parallel_identical is not False and result.mentions.equals(first.mentions)
    assert first is not None
    rates = {n: _rate(docs.height, s) for n, s in seconds.items()}
    best = max(rates, key=lambda n: rates[n] or 0.0)
    return {
        "docs_per_second": rates[best],
        "docs_per_second_n_process": int(best),
        "docs_per_second_by_n_process": rates,
        "patent_extraction_seconds_by_n_process": {n: round(s, 3) for n, s in seconds.items()},
        "timing_runs": max(1, timing_runs),
        "parallel_mentions_identical": parallel_identical,
    }, first


def single_run_throughput(docs: pl.DataFrame, ontology: Ontology, extractor: EntityExtractor,
                          progress: Progress = no_progress) -> tuple[dict[str, Any], ExtractionResult]:
    """Another extractor's figures: one timed run, no warm-up, `n_process` not applicable (module docstring)."""
    secs, result = time_extraction(docs, ontology, extractor, progress=progress)
    return {
        "docs_per_second": _rate(docs.height, secs),
        "docs_per_second_n_process": None,
        "docs_per_second_by_n_process": None,
        "patent_extraction_seconds_by_n_process": None,
        "patent_extraction_seconds": round(secs, 3),
        "timing_runs": 1,
        "parallel_mentions_identical": None,
    }, result


# ------------------------------------------------------------------ coverage


def coverage_shares(mentions: pl.DataFrame) -> dict[str, float | None]:
    """Share of mention rows per map tier (`exact`, `head_noun`, `none`); None without mentions."""
    counts = dict(mentions.group_by("map_tier").len().iter_rows()) if mentions.height else {}
    total = mentions.height
    return {tier: (counts.get(tier, 0) / total if total else None) for tier in MAP_TIERS}


def distinct_norm_tiers(mentions: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct norm with the best map tier it received (exact > head_noun > none)."""
    rank = {tier: i for i, tier in enumerate(MAP_TIERS)}
    return (
        mentions.filter(pl.col("norm").is_not_null())
        .with_columns(pl.col("map_tier").replace_strict(rank, default=len(MAP_TIERS)).alias("_rank"))
        .group_by("norm").agg(pl.col("_rank").min())
        .with_columns(pl.col("_rank").replace_strict(dict(enumerate(MAP_TIERS)), default="none").alias("map_tier"))
        .select("norm", "map_tier")
        .sort("norm")
    )


def _mapped(shares: dict[str, float | None]) -> float | None:
    return None if shares["exact"] is None else shares["exact"] + (shares["head_noun"] or 0.0)


# ------------------------------------------------------------------ pairs


def sample_random_pairs(gold: pl.DataFrame, patent_ids: Sequence[str], per_device: int, seed: int) -> pl.DataFrame:
    """`per_device` non-gold patents for each gold device (all of them when fewer), reproducibly."""
    rng = np.random.default_rng(seed)
    linked: dict[str, set[str]] = defaultdict(set)
    for fda_id, pat_id in gold.select("fda_id", "pat_id").iter_rows():
        linked[fda_id].add(pat_id)
    patents = sorted(set(patent_ids))
    fda_out: list[str] = []
    pat_out: list[str] = []
    for fda_id in sorted(linked):
        pool = [p for p in patents if p not in linked[fda_id]]
        k = min(per_device, len(pool))
        for i in sorted(rng.choice(len(pool), size=k, replace=False).tolist()) if k else []:
            fda_out.append(fda_id)
            pat_out.append(pool[i])
    return pl.DataFrame({"fda_id": fda_out, "pat_id": pat_out}, schema={"fda_id": pl.String, "pat_id": pl.String})


def weighted_overlap(device_keys: DocKeys, patent_keys: DocKeys, fda_id: str, pat_id: str,
                     cfg: CandidateConfig) -> float:
    """Sum of the tier points of every shared key (see WEIGHTED_OVERLAP_DEFINITION)."""
    d = device_keys.keys.get(fda_id, set())
    p = patent_keys.keys.get(pat_id, set())
    total = sum(k.points for k in d & p)
    d_fam = device_keys.family.get(fda_id, {})
    p_fam = patent_keys.family.get(pat_id, {})
    b_points = UNIFORM_ENTITY_POINTS.get(cfg.entity_weighting, cfg.tier_b_points)
    # Tier B as in EntityMatcher: a shared parent counts unless both sides hold the same single concept.
    total += b_points * sum(1 for parent in d_fam.keys() & p_fam.keys() if len(d_fam[parent] | p_fam[parent]) >= 2)
    return float(total)


def score_pairs(pairs: pl.DataFrame, device_keys: DocKeys, patent_keys: DocKeys, patent_ids: list[str],
                cfg: CandidateConfig) -> pl.DataFrame:
    """Per pair: S_entity, any-tier match, Tier-S match, best tier (`explain`) and weighted overlap.

    S_entity and the match flags come from `EntityMatcher.score_block`, the scorer Stage 2 uses.
    Pairs whose patent is not in `patent_ids` are left out.
    """
    matcher = EntityMatcher(device_keys, patent_keys, patent_ids, cfg)
    position = {p: i for i, p in enumerate(patent_ids)}
    wanted: dict[str, list[str]] = defaultdict(list)
    for fda_id, pat_id in pairs.select("fda_id", "pat_id").unique(maintain_order=True).iter_rows():
        if pat_id in position:
            wanted[fda_id].append(pat_id)
    devices = sorted(wanted)
    rows: list[tuple[str, str, float, bool, bool, str, float]] = []
    block = max(1, cfg.device_block_size)
    for b in range(0, len(devices), block):
        ids = devices[b:b + block]
        scores = matcher.score_block(ids)
        for r, fda_id in enumerate(ids):
            for pat_id in wanted[fda_id]:
                j = position[pat_id]
                rows.append((fda_id, pat_id, float(scores.score[r, j]), bool(scores.matches[r, j] > 0),
                             bool(scores.tier_s[r, j]), matcher.explain(fda_id, pat_id)[0],
                             weighted_overlap(device_keys, patent_keys, fda_id, pat_id, cfg)))
    return pl.DataFrame(rows, orient="row", schema={
        "fda_id": pl.String, "pat_id": pl.String, "s_entity": pl.Float64, "tier_match": pl.Boolean,
        "tier_s": pl.Boolean, "best_tier": pl.String, "weighted_overlap": pl.Float64})


def _mean(s: pl.Series) -> float | None:
    return float(s.cast(pl.Float64).mean()) if s.len() else None  # type: ignore[arg-type]


def pair_summary(scored: pl.DataFrame, prefix: str) -> dict[str, Any]:
    return {
        f"n_{prefix}_pairs": scored.height,
        f"{prefix}_tier_match_share": _mean(scored["tier_match"]),
        f"{prefix}_tier_s_share": _mean(scored["tier_s"]),
        f"{prefix}_weighted_overlap_mean": _mean(scored["weighted_overlap"]),
        f"{prefix}_s_entity_mean": _mean(scored["s_entity"]),
        f"{prefix}_best_tier_shares": {
            t: (scored.filter(pl.col("best_tier") == t).height / scored.height if scored.height else None)
            for t in ("S", "A", "B", "none")},
    }


# ------------------------------------------------------------------ LLM entities


def read_llm_entities(path: str | Path) -> pl.DataFrame:
    """The paper's per-gold-pair LLM entity names (Parquet, CSV or JSON Lines), as text columns; the
    ids trimmed as the corpus trims them, so "P000018 " joins to device P000018."""
    df = read_raw(Path(path))
    missing = [c for c in LLM_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (columns: {', '.join(df.columns)})")
    # a row cut to the header's width or read with U+FFFD would lose names unseen: refuse the file
    bad = df.with_row_index().filter(pl.col("__parse_error__").is_not_null()) if "__parse_error__" in df else None
    if bad is not None and bad.height:
        rows = "; ".join(f"row {i + 1}: {e}" for i, e in bad.select("index", "__parse_error__").head(5).iter_rows())
        raise CorpusError(f"{path}: {bad.height} record(s) cannot be read as written ({rows})")
    return df.select(key_text("fda_id"), key_text("pat_id"), "ent_names_d", "ent_names_p")


def _llm_strings(pairs: pl.DataFrame, id_col: str, names_col: str) -> list[tuple[str, str]]:
    """Distinct (doc id, normalised name) over the pairs."""
    out: set[tuple[str, str]] = set()
    for doc_id, names in pairs.select(id_col, names_col).iter_rows():
        for name in (names or "").split(LLM_SEPARATOR):
            if norm := normalize_term(name.lower()):
                out.add((doc_id, norm))
    return sorted(out)


def _doc_index(mentions: pl.DataFrame) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    norms: dict[str, set[str]] = defaultdict(set)
    concepts: dict[str, set[str]] = defaultdict(set)
    for doc_id, norm, concept in mentions.select("doc_id", "norm", "concept_id").iter_rows():
        if norm:
            norms[doc_id].add(norm)
        if concept:
            concepts[doc_id].add(concept)
    return norms, concepts


def llm_entity_recall(llm_entities: pl.DataFrame, gold: pl.DataFrame, device_mentions: pl.DataFrame,
                      patent_mentions: pl.DataFrame, ontology: Ontology) -> dict[str, Any]:
    """String- and concept-level recall of the LLM names on gold pairs (see the module docstring)."""
    pairs = llm_entities.select(LLM_COLUMNS).join(gold.select("fda_id", "pat_id").unique(),
                                                   on=["fda_id", "pat_id"], how="semi")
    hits: dict[str, list[tuple[bool, bool, bool]]] = {}
    for side, id_col, names_col, mentions in (("devices", "fda_id", "ent_names_d", device_mentions),
                                              ("patents", "pat_id", "ent_names_p", patent_mentions)):
        norms, concepts = _doc_index(mentions)
        side_hits = []
        for doc_id, norm in _llm_strings(pairs, id_col, names_col):
            concept = map_phrase(norm, ontology).concept_id
            side_hits.append((norm in norms.get(doc_id, ()),
                              concept is not None and concept in concepts.get(doc_id, ()),
                              concept is not None))
        hits[side] = side_hits

    def share(rows: Iterable[tuple[bool, bool, bool]], i: int) -> float | None:
        rows = list(rows)
        return sum(r[i] for r in rows) / len(rows) if rows else None

    both = hits["devices"] + hits["patents"]
    return {
        "llm_pairs": pairs.height,
        "n_llm_strings": len(both),
        "n_llm_strings_devices": len(hits["devices"]),
        "n_llm_strings_patents": len(hits["patents"]),
        "llm_entity_recall": share(both, 0),
        "llm_entity_recall_devices": share(hits["devices"], 0),
        "llm_entity_recall_patents": share(hits["patents"], 0),
        "llm_concept_recall": share(both, 1),
        "llm_concept_recall_devices": share(hits["devices"], 1),
        "llm_concept_recall_patents": share(hits["patents"], 1),
        "llm_strings_mapped_share": share(both, 2),
    }


_NO_LLM: dict[str, Any] = dict.fromkeys(
    ("n_llm_strings", "n_llm_strings_devices", "n_llm_strings_patents", "llm_entity_recall",
     "llm_entity_recall_devices", "llm_entity_recall_patents", "llm_concept_recall", "llm_concept_recall_devices",
     "llm_concept_recall_patents", "llm_strings_mapped_share")) | {"llm_pairs": 0}


# ------------------------------------------------------------------ everything


def measure_extraction(corpus: Corpus, ontology: Ontology, extractors: Mapping[Domain, EntityExtractor],
                       cfg: CandidateConfig, llm_entities: pl.DataFrame | None, seed: int = 42,
                       random_pairs_per_device: int = 20, *, n_process: Sequence[int] = (1, 2), timing_runs: int = 3,
                       batch_size: int = 64, progress: Callable[[str], None] | None = None,
                       llm_entities_file: InputFile | None = None) -> dict[str, Any]:
    """Every figure of the module docstring on `corpus`, extracted by `extractors` (one per domain, as
    pipeline.Models holds them); JSON-serialisable. Another extractor than spaCy (an LLM endpoint may
    take an hour) reports how far its runs are through `progress`, as `meddevkg run` does.
    `llm_entities_file`: the file `llm_entities` was read from, recorded with the corpus's (`inputs`)."""
    pat_docs = corpus.patents.select(pl.col("pat_id").alias("doc_id"), "text")
    dev_docs = corpus.devices.select(pl.col("fda_id").alias("doc_id"), "text")
    patent_extractor = extractors["patent"]
    if isinstance(patent_extractor, SpacyEntityExtractor):  # both domains' extractors are of one kind
        throughput, patents = spacy_throughput(pat_docs, ontology, patent_extractor, n_process, timing_runs,
                                               batch_size)
        dev_seconds, devices = time_extraction(dev_docs, ontology, _timed(extractors["device"], batch_size))
        extraction = {}  # spaCy's report stays as it was before another extractor could be measured
    else:
        throughput, patents = single_run_throughput(pat_docs, ontology, patent_extractor,
                                                    _reporter("patent_entities", progress))
        dev_seconds, devices = time_extraction(dev_docs, ontology, extractors["device"],
                                               progress=_reporter("device_entities", progress))
        extraction = {"entity_extraction": {domain: extractors[domain].figures() for domain in DOMAINS}}

    mentions = pl.concat([devices.mentions, patents.mentions])
    distinct = distinct_norm_tiers(mentions)
    coverage = coverage_shares(mentions)
    coverage_distinct = coverage_shares(distinct)

    gold = corpus.gold_links.select("fda_id", "pat_id").unique().sort("fda_id", "pat_id")
    patent_ids = corpus.patents["pat_id"].to_list()
    random_pairs = sample_random_pairs(gold, patent_ids, random_pairs_per_device, seed)
    dk, pk = doc_keys(devices.mentions, ontology, cfg), doc_keys(patents.mentions, ontology, cfg)
    scored = score_pairs(pl.concat([gold, random_pairs]), dk, pk, patent_ids, cfg)
    gold_scored = scored.join(gold, on=["fda_id", "pat_id"], how="semi")
    random_scored = scored.join(random_pairs, on=["fda_id", "pat_id"], how="semi")

    llm = (llm_entity_recall(llm_entities, gold, devices.mentions, patents.mentions, ontology)
           if llm_entities is not None else dict(_NO_LLM))

    return {
        "n_patents": pat_docs.height,
        "n_devices": dev_docs.height,
        **throughput,
        "device_docs_per_second": _rate(dev_docs.height, dev_seconds),
        "device_extraction_seconds": round(dev_seconds, 3),
        "n_mentions_patents": patents.mentions.height,
        "n_mentions_devices": devices.mentions.height,
        "n_rejected_patents": patents.rejected.height,
        "n_rejected_devices": devices.rejected.height,
        "coverage": coverage,
        "coverage_mapped": _mapped(coverage),
        "coverage_patents": coverage_shares(patents.mentions),
        "coverage_devices": coverage_shares(devices.mentions),
        "n_distinct_norms": distinct.height,
        "coverage_distinct": coverage_distinct,
        "coverage_distinct_mapped": _mapped(coverage_distinct),
        "n_gold_devices": gold["fda_id"].n_unique(),
        "random_pairs_per_device": random_pairs_per_device,
        "seed": seed,
        **pair_summary(gold_scored, "gold"),
        **pair_summary(random_scored, "random"),
        "weighted_overlap_definition": WEIGHTED_OVERLAP_DEFINITION,
        **llm,
        **extraction,
        "inputs": inputs_json({**corpus.inputs, **({"llm_entities": llm_entities_file} if llm_entities_file else {})}),
    }


def _num(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _throughput_lines(r: dict[str, Any]) -> list[str]:
    """spaCy's rate per process count; another extractor's one run, named, with how much of it the reply
    cache answered."""
    if "entity_extraction" not in r:
        rates = ", ".join(f"n_process={n}: {_num(v)}/s" for n, v in r["docs_per_second_by_n_process"].items())
        return [f"  throughput (patents)      {_num(r['docs_per_second'])} docs/s best ({rates}; median of "
                f"{r['timing_runs']} run(s)); target >= 400"]
    lines = [f"  extractor                 {entities_line(r['entity_extraction'])}"]
    if llm := [f for f in r["entity_extraction"].values() if "llm_documents" in f]:
        docs, hits = sum(f["llm_documents"] for f in llm), sum(f["llm_cache_hits"] for f in llm)
        if not hits:
            cache = f"none of {docs} documents answered from the reply cache: every one sent to the endpoint"
        elif hits == docs:
            cache = f"all {docs} documents answered from the reply cache: not the endpoint's throughput"
        else:
            cache = (f"{hits} of {docs} documents answered from the reply cache: the throughput is not the "
                     "endpoint's alone")
        lines.append(f"  reply cache               {cache}")
    lines.append(f"  throughput (patents)      {_num(r['docs_per_second'])} docs/s (one timed run of "
                 f"{_num(r['patent_extraction_seconds'], 3)} s; n_process n/a)")
    return lines


def format_summary(r: dict[str, Any]) -> str:
    """A human summary of `measure_extraction`'s result, with the paper's figures for reference."""
    cov, covd = r["coverage"], r["coverage_distinct"]
    lines = [
        f"extraction benchmark: {r['n_patents']} patents, {r['n_devices']} devices",
        *_throughput_lines(r),
        f"  throughput (devices)      {_num(r['device_docs_per_second'])} docs/s",
        f"  mentions                  {r['n_mentions_patents']} patent, {r['n_mentions_devices']} device; "
        f"rejected {r['n_rejected_patents'] + r['n_rejected_devices']}",
        f"  coverage (mentions)       exact {percent(cov['exact'])}, head noun {percent(cov['head_noun'])}, "
        f"none {percent(cov['none'])}",
        f"  coverage (distinct norms) exact {percent(covd['exact'])}, head noun {percent(covd['head_noun'])}, "
        f"none {percent(covd['none'])} over {r['n_distinct_norms']} norms "
        f"(paper, distinct entities: 9.2% + 73.7% = 82.9%)",
        f"  tier S/A/B match share    gold {percent(r['gold_tier_match_share'])} of {r['n_gold_pairs']} vs "
        f"random {percent(r['random_tier_match_share'])} of {r['n_random_pairs']}",
        f"  weighted overlap mean     gold {_num(r['gold_weighted_overlap_mean'])} vs random "
        f"{_num(r['random_weighted_overlap_mean'])} (paper 47.3 vs 12.1; ours = sum of shared tier points)",
        f"  S_entity mean (max)       gold {_num(r['gold_s_entity_mean'])} vs random "
        f"{_num(r['random_s_entity_mean'])}",
    ]
    if r["llm_pairs"]:
        lines.append(
            f"  LLM entity recall         strings {percent(r['llm_entity_recall'])} (devices "
            f"{percent(r['llm_entity_recall_devices'])}, patents {percent(r['llm_entity_recall_patents'])}), concepts "
            f"{percent(r['llm_concept_recall'])}; {r['n_llm_strings']} names on {r['llm_pairs']} gold pairs, "
            f"{percent(r['llm_strings_mapped_share'])} of them map to a concept")
    else:
        lines.append("  LLM entity recall         n/a (no LLM entity file)")
    return "\n".join(lines)
