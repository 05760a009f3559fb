"""Every NeuralSQL query shape of reference-builders.md 6.4 on the fixture database, with the oracle.

Expected answers are worked out by hand from ``tests.neuralsql.AFFIRMED`` and the study times.
"""

from __future__ import annotations

import pytest

from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutionError, same_answer
from tests.neuralsql import A, B, C, SID

BY_ID = "(select tb_cxr.study_id from tb_cxr where tb_cxr.study_id = {sid}) as {alias}"
PREV = ("(select tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = (select subject_id from tb_cxr where "
        "study_id = {sid}) and tb_cxr.studydatetime < (select studydatetime from tb_cxr where study_id = {sid}) "
        "order by tb_cxr.studydatetime desc limit 1) as {alias}")
IN_2105 = ("(select tb_cxr.study_id, tb_cxr.subject_id, tb_cxr.studydatetime from tb_cxr "
           "where strftime('%y', tb_cxr.studydatetime) = '2105') as t1")
ALL = "(select tb_cxr.study_id, tb_cxr.subject_id, tb_cxr.studydatetime from tb_cxr) as t1"


def one(question, sid, alias="t1"):
    return f'select func_vqa("{question}", {alias}.study_id) from {BY_ID.format(sid=sid, alias=alias)}'


def check(result, expected):
    assert same_answer(result.answer, expected, ordered=result.ordered), (result.answer, expected)


@pytest.mark.parametrize("study, expected", [("A2", [1]), ("A3", [0]), ("B1", [0])])
def test_single_study_by_id(run, study, expected):
    check(run(one("is there pleural effusion in the left lung?", SID[study])), expected)


@pytest.mark.parametrize("time_filter, question, expected", [
    # last study of A in 2105 -> A3 (nothing affirmed)
    ("and strftime('%y', tb_cxr.studydatetime) = '2105' order by tb_cxr.studydatetime desc limit 1",
     "is there pneumonia in the left lung?", [0]),
    # first study of A in 2105 -> A1
    ("and strftime('%y', tb_cxr.studydatetime) = '2105' order by tb_cxr.studydatetime asc limit 1",
     "is there pneumonia in the left lung?", [1]),
    # second study of A this year (relative to current_time) -> A2
    ("and datetime(tb_cxr.studydatetime, 'start of year') = datetime(current_time, 'start of year', '-0 year') "
     "order by tb_cxr.studydatetime asc limit 1 offset 1", "is there lung opacity in the right lung?", [1]),
    # current hospital visit -> A3
    ("and tb_cxr.hadm_id in (select admissions.hadm_id from admissions where admissions.subject_id = 10000001 "
     "and admissions.dischtime is null) order by tb_cxr.studydatetime desc limit 1",
     "is the left lung abnormal?", [0]),
])
def test_single_study_by_time(run, time_filter, question, expected):
    q = (f'SELECT FUNC_VQA("{question}", T1.study_id) FROM (select tb_cxr.study_id from tb_cxr '
         f"where tb_cxr.subject_id = {A} {time_filter}) AS T1")
    check(run(q), expected)


LL_AF, RL_AF = "list all anatomical findings in the left lung.", "list all anatomical findings in the right lung."


@pytest.mark.parametrize("first, op, second, question, expected", [
    ("prev", "except", "target", LL_AF, ["lung opacity"]),  # resolved
    ("prev", "intersect", "target", LL_AF, ["pleural effusion"]),  # still present
    ("target", "except", "prev", RL_AF, ["atelectasis", "lung opacity"]),  # newly detected
    ("target", "except", "prev", "list all abnormalities.", ["atelectasis"]),
    ("target", "union", "prev", "list all abnormalities in the left lung.",
     ["lung opacity", "pleural effusion", "pneumonia"]),
])
def test_comparison_with_previous_study(run, first, op, second, question, expected):
    src = {"prev": PREV.format(sid=SID["A2"], alias="t2"), "target": BY_ID.format(sid=SID["A2"], alias="t1")}
    alias = {"prev": "t2", "target": "t1"}
    q = (f'select func_vqa("{question}", {alias[first]}.study_id) from {src[first]} {op} '
         f'select func_vqa("{question}", {alias[second]}.study_id) from {src[second]}')
    check(run(q), expected)


@pytest.mark.parametrize("question, expected", [("is there pneumonia in the right lung?", [1]),
                                                ("is there pleural effusion in the left lung?", [0])])
def test_still_absent(run, question, expected):
    prev, target = PREV.format(sid=SID["A2"], alias="t2"), BY_ID.format(sid=SID["A2"], alias="t1")
    q = (f'select (select count(*) from {prev} where func_vqa("{question}", t2.study_id) = false) > 0 and '
         f'(select count(*) from {target} where func_vqa("{question}", t1.study_id) = false) > 0')
    check(run(q), expected)


LO_LL = "is there lung opacity in the left lung?"
PNA_LL = "is there pneumonia in the left lung?"


@pytest.mark.parametrize("select, tail, expected", [
    ("count(distinct t1.subject_id)", "", [2]),  # A1, C2 (C3 abstains: not in the answer sheet)
    ("distinct t1.subject_id", "", [A, C]),
    ("t1.studydatetime", "order by t1.studydatetime asc limit 1", ["2105-01-02 10:00:00"]),
    ("min(t1.studydatetime)", "", ["2105-01-02 10:00:00"]),
])
def test_filter_then_aggregate(run, select, tail, expected):
    q = f'select {select} from {IN_2105} where func_vqa("{LO_LL}", t1.study_id) = true {tail}'
    check(run(q), expected)


