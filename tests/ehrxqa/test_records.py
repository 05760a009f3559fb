"""EHRXQA release records: published key order and field types, byte-identical files, the template catalog
as data, and the consistency check over stored items (fails on a tampered answer)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG
from ehrxqa_pipeline.questions.ehrxqa.records import (RECORD_FIELDS, build_records, catalog_rows, check_stored,
                                                      stored_frame, write_release)
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, sample_ehrxqa

TEMPLATES = (1001, 1107, 1146, 2001, 2309, 3000, 3101, 3205, 4000, 4105)


def _sample(db_path, seed=0):
    files = DatabaseFiles(db_path, db_path)
    return sample_ehrxqa(files, files, seed=seed, caps=SamplingCaps(train_valid=6, test=2),
                         templates=[BY_INDEX[i] for i in TEMPLATES])


@pytest.fixture(scope="module")
def frame(db_path):
    return stored_frame(_sample(db_path))


def test_records_have_the_published_keys_in_order_and_types(frame):
    records = build_records(frame)
    assert set(records) == {"train", "valid", "test"} and all(records.values())
    by_text = {t.text: t.index for t in CATALOG}
    for split, recs in records.items():
        assert [r["id"] for r in recs] == list(range(len(recs)))
        order = [by_text[r["q_tag"]] for r in recs]
        assert order == sorted(order)  # template index order (draw order within: checked in test_sampling)
        for r in recs:
            assert tuple(r) == RECORD_FIELDS
            assert r["db_id"] == "mimic_iv_cxr" and r["split"] == split
            assert r["question"] == r["template"] == r["template"].lower() and "{" not in r["question"]
            assert isinstance(r["query"], str) and r["query"] == r["query"].lower() and "func_vqa" in r["query"]
            assert isinstance(r["value"], dict) and isinstance(r["o_tag"], dict) and isinstance(r["v_tag"], dict)
            assert isinstance(r["t_tag"], list) and len(r["t_tag"]) == 5 and all(isinstance(x, str) for x in r["t_tag"])
            assert isinstance(r["q_tag"], str) and isinstance(r["tag"], str)
            assert r["para_type"] == "none" and r["is_impossible"] is False
            assert isinstance(r["answer"], list)
            assert "_gold_program" not in r


def test_release_files_are_byte_identical_and_indented_4(db_path, frame, tmp_path):
    a = write_release(build_records(frame), tmp_path / "a")
    b = write_release(build_records(stored_frame(_sample(db_path))), tmp_path / "b")
    for split in ("train", "valid", "test"):
        assert a[split].read_bytes() == b[split].read_bytes()
        text = a[split].read_text()
        assert text.startswith("[\n    {\n        \"db_id\"") and text.endswith("]\n")
        assert json.loads(text) == build_records(frame)[split]


def test_consistency_check_passes_then_fails_on_a_tampered_answer(db_path, frame):
    files = {"silver": DatabaseFiles(db_path, db_path), "gold": DatabaseFiles(db_path, db_path)}
    assert check_stored(frame, files) == []
    row = frame.filter(pl.col("template_index") == 3205).row(0, named=True)  # "has ... had any": [0] or [1]
    tampered = frame.with_columns(answer=pl.when((pl.col("split") == row["split"]) & (pl.col("id") == row["id"]))
                                  .then(pl.lit(json.dumps([1 - json.loads(row["answer"])[0]])))
                                  .otherwise(pl.col("answer")))
    progress = []
    bad = check_stored(tampered, files, log=progress.append)
    assert len(bad) == 1 and bad[0].index == 3205 and bad[0].question == row["question"]
    # a long check says how far it is: one line per chunk, the last one with every item
    assert len(progress) > 1 and progress[-1].startswith(f"{frame.height:,} of {frame.height:,} items checked")
    assert sum(int(p.split(", ")[1].split()[0]) for p in progress) == 1  # the one mismatch, in its chunk
    assert bad[0].stored != bad[0].gold == bad[0].neural
    with pytest.raises(ValueError, match="no database files"):
        check_stored(frame, {"silver": files["silver"]})


def test_bad_stored_rows_name_row_and_fix(frame):
    row = frame.row(0, named=True)
    rec = json.loads(row["record"])
    rec["t_tag"] = ["", ""]
    broken = frame.with_columns(record=pl.when(pl.col("id") == row["id"]).then(pl.lit(json.dumps(rec)))
                                .otherwise(pl.col("record")))
    with pytest.raises(ValueError, match=rf"split={row['split']} id={row['id']}.*t_tag"):
        build_records(broken.filter(pl.col("split") == row["split"]))
    with pytest.raises(ValueError, match="missing columns"):
        build_records(frame.drop("record"))
    with pytest.raises(ValueError, match="ids of split"):
        build_records(frame.filter(pl.col("id") != 0))


def test_catalog_as_data():
    rows = catalog_rows()
    assert list(rows) == [str(i) for i in sorted(t.index for t in CATALOG)]
    r = rows["1001"]
    assert r["question_template"] == BY_INDEX[1001].text
    assert r["vqa_template"] == "is there ${attribute} in the ${object}?"
    assert (r["scope"], r["modality"], r["patient_scope"], r["images"]) == ("IMAGE-SINGLE-1", "image", "single",
                                                                             "1-image")
    assert {v["modality"] for v in rows.values()} <= {"image", "image+table", "table"}
    for index, v in rows.items():
        if v["modality"] == "table":
            assert v["vqa_template"] is None, index
