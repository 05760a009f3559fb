"""EHRXQA sampling on the hand-built database: exact caps and 7:1 split, counts of saturated templates derived
from the database, determinism (also across worker processes), bounded attempts and the empty-pool reasons."""

from __future__ import annotations

import shutil
import sqlite3
import time

import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, templates
from ehrxqa_pipeline.questions.ehrxqa.records import stored_frame
from ehrxqa_pipeline.questions.ehrxqa.sampling import (DatabaseFiles, SamplingCaps, open_database, sample_ehrxqa,
                                                       sample_templates)
from tests.ehrxqa import STUDIES

IMAGE = tuple(t for scope in ("IMAGE-SINGLE-1", "IMAGE-SINGLE-2", "IMAGE-SINGLE-N", "IMAGE-GROUP-N")
              for t in templates(scope))
SMALL = SamplingCaps(train_valid=8, test=2)
# templates with many distinct questions on the hand-built database (time filters x visual values)
WIDE = (1001, 1100, 2001, 2100, 3000, 3101, 4000, 4100)


def _files(path) -> DatabaseFiles:
    return DatabaseFiles(path, path)  # the hand-built file holds both the database and its answer sheet


def _counts(sample) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for item in sample.items:
        out.setdefault(item.template_index, {"train": 0, "valid": 0, "test": 0})[item.split] += 1
    return out


@pytest.fixture(scope="module")
def small_sample(db_path):
    return sample_ehrxqa(_files(db_path), _files(db_path), seed=0, caps=SMALL,
                         templates=[BY_INDEX[i] for i in WIDE])


def test_caps_and_split_ratio_are_exact(small_sample):
    counts = _counts(small_sample)
    assert counts == {i: {"train": 7, "valid": 1, "test": 2} for i in WIDE}
    assert all(r.stop == "cap" and r.reason == "" and r.kept == r.cap for r in small_sample.reports)
    for split in ("train", "valid", "test"):  # each split ordered by template index, then draw order
        keys = [(i.template_index, i.draw) for i in small_sample.split(split)]
        assert keys == sorted(keys)
    questions = [(i.database, i.question) for i in small_sample.items]
    assert len(questions) == len(set(questions))  # distinct per database
    assert {i.database for i in small_sample.split("test")} == {"gold"}


@pytest.mark.parametrize("n, valid", [(80, 10), (8, 1), (9, 1), (6, 1), (4, 1), (3, 0), (12, 2), (20, 3), (0, 0)])
def test_valid_share_is_one_eighth_rounded_half_up(n, valid):
    assert SamplingCaps().n_valid(n) == valid


def test_saturated_templates_keep_every_distinct_question(db_path):
    """1119 / 1146 name one study each: 6 studies -> 6 questions; 2304 names a study with a previous one
    (12, 13, 22) and one of the 4 comparison labels -> 12 questions."""
    with_previous = sum(1 for s in STUDIES if any(o[1] == s[1] and o[3] < s[3] for o in STUDIES))
    expected = {1119: len(STUDIES), 1146: len(STUDIES), 2304: 4 * with_previous}
    sample = sample_ehrxqa(_files(db_path), _files(db_path), seed=3, templates=[BY_INDEX[i] for i in expected])
    counts = _counts(sample)
    for index, n in expected.items():
        valid = SamplingCaps().n_valid(n)
        assert counts[index] == {"train": n - valid, "valid": valid, "test": min(n, 10)}, index
    silver = {r.template_index: r for r in sample.reports if r.database == "silver"}
    assert all(silver[i].stop == "exhausted" and "no new question" in silver[i].reason for i in expected)


def test_same_inputs_same_sample_in_one_or_several_processes(db_path, small_sample):
    again = sample_ehrxqa(_files(db_path), _files(db_path), seed=0, caps=SMALL,
                          templates=[BY_INDEX[i] for i in WIDE])
    assert stored_frame(again).equals(stored_frame(small_sample))
    assert again.reports == small_sample.reports
    parallel = sample_ehrxqa(_files(db_path), _files(db_path), seed=0, caps=SMALL,
                             templates=[BY_INDEX[i] for i in WIDE], workers=2)
    assert stored_frame(parallel).equals(stored_frame(small_sample))
    from ehrxqa_pipeline.workers import context
    assert context().get_start_method() == "forkserver"  # (Linux) workers forked with the modules loaded
    other = sample_ehrxqa(_files(db_path), _files(db_path), seed=1, caps=SMALL,
                          templates=[BY_INDEX[i] for i in WIDE])
    assert not stored_frame(other).equals(stored_frame(small_sample))


