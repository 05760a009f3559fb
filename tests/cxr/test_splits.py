"""Splits on a generated source: patient-disjoint, about 95:5, deterministic, gold = test."""

import duckdb
import polars as pl
import pytest

from ehrxqa_pipeline.cxr.splits import SIDES, assign_patient_splits, build_splits, patients_in_several_splits, split_images_sql
from tests.pipeline_steps import build_through_labels

ALL = f"({split_images_sql()})"  # both sides' split tables
TABLES = ("patients", "cxr_metadata", "silver_bbox", "gold_bbox", "silver_relations", "gold_relations")


@pytest.fixture(scope="module")
def con(small_source, tmp_path_factory):
    root, _ = small_source
    con = duckdb.connect()
    build_through_labels(con, root, tmp_path_factory.mktemp("stage"), TABLES)
    return con


def _build_both(con) -> dict:
    """Both sides' splits; the per-split counts and the refusals of the two together."""
    out = [build_splits(con, side, seed=0) for side in SIDES]
    return {"per_split": {**out[0]["per_split"], **out[1]["per_split"]},
            "rejected_no_labels": out[0]["rejected_no_labels"] + out[1]["rejected_no_labels"],
            "null_ratios_by_reason": [o["null_ratios_by_reason"] for o in out]}


def test_splits_are_patient_disjoint_and_complete(con):
    out = _build_both(con)
    assert patients_in_several_splits(con) == 0
    per = out["per_split"]
    assert set(per) == {"train", "valid", "test"}
    assert {r[0] for r in con.execute("SELECT DISTINCT split FROM splits.silver").fetchall()} == {"train", "valid"}
    assert {r[0] for r in con.execute("SELECT DISTINCT split FROM splits.gold").fetchall()} == {"test"}
    silver = con.execute("SELECT count(*) FROM cxr_cohort.silver").fetchone()[0]
    gold_first = con.execute("SELECT count(*) FROM cxr_cohort.gold WHERE study_order = 1").fetchone()[0]
    assert per["train"]["images"] + per["valid"]["images"] + per["test"]["images"] + out["rejected_no_labels"] \
        == silver + gold_first
    test_subjects = {r[0] for r in con.execute(f"SELECT subject_id FROM {ALL} WHERE split = 'test'").fetchall()}
    gold_subjects = {r[0] for r in con.execute("SELECT DISTINCT patient_id FROM ingest.gold_relations").fetchall()}
    assert test_subjects <= gold_subjects
    assert con.execute(f"SELECT count(*) FROM {ALL} WHERE ctr IS NULL").fetchone()[0] == 0
    # gender comes from MIMIC-IV: null exactly for the patients it withholds (the source withholds 5 %), whose
    # images stay in the splits
    withheld = "subject_id NOT IN (SELECT subject_id FROM ingest.patients)"
    nulls, absent = con.execute(f"SELECT count(*) FILTER (gender IS NULL), count(*) FILTER ({withheld}) "
                                f"FROM {ALL}").fetchone()
    assert nulls == absent > 0


def test_split_is_deterministic_and_seeded(con):
    _build_both(con)
    a = con.execute(f"SELECT image_id, split FROM {ALL} ORDER BY image_id").fetchall()
    _build_both(con)
    assert a == con.execute(f"SELECT image_id, split FROM {ALL} ORDER BY image_id").fetchall()


