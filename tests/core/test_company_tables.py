"""The shipped company tables, and a corpus's own read and quarantined as its other tables are
(meddevkg_core.company_tables)."""

from __future__ import annotations

import json
from datetime import date

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.company_names import normalize_company
from meddevkg_core.company_resolver import CompanyMatch, CompanyResolver
from meddevkg_core.company_tables import acquisitions_frame, aliases_frame
from meddevkg_core.errors import CorpusError

# ----------------------------------------------------------------------------- shipped tables


def test_every_alias_row_has_a_source() -> None:
    for frame in (aliases_frame(), acquisitions_frame()):
        assert frame["source"].null_count() == 0
        assert (frame["source"].str.len_chars() > 5).all()


def test_acquisitions_frame_has_the_verified_deals() -> None:
    acq = acquisitions_frame()
    assert acq.schema == schemas.ACQUISITIONS
    assert acq["close_date"].null_count() == 0
    deals = {(a, b): d for a, b, d, _ in acq.iter_rows()}
    for key, when in {
        ("ABBOTT", "ST JUDE MEDICAL"): date(2017, 1, 4),
        ("BOSTON SCIENTIFIC", "GUIDANT"): date(2006, 4, 21),
        ("MEDTRONIC", "COVIDIEN"): date(2015, 1, 26),
        ("ENDOLOGIX", "TRIVASCULAR"): date(2016, 2, 3),
        ("BD", "C R BARD"): date(2017, 12, 29),
        ("CARDINAL HEALTH", "CORDIS"): date(2015, 10, 4),
        ("ST JUDE MEDICAL", "THORATEC"): date(2015, 10, 8),
        ("MEDTRONIC", "ATS MEDICAL"): date(2010, 8, 12),
        ("ABBOTT", "TENDYNE"): date(2015, 9, 2),
        ("LIVANOVA", "CYBERONICS"): date(2015, 10, 19),
    }.items():
        assert deals[key] == when


def test_alias_keys_are_unique_after_normalisation() -> None:
    keys = [normalize_company(a) for a in aliases_frame()["alias"]]
    assert None not in keys
    assert len(keys) == len(set(keys))


# ----------------------------------------------------------------------------- a corpus's own tables


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_corpus_company_tables_are_read_in_every_corpus_format(tmp_path, suffix) -> None:
    """README: a corpus table may be Parquet, CSV or JSON Lines; these two were ignored."""
    tables = {"acquisitions": {"acquirer": ["ZETA MEDICAL"], "acquired": ["OMEGA DEVICES"],
                               "close_date": ["2015-06-01"], "source": ["memo"]},
              "aliases": {"alias": ["ZetaX Inc"], "canonical": ["ZETA MEDICAL"]},
              "alliances": {"company_a": ["ZETA MEDICAL"], "company_b": ["GADGETCO"], "start_date": ["2016-01-01"]}}
    for name, columns in tables.items():
        df = pl.DataFrame(columns)
        df.write_parquet(tmp_path / f"{name}{suffix}") if suffix == ".parquet" else df.write_ndjson(
            tmp_path / f"{name}{suffix}")
    r = CompanyResolver.for_corpus(tmp_path)
    assert r.company_relation("ZetaX Inc", date(2016, 1, 1), "OMEGA DEVICES") == CompanyMatch(
        "acquired", "ZETA MEDICAL <- OMEGA DEVICES (2015-06-01)")
    assert r.company_relation("GADGETCO", None, "ZETA MEDICAL").kind == "partner"
    assert r.rejected.height == 0
    (tmp_path / "acquisitions.csv").write_text("acquirer,acquired,close_date\n")
    with pytest.raises(CorpusError, match="'acquisitions' is given twice"):
        CompanyResolver.for_corpus(tmp_path)


def test_corpus_company_rows_the_resolver_cannot_use_are_quarantined_not_passed_over(tmp_path) -> None:
    # each was read as valid, and then left out of the resolver (or overrode an earlier row) without a word
    (tmp_path / "aliases.csv").write_text("alias,canonical\nZetaX,&\nZeta Devices,ZETA MEDICAL\n"
                                          "ZETA DEVICES INC.,OMEGA DEVICES\nZeta Devices Corp,Zeta Medical Inc\n")
    (tmp_path / "acquisitions.csv").write_text("acquirer,acquired,close_date\nInc.,OMEGA DEVICES,2015-06-01\n"
                                               "ZETA MEDICAL,OMEGA DEVICES,2015-06-01\n")
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\n"
                                            "Zeta Devices,Zeta Medical Inc.,2016-01-01\n"
                                            "Biosense Webster,Johnson & Johnson,2016-01-01\n"
                                            "ZETA MEDICAL,GADGETCO,2016-01-01\n")
    r = CompanyResolver.for_corpus(tmp_path)
    assert r.rejected.select("source", "record_key", "reason").rows() == [
        ("aliases.csv", "aliases:ZetaX|&", "canonical '&' names no company once normalised"),
        ("aliases.csv", "aliases:ZETA DEVICES INC.|OMEGA DEVICES", "alias 'ZETA DEVICES INC.' is alias 'Zeta "
                                                                    "Devices' once normalised (ZETA DEVICES), which "
                                                                    "names ZETA MEDICAL"),
        ("acquisitions.csv", "acquisitions:Inc.|OMEGA DEVICES", "acquirer 'Inc.' names no company once normalised"),
        ("alliances.csv", "alliances:Zeta Devices|Zeta Medical Inc.", "company_a and company_b are one company "
                                                                       "(ZETA MEDICAL)"),
        ("alliances.csv", "alliances:Biosense Webster|Johnson & Johnson", "company_a and company_b are one company "
                                                                           "(JOHNSON AND JOHNSON)")]
    assert json.loads(r.rejected["record"][2]) == {"acquirer": "Inc.", "acquired": "OMEGA DEVICES",
                                                   "close_date": "2015-06-01", "source": None}
    assert r.resolve("Zeta Devices") == "ZETA MEDICAL"  # the usable rows are all used
    assert [d.acquired for d in r.deals if d.acquirer == "ZETA MEDICAL"] == ["OMEGA DEVICES"]
    assert r.company_relation("GADGETCO", None, "ZETA MEDICAL").kind == "partner"


