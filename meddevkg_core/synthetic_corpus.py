"""A synthetic corpus of any size with the statistics of the real benchmark, made without any model.

The scale benchmark (scale_bench.py) asks whether the *linking* scales to the paper's search space
(434 devices x 698,191 patents, about 3.03e8 pairs). Encoding 698K abstracts takes hours on a CPU, so
the corpus is synthetic but built to have the statistics of the real benchmark (measured on
../shared/data/bridge-meddevkg with the shipped extractor and the packaged MiniLM):

* embeddings: unit float32 rows of dimension 384, a shared mean direction (real mean-vector norm
  0.53) plus topic and sub-topic components, so cosine has structure (real device-patent cosine:
  median 0.18, 99th percentile 0.47);
* entity mentions from the shipped MedDevOnto: about 16 per document (patents sd 6, devices sd 11),
  18% (patents) / 41% (devices) mapped to a concept with Zipf-like concept popularity biased by
  topic, a third of those as head-noun variants ("delivery catheter"), the rest free-text Tier-S
  norms from a Zipf vocabulary (most norms occur once, as in the real extraction);
* companies: Zipf assignees (a few large ones), device applicants drawn from the largest, a few
  acquisitions so some matches go through a deal;
* text lengths (patents about 760 characters, devices about 430) drive a synthetic TF-IDF matrix,
  so the lexical scorer of the pipeline (baselines.TfidfScorer) runs on realistic sparsity.

`stage2_inputs` gives the pipeline's Stage 2 inputs from it, `synthetic_gold` gold links on its
pool for training Stage 3.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import polars as pl
from scipy import sparse

from meddevkg_core.baselines import TfidfScorer
from meddevkg_core.block_scores import Stage2Inputs
from meddevkg_core.config import PipelineConfig
from meddevkg_core.entity_match import EntityMatcher, doc_keys
from meddevkg_core.ontology import Ontology, load_meddevonto

# Calibration. Chosen on 434 x 2,185 against the real benchmark (shipped spaCy extraction, packaged
# MiniLM, default configuration), share of all pairs / share of the pool. Device-patent cosine
# quantiles 1/10/50/85/99%: real -0.03/0.05/0.18/0.30/0.47, synthetic -0.03/0.06/0.21/0.34/0.48.
#                      pool   threshold  rescue_anchor  rescue_vector  same_company
#   real              6.2%       62%         25%             4%            10%
#   synthetic         5.5%       48%         35%             8%             9%
#                     Tier-S anchor  Tier S   S_entity>=50  any entity match  Tier B only
#   real                  4.5%        7.8%       5.5%           10.8%            2.2%
#   synthetic             2.5%       10.1%      12.3%           18.7%            2.2%
CONCEPT_ZIPF_S = 0.9
CONCEPT_TOPIC_SHARE = 0.6
FAVOURITES = 3
FAVOURITE_ZIPF_S = 0.9
ANCHOR_BOOST = 0.3
OTHER_BOOST = 0.3
PREFERRED_TERM_SHARE = 0.75
CONCEPT_REPEAT = 0.35
FREE_TOPIC_SHARE = 0.25
FREE_SUBTOPIC_SHARE = 0.25
FREE_COMMON = 20_000
FREE_ZIPF_S = 0.7
FREE_RARE_SHARE = 0.55
FREE_ONTO_WORD_PER_MILLE = 60

PAPER_PATENTS = 698_191
PAPER_DEVICES = 434
DIMENSION = 384


@dataclass(frozen=True)
class Mentions:
    """Entity mentions held as codes: one row per document and norm (11M at 698K patents).

    `frame()` is the table Stage 2 reads (doc_id, norm, concept_id as strings); held as three int32
    codes into the distinct values it takes 12 bytes a row instead of three 16-byte string views
    plus the text, and the table is only made while the entity index is built.
    """

    doc_ids: pl.Series  # String, one per document
    norms: pl.Series  # String, distinct
    concepts: pl.Series  # String, distinct (a null among them)
    doc: np.ndarray  # int32 codes, one per mention
    norm: np.ndarray
    concept: np.ndarray

    @property
    def height(self) -> int:
        return len(self.doc)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame({"doc_id": self.doc_ids.gather(self.doc), "norm": self.norms.gather(self.norm),
                             "concept_id": self.concepts.gather(self.concept)})

    def concept_share(self) -> float:
        # polars types mean() for any dtype; a Boolean column's is a float (None when empty)
        return float(self.concepts.is_not_null().gather(self.concept).mean() or 0)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SyntheticCorpus:
    """Everything Stage 2 reads, generated without any model."""

    device_ids: list[str]
    patent_ids: list[str]
    device_vectors: np.ndarray
    patent_vectors: np.ndarray
    device_mention_codes: Mentions
    patent_mention_codes: Mentions
    company_matches: pl.DataFrame  # fda_id, pat_id (strings), match_kind, company_path (categorical)
    device_chars: np.ndarray
    patent_chars: np.ndarray
    lexical: TfidfScorer | None
    device_topics: np.ndarray
    patent_topics: np.ndarray

    @property
    def device_mentions(self) -> pl.DataFrame:
        """doc_id, norm, concept_id (one row per document and norm), made on each call."""
        return self.device_mention_codes.frame()

    @property
    def patent_mentions(self) -> pl.DataFrame:
        """doc_id, norm, concept_id (one row per document and norm), made on each call."""
        return self.patent_mention_codes.frame()

    def stats(self) -> dict[str, Any]:
        dm, pm = self.device_mention_codes, self.patent_mention_codes
        return {
            "mentions_per_patent": round(pm.height / max(len(self.patent_ids), 1), 2),
            "mentions_per_device": round(dm.height / max(len(self.device_ids), 1), 2),
            "patent_concept_share": round(pm.concept_share(), 3),
            "device_concept_share": round(dm.concept_share(), 3),
            "distinct_norms": int(pl.concat([dm.norms, pm.norms]).n_unique()),
            "company_match_pairs": self.company_matches.height,
            "mean_patent_chars": round(float(self.patent_chars.mean()), 1),
            "mean_device_chars": round(float(self.device_chars.mean()), 1),
        }


def _zipf_probs(n: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    return p / p.sum()


def _draw(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """Inverse-CDF sampling (cheaper than rng.choice with p for large vocabularies)."""
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@dataclass(frozen=True)
class _Topics:
    mean: np.ndarray
    topics: np.ndarray  # (T, d)
    subtopics: np.ndarray  # (T, S, d)
    popularity_cdf: np.ndarray


def _topic_model(rng: np.random.Generator, n_topics: int, n_sub: int) -> _Topics:
    mean = _unit(rng.standard_normal(DIMENSION))
    topics = _unit(rng.standard_normal((n_topics, DIMENSION)))
    subtopics = _unit(rng.standard_normal((n_topics, n_sub, DIMENSION)))
    return _Topics(mean, topics, subtopics, np.cumsum(_zipf_probs(n_topics, 0.8)))


# Squared weights of the components (they sum to 1): the shared mean direction varies per
# document (so random pairs spread from cosine ~0 to ~0.4), topic 0.13, sub-topic 0.14, the rest noise.
_W2_MEAN_RANGE, _W2_TOPIC, _W2_SUB = (0.0, 0.45), 0.13, 0.14


def _embed(rng: np.random.Generator, model: _Topics, topic: np.ndarray, sub: np.ndarray,
           chunk: int = 65_536) -> np.ndarray:
    out = np.empty((len(topic), DIMENSION), np.float32)
    for start in range(0, len(topic), chunk):
        t, s = topic[start:start + chunk], sub[start:start + chunk]
        w2_mean = rng.uniform(*_W2_MEAN_RANGE, len(t)).astype(np.float32)[:, None]
        noise = _unit(rng.standard_normal((len(t), DIMENSION), dtype=np.float32))
        v = (np.sqrt(w2_mean) * model.mean + np.sqrt(_W2_TOPIC) * model.topics[t]
             + np.sqrt(_W2_SUB) * model.subtopics[t, s] + np.sqrt(1 - _W2_TOPIC - _W2_SUB - w2_mean) * noise)
        out[start:start + len(t)] = _unit(v)
    return out


_SYLLABLES = ("ba", "co", "di", "fe", "ga", "hi", "ju", "ka", "lo", "me", "ni", "po", "qu", "ra", "si", "tu",
              "vo", "xe", "ze", "ly", "pr", "st", "tr", "an", "or", "ex", "um", "id")
_MODIFIERS = ("delivery", "distal", "proximal", "implantable", "flexible", "outer", "inner", "elongate",
              "expandable", "tubular", "first", "second", "radial", "coated", "sealing", "guiding",
              "support", "main", "wire", "locking")


def _words(onto_words: list[str], n_synthetic: int) -> list[str]:
    """Ontology words (so free text sometimes contains an anchor) plus pronounceable fillers."""
    k = len(_SYLLABLES)
    synthetic = [_SYLLABLES[i % k] + _SYLLABLES[(i // k) % k] + _SYLLABLES[(i // k // k) % k]
                 + (str(i // (k ** 3)) if i >= k ** 3 else "") for i in range(n_synthetic)]
    return onto_words + synthetic


def _free_norm(i: int, words: list[str], n_onto: int, onto_share_per_mille: int) -> str:
    """A deterministic normalised phrase for free-text vocabulary id i (1-3 words)."""
    h = int.from_bytes(hashlib.blake2b(i.to_bytes(8, "little"), digest_size=8).digest(), "little")
    n_words = 1 if i < 2_000 else (2 if h % 3 else 3)
    out = []
    for _ in range(n_words):
        h, r = divmod(h, 1000)
        h, w = divmod(h, 1 << 16)
        out.append(words[w % n_onto] if r < onto_share_per_mille else words[n_onto + w % (len(words) - n_onto)])
    return " ".join(out)


@dataclass(frozen=True)
class _Vocab:
    concept_ids: list[str]
    concept_cdf: np.ndarray
    term_offsets: np.ndarray  # concept -> first row in term_norms
    term_counts: np.ndarray
    term_norms: list[str]
    words: list[str]
    n_onto_words: int
    favourites: np.ndarray  # (topics, k) concept indices


def _vocab(onto: Ontology, n_words: int) -> _Vocab:
    # popularity order: a fixed shuffle of the concepts with the anchor concepts moved up (in the real
    # extraction catheter, stent, graft and valve are among the most frequent, next to heart or lumen)
    ids = onto.concepts["concept_id"].to_list()
    shuffle = np.random.default_rng(20_260_701).permutation(len(ids)).astype(np.float64)
    boost = np.array([ANCHOR_BOOST if onto.concept(c).is_anchor else OTHER_BOOST if onto.category(c) == "OTHER"
                      else 1.0 for c in ids])
    concepts = [ids[i] for i in np.argsort(shuffle * boost, kind="stable")]
    terms = onto.terms.select("term_norm", "concept_id").unique(maintain_order=True)
    pref = {c: onto.concept(c).preferred_name for c in concepts}
    term_norms: list[str] = []
    offsets, counts = [], []
    by_concept: dict[str, list[str]] = {}
    for norm, cid in terms.iter_rows():
        by_concept.setdefault(cid, []).append(norm)
    for c in concepts:
        names = sorted(set(by_concept.get(c, [])), key=lambda t: (t != onto.lookup(pref[c]) and t != pref[c], t))
        names = [n for n in names if onto.lookup(n) == c] or [pref[c]]
        offsets.append(len(term_norms))
        counts.append(len(names))
        term_norms.extend(names)
    onto_words = sorted({w for t in term_norms for w in t.split() if len(w) > 2})
    cdf = np.cumsum(_zipf_probs(len(concepts), CONCEPT_ZIPF_S))
    favourites = _draw(np.random.default_rng(7), np.cumsum(_zipf_probs(len(concepts), FAVOURITE_ZIPF_S)),
                       40 * FAVOURITES).reshape(40, FAVOURITES)
    return _Vocab(concepts, cdf, np.array(offsets), np.array(counts), term_norms, _words(onto_words, n_words),
                  len(onto_words), favourites)


def _mentions(rng: np.random.Generator, onto: Ontology, vocab: _Vocab, doc_ids: list[str], topics: np.ndarray,
              subtopics: np.ndarray,
              mean: float, sd: float, concept_share: float, n_common: int, free_s: float, rare_share: float,
              onto_word_per_mille: int, norm_cache: dict[int, str]) -> Mentions:
    n_docs = len(doc_ids)
    p = mean / (sd * sd)  # negative binomial with this mean and sd (numpy: failures before r successes)
    counts = np.maximum(rng.negative_binomial(mean * p / (1 - p), p, n_docs), 1)
    doc = np.repeat(np.arange(n_docs), counts)
    topic = topics[doc]
    total = len(doc)
    is_concept = rng.random(total) < concept_share
    # concept popularity: global Zipf, or one of the few favourite concepts of the document's topic
    # (so documents close in vector space also share concepts and anchors, as real ones do)
    concept = _draw(rng, vocab.concept_cdf, total)
    favourite = vocab.favourites[topic, rng.integers(0, vocab.favourites.shape[1], total)]
    concept = np.where(rng.random(total) < CONCEPT_TOPIC_SHARE, favourite, concept)
    # a document names some concepts more than once (real: 1.5 mentions per concept and document)
    last = np.maximum.accumulate(np.where(is_concept, np.arange(total), -1))
    prev = np.concatenate([[-1], last[:-1]])
    repeat = is_concept & (prev >= 0) & (doc[np.maximum(prev, 0)] == doc) & (rng.random(total) < CONCEPT_REPEAT)
    concept = np.where(repeat, concept[np.maximum(prev, 0)], concept)
    synonym = rng.integers(0, 1 << 30, total) % vocab.term_counts[concept]
    pick = np.where(rng.random(total) < PREFERRED_TERM_SHARE, 0, synonym)
    term = vocab.term_offsets[concept] + pick
    head_noun = rng.random(total) < 1 / 3
    modifier = rng.integers(0, len(_MODIFIERS), total)
    # free text: a common Zipf vocabulary (half of the draws permuted per topic: topic jargon),
    # or a rare phrase that practically never repeats (most real norms occur once)
    rank = _draw(rng, np.cumsum(_zipf_probs(n_common, free_s)), total).astype(np.int64)
    u = rng.random(total)
    common = np.where(u < FREE_TOPIC_SHARE, (rank * 7_919 + topic * 104_729) % n_common,
                      np.where(u < FREE_TOPIC_SHARE + FREE_SUBTOPIC_SHARE,
                               (rank * 7_919 + (1 + topic * 8 + subtopics[doc]) * 15_485_863) % n_common, rank))
    rare = n_common + rng.integers(0, max(50 * n_docs, 1_000_000), total)
    free = np.where(rng.random(total) < rare_share, rare, common)
    # one integer code per mention: >= 0 a free-text id, < 0 a concept term or "modifier term"
    n_terms, n_mod = len(vocab.term_norms), len(_MODIFIERS)
    code = np.where(is_concept, -(1 + np.where(head_noun, n_terms + term * n_mod + modifier, term)), free)
    uniq, inverse = np.unique(code, return_inverse=True)
    norms: list[str] = []
    concepts: list[str | None] = []
    for u in uniq.tolist():
        if u >= 0:
            text = norm_cache.get(u)
            if text is None:
                text = norm_cache[u] = _free_norm(u, vocab.words, vocab.n_onto_words, onto_word_per_mille)
            norms.append(text)
            concepts.append(onto.lookup(text))
            continue
        v = -u - 1
        if v < n_terms:  # the term itself: exact mapping
            norms.append(vocab.term_norms[v])
            concepts.append(onto.lookup(vocab.term_norms[v]))
        else:  # head-noun variant: mapped to the concept of its head term
            t, m = divmod(v - n_terms, n_mod)
            norms.append(f"{_MODIFIERS[m]} {vocab.term_norms[t]}")
            concepts.append(onto.lookup(norms[-1]) or onto.lookup(vocab.term_norms[t]))
    # one row per document and norm *text* (two codes can give the same text), the first one kept,
    # in mention order: the table of `frame.unique(["doc_id", "norm"], keep="first", maintain_order=True)`
    norm_of = _first_ids(norms)[inverse.ravel()]
    concept_of = _first_ids(concepts)[inverse.ravel()]
    _, first = np.unique(doc.astype(np.int64) * (int(norm_of.max(initial=0)) + 1) + norm_of, return_index=True)
    keep = np.sort(first)
    return Mentions(pl.Series(doc_ids, dtype=pl.String), pl.Series(list(dict.fromkeys(norms)), dtype=pl.String),
                    pl.Series(list(dict.fromkeys(concepts)), dtype=pl.String), doc[keep].astype(np.int32),
                    norm_of[keep], concept_of[keep])


def _first_ids(values: list) -> np.ndarray:
    """int32 id of each value: its position among the distinct values in order of first appearance."""
    ids: dict = {}
    return np.fromiter((ids.setdefault(v, len(ids)) for v in values), np.int32, len(values))


def _companies(rng: np.random.Generator, device_ids: list[str], patent_ids: list[str],
               n_assignees: int) -> pl.DataFrame:
    """Same-company and acquisition matches: Zipf assignees, device applicants from the largest."""
    pat_company = _draw(rng, np.cumsum(_zipf_probs(n_assignees, 0.9)), len(patent_ids))
    dev_company = _draw(rng, np.cumsum(_zipf_probs(60, 1.1)), len(device_ids))
    name = [f"COMPANY {i:05d}" for i in range(n_assignees)]
    deals = [(acquirer, target) for acquirer in range(8) for target in
             rng.choice(np.arange(50, min(n_assignees, 2_000)), size=2, replace=False).tolist()]
    edges = [(c, c, "same", name[c]) for c in range(60)]
    edges += [(a, t, "acquired", f"{name[a]} <- {name[t]}") for a, t in deals]  # device of the acquirer
    edges += [(t, a, "acquirer", f"{name[t]} -> {name[a]}") for a, t in deals]  # device of the target
    link = pl.DataFrame(edges, schema={"dev_c": pl.Int64, "pat_c": pl.Int64, "match_kind": pl.String,
                                       "company_path": pl.String}, orient="row")
    devices = pl.DataFrame({"fda_id": device_ids, "dev_c": dev_company.astype(np.int64)})
    patents = pl.DataFrame({"pat_id": patent_ids, "pat_c": pat_company.astype(np.int64)})
    # match_kind (3 values) and company_path (a few dozen) as Categorical: 4 bytes a row instead of a
    # 16-byte string view (Stage 2 reads them as strings); 6M rows at 698K patents
    return (devices.join(link, on="dev_c").join(patents, on="pat_c")
            .select("fda_id", "pat_id", "match_kind", "company_path")
            .unique(["fda_id", "pat_id"], keep="first", maintain_order=True)
            .with_columns(pl.col("match_kind", "company_path").cast(pl.Categorical)))


def _tfidf(rng: np.random.Generator, chars: np.ndarray, topics: np.ndarray, vocab_size: int,
           idf: np.ndarray | None, chunk: int = 50_000) -> tuple[sparse.csr_matrix, np.ndarray]:
    """Sublinear-tf TF-IDF rows (L2-normalised) with Zipf terms, as TfidfVectorizer would give."""
    cdf = np.cumsum(_zipf_probs(vocab_size, 0.9))
    parts = []
    for start in range(0, len(chars), chunk):
        n_tok = np.maximum((chars[start:start + chunk] / 6.5 * 0.55).astype(np.int64), 1)  # after stop words
        doc = np.repeat(np.arange(len(n_tok)), n_tok)
        term = _draw(rng, cdf, len(doc)).astype(np.int64)
        t = topics[start:start + chunk][doc]
        term = np.where(rng.random(len(doc)) < 0.3, (term * 7_919 + t * 104_729) % vocab_size, term)
        m = sparse.csr_matrix((np.ones(len(doc), np.float32), (doc, term)), shape=(len(n_tok), vocab_size))
        m.sum_duplicates()
        parts.append(m)
    tf = sparse.vstack(parts).tocsr()
    if idf is None:
        df = np.bincount(tf.indices, minlength=vocab_size)
        idf = (np.log((1 + tf.shape[0]) / (1 + df)) + 1).astype(np.float32)
    tf.data = (1 + np.log(tf.data)).astype(np.float32)
    tf = tf.multiply(idf[None, :]).tocsr().astype(np.float32)
    norms = np.sqrt(np.asarray(tf.multiply(tf).sum(axis=1)).ravel())
    tf = sparse.diags(1 / np.where(norms == 0, 1, norms)).astype(np.float32) @ tf
    return tf.tocsr(), idf


def synthetic_corpus(n_patents: int = PAPER_PATENTS, n_devices: int = PAPER_DEVICES, seed: int = 0, *,
                     lexical: bool = True, ontology: Ontology | None = None,
                     progress: Callable[[str], None] | None = None) -> SyntheticCorpus:
    """A corpus with the real benchmark's statistics (see the module docstring); no model is run."""
    say = progress or (lambda _: None)
    rng = np.random.default_rng(seed)
    onto = ontology or load_meddevonto()
    model = _topic_model(rng, n_topics=40, n_sub=8)
    patent_ids = [f"S{i:07d}" for i in range(n_patents)]
    device_ids = [f"D{i:05d}" for i in range(n_devices)]
    p_topic = _draw(rng, model.popularity_cdf, n_patents)
    d_topic = _draw(rng, model.popularity_cdf, n_devices)
    p_sub, d_sub = rng.integers(0, 8, n_patents), rng.integers(0, 8, n_devices)
    say("embeddings")
    patent_vectors = _embed(rng, model, p_topic, p_sub)
    device_vectors = _embed(rng, model, d_topic, d_sub)
    say("entity mentions")
    vocab = _vocab(onto, n_words=20_000)
    cache: dict[int, str] = {}
    mentions = partial(_mentions, n_common=FREE_COMMON, free_s=FREE_ZIPF_S, rare_share=FREE_RARE_SHARE,
                       onto_word_per_mille=FREE_ONTO_WORD_PER_MILLE, norm_cache=cache)
    patent_mentions = mentions(rng, onto, vocab, patent_ids, p_topic, p_sub, 16.0, 6.0, 0.18)
    device_mentions = mentions(rng, onto, vocab, device_ids, d_topic, d_sub, 16.6, 11.4, 0.41)
    say("companies")
    company = _companies(rng, device_ids, patent_ids, n_assignees=max(2_000, n_patents // 15))
    patent_chars = np.clip(rng.normal(760, 236, n_patents), 89, 1_200).astype(np.int64)
    device_chars = np.clip(rng.lognormal(np.log(350), 0.7, n_devices), 12, 2_049).astype(np.int64)
    scorer = None
    if lexical:
        say("tf-idf")
        pat_tfidf, idf = _tfidf(rng, patent_chars, p_topic, 200_000, None)
        dev_tfidf, _ = _tfidf(rng, device_chars, d_topic, 200_000, idf)
        # the patents column-major: the scorer's by-term matrix (`patents.T.tocsr()`) is then that same
        # storage, not a second copy (the same sorted entries, so the same scores)
        scorer = TfidfScorer(devices=dev_tfidf, patents=pat_tfidf.tocsc())
        del pat_tfidf
    return SyntheticCorpus(device_ids, patent_ids, device_vectors, patent_vectors, device_mentions,
                           patent_mentions, company, device_chars, patent_chars, scorer, d_topic, p_topic)


def stage2_inputs(corpus: SyntheticCorpus, config: PipelineConfig, ontology: Ontology | None = None) -> Stage2Inputs:
    """The same Stage2Inputs the pipeline builds (pipeline.stage2_inputs), from the synthetic corpus."""
    onto = ontology or load_meddevonto()
    cfg = config.candidates
    matcher = EntityMatcher(doc_keys(corpus.device_mentions, onto, cfg), doc_keys(corpus.patent_mentions, onto, cfg),
                            corpus.patent_ids, cfg)
    return Stage2Inputs(corpus.device_ids, corpus.device_vectors, corpus.patent_ids, corpus.patent_vectors,
                        corpus.company_matches, matcher, corpus.lexical)


def synthetic_gold(pool: pl.DataFrame, n_devices: int = 54, per_device: int = 8, seed: int = 0) -> pl.DataFrame:
    """Gold links for a seeded subset of devices: the pool pairs with the best noisy latent score."""
    devices = pool["fda_id"].unique().sort()
    rng = np.random.default_rng(seed)
    chosen = rng.choice(devices.to_numpy(), size=min(n_devices, devices.len()), replace=False).tolist()
    sub = pool.filter(pl.col("fda_id").is_in(chosen))
    latent = (sub["score_total"].to_numpy() / 40 + sub["sim_z_device"].to_numpy()
              + rng.normal(0, 1.0, sub.height))
    return (sub.select("fda_id", "pat_id").with_columns(pl.Series("_l", latent))
            .sort("_l", descending=True).group_by("fda_id", maintain_order=True).head(per_device)
            .select("fda_id", "pat_id").sort("fda_id", "pat_id"))

