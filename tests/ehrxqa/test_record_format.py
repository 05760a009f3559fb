"""EHRXQA release records in the published format (issue 14 points 4 and 5).

Field order and JSON types of a released record against the published example record (README of
github.com/baeseongsu/ehrxqa, master; fields as dataset_builder/internal_utils/_format_qa_dataset.py writes
them, ``answer`` appended by dataset_builder/generate_answer.py) plus our ``resolved_value``. And values with an
apostrophe: written so that the published post-processing (``post_process_sql`` of generate_answer.py on master
and experiment/NeuralSQL/execute_nsql.py on dev-experiment, which replaces ``''`` by ``'``) leaves a query that
gives the same answer as without it."""

from __future__ import annotations

import json
import shutil
import sqlite3

import polars as pl
import pytest
import sqlglot

from ehrxqa_pipeline.paraphrase import choose_ehrxqa_phrasings
from ehrxqa_pipeline.paraphrase.pools import POOL_SCHEMA
from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG
from ehrxqa_pipeline.questions.ehrxqa.filler import fill_items
from ehrxqa_pipeline.questions.ehrxqa.item import placeholders
from ehrxqa_pipeline.questions.ehrxqa.records import (PUBLISHED_FIELDS, RECORD_FIELDS, build_records, stored_frame,
                                                      write_release)
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, sample_ehrxqa
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import q
from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutor, OracleModule, normalise_rows

# The published example record (README.md of baeseongsu/ehrxqa, master), "answer" as generate_answer.py writes it
PUBLISHED_EXAMPLE = {
    "db_id": "mimic_iv_cxr", "split": "train", "id": 0,
    "question": "how many days have passed since the last chest x-ray of patient 18679317 depicting any anatomical "
                "findings in 2105?",
    "template": "how many days have passed since the last time patient 18679317 had a chest x-ray study indicating "
                "any anatomicalfinding in 2105?",
    "query": "select 1 * ( strftime('%J',current_time) - strftime('%J',t1.studydatetime) ) from ( select "
             "tb_cxr.study_id, tb_cxr.studydatetime from tb_cxr where tb_cxr.study_id in ( select distinct "
             "tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = 18679317 and strftime('%Y',tb_cxr.studydatetime) "
             "= '2105' ) ) as t1 where func_vqa(\"is the chest x-ray depicting any anatomical findings?\", "
             "t1.study_id) = true",
    "value": {"patient_id": 18679317},
    "q_tag": "how many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} had a chest "
             "x-ray study indicating any ${category} [time_filter_global1]?",
    "t_tag": ["abs-year-in", "", "", "exact-last", ""],
    "o_tag": {"unit_count": {"nlq": "days", "sql": "1 * ", "type": "days", "sql_pattern": "[unit_count]"}},
    "v_tag": {"object": [], "category": ["anatomicalfinding"], "attribute": []},
    "tag": "how many [unit_count:days] have passed since the [time_filter_exact1:exact-last] time patient "
           "{patient_id} had a chest x-ray study indicating any anatomicalfinding [time_filter_global1:abs-year-in]?",
    "para_type": "machine", "is_impossible": False, "answer": [1234],
}
TEMPLATES = (1000, 1100, 2000, 2105, 2201, 2300, 3000, 3101, 3205, 4000, 4105, 5000, 5110, 6000, 6020)
STUDY_KEYS = {"study_id", "study_id1", "study_id2"}


def published_post_process(query: str, current_time: str = "2105-12-31 23:59:00") -> str:
    """``post_process_sql`` of the published answer generation and NeuralSQL executor, without its vital-sign
    range substitution (no EHRXQA query has a ``*_lower`` / ``*_upper`` placeholder)."""
    query = query.replace("current_time", f"'{current_time}'")
    query = query.replace("''", "'").replace("< =", "<=")
    query = query.replace("%y", "%Y").replace("%j", "%J")
    query = query.replace("\u2018", "'").replace("\u2019", "'")
    return query.replace("\u201c", '"').replace("\u201d", '"')


@pytest.fixture(scope="module")
def released(db_path, tmp_path_factory):
    files = DatabaseFiles(db_path, db_path)
    frame = stored_frame(sample_ehrxqa(files, files, seed=0, caps=SamplingCaps(train_valid=4, test=1),
                                       templates=[BY_INDEX[i] for i in TEMPLATES]))
    no_pools = pl.DataFrame(schema=POOL_SCHEMA)  # as the release asset does, without pools: para_type "original"
    records = build_records(choose_ehrxqa_phrasings(frame, no_pools, 0))
    paths = write_release(records, tmp_path_factory.mktemp("release"))
    return {s: json.loads(p.read_text()) for s, p in paths.items()}


def _json_type(x) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            type(None): "null"}[type(x)]


def _scalars(x) -> bool:
    return all(isinstance(v, (int, float, str)) for v in x)


