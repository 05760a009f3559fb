"""CTR / MTR (cxr/ratios.py) on hand-made box rows: the silver and gold box readers (object_id, coord224)
feeding ratios_sql, several images in one query, and the order of the null-ratio reasons; every ratio and
reason derived by hand in the test."""

from __future__ import annotations

import duckdb
import pytest

from ehrxqa_pipeline.cxr.ratios import GOLD_BOXES_SQL, SILVER_BOXES_SQL, ratios_sql

RL, LL, HEART, MED = "right lung", "left lung", "cardiac silhouette", "upper mediastinum"


def ratios(con, boxes_sql: str) -> dict[str, tuple]:
    """image -> (ctr, mtr, ctr_reason, mtr_reason)."""
    return {r[0]: r[1:] for r in con.execute(ratios_sql(boxes_sql)).fetchall()}


def silver(rows) -> duckdb.DuckDBPyConnection:
    """ingest.silver_bbox from (dicom_id, bbox_name, x1, x2) rows (object_id = dicom_id_bbox_name)."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest")
    con.execute("CREATE TABLE ingest.silver_bbox (object_id VARCHAR, bbox_name VARCHAR, x1 DOUBLE, x2 DOUBLE)")
    con.executemany("INSERT INTO ingest.silver_bbox VALUES (?, ?, ?, ?)",
                    [(f"{d}_{name}", name, x1, x2) for d, name, x1, x2 in rows])
    return con


def boxes(image: str, **widths) -> list[tuple]:
    """The four ratio boxes of one image, x ranges given per box (None: no such box)."""
    default = {RL: (10, 90), LL: (110, 190), HEART: (60, 140), MED: (80, 120)}  # thorax 190 - 10 = 180
    spans = {**default, **{k.replace("_", " "): v for k, v in widths.items()}}
    return [(image, name, float(span[0]), float(span[1])) for name, span in spans.items() if span is not None]


def test_silver_boxes_give_each_image_its_own_ratios():
    con = silver([
        *boxes("img-a"),  # CTR 80 / 180, MTR 40 / 180
        ("img-a", "trachea", 0.0, 224.0),  # not a ratio box: ignored
        *boxes("img-b", left_lung=None),  # no thorax edge: both ratios null
        *boxes("img-c", cardiac_silhouette=(100, 100)),  # a flat heart: CTR null, MTR 40 / 180
        ("img-d", "trachea", 90.0, 130.0),  # none of the four boxes: no row at all
    ])
    got = ratios(con, SILVER_BOXES_SQL)
    assert sorted(got) == ["img-a", "img-b", "img-c"]
    assert got["img-a"] == (pytest.approx(80 / 180), pytest.approx(40 / 180), None, None)
    assert got["img-b"] == (None, None, "missing_box:left lung", "missing_box:left lung")
    assert got["img-c"] == (None, pytest.approx(40 / 180), "zero_width_box:cardiac silhouette", None)


def test_gold_boxes_take_x1_and_x2_from_coord224():
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest")
    con.execute("CREATE TABLE ingest.gold_bbox (image_id VARCHAR, bbox_name VARCHAR, coord224 VARCHAR)")
    con.executemany("INSERT INTO ingest.gold_bbox VALUES (?, ?, ?)", [
        ("g1.dcm", RL, "[12.5, 30, 92.5, 180]"),
        ("g1.dcm", LL, "[110, 25, 187.5, 175]"),
        ("g1.dcm", HEART, "[140, 100, 60, 170]"),  # x2 < x1: the width is still 80
        ("g1.dcm", MED, "[85.0,20.0,115.0,90.0]"),  # no spaces
    ])
    # thorax = 187.5 - 12.5 = 175 (x, not y: the y fields would give 175 - 30 = 145)
    assert ratios(con, GOLD_BOXES_SQL) == {"g1": (pytest.approx(80 / 175), pytest.approx(30 / 175), None, None)}


@pytest.mark.parametrize("change, reasons", [
    pytest.param(dict(right_lung=None, left_lung=None), ("missing_box:right lung",) * 2, id="right_lung_first"),
    pytest.param(dict(left_lung=(150, 150), cardiac_silhouette=(60, 60)), ("zero_width_box:left lung",) * 2,
                 id="lungs_before_own_box"),
    pytest.param(dict(cardiac_silhouette=None, upper_mediastinum=(100, 100)),
                 ("missing_box:cardiac silhouette", "zero_width_box:upper mediastinum"), id="each_ratio_its_box"),
    # thorax 20 - 200 < 0, but the flat heart is named first; MTR only has the thorax against it
    pytest.param(dict(right_lung=(200, 210), left_lung=(10, 20), cardiac_silhouette=(60, 60)),
                 ("zero_width_box:cardiac silhouette", "nonpositive_thorax"), id="box_before_thorax"),
    pytest.param(dict(right_lung=(100, 110), left_lung=(20, 100)), ("nonpositive_thorax",) * 2,
                 id="zero_thorax"),  # 100 - 100 = 0 is not positive
])
def test_the_first_failing_check_names_the_null_ratio(change, reasons):
    got = ratios(silver(boxes("img", **change)), SILVER_BOXES_SQL)["img"]
    assert got[:2] == (None, None) and got[2:] == reasons


def test_the_first_box_that_cannot_carry_the_ratio_is_named_as_documented():
    """Box by box (right lung, left lung, own box): a flat right lung is named before a missing left lung."""
    got = ratios(silver(boxes("img", right_lung=(50, 50), left_lung=None)), SILVER_BOXES_SQL)["img"]
    assert got[2:] == ("zero_width_box:right lung", "zero_width_box:right lung")
