"""Post-processing, validation errors (with positions) and execution rewrites of the NeuralSQL parser."""

from __future__ import annotations

import sqlite3
import pytest

from ehrxqa_pipeline.questions.neuralsql import (NeuralSqlError, NeuralSqlSyntaxError, NeuralSqlValidationError,
                                                 normalise_rows, parse_neuralsql, postprocess_query, same_answer)

Q = "select func_vqa(\"is there pneumonia?\", t1.study_id) from (select study_id from tb_cxr) as t1"


def test_postprocess_restores_the_stored_lower_case_query():
    stored = ("select strftime('%y', x) from t where strftime('%j', y) < = julianday(current_time) "
              "and z = \u2018a\u2019 and CURRENT_TIME is not null")
    assert postprocess_query(stored) == (
        "select strftime('%Y', x) from t where strftime('%J', y) <= julianday('2105-12-31 23:59:00') "
        "and z = 'a' and '2105-12-31 23:59:00' is not null")
    assert postprocess_query("select 'alzheimer''s'") == "select 'alzheimer''s'"  # SQL escapes stay


def test_calls_question_literals_and_name_case():
    p = parse_neuralsql(Q.replace("func_vqa", "FuNc_VqA") + " where func_vqa('is there pneumonia?', t1.study_id)")
    assert [(c.question, c.study, c.projected) for c in p.calls] == [
        ("is there pneumonia?", "t1.study_id", True), ("is there pneumonia?", "t1.study_id", False)]
    assert p.has_vqa and not p.ordered
    assert "'is there pneumonia?'" in p.sql and '"' not in p.sql and "FUNC_VQA(" in p.sql.upper()


def test_bare_select_items_explode_through_json_each():
    p = parse_neuralsql("select func_vqa('q', t.s) as a, t.s from t where t.s > 1")
    assert p.sql == ("SELECT _vqa0_0.value AS a, t.s FROM t CROSS JOIN JSON_EACH(FUNC_VQA_ROWS('q', t.s)) AS _vqa0_0 "
                     "WHERE t.s > 1")
    assert parse_neuralsql("select func_vqa('q', 5)").sql == (
        "SELECT _vqa0_0.value FROM JSON_EACH(FUNC_VQA_ROWS('q', 5)) AS _vqa0_0")
    assert "FUNC_VQA_ROWS" not in parse_neuralsql("select func_vqa('q', 5) and func_vqa('r', 5)").sql


def test_func_vqa_operands_move_last_and_inner_join_conditions_join_where():
    p = parse_neuralsql("select 1 from t where func_vqa('q', t.s) = true and t.a = 1 or func_vqa('r', t.s) or t.b")
    assert p.sql == "SELECT 1 FROM t WHERE t.b OR (t.a = 1 AND FUNC_VQA('q', t.s) = TRUE) OR FUNC_VQA('r', t.s)"
    p = parse_neuralsql("select 1 from t join u on t.a = u.a and u.x < 3 where func_vqa('q', u.s)")
    assert p.sql == "SELECT 1 FROM t, u WHERE t.a = u.a AND u.x < 3 AND FUNC_VQA('q', u.s)"
    left = "select 1 from t left join u on t.a = u.a and func_vqa('q', u.s) where t.b = 1"
    assert "LEFT JOIN u ON t.a = u.a AND FUNC_VQA('q', u.s) WHERE" in parse_neuralsql(left).sql


def test_order_by_and_set_operation_arms():
    assert parse_neuralsql("select a from t order by a").ordered
    assert parse_neuralsql("select a from t union select b from u order by 1").ordered
    assert not parse_neuralsql("select a from (select a from t order by a limit 2) as x").ordered
    assert parse_neuralsql("(select a from t) except (select b from u limit 1)").sql == (
        "SELECT a FROM t EXCEPT SELECT * FROM (SELECT b FROM u LIMIT 1) AS _arm")


