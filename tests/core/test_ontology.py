"""MedDevOnto: the shipped data is consistent, and the lookups and METHOD §2.3 rules behave."""

import re

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.ontology import (
    CATEGORY_WEIGHTS,
    Ontology,
    category_for_tui,
    load_meddevonto,
    normalize_term,
)


@pytest.fixture(scope="module")
def onto() -> Ontology:
    return load_meddevonto()


def _small(concepts, terms=(), parents=()) -> Ontology:
    return Ontology.from_frames(
        pl.DataFrame(
            [{"concept_id": cid, "preferred_name": name, "tui": "T074", "category": "DEVICE_TYPE",
              "weight": 1.0, "is_anchor": False, "source": "test"} for cid, name in concepts],
            schema=schemas.CONCEPTS,
        ),
        pl.DataFrame(list(terms), schema={"term": pl.String, "concept_id": pl.String}, orient="row"),
        pl.DataFrame(list(parents), schema=schemas.CONCEPT_PARENTS, orient="row"),
    )


# ------------------------------------------------------------------ the shipped data


def test_shipped_ontology_loads_with_declared_schemas(onto):
    assert onto.concepts.schema == schemas.CONCEPTS
    assert onto.terms.schema == schemas.CONCEPT_TERMS
    assert onto.hierarchy.schema == schemas.CONCEPT_PARENTS
    assert 150 <= onto.concepts.height <= 400
    assert onto.terms.height > 2 * onto.concepts.height
    assert load_meddevonto() is onto  # cached


def test_referential_integrity_and_unique_ids(onto):
    ids = set(onto.concepts["concept_id"].to_list())
    assert len(ids) == onto.concepts.height
    assert set(onto.terms["concept_id"].to_list()) <= ids
    assert set(onto.hierarchy["concept_id"].to_list()) | set(onto.hierarchy["parent_id"].to_list()) <= ids
    assert all(re.fullmatch(r"C\d{7}|MDO:\d{4}", cid) for cid in ids)
    for name, cid in onto.concepts.select("preferred_name", "concept_id").iter_rows():
        assert onto.lookup(name) == cid, name


def test_no_normalised_term_names_two_concepts(onto):
    clashes = onto.terms.group_by("term_norm").agg(pl.col("concept_id").n_unique().alias("n")).filter(pl.col("n") > 1)
    assert clashes.height == 0, clashes


def test_weights_follow_categories_and_categories_follow_tuis(onto):
    for row in onto.concepts.iter_rows(named=True):
        assert row["weight"] == CATEGORY_WEIGHTS[row["category"]], row
        assert row["category"] != "OTHER_LONG"
        if row["category"] != category_for_tui(row["tui"])[0]:
            assert "curated" in row["source"], row  # every exception is documented on its row


def test_anchor_concepts_are_the_method_anchors(onto):
    anchors = set(onto.concepts.filter(pl.col("is_anchor"))["preferred_name"].to_list())
    assert anchors == {
        "stent", "catheter", "valve", "pacemaker", "defibrillator", "graft", "implant", "prosthesis",
        "sensor", "electrode", "balloon", "occluder", "closure device", "lead", "ablation", "pacing",
        "defibrillation", "monitoring", "percutaneous coronary intervention", "embolic protection",
        "vascular closure", "valve repair",
    }
    assert onto.category(onto.lookup("electrode")) == "SENSOR" and onto.weight(onto.lookup("electrode")) == 0.8
    assert onto.category(onto.lookup("defibrillator")) == "DEVICE_TYPE"
    assert onto.category(onto.lookup("defibrillation")) == "PROCESS"


# ------------------------------------------------------------------ normalisation


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("Stent-Graft", "stent graft"),
        ("  Drug\u2013Eluting   STENT ", "drug eluting stent"),
        ("Ablation, Catheter", "ablation catheter"),
        ("CRT-D", "crt d"),
        ("Crohn's disease", "crohns disease"),
        ("Caf\u00e9\u2122 valve", "cafe valve"),
        ("poly(L-lactic acid)", "poly l lactic acid"),
        ("ePTFE_graft", "eptfe graft"),
        ("", ""),
    ],
)
def test_normalize_term(raw, norm):
    assert normalize_term(raw) == norm


def test_normalize_term_is_idempotent_on_every_shipped_term(onto):
    for norm in onto.terms["term_norm"].to_list():
        assert normalize_term(norm) == norm


# ------------------------------------------------------------------ lookups