def test_a_side_reads_only_its_own_labels(con):
    """The gold side's tables stay as they are when every silver label is gone, and the other way round
    (issue 23: an edit on one side never re-splits the other)."""
    _build_both(con)
    tables = {side: [f"splits.{side}", f"splits.{side}_rejected", f"splits.{side}_ratio_gaps"] for side in SIDES}
    before = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for ts in tables.values() for t in ts}
    for side, other in (("silver", "gold"), ("gold", "silver")):
        con.execute(f"CREATE TEMP TABLE _keep AS SELECT * FROM cxr_labels.{side}")
        con.execute(f"CREATE TEMP TABLE _keep_images AS SELECT * FROM cxr_labels.{side}_images")
        try:
            con.execute(f"DELETE FROM cxr_labels.{side}; DELETE FROM cxr_labels.{side}_images")
            build_splits(con, other, seed=0)
            assert all(con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() == before[t] for t in tables[other])
            build_splits(con, side, seed=0)  # ... while its own side now has no labelled image
            assert con.execute(f"SELECT count(*) FROM splits.{side}").fetchone()[0] == 0
        finally:
            con.execute(f"INSERT INTO cxr_labels.{side} SELECT * FROM _keep; "
                        f"INSERT INTO cxr_labels.{side}_images SELECT * FROM _keep_images; DROP TABLE _keep; "
                        "DROP TABLE _keep_images")
            build_splits(con, side, seed=0)


def test_assignment_is_stratified_and_about_five_percent():
    # 2,000 patients: half never abnormal, half always abnormal.
    studies = pl.DataFrame({"subject_id": list(range(2000)), "study_id": list(range(2000)),
                            "abnormal": [i % 2 == 0 for i in range(2000)]})
    out = assign_patient_splits(studies, seed=1).join(studies, on="subject_id")
    valid = out.filter(pl.col("split") == "valid")
    assert valid.height == 100
    assert valid["abnormal"].sum() == 50  # each stratum contributes its own 5%
    other = assign_patient_splits(studies, seed=2)
    assert not other["split"].equals(out.sort("subject_id")["split"])


def test_zero_width_box_gives_a_null_ratio_with_its_reason(con):
    """Silver image: cardiac silhouette of width 0 -> CTR null (MTR kept); gold image: a zero-width gold
    lung falls back to the silver boxes. Each null ratio has a row in its side's ratio_gaps table."""
    _build_both(con)
    train, test = (con.execute(f"SELECT min(image_id) FROM {ALL} WHERE split = '{s}'").fetchone()[0]
                   for s in ("train", "test"))
    con.execute("CREATE TEMP TABLE _bb AS SELECT * FROM ingest.silver_bbox; "
                "CREATE TEMP TABLE _gb AS SELECT * FROM ingest.gold_bbox")
    try:
        con.execute("UPDATE ingest.silver_bbox SET x2 = x1, width = 0 WHERE object_id = ? || '_cardiac silhouette'",
                    [train])
        con.execute("UPDATE ingest.gold_bbox SET coord224 = '[50, 20, 50, 200]' "
                    "WHERE image_id = ? || '.dcm' AND bbox_name = 'right lung'", [test])
        out = _build_both(con)
        assert out["null_ratios_by_reason"] == [{"ctr": {"zero_width_box:cardiac silhouette": 1}}, {}]
        assert con.execute("SELECT * FROM splits.gold_ratio_gaps").fetchall() == []
        assert con.execute("SELECT * FROM splits.silver_ratio_gaps").fetchall() == [
            (train, "train", "ctr", "zero_width_box:cardiac silhouette", None)]
        row = con.execute("SELECT ctr, mtr FROM splits.silver WHERE image_id = ?", [train]).fetchone()
        assert row[0] is None and row[1] > 0
        assert con.execute("SELECT ctr > 0 AND mtr > 0 FROM splits.gold WHERE image_id = ?", [test]).fetchone()[0]
        con.execute("UPDATE ingest.silver_bbox SET x2 = x1, width = 0 WHERE object_id = ? || '_right lung'", [test])
        build_splits(con, "gold", seed=0)
        assert con.execute("SELECT * FROM splits.gold_ratio_gaps WHERE image_id = ?", [test]).fetchall() == [
            (test, "test", r, "zero_width_box:right lung", "zero_width_box:right lung") for r in ("ctr", "mtr")]
    finally:
        con.execute("CREATE OR REPLACE TABLE ingest.silver_bbox AS SELECT * FROM _bb; "
                    "CREATE OR REPLACE TABLE ingest.gold_bbox AS SELECT * FROM _gb; DROP TABLE _bb; DROP TABLE _gb")
        _build_both(con)