@pytest.mark.parametrize("query, error, message", [
    ("select * from tb_cxr where", NeuralSqlSyntaxError, r"syntax error: .*\(line 1, column \d+\)"),
    ("select 'unterminated", NeuralSqlSyntaxError, "syntax error"),
    ("select 1; select 2", NeuralSqlValidationError, "exactly one SQL statement; got 2"),
    ("delete from tb_cxr", NeuralSqlValidationError, "got a DELETE statement"),
    ("update tb_cxr set study_id = 1", NeuralSqlValidationError, "got a UPDATE statement"),
    ("insert into tb_cxr values (1)", NeuralSqlValidationError, "got a INSERT statement"),
    ("pragma table_info(tb_cxr)", NeuralSqlValidationError, "only SELECT"),
    ("select func_vqa('q') from t", NeuralSqlValidationError,
     r"FUNC_VQA takes 2 arguments \(question, study_id\); got 1.*\(line 1, column 8\)"),
    ("select\n  func_vqa('q', t.s, 3) from t", NeuralSqlValidationError, r"got 3.*\(line 2, column 3\)"),
    ("select func_vqa(t.question, t.s) from t", NeuralSqlValidationError,
     "first argument must be a string literal question; got t.question"),
    ("select func_vqa(question, t.s) from t", NeuralSqlValidationError, "string literal question; got question"),
    ("select func_vqa('', t.s) from t", NeuralSqlValidationError, "question is empty"),
    ("select func_vqa('q', 'x') from t", NeuralSqlValidationError, "second argument must yield a study_id"),
    ("select func_vqa('q', *) from t", NeuralSqlValidationError, "second argument must yield a study_id"),
    ("select func_vqa('q', func_vqa('r', t.s)) from t", NeuralSqlValidationError, "cannot be nested"),
    ("select t.a from t where my_udf(t.a) = 1", NeuralSqlValidationError, r"unknown function MY_UDF \(line 1"),
    ("select a from nope", NeuralSqlValidationError, r"unknown table nope \(line 1, column 15\)"),
    ("select * from tb_cxr_plus", NeuralSqlValidationError, "hidden answer sheet"),
])
def test_malformed_queries_name_the_problem(query, error, message):
    with pytest.raises(error, match=message):
        parse_neuralsql(query, tables={"t", "tb_cxr"}, functions={"count", "strftime"})


def test_errors_are_value_errors_and_names_known_via_ctes():
    assert issubclass(NeuralSqlError, ValueError)
    p = parse_neuralsql("with x as (select 1 as a) select a from x", tables=set(), functions=set())
    assert not p.has_vqa


def test_executor_validates_against_the_database(run):
    with pytest.raises(NeuralSqlValidationError, match="unknown table tb_cxr_image"):
        run("select * from tb_cxr_image")
    with pytest.raises(NeuralSqlValidationError, match="unknown function VQA"):
        run("select vqa('q', study_id) from tb_cxr")
    assert run("select count(*) from tb_cxr where julianday(studydatetime) > 0 and json_valid('[]')").answer == [8]


def test_answer_normalisation_and_order_insensitive_comparison():
    assert normalise_rows([(1,), (0.1 + 0.2,), (None,)]) == [1, 0.3, None]
    assert normalise_rows([(1, 2.0000004)]) == [(1, 2.0)]
    assert same_answer([(1,), (2,), (2,)], [2, 1, 2]) and not same_answer([1, 2], [1, 2, 2])
    assert not same_answer([1, 2], [2, 1], ordered=True) and same_answer([1, 2], [1.0, 2], ordered=True)
    assert same_answer(["b", "a"], ["a", "b"]) and not same_answer(["1"], [1]) and same_answer([True], [1])
    assert same_answer([], []) and not same_answer([None], []) and same_answer([(1, "a")], [(1.0, "a")])


ROUND_TRIP = [  # EHRSQL-style constructs: the rewritten SQL must give SQLite's rows for the original text
    "select 1 * (strftime('%j', current_time) - strftime('%j', admissions.admittime)) from admissions "
    "where admissions.subject_id = 10000001 and admissions.dischtime is null",
    "select t1.label from (select d_labitems.label, dense_rank() over (order by count(*) desc) as c1 from labevents "
    "join d_labitems on labevents.itemid = d_labitems.itemid group by d_labitems.label) as t1 where t1.c1 <= 3",
    "select case when count(*) > 2 then 'many' else 'few' end, cast(strftime('%y', max(charttime)) as int), "
    "round(avg(valuenum), 2) from labevents",
    "select labevents.valuenum || ' ' || labevents.valueuom, ifnull(null, 1), coalesce(null, 2), substr('abc', 2), "
    "iif(1, 'y', 'n') from labevents limit 1 offset 1",
    "select count(*) from labevents where datetime(labevents.charttime) between datetime('2105-01-01') and "
    "datetime('2105-01-01', '+3 day') and labevents.hadm_id not in (select 999) and exists (select 1 from admissions)",
    "select distinct subject_id from labevents where strftime('%y-%m', charttime) = '2105-01' group by subject_id "
    "having count(*) >= 2",
    "select datetime(labevents.charttime, 'start of year') = datetime(current_time, 'start of year', '-0 year') "
    "from labevents",
    "select julianday('2105-12-31') - julianday(min(charttime)) from labevents",
]


