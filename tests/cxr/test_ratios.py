"""CTR / MTR from boxes: zero-width and missing boxes give null ratios with a named reason."""

import duckdb
import pytest

from ehrxqa_pipeline.cxr.ratios import ratios_sql

NORMAL = {"right lung": (10, 90), "left lung": (110, 190), "cardiac silhouette": (60, 140),
          "upper mediastinum": (80, 120)}  # thorax 180: CTR 80/180, MTR 40/180


def _ratios(boxes: dict[str, dict[str, tuple[float, float]]]) -> dict:
    con = duckdb.connect()
    rows = [(image, name, float(x1), float(x2)) for image, b in boxes.items() for name, (x1, x2) in b.items()]
    con.execute("CREATE TABLE bx (image_id VARCHAR, bbox_name VARCHAR, x1 DOUBLE, x2 DOUBLE)")
    con.executemany("INSERT INTO bx VALUES (?, ?, ?, ?)", rows)
    return {r[0]: r[1:] for r in con.execute(ratios_sql("SELECT * FROM bx")).fetchall()}


@pytest.mark.parametrize("change, expected", [
    ({}, (80 / 180, 40 / 180, None, None)),
    ({"cardiac silhouette": (60, 60)}, (None, 40 / 180, "zero_width_box:cardiac silhouette", None)),
    ({"upper mediastinum": (100, 100)}, (80 / 180, None, None, "zero_width_box:upper mediastinum")),
    ({"right lung": (50, 50)}, (None, None, "zero_width_box:right lung", "zero_width_box:right lung")),
    ({"left lung": (150, 150)}, (None, None, "zero_width_box:left lung", "zero_width_box:left lung")),
    ({"cardiac silhouette": None}, (None, 40 / 180, "missing_box:cardiac silhouette", None)),
    ({"right lung": None, "cardiac silhouette": (60, 60)},
     (None, None, "missing_box:right lung", "missing_box:right lung")),
    ({"right lung": (200, 210), "left lung": (10, 20)}, (None, None, "nonpositive_thorax", "nonpositive_thorax")),
    ({"cardiac silhouette": (140, 60)}, (80 / 180, 40 / 180, None, None)),  # x2 < x1 (gold coord224): |width|
])
def test_ratio_and_reason(change, expected):
    boxes = {k: v for k, v in {**NORMAL, **change}.items() if v is not None}
    got = _ratios({"img": boxes})["img"]
    assert got[2:] == expected[2:]
    assert [g if g is None else pytest.approx(g) for g in got[:2]] == list(expected[:2])
