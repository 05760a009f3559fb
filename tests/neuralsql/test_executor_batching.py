"""How FUNC_VQA reaches the module: batches, only rows that get there, abstention, caching, errors."""

from __future__ import annotations

import sqlite3

import pytest

from ehrxqa_pipeline.questions.neuralsql import (NeuralSqlExecutionError, NeuralSqlExecutor, VqaModuleError,
                                                 YesModule, same_answer)
from tests.neuralsql import A, B, C, POOL, SID, STUDIES
from tests.neuralsql.conftest import Spy
from tests.neuralsql.test_executor_shapes import ALL, BY_ID, IN_2105, JOIN, LO_LL, one

PE_LL = "is there pleural effusion in the left lung?"


def test_one_call_per_batch_of_many_images(run):
    spy = Spy()
    r = run(f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = true', spy, batch_size=3)
    assert r.answer == [8] and r.passes == 2
    assert [len(s) for s, _ in spy.calls] == [3, 3, 2] and r.module_calls == 3 and r.asked == 8
    assert sorted(s for s, _ in spy.asked) == sorted(SID.values())


def test_a_batch_mixes_questions_grouped_by_question(run):
    spy = Spy()
    q = (f'select count(*) from {ALL} where t1.subject_id = {C} and (func_vqa("{PE_LL}", t1.study_id) = true '
         f'or func_vqa("{LO_LL}", t1.study_id) = true)')
    r = run(q, spy, batch_size=32)
    assert r.answer == [3] and len(spy.calls) == 1  # yes-spy: the first disjunct settles every row
    spy = Spy()
    r = run(q.replace("or func_vqa", "and func_vqa"), spy, batch_size=32)
    # in WHERE, SQLite treats a pending (NULL) operand as not true: the second question waits one pass
    assert r.answer == [3] and r.passes == 3 and [qs for _, qs in spy.calls] == [[PE_LL] * 3, [LO_LL] * 3]
    spy = Spy()
    r = run(f'select func_vqa("{PE_LL}", t1.study_id) = 1 and func_vqa("{LO_LL}", t1.study_id) = 1 from {ALL} '
            f"where t1.subject_id = {C}", spy, batch_size=32)
    # in the select list NULL AND x needs x: both questions in one call, grouped by question
    assert r.answer == [1, 1, 1] and [qs for _, qs in spy.calls] == [[LO_LL] * 3 + [PE_LL] * 3]


@pytest.mark.parametrize("query, asked", [
    (one(PE_LL, SID["A2"]), {"A2"}),
    (f'select t1.study_id from {ALL} where func_vqa("{PE_LL}", t1.study_id) = false and t1.subject_id = {A}',
     {"A1", "A2", "A3"}),  # written VQA-first: the rewrite still filters by subject before asking
    (f'select count(*) from {IN_2105} where func_vqa("{PE_LL}", t1.study_id) = true',
     {"A1", "A2", "A3", "C1", "C2", "C3"}),
    ("select func_vqa('is there pneumonia in the left lung?', t1.study_id) from (select tb_cxr.study_id from "
     f"tb_cxr where tb_cxr.subject_id = {A} order by tb_cxr.studydatetime desc limit 1) as t1", {"A3"}),
    (f'select t1.study_id from {ALL} where t1.subject_id = {B} or func_vqa("{PE_LL}", t1.study_id) = true',
     {"A1", "A2", "A3", "C1", "C2", "C3"}),  # B's rows are settled by the plain disjunct
    (JOIN.format(select="count(*)", question="is the left lung abnormal?"), {"A1", "A3", "B2"}),
    (JOIN.replace("where t1.charttime", "and t1.charttime").replace("and func_vqa", "where func_vqa").format(
        select="count(*)", question="is the left lung abnormal?"), {"A1", "A3", "B2"}),  # window in ON
])
def test_rows_that_never_reach_func_vqa_are_never_asked(run, oracle, query, asked):
    spy = Spy(oracle)
    run(query, spy)
    key = {v[2]: k for k, v in STUDIES.items()}
    assert {key[s] for s, _ in spy.asked} == asked


def test_dependent_calls_take_one_pass_per_level(run):
    inner = f'select t2.study_id from {ALL.replace("t1", "t2")} where func_vqa("{PE_LL}", t2.study_id) = true'
    q = f'select count(*) from {ALL} where t1.study_id in ({inner}) and func_vqa("{LO_LL}", t1.study_id) = true'
    spy = Spy(YesModule())
    r = run(q, spy)
    assert r.answer == [8] and r.passes == 3  # the outer question waits for the inner answers
    with pytest.raises(NeuralSqlExecutionError, match="fixpoint in 2 passes"):
        run(q, Spy(), max_passes=2)


def test_answers_are_reused_across_queries(db_path):
    spy = Spy()
    with_cache = NeuralSqlExecutor(db_path, spy)
    q = f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = true'
    first, again = with_cache.execute(q), with_cache.execute(q)
    assert (first.asked, again.asked, again.passes) == (8, 0, 1) and len(spy.calls) == 1
    fresh = NeuralSqlExecutor(db_path, spy, reuse_answers=False)
    fresh.execute(q), fresh.execute(q)
    assert len(spy.calls) == 3


@pytest.mark.parametrize("query, expected", [
    (one(PE_LL, SID["A2"]), [None]),
    (f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = true', [0]),
    (f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = false', [0]),
    (f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) is null', [8]),
    (one("list all abnormalities.", SID["A1"]), [None]),
])
def test_abstention_is_null_not_an_exception(run, query, expected):
    r = run(query, Spy(constant=None))
    assert same_answer(r.answer, expected)


def test_unknown_study_ids_are_null_without_a_module_call(run):
    spy = Spy()
    r = run(one(PE_LL, 42).replace(BY_ID.format(sid=42, alias="t1"), "(select 42 as study_id) as t1"), spy)
    assert r.answer == [None] and r.unknown_studies == [42] and spy.calls == []
    assert run("select func_vqa('q', t.s) from (select null as s) as t", spy).answer == [None] and spy.calls == []


def test_yes_module_answers_true_everywhere(run):
    assert run(one("list all abnormalities.", SID["A3"]), YesModule()).answer == [1]
    assert run(f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = false', YesModule()).answer == [0]


class _Broken:
    name = "broken"

    def __init__(self, answer):
        self.answer = answer

    def __call__(self, images, questions):
        return self.answer(questions)


@pytest.mark.parametrize("answer, message", [
    (lambda qs: [True] * (len(qs) + 1), "returned 2 answers for 1 questions"),
    (lambda qs: [0.5] * len(qs), "returned float"),
    (lambda qs: [[1]] * len(qs), "non-string items"),
])
def test_module_contract_violations(run, answer, message):
    with pytest.raises(VqaModuleError, match=message):
        run(one(PE_LL, SID["A1"]), _Broken(answer))


def test_module_answer_forms_are_normalised(run):
    assert run(one(PE_LL, SID["A1"]), _Broken(lambda qs: ["Yes"] * len(qs))).answer == [1]
    assert run(one(PE_LL, SID["A1"]), _Broken(lambda qs: [["NO"]] * len(qs))).answer == [0]
    assert run(one("list all abnormalities.", SID["A1"]), _Broken(lambda qs: [("A", " b ")])).answer == ["a", "b"]


def test_no_module_and_sqlite_errors(db_path, run):
    with pytest.raises(NeuralSqlExecutionError, match="no VQA module"):
        NeuralSqlExecutor(db_path).execute(one(PE_LL, SID["A1"]))
    assert NeuralSqlExecutor(db_path).execute("select count(*) from tb_cxr").answer == [8]
    with pytest.raises(NeuralSqlExecutionError, match="no such column: tb_cxr.nope"):
        run("select tb_cxr.nope from tb_cxr")


def test_gold_sql_on_the_answer_sheet_equals_neuralsql_with_the_oracle(db_path, oracle):
    """The paper's figure C3 pair (is there ${attribute} in the ${object}?) for every study and pool pair."""
    neural = NeuralSqlExecutor(db_path, oracle)
    gold = NeuralSqlExecutor(db_path, allow_answer_sheet=True)
    for sid in SID.values():
        for obj, attrs in POOL.items():
            for attr in attrs:
                g = gold.execute(f"select max(t1.relation = 1) from (select * from tb_cxr_plus where "
                                 f'tb_cxr_plus.study_id = {sid}) as t1 where t1.object = "{obj}" and '
                                 f't1.attribute = "{attr}"')
                n = neural.execute(one(f"is there {attr} in the {obj}?", sid))
                assert same_answer(g.answer, n.answer), (sid, obj, attr, g.answer, n.answer)


def test_executor_accepts_an_open_connection(db_path):
    con = sqlite3.connect(db_path)
    ex = NeuralSqlExecutor(con, YesModule())
    assert ex.execute(one(PE_LL, SID["B1"])).answer == [1]
    con.close()


def test_prefetch_asks_in_full_batches_and_changes_no_result(db_path, oracle):
    """The first passes of many queries asked together: the same answers as one by one, in fewer calls, and
    every later execute of them finds its first-level answers cached (dependent levels still take a pass)."""
    queries = [one(PE_LL, SID[s]) for s in ("A1", "A2", "B2", "C3")] + [
        f'select count(*) from {ALL} where func_vqa("{LO_LL}", t1.study_id) = true',
        f'select t1.study_id from {ALL} where t1.subject_id = {A} and func_vqa("{PE_LL}", t1.study_id) = false']
    alone_spy, batched_spy = Spy(oracle), Spy(oracle)
    alone = NeuralSqlExecutor(db_path, alone_spy, batch_size=4)
    expected = [alone.execute(q).answer for q in queries]
    batched = NeuralSqlExecutor(db_path, batched_spy, batch_size=4)
    asked = batched.prefetch([*queries, "select nothing from nowhere"])  # a bad query is left to execute
    # 8 studies x LO_LL, PE_LL on A1, A2, B2, C3 and A3 (patient A's third): 13 pairs, 4 per call
    assert asked == len(set(batched_spy.asked)) == 13 and [len(s) for s, _ in batched_spy.calls] == [4, 4, 4, 1]
    results = [batched.execute(q) for q in queries]
    assert [r.answer for r in results] == expected and all(r.passes == 1 and r.asked == 0 for r in results)
    assert len(batched_spy.calls) == 4 < len(alone_spy.calls) == 7
    assert NeuralSqlExecutor(db_path, Spy(), reuse_answers=False).prefetch(queries) == 0


def test_a_shared_first_pass_asks_the_same_pairs_and_changes_no_result(db_path, oracle):
    """``first_pass`` on an executor without a module gives the pairs a module's own prefetch reaches; a
    prefetch handed them asks exactly those pairs in the same calls, runs no first pass itself, and every
    result is the same. Pairs already answered are not asked again."""
    queries = [one(PE_LL, SID[s]) for s in ("A1", "B2")] + [
        f'select count(*) from {ALL} where func_vqa("{LO_LL}", t1.study_id) = true',
        f'select t1.study_id from {ALL} where t1.subject_id = {A} and func_vqa("{PE_LL}", t1.study_id) = false',
        "select nothing from nowhere"]
    first = NeuralSqlExecutor(db_path).first_pass(queries)
    assert len(first) == 8 + 4  # LO_LL on all 8 studies; PE_LL on A1, B2 and patient A's other two
    own_spy, shared_spy = Spy(oracle), Spy(oracle)
    own = NeuralSqlExecutor(db_path, own_spy, batch_size=5)
    shared = NeuralSqlExecutor(db_path, shared_spy, batch_size=5)
    assert own.prefetch(queries) == 12
    runs = []
    shared._run = lambda sql, run=shared._run: runs.append(sql) or run(sql)
    assert shared.prefetch(queries, first_pass=first) == 12 and runs == []
    assert shared_spy.calls == own_spy.calls
    assert [shared.execute(q).answer for q in queries[:-1]] == [own.execute(q).answer for q in queries[:-1]]
    assert shared.prefetch(queries, first_pass=first) == 0  # all known now


def test_a_module_states_its_batch_size_and_an_explicit_one_wins(db_path):
    """A module with a ``batch_size`` attribute (the label modules: 4096) is asked in batches of that size; an
    executor's explicit ``batch_size`` overrides it; a module without one gets the default 32."""
    from ehrxqa_pipeline.questions.neuralsql.executor import DEFAULT_BATCH_SIZE
    from ehrxqa_pipeline.questions.neuralsql.oracle import LabelModule

    class Sized(Spy):
        batch_size = 3

    query = f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = true'
    spy = Sized()
    NeuralSqlExecutor(db_path, spy).execute(query)
    assert [len(s) for s, _ in spy.calls] == [3, 3, 2]
    spy = Sized()
    NeuralSqlExecutor(db_path, spy, batch_size=5).execute(query)
    assert [len(s) for s, _ in spy.calls] == [5, 3]
    assert NeuralSqlExecutor(db_path, Spy()).batch_size == DEFAULT_BATCH_SIZE == 32
    assert LabelModule.batch_size == 4096


def test_a_module_that_reads_no_pixels_gets_no_image_paths(db_path, tmp_path):
    """``reads_pixels = False`` (the constant, the priors, the label modules): the executor looks for no JPEG
    file; a module that reads pixels gets the folder (and a path where the file is there)."""
    from ehrxqa_pipeline.vqa.scoring import _Counting

    class Looks(Spy):
        reads_pixels = True

    assert NeuralSqlExecutor(db_path, YesModule(), images_root=tmp_path).images_root is None
    assert NeuralSqlExecutor(db_path, _Counting(YesModule()), images_root=tmp_path).images_root is None
    assert NeuralSqlExecutor(db_path, _Counting(Looks()), images_root=tmp_path).images_root == tmp_path
    assert NeuralSqlExecutor(db_path, Spy(), images_root=tmp_path).images_root == tmp_path
