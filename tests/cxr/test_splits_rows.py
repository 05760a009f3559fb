"""The split SQL of each side (``cxr.splits.build_splits``) on hand-made rows in an in-memory DuckDB: which
images each side keeps or refuses, their ratios and null-ratio reasons, sex, order, and the patient-disjoint
valid draw. Every expected value is worked out by hand in the test."""

import datetime as dt

import duckdb
import pytest

from ehrxqa_pipeline.cxr.splits import build_splits, patients_in_several_splits

T0 = dt.datetime(2150, 1, 1)
# Boxes whose ratios are easy to check: thorax = left lung's right edge (200) - right lung's left edge (0) = 200;
# heart 100 wide -> CTR 0.5; upper mediastinum 50 wide -> MTR 0.25.
BOXES = {"right lung": (0, 90), "left lung": (110, 200), "cardiac silhouette": (50, 150),
         "upper mediastinum": (75, 125)}


def _cohort(con, side: str, rows: list[tuple]) -> None:
    """rows: (subject_id, study_id, image_id, study_order)."""
    con.execute(f"""CREATE OR REPLACE TABLE cxr_cohort.{side} (subject_id BIGINT, study_id BIGINT, image_id VARCHAR,
                    view_position VARCHAR, study_datetime TIMESTAMP, study_order INTEGER, n_rows INTEGER,
                    n_columns INTEGER)""")
    con.executemany(f"INSERT INTO cxr_cohort.{side} VALUES (?, ?, ?, 'PA', ?, ?, 2048, 2048)",
                    [(s, st, i, T0 + dt.timedelta(days=o), o) for s, st, i, o in rows])


def _labels(con, side: str, images: list[str], affirmed: list[tuple[str, str, str]]) -> None:
    """images: the labelled images (``<side>_images``); affirmed: (image, object, attribute) rows."""
    con.execute(f"CREATE OR REPLACE TABLE cxr_labels.{side}_images (image_id VARCHAR, study_id BIGINT)")
    con.executemany(f"INSERT INTO cxr_labels.{side}_images VALUES (?, 0)", [(i,) for i in images])
    con.execute(f"CREATE OR REPLACE TABLE cxr_labels.{side} (image_id VARCHAR, object VARCHAR, attribute VARCHAR)")
    if affirmed:
        con.executemany(f"INSERT INTO cxr_labels.{side} VALUES (?, ?, ?)", affirmed)


def _silver_boxes(con, images: list[str], without: dict[str, str] | None = None) -> None:
    """Every ratio box of ``images``; ``without``: image -> a box it lacks."""
    rows = [(f"{i}_{name}", name, lo, hi) for i in images for name, (lo, hi) in BOXES.items()
            if (without or {}).get(i) != name]
    con.execute("CREATE OR REPLACE TABLE ingest.silver_bbox (object_id VARCHAR, bbox_name VARCHAR, x1 DOUBLE, "
                "x2 DOUBLE)")
    con.executemany("INSERT INTO ingest.silver_bbox VALUES (?, ?, ?, ?)", rows)


@pytest.fixture
def con():
    con = duckdb.connect()
    for schema in ("cxr_cohort", "cxr_labels", "ingest"):
        con.execute(f"CREATE SCHEMA {schema}")
    con.execute("CREATE TABLE ingest.patients (subject_id BIGINT, gender VARCHAR)")
    con.executemany("INSERT INTO ingest.patients VALUES (?, ?)", [(10000001, "F"), (10000002, "M"), (10000003, "F"),
                                                                   (10000004, "M"), (11000001, "F")])
    con.execute("CREATE TABLE ingest.gold_bbox (image_id VARCHAR, bbox_name VARCHAR, coord224 VARCHAR)")
    return con