def test_released_record_has_the_published_fields_in_order_then_resolved_value(released):
    assert PUBLISHED_FIELDS == tuple(PUBLISHED_EXAMPLE)
    assert RECORD_FIELDS == (*PUBLISHED_FIELDS, "resolved_value")
    scopes = set()
    for split, recs in released.items():
        assert recs
        for r in recs:
            assert tuple(r) == RECORD_FIELDS, list(r)
            assert {k: _json_type(r[k]) for k in PUBLISHED_FIELDS} == {
                k: _json_type(v) for k, v in PUBLISHED_EXAMPLE.items()}, r["q_tag"]
            assert r["db_id"] == "mimic_iv_cxr" and r["split"] == split and r["is_impossible"] is False
            assert r["question"] == r["question"].lower() and r["template"] == r["template"].lower()
            assert r["query"] == r["query"].lower() and "func_vqa(\"" in r["query"]  # all image / multimodal
            assert len(r["t_tag"]) == 5 and all(isinstance(x, str) for x in r["t_tag"])
            assert all(set(v) == {"nlq", "sql", "type", "sql_pattern"} and all(isinstance(x, str) for x in v.values())
                       for v in r["o_tag"].values())
            assert list(r["v_tag"])[:3] == ["object", "category", "attribute"] and set(r["v_tag"]) <= {
                "object", "category", "attribute", "comparison"}
            assert all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in r["v_tag"].values())
            assert list(r["value"]) == placeholders(r["q_tag"]) and _scalars(r["value"].values())
            assert all(isinstance(r["value"][k], int) for k in r["value"] if k in STUDY_KEYS | {"patient_id"})
            assert isinstance(r["answer"], list) and _scalars(r["answer"])
            assert set(r["resolved_value"]) <= STUDY_KEYS and all(
                type(v) is int for v in r["resolved_value"].values())
            scopes.add(tuple(sorted(r["resolved_value"])))
    assert scopes == {(), ("study_id",), ("study_id1", "study_id2")}


def test_q_writes_apostrophes_so_the_published_post_processing_keeps_them():
    assert q("pneumonia") == "'pneumonia'"
    assert q("alzheimer's disease") == "\"alzheimer's disease\""
    assert q("say \"x\" it's") == "\"say \"\"x\"\" it's\""
    con = sqlite3.connect(":memory:")
    con.execute("create table d (t text)")
    values = ["alzheimer's disease", "o'brien's \"sign\"", "plain", "a 'quoted' word"]
    con.executemany("insert into d values (?)", [(v,) for v in values])
    for v in values:
        sql = f"select count(*) from d where d.t = {q(v)}"
        assert "''" not in sql
        for text in (sql, published_post_process(sql), sqlglot.parse_one(published_post_process(sql)).sql()):
            assert con.execute(text).fetchall() == [(1,)], text  # raw, post-processed, sqlglot-normalised
    old = "select count(*) from d where d.t = 'alzheimer''s disease'"  # the standard escape: broken there
    assert con.execute(old).fetchall() == [(1,)]
    with pytest.raises(sqlite3.OperationalError):
        con.execute(published_post_process(old))


def _apostrophe_copy(src, dst) -> dict[str, str]:
    """A copy of the database whose diagnosis titles all start with "alzheimer's " (order kept)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    titles = [r[0] for r in con.execute("select distinct long_title from d_icd_diagnoses")]
    renamed = {t: f"alzheimer's {t}" for t in titles}
    con.executemany("update d_icd_diagnoses set long_title = ? where long_title = ?",
                    [(new, old) for old, new in renamed.items()])
    con.commit()
    con.close()
    return renamed


@pytest.mark.parametrize("which", ["table", "multimodal"])
def test_queries_with_apostrophe_values_answer_the_same_with_and_without_published_post_processing(
        which, db_path, table_db_path, tmp_path):
    """Every template naming a diagnosis, filled on a database, then asked again with the diagnosis renamed to
    hold an apostrophe: the released query has no ``''`` and gives the original answer on SQLite through our
    executor, and after the published post-processing (through our executor and, for table queries, on SQLite
    directly)."""
    src = table_db_path if which == "table" else db_path
    templates = tuple(t for t in CATALOG if any(n.startswith("diagnosis_name") for n in placeholders(t.text))
                      and (t.index < 1000) == (which == "table"))
    items = fill_items(sqlite3.connect(src), 0, templates, per_template=1)
    assert len(items) >= len(templates) - 2
    renamed = _apostrophe_copy(src, tmp_path / "apostrophe.db")
    con = sqlite3.connect(tmp_path / "apostrophe.db")
    executor = NeuralSqlExecutor(con, OracleModule(con) if which == "multimodal" else None)
    for item in items:
        values = {k: renamed[v] if k.startswith("diagnosis_name") else v for k, v in item.values.items()}
        assert any("'" in v for k, v in values.items() if k.startswith("diagnosis_name"))
        query = item.template.queries(values)[1].lower()  # the released query
        want = [renamed.get(a, a) for a in item.answer]
        assert "''" not in query and "\"alzheimer's " in query, query
        assert executor.execute(query).answer == want, (item.template.index, query)
        assert executor.execute(published_post_process(query)).answer == want, item.template.index
        if which == "table":
            assert normalise_rows(con.execute(published_post_process(query)).fetchall()) == want


def test_the_field_dictionary_documents_every_field_in_order(tmp_path):
    from pathlib import Path

    from ehrxqa_pipeline.markdown import table
    from ehrxqa_pipeline.questions.ehrxqa.records import FIELD_DICTIONARY
    from ehrxqa_pipeline.release import datasheet, manifest
    from tests.release.helpers import make_source
    from tests.release.test_datasheet import _gathered

    gathered, _ = _gathered(tmp_path)
    source = make_source(tmp_path, seed=9)
    sheet = datasheet.render_datasheet(gathered, manifest.source_section(source, manifest.source_digests(source)),
                                       {"package": "p", "version": "0", "sha256": "ab", "files": 1, "dirs": ["a"]},
                                       0, {})

    assert tuple(f for f, _, _ in FIELD_DICTIONARY) == RECORD_FIELDS
    rendered = table(["field", "JSON type", "meaning"], FIELD_DICTIONARY)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert rendered in readme.split("## The release folder")[1].split("\n## ")[0]
    assert rendered in sheet
    deviations = (Path(__file__).resolve().parents[2] / "docs" / "deviations.md").read_text()
    section = deviations.split("## Published dataset: record format")[1]
    for field in ("resolved_value", "para_type", "template", "query", "value"):
        assert f"| `{field}`" in section
