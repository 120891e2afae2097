"""Company-name normalisation and assignee splitting (meddevkg_core.company_names)."""

from __future__ import annotations

import pytest

from meddevkg_core.company_names import normalize_company, split_assignees
from meddevkg_core.company_tables import acquisitions_frame, aliases_frame, alliances_frame

# ----------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("St. Jude Medical, Inc.", "ST JUDE MEDICAL"),
        ("Johnson & Johnson", "JOHNSON AND JOHNSON"),
        ("Guidant Corp.", "GUIDANT"),
        ("Biotronik GmbH & Co. KG", "BIOTRONIK"),
        ("BIOTRONIK AND", "BIOTRONIK"),
        ("Goodman Co., Ltd.", "GOODMAN"),
        ("Occlutech Holding AG", "OCCLUTECH"),
        ("Rex Medical, L.P.", "REX MEDICAL"),
        ("TERUMO KABUSHIKI KAISHA", "TERUMO"),
        ("The Spectranetics Corp.", "SPECTRANETICS"),
        ("Biosensors International USA, Inc.", "BIOSENSORS INTL USA"),
        ("Alliance Medical Technologies, Inc.", "ALLIANCE MEDICAL TECH"),
        ("OrbusNeich Medical (Shenzhen) Co., Ltd.", "ORBUSNEICH MEDICAL SHENZHEN"),
        ("Meadox Medicals, Div. Boston Scientific Corp.", "BOSTON SCIENTIFIC"),
        ("MEADOX MEDICALS DIV BOSTON SCIENTIFIC", "BOSTON SCIENTIFIC"),
        ("St. Jude Medical, Cardiac Rhythm Management Divisi", "ST JUDE MEDICAL CARDIAC RHYTHM MANAGEMENT"),
        ("Graphic Controls D.B.A. Vermed", "VERMED"),
        ("Micro Therapeutics, Inc. d/b/a ev3 Neurovascular", "EV3 NEUROVASCULAR"),
        ("  Édwards   Lifesciences, LLC ", "EDWARDS LIFESCIENCES"),
        ("W L GORE", "W L GORE"),
    ],
)
def test_normalize_examples(raw: str, expected: str) -> None:
    assert normalize_company(raw) == expected


@pytest.mark.parametrize("raw", [None, "", "   ", "...", "Inc.", 42])
def test_normalize_empty_and_garbage_is_none(raw: object) -> None:
    assert normalize_company(raw) is None  # type: ignore[arg-type]


def test_normalize_is_idempotent_on_canonical_ids() -> None:
    acq, pacts = acquisitions_frame(), alliances_frame()
    ids = (set(aliases_frame()["canonical"]) | set(acq["acquirer"]) | set(acq["acquired"])
           | set(pacts["company_a"]) | set(pacts["company_b"]))
    assert {c for c in ids if normalize_company(c) != c} == set()
    assert pacts["source"].null_count() == 0 and acq["source"].null_count() == 0


# ----------------------------------------------------------------------------- multi-assignee


def test_split_assignees() -> None:
    assert split_assignees("Foo Inc.; Bar Corp | Baz ;") == ["Foo Inc.", "Bar Corp", "Baz"]
    assert split_assignees(None) == []
    assert split_assignees("  ") == []
