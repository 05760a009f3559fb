"""The parse store: parses kept on disk give the same results as parsing, are read instead of parsing in a
later executor (another process or build), never serve another parser or database, and a store that cannot
be used is named once and parsed around."""

from __future__ import annotations

import sqlite3

import pytest

from ehrxqa_pipeline.questions.neuralsql import NeuralSqlError, NeuralSqlExecutor, parser
from ehrxqa_pipeline.questions.neuralsql import parse_store as store_module
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore
from tests.neuralsql import C, SID
from tests.neuralsql.test_executor_shapes import ALL, JOIN, one

PE_LL = "is there pleural effusion in the left lung?"
QUERIES = [f'select count(*) from {ALL} where func_vqa("{PE_LL}", t1.study_id) = true',
           f"select t1.study_id from {ALL} where t1.subject_id = {C} order by t1.study_id",
           JOIN.format(select="count(distinct t1.subject_id)", question="is the left lung abnormal?"),
           one(PE_LL, SID["A2"])]


def _answers(db_path, oracle, store, queries=QUERIES):
    ex = NeuralSqlExecutor(db_path, oracle, parse_store=store)
    try:
        ex.prefetch(queries)
        return [ex.execute(q).answer for q in queries]
    finally:
        ex.close()


def test_kept_parses_are_read_instead_of_parsed_and_give_the_same_answers(db_path, oracle, tmp_path, monkeypatch):
    path = tmp_path / "parses.sqlite"
    expected = _answers(db_path, oracle, None)
    assert _answers(db_path, oracle, ParseStore(path)) == expected
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT kind, count(*) FROM results GROUP BY 1").fetchall() == [("parse", len(QUERIES))]
    parser._parse.cache_clear()
    monkeypatch.setattr(parser, "_parse_one", lambda text: pytest.fail(f"parsed: {text}"))
    assert _answers(db_path, oracle, ParseStore(path)) == expected  # a later process: nothing parsed
    with pytest.raises(pytest.fail.Exception):  # a query it does not hold is parsed (and only it)
        _answers(db_path, oracle, ParseStore(path), [QUERIES[0] + " and 1 = 1"])
    parser._parse.cache_clear()


def test_kept_parse_equals_a_fresh_parse_field_by_field(db_path, tmp_path):
    ex = NeuralSqlExecutor(db_path, parse_store=ParseStore(tmp_path / "p.sqlite"))
    ex.parse_many(QUERIES)
    stored = ParseStore(tmp_path / "p.sqlite").get(
        "parse", store_module.options_digest(ex.tables, ex.functions, ex.hidden_tables, True), QUERIES)
    stored = {q: store_module.from_json(text) for q, text in stored.items()}
    assert stored == {q: parser.parse_neuralsql(q, tables=ex.tables, functions=ex.functions,
                                                hidden_tables=ex.hidden_tables) for q in QUERIES}
    assert any(p.calls for p in stored.values()) and any(p.ordered for p in stored.values())
    ex.close()


def test_another_parser_or_database_never_reads_a_kept_parse(db_path, tmp_path, monkeypatch):
    store = ParseStore(tmp_path / "p.sqlite")
    ex = NeuralSqlExecutor(db_path, parse_store=store)
    ex.parse_many(QUERIES)
    options = store_module.options_digest(ex.tables, ex.functions, ex.hidden_tables, True)
    assert len(store.get("parse", options, QUERIES)) == len(QUERIES)
    # a database with another table, or one that lets queries read the answer sheet: other keys
    assert store.get("parse", store_module.options_digest({*ex.tables, "x"}, ex.functions, ex.hidden_tables, True),
                     QUERIES) == {}
    assert store.get("parse", store_module.options_digest(ex.tables, ex.functions, (), True), QUERIES) == {}
    assert store.get("shape", options, QUERIES) == {}  # another kind
    # an edited parser: other keys, and its first write drops the old parser's entries, not other kinds'
    store.put("shape", "s", {QUERIES[0]: "[]"})
    shape_code = store_module.fingerprint("shape")
    monkeypatch.setattr(store_module, "fingerprint", lambda kind: f"edited {kind}")
    edited = store_module.options_digest(ex.tables, ex.functions, ex.hidden_tables, True)
    assert store.get("parse", edited, QUERIES) == {}
    store.put("parse", edited, {QUERIES[0]: store_module.to_json(parser.parse_neuralsql(QUERIES[0]))})
    with sqlite3.connect(tmp_path / "p.sqlite") as con:
        assert con.execute("SELECT kind, fingerprint, count(*) FROM results GROUP BY 1, 2 ORDER BY 1").fetchall() == [
            ("parse", "edited parse", 1), ("shape", shape_code, 1)]
    ex.close()


def test_a_query_that_does_not_parse_is_not_kept_and_fails_in_execute(db_path, oracle, tmp_path):
    store = ParseStore(tmp_path / "p.sqlite")
    bad = "select count(*) from no_such_table"
    ex = NeuralSqlExecutor(db_path, oracle, parse_store=store)
    ex.prefetch([bad, QUERIES[1]])
    with pytest.raises(NeuralSqlError, match="no_such_table"):
        ex.execute(bad)
    with sqlite3.connect(tmp_path / "p.sqlite") as con:
        assert con.execute("SELECT count(*) FROM results").fetchone() == (1,)
    ex.close()


def test_an_unusable_store_is_named_once_and_the_queries_are_parsed(db_path, oracle, tmp_path):
    path = tmp_path / "p.sqlite"
    path.write_bytes(b"not a SQLite file, " * 100)
    said = []
    expected = _answers(db_path, oracle, None)
    assert _answers(db_path, oracle, ParseStore(path, warn=said.append)) == expected
    assert len(said) == 1 and str(path) in said[0] and "parsed instead" in said[0], said
    assert path.read_bytes().startswith(b"not a SQLite file")  # left as it was


def test_a_damaged_entry_is_parsed_again(db_path, oracle, tmp_path):
    path = tmp_path / "p.sqlite"
    expected = _answers(db_path, oracle, ParseStore(path))
    with sqlite3.connect(path) as con:
        con.execute("UPDATE results SET result = 'not json'")
    assert _answers(db_path, oracle, ParseStore(path)) == expected


def test_shapes_are_kept_and_read_back_refusals_included(tmp_path, monkeypatch):
    from ehrxqa_pipeline.questions.neuralsql import shapes

    refused = f'select func_vqa("{PE_LL}", tb_cxr.study_id) from tb_cxr where tb_cxr.study_id = 1'
    records = {"test": [{"id": i, "q_tag": "t", "query": q} for i, q in enumerate([*QUERIES, refused, None])]}
    store = ParseStore(tmp_path / "p.sqlite")
    expected = shapes.shape_counts(records)
    assert expected[1] and shapes.shape_counts(records, store) == expected
    with sqlite3.connect(tmp_path / "p.sqlite") as con:  # the queries that call func_vqa, the refused one too
        kept = con.execute("SELECT count(*) FROM results WHERE kind = 'shape'").fetchone()[0]
    assert kept == sum("func_vqa" in q for q in [*QUERIES, refused])
    monkeypatch.setattr(shapes.sqlglot, "parse_one", lambda *a, **k: pytest.fail("parsed"))
    assert shapes.shape_counts(records, store) == expected  # read back: nothing parsed