@pytest.mark.parametrize("where, expected", [
    (f'func_vqa("{LO_LL}", t1.study_id) = true and func_vqa("{PNA_LL}", t1.study_id) = true', [SID["A1"]]),
    (f'func_vqa("{LO_LL}", t1.study_id) and func_vqa("{PNA_LL}", t1.study_id)', [SID["A1"]]),
    ('func_vqa("is there pleural effusion in the left lung?", t1.study_id) = true or '
     'func_vqa("is there enlarged cardiac silhouette in the cardiac silhouette?", t1.study_id) = true',
     [SID[k] for k in ("A1", "A2", "B1", "B2")]),
    (f"t1.subject_id = {A} and func_vqa(\"is there pleural effusion in the left lung?\", t1.study_id) = false",
     [SID["A3"]]),
    (f"t1.subject_id = {A} and not func_vqa(\"is there pleural effusion in the left lung?\", t1.study_id)",
     [SID["A3"]]),
    (f'func_vqa("{LO_LL}", t1.study_id) = 1 and t1.subject_id = {C}', [SID["C2"]]),
])
def test_boolean_combinations(run, where, expected):
    check(run(f"select t1.study_id from {ALL} where {where}"), expected)


def test_in_subquery_with_func_vqa(run):
    q = ("select distinct tb_cxr.subject_id from tb_cxr where tb_cxr.study_id in (select t1.study_id from tb_cxr as "
         't1 where func_vqa("is there enlarged cardiac silhouette in the cardiac silhouette?", t1.study_id) = true)')
    check(run(q), [B])


JOIN = ("select {select} from (select labevents.subject_id, labevents.charttime from labevents where labevents.itemid "
        "in (select d_labitems.itemid from d_labitems where d_labitems.label = 'glucose')) as t1 join (select "
        "tb_cxr.subject_id, tb_cxr.study_id, tb_cxr.studydatetime from tb_cxr) as t2 on t1.subject_id = t2.subject_id "
        "where t1.charttime < t2.studydatetime and datetime(t2.studydatetime) between datetime(t1.charttime) and "
        "datetime(t1.charttime, '+2 day') and func_vqa(\"{question}\", t2.study_id) = true")


@pytest.mark.parametrize("select, question, expected", [
    ("count(distinct t1.subject_id)", "is the left lung abnormal?", [1]),  # pairs A1, A3, B2; A1 abnormal
    ("distinct t2.subject_id", "is the left lung abnormal?", [A]),
    ("distinct t2.study_id", "is there enlarged cardiac silhouette in the cardiac silhouette?", [SID["B2"]]),
])
def test_join_table_events_with_studies_in_a_time_window(run, select, question, expected):
    check(run(JOIN.format(select=select, question=question)), expected)


@pytest.mark.parametrize("subject, expected", [(A, [1]), (B, [0])])
def test_multimodal_and_of_counts(run, subject, expected):
    q = (f"select (select count(*) > 0 from labevents where labevents.subject_id = {subject} and labevents.itemid in "
         "(select itemid from d_labitems where label = 'glucose') and strftime('%y', labevents.charttime) = '2105') "
         f"and (select count(*) > 0 from (select tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = {subject} and "
         "strftime('%y', tb_cxr.studydatetime) = '2105') as t1 where "
         'func_vqa("is there pleural effusion in the left lung?", t1.study_id) = true)')
    check(run(q), expected)


@pytest.mark.parametrize("question, study, expected", [
    ("list all abnormalities in the left lung.", "A1", ["pneumonia", "lung opacity", "pleural effusion"]),
    ("list all abnormalities in the left lung.", "A3", []),
    ("which view is in this image, ap or pa?", "A2", ["pa"]),
    ("what is the gender of this patient?", "B1", ["male"]),
    ("which anatomical location is related to pleural effusion, the left lung or the right lung?", "C1",
     ["right lung"]),
    ("list all tubes/lines and devices in the mediastinum.", "B2", ["cardiac pacer and wires"]),
])
def test_list_answers_explode_into_rows(run, question, study, expected):
    check(run(one(question, SID[study])), expected)


def test_bare_call_over_several_studies_gives_one_row_each(run):
    q = f'select func_vqa("{LO_LL}", t1.study_id) as lo from {ALL} where t1.subject_id = {A}'
    r = run(q)
    assert r.columns == ["lo"] and sorted(r.answer) == [0, 0, 1]


def test_list_answer_in_a_scalar_context_is_an_error(run):
    q = f'select count(*) from {ALL} where func_vqa("list all abnormalities.", t1.study_id) = true'
    with pytest.raises(NeuralSqlExecutionError, match="list answer"):
        run(q)


@pytest.mark.parametrize("question, study, expected", [
    ("is there lung opacity in the left lung?", "C3", [None]),  # study without answer-sheet rows
    ("is the width of the cardiac silhouette wider than 1/2 of the thorax width?", "C2", [None]),  # no CTR
    ("is the width of the cardiac silhouette wider than 1/2 of the thorax width?", "B1", [1]),
    ("is the width of the upper mediastinum wider than 1/3 of the thorax width?", "C1", [0]),
])
def test_oracle_abstentions_and_size_questions(run, question, study, expected):
    check(run(one(question, SID[study])), expected)


def test_order_by_makes_the_answer_ordered(run):
    q = f"select t1.study_id from {ALL} where t1.subject_id = {A} order by t1.studydatetime desc"
    r = run(q)
    assert r.ordered and r.answer == [SID["A3"], SID["A2"], SID["A1"]]
    assert not same_answer(r.answer, [SID["A1"], SID["A2"], SID["A3"]], ordered=True)