def _rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_gold_side_keeps_labelled_first_studies_with_gold_boxes_first(con):
    # g1: first study, labelled, a finding -> test, abnormal; gold boxes make its heart 60 wide (CTR 0.3)
    # g2: first study, labelled, no finding -> test, not abnormal; no gold boxes -> silver ratios (0.5 / 0.25)
    # g3: a later study of patient 1 -> not a test image (only first studies are)
    # g4: first study without any label row -> refused: no_labels
    # g5: first study, labelled, patient withheld from MIMIC-IV -> test with a null sex
    _cohort(con, "gold", [(10000001, 1, "g1", 1), (10000002, 2, "g2", 1), (10000001, 3, "g3", 2),
                          (10000003, 4, "g4", 1), (19999999, 5, "g5", 1)])
    _labels(con, "gold", ["g1", "g2", "g3", "g5"], [("g1", "left lung", "lung opacity")])
    _silver_boxes(con, ["g1", "g2", "g3", "g4", "g5"])
    con.executemany("INSERT INTO ingest.gold_bbox VALUES (?, ?, ?)", [
        ("g1.dcm", "right lung", "[0, 10, 90, 100]"), ("g1.dcm", "left lung", "[110, 10, 200, 100]"),
        ("g1.dcm", "cardiac silhouette", "[70, 10, 130, 100]")])  # no gold upper mediastinum: silver MTR
    out = build_splits(con, "gold", seed=0)
    assert _rows(con, "SELECT image_id, subject_id, split, gender, round(ctr, 6), round(mtr, 6), abnormal, "
                      "image_path FROM splits.gold") == [
        ("g1", 10000001, "test", "F", 0.3, 0.25, True, "p10/p10000001/s1/g1.jpg"),
        ("g2", 10000002, "test", "M", 0.5, 0.25, False, "p10/p10000002/s2/g2.jpg"),
        ("g5", 19999999, "test", None, 0.5, 0.25, False, "p19/p19999999/s5/g5.jpg")]
    assert _rows(con, "SELECT * FROM splits.gold_rejected") == [("g4", 10000003, 4, "gold", "no_labels")]
    assert _rows(con, "SELECT count(*) FROM splits.gold_ratio_gaps") == [(0,)]
    assert out == {"per_split": {"test": {"images": 3, "patients": 3, "abnormal_share": round(1 / 3, 4)}},
                   "rejected_no_labels": 1, "null_ratios_by_reason": {}}
    # the predictions read the gold cohort and the boxes, not splits.gold (issue 23): they see the same ratios,
    # g1's from both box sets; g3 is a later study the gold database asks about (no ratio); g4, unlabelled, too
    from ehrxqa_pipeline.vqa.workspace import GOLD_COHORT_IMAGES_SQL

    assert _rows(con, f"SELECT image_id, split, round(ctr, 6), round(mtr, 6) FROM ({GOLD_COHORT_IMAGES_SQL})") == [
        ("g1", "test", 0.3, 0.25), ("g2", "test", 0.5, 0.25), ("g3", "ehrxqa", None, None), ("g4", "test", 0.5, 0.25),
        ("g5", "test", 0.5, 0.25)]


def test_a_null_ratio_names_each_box_set_tried(con):
    # s1 lacks its silver heart: a train image tries the silver boxes only (gold_reason null)
    # g1 lacks its silver heart and has no gold boxes: a test image names both sets (gold: no_boxes)
    _cohort(con, "silver", [(10000001, 1, "s1", 1)])
    _labels(con, "silver", ["s1"], [])
    _cohort(con, "gold", [(10000002, 2, "g1", 1)])
    _labels(con, "gold", ["g1"], [])
    _silver_boxes(con, ["s1", "g1"], without={"s1": "cardiac silhouette", "g1": "cardiac silhouette"})
    build_splits(con, "silver", seed=0, valid_fraction=0.0)
    build_splits(con, "gold", seed=0)
    assert _rows(con, "SELECT * FROM splits.silver_ratio_gaps") == [
        ("s1", "train", "ctr", "missing_box:cardiac silhouette", None)]
    assert _rows(con, "SELECT * FROM splits.gold_ratio_gaps") == [
        ("g1", "test", "ctr", "missing_box:cardiac silhouette", "no_boxes")]
    assert _rows(con, "SELECT ctr IS NULL, round(mtr, 6) FROM splits.silver") == [(True, 0.25)]


def test_silver_side_draws_whole_patients_for_valid(con):
    # four patients, 2 studies each; one refused image without labels (p4's second study).
    # valid quota: round(4 x 0.25) = 1 patient; every image of that patient is valid, the rest train.
    rows = [(10000000 + p, 100 * p + k, f"s{p}{k}", k) for p in range(1, 5) for k in (1, 2)]
    _cohort(con, "silver", rows)
    labelled = [r[2] for r in rows if r[2] != "s42"]
    _labels(con, "silver", labelled, [("s11", "left lung", "lung opacity"), ("s21", "left lung", "lung opacity")])
    _silver_boxes(con, [r[2] for r in rows])
    out = build_splits(con, "silver", seed=3, valid_fraction=0.25)
    got = _rows(con, "SELECT image_id, split FROM splits.silver")
    valid = {i for i, s in got if s == "valid"}
    assert len({i[:2] for i in valid}) == 1 and len(valid) in (1, 2)  # one patient: its labelled images
    patient = next(iter(valid))[:2]
    assert valid == {i for i in labelled if i.startswith(patient)}
    assert [s for _, s in got] == sorted((s for _, s in got), key=["train", "valid"].index)  # train rows first
    assert patients_in_several_splits(con, sides=("silver",)) == 0
    assert _rows(con, "SELECT * FROM splits.silver_rejected") == [("s42", 10000004, 402, "silver", "no_labels")]
    assert _rows(con, "SELECT image_id FROM splits.silver WHERE abnormal ORDER BY 1") == [("s11",), ("s21",)]
    assert out["per_split"]["train"]["images"] + out["per_split"]["valid"]["images"] == 7
    # the same seed gives the same split
    again = build_splits(con, "silver", seed=3, valid_fraction=0.25)
    assert again == out and _rows(con, "SELECT image_id, split FROM splits.silver") == got


def test_a_side_is_checked_by_name():
    with pytest.raises(ValueError, match="side must be one of"):
        build_splits(duckdb.connect(), "bronze", seed=0)
