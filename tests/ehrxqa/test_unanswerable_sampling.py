"""The opt-in unanswerable items through the sampler: off by default, n per database when asked (silver split
7:1 into train/valid, gold to test), after every catalog template, deterministic, kept by the consistency check
(no SQL to run) and left out of Table C9."""

from __future__ import annotations

import json

import polars as pl
import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX
from ehrxqa_pipeline.questions.ehrxqa.records import build_records, check_stored, stored_frame
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, sample_ehrxqa
from ehrxqa_pipeline.questions.ehrxqa.stats import c9_counts, frame_from_records
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import UNANSWERABLE_BY_INDEX

TEMPLATES = (1, 2, 3)  # three table templates of the hand-built table database


def _sample(path, unanswerable: int):
    files = DatabaseFiles(path, path)
    return sample_ehrxqa(files, files, seed=3, caps=SamplingCaps(train_valid=8, test=2, unanswerable=unanswerable),
                         templates=[BY_INDEX[i] for i in TEMPLATES])


@pytest.fixture(scope="module")
def with_impossible(table_db_path):
    return _sample(table_db_path, 16)


def test_off_by_default(table_db_path):
    assert SamplingCaps().unanswerable == 0
    sample = _sample(table_db_path, 0)
    assert sample.items and not any(i.template_index in UNANSWERABLE_BY_INDEX for i in sample.items)


def test_n_per_database_split_like_a_template(with_impossible, table_db_path):
    impossible = [i for i in with_impossible.items if i.template_index in UNANSWERABLE_BY_INDEX]
    per_split = {s: sum(1 for i in impossible if i.split == s) for s in ("train", "valid", "test")}
    assert per_split == {"train": 14, "valid": 2, "test": 16}  # 16 silver -> 14:2 (7:1), 16 gold -> test
    assert {i.database for i in impossible if i.split == "test"} == {"gold"}
    for split in ("train", "valid", "test"):  # after every catalog template, each split in index/draw order
        keys = [(i.template_index, i.draw) for i in with_impossible.split(split)]
        assert keys == sorted(keys)
    for i in impossible:
        assert i.answer == [] and i.neural_sql == i.gold_sql == "null" and i.record["is_impossible"] is True
    # the answerable part is the same sample as without the option
    plain = [(i.split, i.question) for i in _sample(table_db_path, 0).items]
    assert [(i.split, i.question) for i in with_impossible.items if i.template_index in BY_INDEX] == plain
    again = _sample(table_db_path, 16)
    assert [(i.split, i.question) for i in again.items] == [(i.split, i.question) for i in with_impossible.items]


def test_consistency_check_skips_their_sql_but_not_their_shape(with_impossible, table_db_path):
    frame = stored_frame(with_impossible)
    files = {"silver": DatabaseFiles(table_db_path, table_db_path), "gold": DatabaseFiles(table_db_path, table_db_path)}
    assert check_stored(frame, files) == []
    row = frame.filter(pl.col("template_index") >= 9000).row(0, named=True)
    tampered = frame.with_columns(answer=pl.when((pl.col("split") == row["split"]) & (pl.col("id") == row["id"]))
                                  .then(pl.lit(json.dumps(["yes"]))).otherwise(pl.col("answer")))
    bad = check_stored(tampered, files)
    assert [(m.index, m.question) for m in bad] == [(row["template_index"], row["question"])]


def test_released_with_is_impossible_and_left_out_of_c9(with_impossible):
    records = build_records(stored_frame(with_impossible))
    flagged = {s: sum(r["is_impossible"] for r in recs) for s, recs in records.items()}
    assert flagged == {"train": 14, "valid": 2, "test": 16}
    assert all(r["answer"] == [] and r["query"] == "null" for recs in records.values() for r in recs
               if r["is_impossible"])
    frame = frame_from_records(records)
    assert set(frame["template_index"]) == set(TEMPLATES)
    total = c9_counts(frame)[-1]
    answerable = {s: len(recs) - flagged[s] for s, recs in records.items()}
    assert {s: total[s] for s in answerable} == answerable
