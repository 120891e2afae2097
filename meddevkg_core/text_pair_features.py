"""Features of a labelled (device text, patent text) pair of text_pairs, for `meddevkg pairs-cv`.

Not pair_features.py, which holds the reranker's features of a candidate pair (its ids and its
device's Stage-2 pool): these compare the pair's two texts.

Every feature is a function of the texts alone, except the year gap, which is read off the two
ids (pair_features: a PMA/HDE number starts with its filing year, a US patent number gives its
grant year), and the dossier features, whose device side adds the public FDA supplements of the
pair's PMA number (dossier; only with `--fda-pma`). The word and character TF-IDF vocabularies
and idf, and the "pool" percentiles, are fitted unsupervised on all distinct texts of the input:
no label is used, so this is transductive but leak-free (deployment has the whole corpus to fit
them on too).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

from meddevkg_core.config import CandidateConfig, CrossEncoderConfig
from meddevkg_core.cross_encoder import PairScorer, truncate
from meddevkg_core.embeddings import Encoder
from meddevkg_core.entities import extract_mentions
from meddevkg_core.entity_match import DocKeys, doc_keys
from meddevkg_core.ontology import Ontology
from meddevkg_core.pair_features import with_year_features
from meddevkg_core.text_pairs import check_pairs

if TYPE_CHECKING:
    from spacy.language import Language

ENTITY_FEATURES = ("entity_score", "n_shared_s", "n_shared_a", "n_shared_b", "n_shared_anchor", "entity_overlap")
YEAR_FEATURES = ("year_gap", "abs_year_gap")
"""Patent grant year minus device filing year, and its size: a pair property (a random device x
patent pair is usually years apart, a patent and the device it marks are close in time)."""
LENGTH_FEATURES = ("device_chars", "patent_chars")
"""One side's text only: they can only tell which devices/patents tend to be gold, a property of
how the labelled set was sampled (METHOD §9.1), not of the pair. Reported as an ablation."""
CHAR_FEATURES = ("char_tfidf_cosine", "char_tfidf_device_pct", "char_tfidf_patent_pct")
DOSSIER_FEATURES = ("dossier_tfidf_cosine", "dossier_tfidf_device_pct", "dossier_tfidf_patent_pct")
"""Word TF-IDF between the patent and the device's dossier (its text and its PMA supplements, dossier)."""

_TOKEN = r"(?u)\b[a-zA-Z][a-zA-Z0-9]+\b"


@dataclass(frozen=True)
class TextIndex:
    """Distinct texts of each side and, per pair, which one it uses: every model sees a text once."""

    device_texts: list[str]
    patent_texts: list[str]
    device_idx: np.ndarray
    patent_idx: np.ndarray


def text_index(pairs: pl.DataFrame) -> TextIndex:
    dev = pairs["device_text"].to_list()
    pat = pairs["patent_text"].to_list()
    dev_texts, pat_texts = sorted(set(dev)), sorted(set(pat))
    d_pos = {t: i for i, t in enumerate(dev_texts)}
    p_pos = {t: i for i, t in enumerate(pat_texts)}
    return TextIndex(dev_texts, pat_texts, np.array([d_pos[t] for t in dev]), np.array([p_pos[t] for t in pat]))


