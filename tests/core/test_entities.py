"""The offline extractor: dictionary and noun-phrase mentions, grounded and mapped, and the mention table."""

import json

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.concept_mapping import COMPONENT, MECHANISM
from meddevkg_core.entities import extract_mentions, load_spacy_pipeline
from meddevkg_core.grounding import ground_span
from meddevkg_core.ontology import load_meddevonto

TEXTS = {
    "P1": "A drug-eluting stent is advanced by a bi-directional steerable catheter to treat coronary "
          "artery disease. The drug-eluting stents release sirolimus from a polymer coating.",
    "P2": "An implantable cardioverter defibrillator (ICD) has two electrodes and a pacing lead. "
          "Sensing may lead to ablation of the tissue with radiofrequency ablation. The device and the "
          "system are shown.",
    "P3": "A stent graft system for endovascular aneurysm repair comprises a bifurcated graft.",
}


@pytest.fixture(scope="module")
def onto():
    return load_meddevonto()


@pytest.fixture(scope="module")
def nlp():
    return load_spacy_pipeline()


@pytest.fixture(scope="module")
def result(onto, nlp):
    docs = pl.DataFrame({"doc_id": list(TEXTS), "text": list(TEXTS.values())})
    return extract_mentions(docs, onto, nlp, batch_size=2)


def _mention(result, doc_id, mention):
    rows = result.mentions.filter((pl.col("doc_id") == doc_id) & (pl.col("mention") == mention))
    assert rows.height == 1, (doc_id, mention, result.mentions.filter(pl.col("doc_id") == doc_id)["mention"].to_list())
    return rows.row(0, named=True)


# ------------------------------------------------------------------ extraction


def test_exact_and_head_noun_mentions(result, onto):
    des = _mention(result, "P1", "drug-eluting stent")
    assert (des["concept_id"], des["map_tier"], des["norm"]) == (onto.lookup("DES"), "exact", "drug eluting stent")
    steerable = _mention(result, "P1", "bi-directional steerable catheter")
    assert (steerable["concept_id"], steerable["map_tier"]) == ("C0085590", "head_noun")
    assert _mention(result, "P2", "ICD")["concept_id"] == "C0162589"
    graft = _mention(result, "P3", "stent graft system")
    assert (graft["concept_id"], graft["map_tier"]) == (onto.lookup("stent graft"), "head_noun")


def test_offsets_slice_back_to_the_mention_and_every_span_is_grounded(result):
    for row in result.mentions.iter_rows(named=True):
        assert TEXTS[row["doc_id"]][row["start"]:row["end"]] == row["mention"]
        assert row["grounding"] == "exact"
    assert result.mentions.schema == schemas.MENTIONS
    assert result.rejected.height == 0


def test_plural_heads_are_lemmatised_and_one_mention_per_norm(result):
    p1 = result.mentions.filter(pl.col("doc_id") == "P1")
    assert p1["norm"].is_unique().all()
    des = p1.filter(pl.col("norm") == "drug eluting stent")
    assert des.height == 1 and des["start"].item() == TEXTS["P1"].index("drug-eluting stent")  # the first one
    assert _mention(result, "P2", "electrodes")["norm"] == "electrode"


def test_entity_types(result):
    assert _mention(result, "P1", "drug-eluting stent")["entity_type"] == COMPONENT
    assert _mention(result, "P1", "sirolimus")["entity_type"] == COMPONENT
    assert _mention(result, "P1", "coronary artery disease")["entity_type"] == MECHANISM
    assert _mention(result, "P2", "radiofrequency ablation")["entity_type"] == MECHANISM
    assert _mention(result, "P3", "endovascular aneurysm repair")["entity_type"] == MECHANISM


def test_generic_singletons_and_verbs_are_not_mentions(result, onto):
    norms = set(result.mentions.filter(pl.col("doc_id") == "P2")["norm"].to_list())
    assert {"device", "system"}.isdisjoint(norms)  # "The device and the system": generic alone
    assert "lead" not in norms  # "Sensing may lead to ablation": a verb, not a pacing lead
    assert _mention(result, "P2", "pacing lead")["concept_id"] == onto.lookup("pacing lead")


ONE_WORD = {
    "W1": "The electrode is placed against the vein.",
    "W2": "The kit holds one electrode, one lead, one valve and one implant.",
    "W3": "Heating may lead to errors; the surgeon is able to implant it and to shunt blood.",
    "W4": "Imaging may lead to ablation. Such devices lead to noise.",
}


def test_a_dictionary_word_alone_in_its_segment_is_a_verb_only_after_a_verbal_cue(onto, nlp):
    """Tagged without context, "electrode" reads as an adverb and "valve" or "lead" as a verb: such
    a word is dropped only after a verbal cue ("may lead", "to implant"), and not when it names a
    process, which a verb may name ("lead to ablation"). In a longer segment its tag stands."""
    docs = pl.DataFrame({"doc_id": list(ONE_WORD), "text": list(ONE_WORD.values())})
    mentions = extract_mentions(docs, onto, nlp).mentions
    norms = {d: set(mentions.filter(pl.col("doc_id") == d)["norm"].to_list()) for d in ONE_WORD}
    assert {"electrode", "vein"} <= norms["W1"]
    assert {"electrode", "lead", "valve", "implant"} <= norms["W2"]
    assert {"lead", "implant", "shunt"}.isdisjoint(norms["W3"])
    assert "ablation" in norms["W4"] and "lead" not in norms["W4"]
    electrode = _mention(extract_mentions(docs.head(1), onto, nlp), "W1", "electrode")
    assert (electrode["concept_id"], electrode["map_tier"]) == (onto.lookup("electrode"), "exact")