def _copy(db_path, tmp_path, *statements) -> sqlite3.Connection:
    path = tmp_path / "mimic_iv_cxr.db"
    shutil.copy(db_path, path)
    with sqlite3.connect(path) as c:
        for sql in statements:
            c.execute(sql)
    return open_database(path, path)


def test_empty_pools_end_at_once_with_their_reason(db_path, tmp_path):
    # keep only each patient's first study: no 2-image template can be drawn
    conn = _copy(db_path, tmp_path, "DELETE FROM tb_cxr WHERE study_id NOT IN (11, 21, 31)",
                 "DELETE FROM tb_cxr_plus WHERE study_id NOT IN (11, 21, 31)")
    start = time.perf_counter()
    items, reports = sample_templates(conn, "silver", 0, SamplingCaps(), templates("IMAGE-SINGLE-2"))
    assert time.perf_counter() - start < 5
    assert not any(items.values())
    assert {(r.kept, r.draws, r.stop, r.reason) for r in reports} == {(0, 0, "empty_pool",
                                                                       "no patient with >= 2 studies")}
    _, one = sample_templates(conn, "silver", 0, SamplingCaps(), [BY_INDEX[1119]])
    assert one[0].kept == 3 and one[0].stop == "exhausted"  # the 1-image templates still work


def test_no_study_at_all(db_path, tmp_path):
    conn = _copy(db_path, tmp_path, "DELETE FROM tb_cxr", "DELETE FROM tb_cxr_plus")
    _, reports = sample_templates(conn, "gold", 0, SamplingCaps(), IMAGE[:3])
    assert {(r.draws, r.reason) for r in reports} == {(0, "no study in TB_CXR")}


def test_template_without_a_valid_draw_stops_after_patience(db_path, tmp_path):
    conn = _copy(db_path, tmp_path, "UPDATE tb_cxr_plus SET ct_ratio = NULL")  # CTR questions: no answer
    caps = SamplingCaps(patience=25)
    start = time.perf_counter()
    items, reports = sample_templates(conn, "silver", 0, caps, [BY_INDEX[1146]])
    assert time.perf_counter() - start < 5
    assert items[1146] == []
    assert (reports[0].draws, reports[0].valid_draws, reports[0].stop) == (25, 0, "exhausted")
    assert reports[0].reason == "no valid draw in 25 attempts"


def test_attempts_are_bounded(db_path):
    conn = open_database(db_path, db_path)
    caps = SamplingCaps(train_valid=8, max_draws_per_item=1)  # 8 draws for 8 questions, but only 6 studies
    _, reports = sample_templates(conn, "silver", 0, caps, [BY_INDEX[1119]])
    r = reports[0]
    assert (r.draws, r.stop) == (8, "attempt_limit") and r.kept <= 6 and r.duplicates == r.valid_draws - r.kept


def test_bad_inputs_name_the_problem(tmp_path, db_path):
    with pytest.raises(FileNotFoundError, match="ehr_db"):
        open_database(tmp_path / "missing.db", db_path)
    empty = tmp_path / "sheet.db"
    sqlite3.connect(empty).close()
    with pytest.raises(ValueError, match="tb_cxr_plus"):
        open_database(db_path, empty)
    with pytest.raises(ValueError, match="patience"):
        SamplingCaps(patience=0)
    with pytest.raises(ValueError, match="train_valid"):
        SamplingCaps(train_valid=-1)
    with pytest.raises(ValueError, match="share an index"):
        sample_ehrxqa(_files(db_path), _files(db_path), 0, SMALL, templates=[BY_INDEX[1001], BY_INDEX[1001]])