def _pool_percentiles(sim: np.ndarray, idx: TextIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: the share of pool patents less similar to its device than its patent is, and the
    share of pool devices less similar to its patent. Corrects for texts that are similar to
    everything (short generic device names, METHOD §9.7) without using any label."""
    pair_sim = sim[idx.device_idx, idx.patent_idx]
    return _share_below(sim, idx.device_idx, pair_sim), _share_below(sim.T, idx.patent_idx, pair_sim)


def _share_below(sim: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each pair, the share of row `rows[i]` of `sim` strictly below `values[i]` (one sort per row)."""
    out = np.empty(len(rows), np.float32)
    for row in np.unique(rows):
        mine = rows == row
        out[mine] = np.searchsorted(np.sort(sim[row]), values[mine], side="left") / sim.shape[1]
    return out


def _similarity_features(sim: np.ndarray, idx: TextIndex, names: Sequence[str]) -> dict[str, np.ndarray]:
    """`names` = (cosine, device percentile, patent percentile) of a device x patent similarity matrix."""
    dev_pct, pat_pct = _pool_percentiles(sim, idx)
    return dict(zip(names, (sim[idx.device_idx, idx.patent_idx], dev_pct, pat_pct), strict=True))


def _tfidf_similarity(vec: TfidfVectorizer, idx: TextIndex) -> np.ndarray:
    """Cosine of L2-normalised TF-IDF rows, the vectoriser fitted unsupervised on every distinct text."""
    vec.fit(idx.device_texts + idx.patent_texts)
    return (vec.transform(idx.device_texts) @ vec.transform(idx.patent_texts).T).toarray()


def sbert_features(idx: TextIndex, encoder: Encoder) -> dict[str, np.ndarray]:
    """Bi-encoder cosine (unit vectors) and its pool percentiles."""
    dev = np.asarray(encoder.encode(idx.device_texts), np.float32)
    pat = np.asarray(encoder.encode(idx.patent_texts), np.float32)
    return _similarity_features(dev @ pat.T, idx, ("sbert_cosine", "sbert_device_pct", "sbert_patent_pct"))


def tfidf_features(idx: TextIndex, names: Sequence[str] = ("tfidf_cosine", "tfidf_device_pct", "tfidf_patent_pct"),
                   ) -> dict[str, np.ndarray]:
    """TF-IDF cosine, idf fitted unsupervised on every distinct text of both sides."""
    vec = TfidfVectorizer(lowercase=True, token_pattern=_TOKEN, stop_words="english", sublinear_tf=True,
                          ngram_range=(1, 2), min_df=1, dtype=np.float32)
    return _similarity_features(_tfidf_similarity(vec, idx), idx, names)


def dossier_features(pairs: pl.DataFrame, dossiers: dict[str, str]) -> dict[str, np.ndarray]:
    """DOSSIER_FEATURES: `tfidf_features` with each device's dossier in place of its text (a device
    the dossiers do not know keeps its text)."""
    ids, own = pairs["fda_id"].to_list(), pairs["device_text"].to_list()
    texts = [dossiers.get(d, t) for d, t in zip(ids, own, strict=True)]
    return tfidf_features(text_index(pairs.with_columns(pl.Series("device_text", texts, pl.String))), DOSSIER_FEATURES)


def char_tfidf_features(idx: TextIndex) -> dict[str, np.ndarray]:
    """TF-IDF cosine over character 3-5-grams inside word boundaries, and its pool percentiles.

    Word TF-IDF misses what device labels and patent abstracts share below the word: inflections
    and compounds ("stent"/"stents"/"stenting", "cryoablation"/"ablation", "radiopaque"/"opaque").
    Fitted unsupervised like the word model; an n-gram must occur in two texts to count."""
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), lowercase=True, sublinear_tf=True, min_df=2,
                          dtype=np.float32)
    return _similarity_features(_tfidf_similarity(vec, idx), idx, CHAR_FEATURES)


def content_tokens(text: str) -> frozenset[str]:
    return frozenset(t for t in re.findall(_TOKEN, text.lower()) if t not in ENGLISH_STOP_WORDS)


def jaccard_features(idx: TextIndex) -> dict[str, np.ndarray]:
    """Unigram Jaccard of content words (stop words removed), the paper's lexical-overlap measure."""
    dev = [content_tokens(t) for t in idx.device_texts]
    pat = [content_tokens(t) for t in idx.patent_texts]
    out = np.zeros(len(idx.device_idx), np.float32)
    for i, (d, p) in enumerate(zip(idx.device_idx, idx.patent_idx, strict=True)):
        union = len(dev[d] | pat[p])
        out[i] = len(dev[d] & pat[p]) / union if union else 0.0
    return {"token_jaccard": out}


def _doc_id(side: str, text: str) -> str:
    return side + hashlib.sha1(text.encode("utf-8")).hexdigest()


def entity_features(idx: TextIndex, nlp: Language, ontology: Ontology,
                    cfg: CandidateConfig | None = None) -> dict[str, np.ndarray]:
    """MedDevOnto tiers per pair: S_entity (best single match, METHOD §2.5) plus what it ignores
    (§9.10): counts per tier, shared anchor terms, and the summed points of all matches."""
    cfg = cfg or CandidateConfig()
    dev_ids = [_doc_id("d", t) for t in idx.device_texts]
    pat_ids = [_doc_id("p", t) for t in idx.patent_texts]
    docs = pl.DataFrame({"doc_id": dev_ids + pat_ids, "text": idx.device_texts + idx.patent_texts})
    keys = doc_keys(extract_mentions(docs, ontology, nlp).mentions, ontology, cfg)
    cols = {name: np.zeros(len(idx.device_idx), np.float32) for name in ENTITY_FEATURES}
    cache: dict[tuple[int, int], tuple[float, ...]] = {}
    for i, (d, p) in enumerate(zip(idx.device_idx.tolist(), idx.patent_idx.tolist(), strict=True)):
        if (d, p) not in cache:
            cache[(d, p)] = _pair_entities(keys, dev_ids[d], pat_ids[p], cfg)
        for name, value in zip(ENTITY_FEATURES, cache[(d, p)], strict=True):
            cols[name][i] = value
    return cols