def test_extraction_is_deterministic_and_independent_of_document_order(onto, nlp, result):
    docs = pl.DataFrame({"doc_id": list(TEXTS)[::-1], "text": list(TEXTS.values())[::-1]})
    again = extract_mentions(docs, onto, nlp, batch_size=1).mentions.sort("doc_id", "start", "norm")
    assert again.equals(result.mentions.sort("doc_id", "start", "norm"))


def test_missing_text_is_rejected_not_dropped(onto, nlp):
    docs = pl.DataFrame({"doc_id": ["E1", "E2", None, "E4"], "text": [None, "   ", "A stent.", "A stent."]})
    out = extract_mentions(docs, onto, nlp)
    assert out.mentions["doc_id"].to_list() == ["E4"]
    assert out.rejected.schema == schemas.REJECTED_RECORDS
    assert out.rejected.select("record_key", "reason").rows() == [
        ("E1", "missing text"), ("E2", "missing text"), (None, "missing doc_id")]
    assert set(out.rejected["source"]) == {"entities"}
    assert json.loads(out.rejected["record"][0]) == {"doc_id": "E1"}


def test_extraction_leaves_the_garbage_collector_as_it_found_it(onto, nlp):
    import gc

    docs = pl.DataFrame({"doc_id": ["G1"], "text": ["A stent."]})
    assert gc.isenabled()
    extract_mentions(docs, onto, nlp)
    assert gc.isenabled()
    gc.disable()
    try:
        extract_mentions(docs, onto, nlp)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_threaded_extraction_restores_the_thread_switch_interval(onto, nlp):
    import sys

    docs = pl.DataFrame({"doc_id": ["G1", "G2"], "text": ["A stent.", "A balloon catheter."]})
    before = sys.getswitchinterval()
    one = extract_mentions(docs, onto, nlp)
    assert sys.getswitchinterval() == before
    assert extract_mentions(docs, onto, nlp, n_process=2).mentions.equals(one.mentions)
    assert sys.getswitchinterval() == before


def test_empty_input_gives_empty_typed_tables(onto, nlp):
    out = extract_mentions(pl.DataFrame(schema={"doc_id": pl.String, "text": pl.String}), onto, nlp)
    assert out.mentions.height == 0 and out.mentions.schema == schemas.MENTIONS
    assert out.rejected.height == 0 and out.rejected.schema == schemas.REJECTED_RECORDS


def test_background_tagging_threads_give_the_same_mentions(onto, nlp, result):
    docs = pl.DataFrame({"doc_id": list(TEXTS), "text": list(TEXTS.values())})
    threaded = extract_mentions(docs, onto, nlp, batch_size=2, n_process=2)
    assert threaded.mentions.equals(result.mentions) and threaded.rejected.equals(result.rejected)


# ------------------------------------------------------------------ the real corpus, against the reference