@pytest.mark.parametrize(
    ("term", "preferred"),
    [
        ("ICD", "implantable cardioverter defibrillator"),
        ("implantable cardioverter-defibrillator", "implantable cardioverter defibrillator"),
        ("CRT-D", "cardiac resynchronization therapy defibrillator"),
        ("CRT-P", "cardiac resynchronization therapy pacemaker"),
        ("TAVR", "transcatheter aortic valve replacement"),
        ("TAVI", "transcatheter aortic valve replacement"),
        ("PTCA", "coronary angioplasty"),
        ("PCI", "percutaneous coronary intervention"),
        ("DES", "drug-eluting stent"),
        ("drug eluting stent", "drug-eluting stent"),
        ("IVL", "intravascular lithotripsy"),
        ("VAD", "ventricular assist device"),
        ("LVAD", "left ventricular assist device"),
        ("AAA", "abdominal aortic aneurysm"),
        ("PFO", "patent foramen ovale"),
        ("ASD", "atrial septal defect"),
        ("Stent-Graft", "stent graft"),
        ("ePTFE", "expanded polytetrafluoroethylene"),
        ("AVNRT", "atrioventricular nodal reentrant tachycardia"),
        ("ischemic heart disease", "myocardial ischemia"),
        ("SFA", "superficial femoral artery"),
        ("monorail", "rapid exchange catheter"),
        ("OTW", "over-the-wire catheter"),
        ("PTRA", "renal angioplasty"),
        ("medical electrical lead", "lead"),
        # FDA product-code device_type_names, in FDA's inverted form
        ("Catheters, Transluminal Coronary Angioplasty, Percutaneous", "angioplasty balloon"),
        ("Device, Hemostasis, Vascular", "vascular closure device"),
        ("Aortic Valve, Prosthesis, Percutaneously Delivered", "transcatheter aortic valve"),
        ("System, Appendage Closure, Left Atrial", "left atrial appendage occluder"),
        # device-text forms that lost "THE" ("CATHETER" -> "CA TER")
        ("CA TER", "catheter"),
        ("PTCA balloon ca ter", "angioplasty balloon"),
        ("TRANSCA TER AORTIC VALVE", "transcatheter aortic valve"),
        ("pros sis", "prosthesis"),
    ],
)
def test_lookup_finds_synonyms_and_abbreviations(onto, term, preferred):
    cid = onto.lookup(term)
    assert cid is not None and onto.concept(cid).preferred_name == preferred


def test_known_cuis_and_unknown_terms(onto):
    assert onto.lookup("stent") == "C0038257"
    assert onto.lookup("catheter") == "C0085590"
    assert onto.lookup("percutaneous coronary intervention") == "C1532338"
    assert onto.lookup("atrial fibrillation") == "C0004238"
    assert onto.lookup("stents") is None  # terms are singular; the extractor lemmatises
    assert onto.lookup("flux capacitor") is None


def test_parents_children_and_ancestors(onto):
    des, coronary, stent = onto.lookup("DES"), onto.lookup("coronary stent"), onto.lookup("stent")
    assert onto.parents(des) == frozenset({coronary})
    assert coronary in onto.children(stent) and des not in onto.children(stent)
    assert {coronary, stent} <= onto.ancestors(des)
    assert onto.lookup("cardiac implantable electronic device") in onto.parents(onto.lookup("ICD"))
    assert onto.parents(onto.lookup("RF ablation")) == frozenset({onto.lookup("cardiac ablation")})
    assert onto.parents(stent) == frozenset()


def test_coverage_additions_sit_under_their_parents(onto):
    ischemia = onto.lookup("myocardial ischemia")
    assert ischemia in onto.parents(onto.lookup("coronary artery disease"))
    vta = onto.lookup("ventricular tachyarrhythmia")
    assert vta in onto.parents(onto.lookup("ventricular tachycardia"))
    assert vta in onto.parents(onto.lookup("ventricular fibrillation"))
    assert onto.lookup("tachycardia") in onto.parents(vta)
    assert onto.lookup("heart block") in onto.parents(onto.lookup("LBBB"))
    assert onto.lookup("catheter") in onto.parents(onto.lookup("rapid exchange catheter"))
    assert onto.lookup("stent") in onto.parents(onto.lookup("venous stent"))
    iliac = onto.lookup("iliac artery")
    assert onto.category(iliac) == "OTHER" and onto.parents(iliac) == frozenset()


_THE_LOST = re.compile(r"\b(ca|transca|pros|biopros|endopros|microca) (ter|ters|terization|sis|tic)\b"
                       r"|\ba (rectomy|rosclero)|\brapy\b")


def test_device_text_forms_without_the_have_their_source_term(onto):
    """Every "THE"-less form ("ca ter") is the "the"-deleted form of a term of the same concept."""
    forms: dict[str, set[str]] = {}
    for term, cid in onto.terms.select("term", "concept_id").iter_rows():
        forms.setdefault(cid, set()).add(term.lower())
    seen = 0
    for norm, cid in onto.terms.select("term_norm", "concept_id").iter_rows():
        if _THE_LOST.search(norm):
            seen += 1
            sources = {normalize_term(t.replace("the", " ")) for t in forms[cid] if "the" in t}
            assert norm in sources, (norm, cid)
    assert seen >= 20
    assert onto.is_anchor_term("ca ter")  # a form of the catheter anchor is an anchor term too