def _pair_entities(keys: DocKeys, dev: str, pat: str, cfg: CandidateConfig) -> tuple[float, ...]:
    shared = keys.keys.get(dev, set()) & keys.keys.get(pat, set())
    d_fam, p_fam = keys.family.get(dev, {}), keys.family.get(pat, {})
    # Tier B as in EntityMatcher: a shared parent counts unless both sides hold the same single concept.
    n_b = sum(1 for parent in set(d_fam) & set(p_fam) if len(d_fam[parent] | p_fam[parent]) >= 2)
    points = [k.points for k in shared]
    best = max(points + ([cfg.tier_b_points] if n_b else []) + [0.0])
    n_s = sum(1 for k in shared if k.tier == "S")
    n_a = sum(1 for k in shared if k.tier == "A")
    n_anchor = sum(1 for k in shared if k.tier == "S" and k.core)
    return best, n_s, n_a, n_b, n_anchor, sum(points) + cfg.tier_b_points * n_b


def cross_encoder_features(pairs: pl.DataFrame, scorer: PairScorer, max_chars: int = 1024,
                           batch_size: int = 32) -> dict[str, np.ndarray]:
    """Cross-encoder probability per distinct (device text, patent text), cut as in cross_encoder.py."""
    texts = [(truncate(d, max_chars), truncate(p, max_chars))
             for d, p in pairs.select("device_text", "patent_text").iter_rows()]
    distinct = sorted(set(texts), key=lambda t: len(t[0]) + len(t[1]))
    scores: dict[tuple[str, str], float] = {}
    for start in range(0, len(distinct), batch_size):
        chunk = distinct[start:start + batch_size]
        out = np.asarray(scorer.score(chunk), np.float32).reshape(-1)
        if out.shape != (len(chunk),):
            raise ValueError(f"scorer {scorer.model_id} returned {out.shape[0]} scores for {len(chunk)} pairs")
        scores.update(zip(chunk, out.tolist(), strict=True))
    return {"cross_encoder": np.array([scores[t] for t in texts], np.float32)}


def year_features(pairs: pl.DataFrame) -> dict[str, np.ndarray]:
    """YEAR_FEATURES from the ids (NaN where an id carries no year); none when no pair has both years."""
    gap = (with_year_features(pairs.select("fda_id", "pat_id"))["year_gap"]
           .cast(pl.Float32).fill_null(np.nan).to_numpy())
    if np.isnan(gap).all():
        return {}
    return {"year_gap": gap, "abs_year_gap": np.abs(gap)}


def length_features(idx: TextIndex) -> dict[str, np.ndarray]:
    dev = np.array([len(t) for t in idx.device_texts], np.float32)
    pat = np.array([len(t) for t in idx.patent_texts], np.float32)
    return {"device_chars": dev[idx.device_idx], "patent_chars": pat[idx.patent_idx]}


def pair_features(pairs: pl.DataFrame, encoder: Encoder, nlp: Language | None, ontology: Ontology | None,
                  cross_encoder: PairScorer | None = None, cross_encoder_cfg: CrossEncoderConfig | None = None,
                  dossiers: dict[str, str] | None = None) -> tuple[pl.DataFrame, dict[str, float]]:
    """Every feature of every pair (no label is read) and the seconds each family took.

    Without `nlp`/`ontology` the entity features are skipped (a fast mode for dry runs); with
    `dossiers` (fda_id -> dossier text) the dossier features are added.
    """
    pairs = check_pairs(pairs)
    ce_cfg = cross_encoder_cfg or CrossEncoderConfig()
    idx = text_index(pairs)
    steps: list[tuple[str, Callable[[], dict[str, np.ndarray]]]] = [
        ("sbert", lambda: sbert_features(idx, encoder)),
        ("tfidf", lambda: tfidf_features(idx)),
        ("char_tfidf", lambda: char_tfidf_features(idx)),
        ("jaccard", lambda: jaccard_features(idx)),
        ("lengths", lambda: length_features(idx)),
        ("years", lambda: year_features(pairs)),
    ]
    if nlp is not None and ontology is not None:
        steps.append(("entities", lambda: entity_features(idx, nlp, ontology)))
    if dossiers is not None:
        steps.append(("dossier", lambda: dossier_features(pairs, dossiers)))
    if cross_encoder is not None:
        steps.append(("cross_encoder", lambda: cross_encoder_features(
            pairs, cross_encoder, ce_cfg.max_chars, ce_cfg.batch_size)))
    columns: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    for name, step in steps:
        start = time.perf_counter()
        columns.update(step())
        seconds[name] = time.perf_counter() - start
    frame = pairs.select("fda_id", "pat_id").with_columns(
        pl.Series(name, np.asarray(values, np.float32), dtype=pl.Float32) for name, values in columns.items()
    )
    return frame, seconds
