"""The image-tree check and the configuration arithmetic."""

import datetime as dt

import pytest

from ehrxqa_pipeline.ehr.checks import check_images_present
from ehrxqa_pipeline.ehr.config import DbConfig, schemas
from ehrxqa_pipeline.sources.schema import image_relpath


def test_every_tb_cxr_image_must_have_a_jpeg(built, tmp_path):
    con, results = built
    schema = results["gold"].schema
    rows = con.execute(f"SELECT subject_id, study_id, image_id FROM {schema}.tb_cxr ORDER BY row_id").fetchall()
    for r in rows:
        path = tmp_path / image_relpath(*r)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\xff\xd8\xff\xd9")
    assert check_images_present(con, schema, tmp_path) == (True, {"images": len(rows), "missing": 0,
                                                                  "first_missing": []})
    (tmp_path / image_relpath(*rows[-1])).unlink()
    ok, details = check_images_present(con, schema, tmp_path)
    assert not ok and details["missing"] == 1
    ok, details = check_images_present(con, schema, None)
    assert ok and "skipped" in details


def test_current_patient_count_is_exact_round_half_up():
    c = DbConfig()
    assert (c.n_patients("silver"), c.n_patients("gold")) == (800, 400)
    assert (c.n_current(800), c.n_current(400), c.n_current(25), c.n_current(24), c.n_current(0)) == (80, 40, 3, 2, 0)
    assert DbConfig(current_ratio=0.15).n_current(30) == 5  # 4.5 -> 5 (banker's rounding would give 4)


def test_year_weights_and_bounds():
    c = DbConfig()
    years, p = c.year_weights()
    assert years == list(range(2100, 2106)) and abs(sum(p) - 1) < 1e-12
    assert p == sorted(p) and p[-1] == pytest.approx(6 / 21)
    assert c.current_time == dt.datetime(2105, 12, 31, 23, 59)
    assert c.sql_bounds() == ("TIMESTAMP '2100-01-01 00:00:00'", "TIMESTAMP '2105-12-31 23:59:00'")
    assert schemas("gold") == ("ehr_gold", "ehr_gold_answers", "ehr_gold_build")


@pytest.mark.parametrize("kwargs", [dict(current_ratio=1.5), dict(silver_patients=-1),
                                    dict(current_time=dt.datetime(2099, 1, 1)), dict(time_span=9)])
def test_bad_configs_are_refused(kwargs):
    with pytest.raises(ValueError):
        DbConfig(**kwargs)
    with pytest.raises(ValueError):
        DbConfig().n_patients("train")
