"""Filler + blocking consistency check: every template, several random fillings, NeuralSQL (oracle) ==
gold SQL; the check fails on a planted wrong gold SQL, a wrong NeuralSQL and a stale answer."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from ehrxqa_pipeline.questions.ehrxqa import (BY_INDEX, ImageFiller, TimeFilter, assert_consistent, check_item,
                                              fill_items, modality)
from ehrxqa_pipeline.questions.ehrxqa import CATALOG as FULL_CATALOG
from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutor
from ehrxqa_pipeline.questions.neuralsql.shapes import shape
from ehrxqa_pipeline.rng import generator

# the image and image+table templates (this database has no table events beyond those they use; the table
# templates are tested on tests.ehrxqa.table_db in test_table_templates.py)
CATALOG = tuple(t for t in FULL_CATALOG if modality(t.scope) != "table")


@pytest.fixture(scope="module")
def items(conn):
    return [i for seed in (0, 1, 2) for i in fill_items(conn, seed, CATALOG, per_template=3)]


def test_every_template_is_filled_and_consistent(items, conn, oracle):
    per = Counter(i.template.index for i in items)
    assert set(per) == {t.index for t in CATALOG}  # all 168 templates instantiated
    assert sum(per.values()) >= 3 * 168
    assert_consistent(items, conn, oracle)  # raises on any mismatch


def test_every_template_composes_the_published_neuralsql_shapes(items):
    shapes = Counter((i.template.index // 100 * 100, shape(i.neural_sql)) for i in items)
    families = {fam: {s for f, s in shapes if f == fam} for fam, _ in shapes}
    assert families == {1000: {"P1"}, 1100: {"P1"}, **{f: {"P1", "P3"} for f in (2000, 2100, 2200, 2300)},
                        **{f: {"P2"} for f in (3000, 3100, 3200, 3300, 4000, 4100, 6000)}, 5000: {"P3"},
                        5100: {"P4"}, 5200: {"P4"}}


def test_image_list_answers_are_stored_sorted(items):
    """Names answers (one or two studies) are sets: stored sorted, whatever order a plan or module gives."""
    lists = [i.answer for i in items if i.template.scope in ("IMAGE-SINGLE-1", "IMAGE-SINGLE-2")
             and not i.template.one_row]
    assert sum(len(a) >= 2 for a in lists) >= 20
    assert all(a == sorted(a) for a in lists)
    patients = [i.answer for i in items  # patient-id lists of the group templates
                if i.template.scope in ("IMAGE-GROUP-N", "MULTIMODAL-GROUP") and not i.template.one_row]
    assert patients and all(a == sorted(a) for a in patients)


def test_answers_are_not_trivial(items):
    # random fillings reach both verify outcomes and non-empty lists in every scope
    for scope in ("IMAGE-SINGLE-1", "IMAGE-SINGLE-2", "IMAGE-SINGLE-N", "IMAGE-GROUP-N"):
        answers = [i.answer for i in items if i.template.scope == scope]
        assert [1] in answers and any(len(a) >= 1 and a not in ([0], [1]) for a in answers), scope
    assert [0] in [i.answer for i in items if i.template.scope != "IMAGE-GROUP-N"]
    group = [i for i in items if i.template.scope == "MULTIMODAL-GROUP"]
    assert {0, 1} <= {i.answer[0] for i in group if i.template.form.endswith("count")}
    assert [] in [i.answer for i in group if i.template.form.endswith("list")]
    assert any(i.answer for i in group if i.template.form.endswith("list"))
    for form in ("same", "cxr-after", "event-after"):  # image+table yes/no questions reach both outcomes
        answers = [i.answer for i in items if getattr(i.template, "form", "") == form]
        assert [0] in answers and [1] in answers, form


def test_items_are_valid(items, conn):
    filler = ImageFiller(conn)
    for i in items:
        assert i.question == i.question.lower() and "[" not in i.question and "{" not in i.question
        assert "tb_cxr_plus" not in i.neural_sql and "func_vqa" in i.neural_sql
        assert "func_vqa" not in i.gold_sql and "tb_cxr_plus" in i.gold_sql
        if i.template.scope == "IMAGE-SINGLE-2":
            assert filler.time_of[i.studies[1]] < filler.time_of[i.studies[0]]
            assert i.values["comparison"] in i.template.comparisons
        assert None not in i.answer


def test_fill_is_deterministic(conn):
    a = [(i.question, i.gold_sql) for i in fill_items(conn, 5, CATALOG[:20] + CATALOG[-20:])]
    b = [(i.question, i.gold_sql) for i in fill_items(conn, 5, CATALOG[:20] + CATALOG[-20:])]
    assert a == b and len(a) == 40


def test_multimodal_draws_follow_the_tables(items, conn):
    from tests.ehrxqa import EVENTS

    names = {"diagnosis_name": {c for *_, c, _ in EVENTS["diagnoses_icd"]},
             "drug_name": {d for _, _, d, _ in EVENTS["prescriptions"]}}
    titles = dict(conn.execute("select icd_code, long_title from d_icd_diagnoses"))
    for i in (i for i in items if i.template.scope == "MULTIMODAL-SINGLE"):
        if "diagnosis_name" in i.values:  # a title of one of the patient's own diagnoses
            assert i.values["diagnosis_name"] in {titles[c] for s, _, c, _ in EVENTS["diagnoses_icd"]
                                                  if s == i.values["patient_id"]}
        if "drug_name" in i.values:
            assert i.values["drug_name"] in names["drug_name"]
        if i.template.form == "same":  # "within the same period" always names a period
            assert i.values["global1"].tag != "null"
        else:
            assert "within" in i.values and i.record()["t_tag"][2] == i.values["within"].tag


def test_record_fields(conn):
    item = ImageFiller(conn).fill(next(t for t in CATALOG if t.index == 2001), generator(0, "ehrxqa.test"))
    r = item.record()
    assert r["db_id"] == "mimic_iv_cxr" and r["template_index"] == 2001 and r["scope"] == "IMAGE-SINGLE-2"
    assert len(r["t_tag"]) == 5 and r["t_tag"][3] in ("exact-first", "exact-last")
    assert r["v_tag"]["comparison"] == [item.values["comparison"]] and r["value"]["patient_id"] == item.values[
        "patient_id"]


LL_LO = {"object_1": "left lung", "attribute_1": "lung opacity"}


@pytest.mark.parametrize("index, values, old, new", [  # hand values whose answer the planted bug changes
    (1001, {"patient_id": 1, "exact1": "last", "global1": TimeFilter("abs-year-in", "2104"), **LL_LO},
     "p.relation = 1", "p.relation = 0"),  # verify: asks the negation ([1] -> [0])
    (1106, {"study_id": 13, "object_1": "right lung", "category_1": "anatomicalfinding"},
     "p.relation = 1", "p.relation = 0"),  # list: the negatives ([pleural effusion] -> [lung opacity])
    (2306, {"study_id1": 12, "object_1": "left lung", "category_1": "disease", "comparison": "resolved"},
     " except ", " intersect "),  # resolved computed as still present ([pneumonia] -> [])
    (3300, {"patient_id": 1, "global1": TimeFilter(), **LL_LO},
     "count(distinct t1.study_id)", "count(distinct t1.hadm_id)"),  # 2 -> 1
    (4100, {"global1": TimeFilter(), "object_1": "left lung", "attribute_1": "pneumonia"},
     "p.object = 'left lung'", "p.object = 'right lung'"),  # [1, 2] -> [2]
])
def test_planted_wrong_gold_sql_fails(conn, oracle, index, values, old, new):
    item = ImageFiller(conn).instantiate(BY_INDEX[index], values)
    executor = NeuralSqlExecutor(conn, oracle)
    assert check_item(item, conn, executor) is None
    assert old in item.gold_sql
    wrong = dataclasses.replace(item, gold_sql=item.gold_sql.replace(old, new))
    m = check_item(wrong, conn, executor)
    assert m is not None and m.index == index and m.neural == item.answer and m.gold != item.answer
    with pytest.raises(AssertionError, match="disagree"):
        assert_consistent([item, wrong], conn, oracle)


def test_planted_wrong_neuralsql_and_stale_answer_fail(conn, oracle):
    executor = NeuralSqlExecutor(conn, oracle)
    item = ImageFiller(conn).instantiate(BY_INDEX[2306], {"study_id1": 12, "object_1": "left lung",
                                                          "category_1": "disease", "comparison": "resolved"})
    swapped = dataclasses.replace(item, neural_sql=item.neural_sql.replace(" except ", " intersect "))
    assert check_item(item, conn, executor) is None and check_item(swapped, conn, executor) is not None
    yes = ImageFiller(conn).instantiate(BY_INDEX[1001], {"patient_id": 1, "exact1": "last", **LL_LO,
                                                           "global1": TimeFilter("abs-year-in", "2104")})
    assert yes.answer == [1] and check_item(yes, conn, executor) is None
    assert check_item(dataclasses.replace(yes, answer=[0]), conn, executor) is not None
    bad_q = dataclasses.replace(yes, neural_sql=yes.neural_sql.replace("is there", "is there not"))
    assert check_item(bad_q, conn, executor) is not None  # not a template question: oracle error -> mismatch


def test_answer_sheet_in_a_separate_attached_file(db_path, tmp_path):
    """The pipeline exports TB_CXR_PLUS apart from mimic_iv_cxr.db: filler and check work with it ATTACHed."""
    import sqlite3

    sheet = tmp_path / "answer_sheet.db"
    src = sqlite3.connect(db_path)
    src.execute("ATTACH DATABASE ? AS s", [str(sheet)])
    src.execute("CREATE TABLE s.tb_cxr_plus AS SELECT * FROM main.tb_cxr_plus")
    src.commit()
    src.close()
    user = tmp_path / "user.db"
    src = sqlite3.connect(db_path)
    src.execute("ATTACH DATABASE ? AS u", [str(user)])
    for table in ("patients", "admissions", "tb_cxr", "d_icd_diagnoses", "d_icd_procedures", "diagnoses_icd",
                  "procedures_icd", "prescriptions"):
        src.execute(f"CREATE TABLE u.{table} AS SELECT * FROM main.{table}")
    src.commit()
    src.close()
    conn = sqlite3.connect(user)
    conn.execute("ATTACH DATABASE ? AS sheet", [str(sheet)])
    items = fill_items(conn, 3, CATALOG[::7])
    assert len(items) == len(CATALOG[::7])
    assert_consistent(items, conn)
    conn.close()


def test_multimodal_record_fields(conn):
    item = ImageFiller(conn).instantiate(BY_INDEX[6020], {"global1": TimeFilter(), "age_group": "50s", "gender": "f",
                                                           **LL_LO})
    r = item.record()
    assert r["answer"] == [1] and r["modality"] == "image+table" and r["value"] == {"gender": "f"}
    assert r["o_tag"] == {"age_group": {"nlq": "50s", "sql": "between 20 and 29".replace("20 and 29", "50 and 59"),
                                        "type": "50s", "sql_pattern": "[age_group]"}}
    assert r["t_tag"] == ["null", "", "", "", ""]
    assert r["tag"] == ("count the number of {gender} patients aged [age_group:50s] who had a chest x-ray study during "
                        "hospital visit indicating lung opacity in the left lung [time_filter_global1:null].")



def test_the_filters_that_hold_for_a_time_are_those_whose_own_statement_holds(conn, monkeypatch):
    """``filters_containing`` asks SQLite once per time for all its candidate filters: the same filters, in the
    same order, as asking for each on its own (times of the database's studies, and edge times)."""
    from ehrxqa_pipeline.questions.neuralsql import postprocess_query

    filler = ImageFiller(conn)
    times = sorted(set(filler.time_of.values()))[:40] + ["2105-12-31 23:59:00", "2105-01-01 00:00:00",
                                                         "2104-12-31 23:59:59", "2100-02-29 12:00:00"]
    asked: dict[str, list] = {}
    batched = filler.holding

    def holding(filters, t):  # the candidates asked about, then the one statement's answer
        asked[t] = list(filters)
        return batched(filters, t)
    monkeypatch.setattr(filler, "holding", holding)
    held_tags = set()
    for t in times:
        got = filler.filters_containing(t)
        assert len(asked[t]) == 27  # 9 absolute, 6 relative since/until, 2 x 6 this/last
        alone = [f for f in asked[t]
                 if conn.execute(postprocess_query(f"select {f.sql(None, column=repr(t)) or '1'}")).fetchone()[0]]
        assert list(got) == alone, t
        held_tags |= {f.tag for f in got}
    assert len(held_tags) >= 20  # most kinds of filter hold for some time