def _reference_extraction(docs: pl.DataFrame, onto, nlp) -> pl.DataFrame:
    """The extractor as it was before its caches (commit 6d4d01c), kept here as the reference:
    tokens read one by one, segments tagged by `nlp.pipe` on packed Docs, plural lemmas by the
    pipeline's lemmatizer, each document's words and phrases built anew, spaCy's filter_spans.
    One change on purpose since: a one-word dictionary hit alone in its segment no longer needs a
    noun tag (tagged without context, "electrode" was an adverb); it is dropped only when a verbal
    cue precedes it and its concept is not a process."""
    from spacy.tokens import Doc
    from spacy.util import filter_spans

    from meddevkg_core.concept_mapping import MECHANISM_CATEGORIES, ConceptMatch, entity_type
    from meddevkg_core.entities import _Candidate, _chunk_candidate, _dedupe, _phrase_matcher
    from meddevkg_core.ontology import normalize_term
    from meddevkg_core.packed_tagging import tag_packed
    from meddevkg_core.phrases import (
        NOMINAL,
        NOMINAL_CONTEXT,
        VERBAL_CONTEXT,
        Tokens,
        Word,
        base_noun_phrases,
        segments,
    )
    from meddevkg_core.segment_tagger import SEGMENTS_PER_DOC, pos_table

    def words_of(toks, spans, tags):
        out = {}
        for start, end in spans:
            cue = toks.lower[start - 1] if start > 0 else ""
            for i, (pos, tag, lemma) in enumerate(tags[tuple(toks.text[start:end])], start):
                if i == start and cue in VERBAL_CONTEXT and pos in NOMINAL:
                    pos, tag = "VERB", "VB"
                elif i == start and cue in NOMINAL_CONTEXT and pos == "VERB" and end - start == 1:
                    pos, tag = "NOUN", "NN"
                out[i] = Word(i, toks.idx[i], toks.text[i], toks.lower[i], pos, tag, lemma, toks.is_stop[i])
        return out

    def tokens_of(doc):
        text, lower, idx, stop, brk = [], [], [], [], []
        prev_ws = True
        for tok in doc:
            t, ws = tok.text, tok.whitespace_
            text.append(t)
            lower.append(tok.lower_)
            idx.append(tok.idx)
            stop.append(tok.is_stop)
            if tok.is_space or tok.is_stop:
                b = True
            elif tok.is_punct:
                b = not (t == "-" and not ws and not prev_ws)
            else:
                b = not any(c.isalpha() for c in t)
            brk.append(b)
            prev_ws = bool(ws)
        return Tokens(text, lower, idx, stop, brk)

    valid = [(d, t) for d, t in docs.select("doc_id", "text").rows() if d is not None and (t or "").strip()]
    tokenized = list(nlp.tokenizer.pipe(t for _, t in valid))
    arrays = [tokens_of(doc) for doc in tokenized]
    spans = [segments(toks) for toks in arrays]
    distinct = sorted({tuple(toks.text[a:b]) for toks, sp in zip(arrays, spans, strict=True) for a, b in sp})
    raw = tag_packed(distinct, nlp, 1, SEGMENTS_PER_DOC)
    plurals = sorted({w.lower() for key, tags in raw.items() for w, t in zip(key, tags, strict=True)
                      if t in ("NNS", "NNPS")})
    lemma_doc = nlp.get_pipe("lemmatizer")(Doc(nlp.vocab, words=plurals, pos=["NOUN"] * len(plurals),
                                                 tags=["NNS"] * len(plurals)))
    lemmas = {t.text: t.lemma_.lower() for t in lemma_doc}
    to_pos = pos_table(nlp)
    tags = {key: tuple((to_pos.get(t, "X"), t, lemmas.get(w.lower(), w.lower()) if t in ("NNS", "NNPS") else w.lower())
                       for w, t in zip(key, ts, strict=True)) for key, ts in raw.items()}
    matcher = _phrase_matcher(onto, nlp)
    cache: dict = {}
    rows = []
    for (doc_id, text), doc, toks, doc_spans in zip(valid, tokenized, arrays, spans, strict=True):
        words = words_of(toks, doc_spans, tags)
        alone = {a for a, b in doc_spans if b == a + 1}
        found = []
        for match_id, start, end in matcher(doc):
            span = doc[start:end]
            concept_id = doc.vocab.strings[match_id]
            pos = words[start].pos_ if start in words else ""
            process = onto.category(concept_id) in MECHANISM_CATEGORIES
            if len(span) == 1 and start in alone:
                if start > 0 and doc[start - 1].lower_ in VERBAL_CONTEXT and not process:
                    continue
            elif len(span) == 1 and pos not in NOMINAL and not (pos == "VERB" and process):
                continue
            span.label_ = concept_id
            found.append(span)
        cands = []
        for span in filter_spans(found):
            norm = normalize_term(span.text)
            match = ConceptMatch(norm, span.label_, "exact")
            cands.append(_Candidate(span.start_char, span.end_char, span.text, match,
                                    entity_type(span.label_, norm.split()[-1], onto)))
        for start, end in doc_spans:
            for phrase, head in base_noun_phrases([words[i] for i in range(start, end)]):
                if (chunk := _chunk_candidate(phrase, head, text, onto, cache)) is not None:
                    cands.append(chunk[1])
        for cand in _dedupe(cands):
            g = ground_span(cand.mention, text, expected_start=cand.start)
            rows.append({"doc_id": doc_id, "mention": text[g.start:g.end], "start": g.start, "end": g.end,
                         "entity_type": cand.entity_type, "norm": cand.match.norm,
                         "concept_id": cand.match.concept_id, "map_tier": cand.match.map_tier,
                         "grounding": g.kind})
    return schemas.conform(pl.DataFrame(rows, schema=schemas.MENTIONS), schemas.MENTIONS)


@pytest.mark.real_data
def test_real_abstracts_give_exactly_the_reference_mentions(benchmark_dir, onto, nlp):
    """On 400 real patent abstracts and 100 device texts, with one ontology object: the cached,
    layer-level extractor (one thread and with background tagging) finds exactly the mentions,
    offsets, norms, types and concepts of the reference."""
    from meddevkg_core.corpus import read_corpus

    corpus = read_corpus(benchmark_dir)
    docs = pl.concat([
        corpus.patents.select(pl.col("pat_id").alias("doc_id"), "text").sample(400, seed=7),
        corpus.devices.select(pl.col("fda_id").alias("doc_id"), "text").sample(100, seed=7),
    ])
    reference = _reference_extraction(docs, onto, nlp)
    assert reference.height > 5000
    for n_process in (1, 2):
        assert extract_mentions(docs, onto, nlp, n_process=n_process).mentions.equals(reference)