def test_corpus_company_rows_missing_a_value_are_quarantined_not_dropped(tmp_path) -> None:
    (tmp_path / "acquisitions.csv").write_text(
        "acquirer,acquired,close_date,source\nZETA MEDICAL,OMEGA DEVICES,,memo\nZETA MEDICAL,,2016-01-01,memo\n"
        "ZETA MEDICAL,ALPHA DEVICES,2017-01-01,memo\n")
    (tmp_path / "alliances.csv").write_text("company_a,company_b,start_date\nZETA MEDICAL,GADGETCO, \n")
    (tmp_path / "aliases.csv").write_text("alias,canonical\nZetaX Inc,\n")
    r = CompanyResolver.for_corpus(tmp_path)
    assert [d.acquired for d in r.deals if d.acquirer == "ZETA MEDICAL"] == ["ALPHA DEVICES"]
    assert r.rejected.select("source", "record_key", "reason").rows() == [
        ("aliases.csv", "aliases#0:ZetaX Inc", "missing canonical"),
        ("acquisitions.csv", "acquisitions#0:ZETA MEDICAL", "missing close_date"),
        ("acquisitions.csv", "acquisitions#1:ZETA MEDICAL", "missing acquired"),
        ("alliances.csv", "alliances#0:ZETA MEDICAL", "missing start_date"),
    ]
    assert r.rejected.schema == schemas.REJECTED_RECORDS
    assert r.with_former_owners(False).rejected is r.rejected
    (tmp_path / "acquisitions.jsonl").write_text(
        '{"acquirer": "ZETA MEDICAL", "acquired": null, "close_date": "2016-01-01"}\nnot json\n')
    (tmp_path / "acquisitions.csv").unlink()
    reasons = CompanyResolver.for_corpus(tmp_path).rejected.filter(pl.col("source") == "acquisitions.jsonl")["reason"]
    assert reasons[0] == "missing acquired" and reasons[1].startswith("line 2: invalid JSON")


@pytest.mark.parametrize(("name", "data", "problem"), [
    ("aliases.csv", b"name,canonical_name\nZetaX Inc,ZETA MEDICAL\n",
     r"table 'aliases' has no column 'alias' \(columns: name, canonical_name\)"),
    ("acquisitions.csv", b"acquirer,acquired,date\nZETA MEDICAL,OMEGA DEVICES,2015-06-01\n",
     r"table 'acquisitions' has no column 'close_date' \(columns: acquirer, acquired, date\)"),
])
def test_a_corpus_company_table_without_a_required_column_is_a_corpus_error_naming_it(tmp_path, name, data,
                                                                                       problem) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(CorpusError, match=f"{name}: {problem}"):
        CompanyResolver.for_corpus(tmp_path)


def test_corpus_company_rows_with_a_bad_date_or_bytes_are_quarantined_as_the_corpus_tables_rows_are(
        tmp_path) -> None:
    (tmp_path / "acquisitions.csv").write_text(
        "acquirer,acquired,close_date\nZETA MEDICAL,OMEGA DEVICES,2099-13-45\nZETA MEDICAL,OMEGA DEVICES,2015-06-01\n"
        "ZETA MEDICAL,OMEGA DEVICES,2015-06-01\n")
    (tmp_path / "aliases.csv").write_bytes("alias,canonical\nZetaX Inc,ZETA M\u00c9DICAL\n".encode("latin-1"))
    (tmp_path / "alliances.jsonl").write_bytes(
        '{"company_a": "ZETA M\u00c9DICAL", "company_b": "X", "start_date": "2001-01-01"}'.encode("latin-1"))
    r = CompanyResolver.for_corpus(tmp_path)
    assert [d.close_date for d in r.deals if d.acquirer == "ZETA MEDICAL"] == [date(2015, 6, 1)]
    assert r.rejected.select("source", "reason").rows() == [
        ("aliases.csv", "bytes that are not UTF-8 in canonical (read as U+FFFD)"),
        ("acquisitions.csv", "unparseable close_date (want YYYY-MM-DD)"),
        ("acquisitions.csv", "duplicate key of row 1"),
        ("alliances.jsonl", "bytes that are not UTF-8 in company_a (read as U+FFFD)"),
    ]