@pytest.mark.parametrize("query", ROUND_TRIP)
def test_plain_sql_round_trips_through_sqlglot(db_path, query):
    con = sqlite3.connect(db_path)
    assert con.execute(parse_neuralsql(query).sql).fetchall() == con.execute(postprocess_query(query)).fetchall()
    con.close()


SKELETON_CASES = [
    'select func_vqa("is there ""x"" in the \'left\'?", t1.study_id) from (select study_id from tb_cxr '
    "where tb_cxr.subject_id = 10027602 and note = 'alzheimer''s') as t1",
    "select count(*) > 0 from tb_cxr t where func_vqa('is there x?', t.study_id) = true and t.x <= 3.5 limit 1",
    "select strftime('%Y-%m', t.d) from tb_cxr t where strftime('%Y-%m', t.d) >= '2105-07' "
    "and datetime(t.d) >= datetime(current_time, '-27 month')",
    "select t.a from tb_cxr t where t.b = 'a rather long value, then a call'\n"
    "  and t.c = 123456 and func_vqa(\"is there y?\", t.study_id) = false order by t.a desc",
    "select t.a from tb_cxr t where t.b = '\u2045 a value holding the stand-in mark' and func_vqa(\"q\", t.s) = 1",
]


@pytest.mark.parametrize("query", SKELETON_CASES)
def test_a_parse_from_the_shared_shape_of_its_template_is_the_query_s_own(query):
    """Items of one template share the parse of their shape (values stood in for, then put back): the same
    executable SQL, calls (questions unescaped, line and column in the query itself) and order as parsing
    the query whole."""
    from ehrxqa_pipeline.questions.neuralsql import parser

    source = postprocess_query(query)
    whole = parser._parse_source(source, None, None, frozenset({"tb_cxr_plus"}))
    assert parse_neuralsql(query) == whole
    skeleton = parser._Skeleton.of(source)
    assert (skeleton is None) == ("\u2045" in query)
    if skeleton is not None:
        shape = parser._parse_shape(skeleton.text, None, None, frozenset({"tb_cxr_plus"}))
        assert skeleton.fill(shape, source) == whole and shape != whole


@pytest.mark.parametrize("value", ["", "plain value, 2105-07-01 12:00:00", "caf\u00e9 \u2045 \u00b5g/ml", "it's",
                                   "back\\slash", "two\nlines", "tab\there", "nul\x00", "del\x7f", "''"])
def test_a_value_is_put_back_as_sqlglot_renders_it(value):
    """The stand-ins' values go back as sqlglot's SQLite literal of them; plain ones without its generator."""
    from sqlglot import exp

    from ehrxqa_pipeline.questions.neuralsql import parser

    assert parser._string_literal(value) == exp.Literal.string(value).sql(dialect="sqlite")


def test_names_are_lowered_once_per_set_and_as_often_as_needed_otherwise():
    """An executor's names (frozensets) are lowered once, however many queries it parses; others every call."""
    from ehrxqa_pipeline.questions.neuralsql import parser

    tables = frozenset({"TB_CXR", "patients"})
    assert parser._names(tables) == parser._names(["tb_cxr", "PATIENTS"]) == frozenset({"tb_cxr", "patients"})
    assert parser._names(tables) is parser._names(tables)
    assert parser._names(None) is None


def test_items_of_one_shape_are_parsed_once_and_values_that_fail_validation_are_still_named():
    from ehrxqa_pipeline.questions.neuralsql import parser

    before = parser._parse_shape.cache_info()
    for subject in range(10000001, 10000011):
        parse_neuralsql(f"select t.a from tb_cxr t where t.subject_id = {subject} and t.note = 'x{subject}'")
    after = parser._parse_shape.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 9
    # an empty question parses in the shape (a stand-in is not empty) but not in the query: the query's own error
    with pytest.raises(NeuralSqlValidationError, match="question is empty"):
        parse_neuralsql("select t.a from tb_cxr t where t.b = 'abc' and func_vqa('', t.s) = 1")
    # an error found in the shape is reported at the query's own line and column, not the shape's
    query = "select t.a from tb_cxr t where t.b = 'a long value, longer' and my_udf(t.a) = 1"
    where = rf"\(line 1, column {query.index('my_udf') + 1}\)"
    with pytest.raises(NeuralSqlValidationError, match=rf"unknown function MY_UDF {where}"):
        parse_neuralsql(query, tables={"tb_cxr"}, functions={"count"})