def test_anchor_terms(onto):
    terms = onto.anchor_terms()
    assert {"stent", "catheter", "pci", "percutaneous coronary intervention", "electrode", "lead"} <= terms
    assert onto.is_anchor_term("PCI") and onto.is_anchor_term("Cardiac pacing")
    assert not onto.is_anchor_term("guidewire") and not onto.is_anchor_term("drug eluting stent")


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("stent", ("DEVICE_TYPE", 1.0)),  # an anchor term
        ("pacing", ("PROCESS", 1.0)),
        ("electrode", ("SENSOR", 0.8)),
        ("sensor", ("SENSOR", 0.8)),
        ("bi-directional steerable catheter", ("DEVICE_TYPE", 1.0)),  # head word is an anchor
        ("ecg monitoring", ("PROCESS", 1.0)),
        ("valve repair", ("PROCESS", 1.0)),  # METHOD §2.3 Tier-S examples
        ("valve replacement", ("DEVICE_TYPE", 1.0)),
        ("ablation, catheter", ("DEVICE_TYPE", 1.0)),
        ("cardiac ablation", ("PROCESS", 1.0)),
        ("vascular closure device", ("DEVICE_TYPE", 1.0)),
        ("vascular closure", ("PROCESS", 1.0)),
        ("guidewire", ("OTHER_LONG", 0.5)),  # long single word, not an anchor
        ("scaffold", ("OTHER_LONG", 0.5)),
        ("pulse generator", ("OTHER_LONG", 0.5)),  # multi-word
        ("imaging system", ("OTHER_LONG", 0.5)),
        ("icd", ("OTHER", 0.1)),  # short
        ("tube", ("OTHER", 0.1)),
        ("", ("OTHER", 0.1)),
    ],
)
def test_tier_s_category(onto, term, expected):
    assert onto.tier_s_category(normalize_term(term)) == expected


@pytest.mark.parametrize(
    ("tui", "expected"),
    [
        ("T074", ("DEVICE_TYPE", 1.0)), ("T061", ("PROCESS", 1.0)), ("T060", ("PROCESS", 1.0)),
        ("T058", ("PROCESS", 1.0)), ("T170", ("ALGORITHM", 1.0)), ("T047", ("INDICATION", 1.0)),
        ("T046", ("INDICATION", 1.0)), ("T191", ("INDICATION", 1.0)), ("T122", ("SUBSTANCE", 0.5)),
        ("T121", ("SUBSTANCE", 0.5)), ("t109", ("SUBSTANCE", 0.5)), ("T073", ("OTHER", 0.1)),
        ("T023", ("OTHER", 0.1)), ("T169", ("OTHER", 0.1)), (None, ("OTHER", 0.1)),
    ],
)
def test_category_for_tui(tui, expected):
    assert category_for_tui(tui) == expected


# ------------------------------------------------------------------ validation in from_frames


def test_from_frames_builds_a_small_ontology():
    onto = _small([("A", "stent"), ("B", "coronary stent")], terms=[("cs", "B")], parents=[("B", "A")])
    assert onto.lookup("CS") == "B"
    assert onto.parents("B") == frozenset({"A"}) and onto.children("A") == frozenset({"B"})
    assert onto.terms.schema == schemas.CONCEPT_TERMS


def test_from_frames_rejects_a_dangling_parent():
    with pytest.raises(ValueError, match="parents reference unknown concepts.*'Z'"):
        _small([("A", "stent"), ("B", "coronary stent")], parents=[("B", "Z")])


def test_from_frames_rejects_a_term_of_an_unknown_concept():
    with pytest.raises(ValueError, match="terms reference unknown concepts.*'Q'"):
        _small([("A", "stent")], terms=[("tube", "Q")])


def test_from_frames_rejects_duplicate_ids_and_cycles():
    with pytest.raises(ValueError, match="duplicate concept ids.*'A'"):
        _small([("A", "stent"), ("A", "catheter")])
    with pytest.raises(ValueError, match="parent cycle"):
        _small([("A", "a"), ("B", "b"), ("C", "c")], parents=[("A", "B"), ("B", "C"), ("C", "A")])
    with pytest.raises(ValueError, match="own parent"):
        _small([("A", "a")], parents=[("A", "A")])


def test_ambiguous_term_resolution_does_not_depend_on_row_order():
    rows = [("X2", "lead"), ("X1", "lead wire")]
    terms = [("lead", "X1"), ("wire", "X2"), ("wire", "X1")]
    for order in (1, -1):
        onto = _small(rows[::order], terms=terms[::order])
        assert onto.lookup("lead") == "X2"  # the concept whose preferred name it is
        assert onto.lookup("wire") == "X1"  # otherwise the smallest id
