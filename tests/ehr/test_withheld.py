"""Patients withheld from MIMIC-IV (the generated source withholds 5 % of its CXR patients): a named,
counted exclusion of both databases; the MIMIC-CXR-VQA splits keep them, without a gender."""

import json

import pytest

from ehrxqa_pipeline.cxr.splits import split_images_sql
from ehrxqa_pipeline.release.tables import rejected_counts
from ehrxqa_pipeline.sources.schema import DEMO_MANIFEST

WHICH = ("silver", "gold")
MISSING = "subject_id NOT IN (SELECT subject_id FROM ingest.patients)"


@pytest.fixture(scope="module")
def withheld(ehr_inputs):
    root, _, _ = ehr_inputs
    return json.loads((root / DEMO_MANIFEST).read_text())["planted"]["withheld"]


def test_source_plants_silver_and_gold_patients(withheld):
    # 100 CXR patients (12 gold) at 5 %: 4 silver and 1 gold patient with 28 and 5 images
    assert withheld["patients"] == {"silver": 4, "gold": 1}
    assert withheld["images"] == {"silver": 28, "gold": 5}


@pytest.mark.parametrize("which", WHICH)
def test_withheld_candidates_are_a_counted_named_exclusion(built, withheld, which):
    con, results = built
    r = results[which]
    build = r.build_schema
    # the silver database samples the valid split: with valid_fraction 0.5 this source's 4 withheld silver
    # patients all fall in it; the gold database samples every gold patient
    assert r.rejected["patients"]["not_in_mimiciv"] == withheld["patients"][which]
    assert r.metadata()["rejected_patients_not_in_mimiciv"] == withheld["patients"][which]
    rows = con.execute(f"SELECT subject_id, gender, dob FROM {build}.patients_rejected "
                       f"WHERE reason = 'not_in_mimiciv' ORDER BY 1").fetchall()
    expected = con.execute(f"SELECT DISTINCT subject_id FROM {build}._images WHERE {MISSING} ORDER BY 1").fetchall()
    assert [(s,) for s, _, _ in rows] == expected and all(g is None and d is None for _, g, d in rows)
    # the other reason of a candidate set aside before the draw is named the same way
    assert con.execute(f"SELECT count(*) FROM {build}.patients_rejected WHERE reason = 'no_eligible_admission'"
                       ).fetchone()[0] == r.candidates["candidates"] - r.candidates["eligible"] - len(rows)
    # nothing of theirs reaches the database
    for table in ("patients", "admissions", "tb_cxr"):
        assert con.execute(f"SELECT count(*) FROM {r.schema}.{table} WHERE {MISSING}").fetchone()[0] == 0
    # the datasheet's "Rows set aside" table lists them with their count
    assert {"table": f"{build}.patients_rejected", "reason": "not_in_mimiciv",
            "rows": withheld["patients"][which]} in rejected_counts(con)


def test_splits_keep_withheld_patients_without_gender(built, withheld):
    """MIMIC-CXR-VQA needs no EHR data: the withheld patients' images stay in the splits with a null gender
    (no gender question is asked about them); every other image has its patient's gender."""
    con, _ = built
    per_side = dict(con.execute(f"""SELECT split = 'test', count(DISTINCT subject_id) FROM ({split_images_sql()})
                                    WHERE {MISSING} GROUP BY 1""").fetchall())
    assert per_side == {False: withheld["patients"]["silver"], True: withheld["patients"]["gold"]}
    assert con.execute(f"SELECT count(*) FILTER (gender IS NULL), count(*) FILTER ({MISSING}) "
                       f"FROM ({split_images_sql()})").fetchone() == (16, 16)
