"""EHRXQA record values (issue 20): ``value`` holds exactly the database values written into the question,
``resolved_value`` the studies the query resolves; the release's blocking check re-resolves every record's
studies with the released SQL on the released SQLite database and fails on a planted mismatch."""

from __future__ import annotations

import copy
import json
import shutil
import sqlite3

import duckdb
import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG
from ehrxqa_pipeline.questions.ehrxqa.filler import fill_items
from ehrxqa_pipeline.questions.ehrxqa.item import placeholders, study_keys
from ehrxqa_pipeline.questions.ehrxqa.records import build_records, stored_frame, write_release
from ehrxqa_pipeline.questions.ehrxqa.resolved import check_resolved, resolve_studies
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, sample_ehrxqa

COMPARISONS = tuple(t.index for t in CATALOG if 2000 <= t.index < 2400)  # time / previous / id forms
OTHERS = (1000, 1001, 1018, 1024, 1100, 1119, 3000, 3205, 4000, 5000, 6000)  # 1-image, N-image, multimodal


@pytest.fixture(scope="module")
def frame(db_path):
    files = DatabaseFiles(db_path, db_path)
    sample = sample_ehrxqa(files, files, seed=0, caps=SamplingCaps(train_valid=8, test=2),
                           templates=[BY_INDEX[i] for i in COMPARISONS + OTHERS])
    return stored_frame(sample)


@pytest.fixture(scope="module")
def released(frame, tmp_path_factory):
    """The records as the release writes and a user reads them, with (split, id) -> template index."""
    out = tmp_path_factory.mktemp("release")
    paths = write_release(build_records(frame), out)
    records = {s: json.loads(p.read_text()) for s, p in paths.items()}
    template_of = {(r["split"], r["id"]): (r["template_index"], r["scope"]) for r in frame.iter_rows(named=True)}
    return records, template_of


def _databases(db_path):
    return {"silver": db_path, "gold": db_path}


def test_value_is_the_written_placeholders_and_resolved_value_the_studies(conn):
    """Every template of the image database: value keys = the {name} placeholders of q_tag (in order);
    resolved_value = the studies the item resolved (1-image: study_id; 2-image: study_id1, study_id2)."""
    items = fill_items(conn, 0, tuple(t for t in CATALOG if t.index >= 1000), per_template=2)
    assert {i.template.scope for i in items} >= {"IMAGE-SINGLE-1", "IMAGE-SINGLE-2", "IMAGE-SINGLE-N",
                                                   "IMAGE-GROUP-N", "MULTIMODAL-SINGLE", "MULTIMODAL-GROUP"}
    for i in items:
        r = i.record()
        assert list(r["value"]) == placeholders(r["q_tag"]), (i.template.index, r["value"])
        assert all(f"{{{k}}}" in r["q_tag"] and f"${{{k}}}" not in r["q_tag"] for k in r["value"])
        assert list(r).index("resolved_value") == list(r).index("answer") + 1
        keys = study_keys(i.template.scope)
        assert r["resolved_value"] == dict(zip(keys, i.studies)) and len(i.studies) == len(keys)
        for k in ("study_id", "study_id1", "study_id2"):
            if k in r["value"]:  # a written study id is the one the query asks about
                assert r["value"][k] == r["resolved_value"][k]
    by_ref = {(i.template.scope, getattr(i.template, "ref", None)): i.record() for i in items}
    assert list(by_ref["IMAGE-SINGLE-1", "time"]["value"]) == ["patient_id"]
    assert list(by_ref["IMAGE-SINGLE-1", "id"]["value"]) == ["study_id"]
    assert list(by_ref["IMAGE-SINGLE-2", "time-time"]["value"]) == ["patient_id"]
    assert list(by_ref["IMAGE-SINGLE-2", "time-previous"]["value"]) == ["patient_id"]
    assert list(by_ref["IMAGE-SINGLE-2", "id-id"]["value"]) == ["study_id1", "study_id2"]
    assert list(by_ref["IMAGE-SINGLE-2", "id-previous"]["value"]) == ["study_id1"]
    assert by_ref["IMAGE-SINGLE-N", "since"]["resolved_value"] == {}  # (the old value held a seed study_id)
    assert "study_id" not in by_ref["IMAGE-SINGLE-N", "since"]["value"]


def test_every_comparison_record_resolves_to_its_stored_studies(released, db_path):
    records, template_of = released
    differences, checked = check_resolved(records, template_of, _databases(db_path))
    assert differences == []
    n = {s: sum(1 for r in recs if 2000 <= template_of[s, r["id"]][0] < 2400) for s, recs in records.items()}
    assert all(n.values()) and checked == sum(n.values()) + sum(
        1 for s, recs in records.items() for r in recs if 1000 <= template_of[s, r["id"]][0] < 1200)
    # and by hand for the time-referenced forms: t1 / t2 of the released SQL = study_id1 / study_id2
    con = sqlite3.connect(db_path)
    seen = 0
    for split, recs in records.items():
        for r in recs:
            if 2000 <= template_of[split, r["id"]][0] < 2200:
                got = resolve_studies(r["query"], con)
                stored = r["resolved_value"]
                assert (got["t1"], got["t2"]) == ([stored["study_id1"]], [stored["study_id2"]])
                seen += 1
    assert seen > 0


def test_the_sampling_seeds_differ_from_the_resolved_studies(conn, released, db_path):
    """What the old ``value`` held (the sampler's seed studies) fails the check: the test can tell."""
    items = fill_items(conn, 0, tuple(t for t in CATALOG if 2000 <= t.index < 2112), per_template=8)
    seeds = [i for i in items if (i.values["study_id1"], i.values["study_id2"]) != tuple(i.studies)]
    assert seeds  # on this database too, a time reference often picks other studies than the seeds
    records, template_of = released
    old = copy.deepcopy(records)
    planted = 0
    for split, recs in old.items():
        for r in recs:
            if 2000 <= template_of[split, r["id"]][0] < 2112:  # resolved_value <- a plausible wrong pair
                r["resolved_value"] = {"study_id1": r["resolved_value"]["study_id2"],
                                       "study_id2": r["resolved_value"]["study_id1"]}
                planted += 1
    differences, _ = check_resolved(old, template_of, _databases(db_path))
    assert len(differences) == planted > 0 and {d.field for d in differences} == {"resolved_value"}


def test_tampered_records_fail_the_check(released, db_path):
    records, template_of = released
    first = {}
    for split, recs in records.items():
        for pos, r in enumerate(recs):
            first.setdefault(template_of[split, r["id"]][0] // 100 * 100, (split, pos))

    def tampered(family, change):
        recs = copy.deepcopy(records)
        split, pos = first[family]
        change(recs[split][pos])
        return check_resolved(recs, template_of, _databases(db_path))[0]

    def swap(r):
        r["resolved_value"]["study_id2"] = r["resolved_value"]["study_id1"]

    bad = tampered(2000, swap)
    assert len(bad) == 1 and bad[0].field == "resolved_value" and 2000 <= bad[0].template_index < 2100
    bad = tampered(2200, lambda r: r["value"].update(study_id1=r["value"]["study_id2"]))
    assert [d.field for d in bad] == ["value"]
    bad = tampered(1000, lambda r: r.pop("resolved_value"))
    assert [d.field for d in bad] == ["resolved_value"] and bad[0].stored is None
    bad = tampered(3000, lambda r: r.update(resolved_value={"study_id": 11}))
    assert [(d.field, d.resolved) for d in bad] == [("resolved_value", {})]
    bad = tampered(2100, lambda r: r.update(query=r["query"].replace("tb_cxr.study_id", "tb_cxr.no_such_id", 1)))
    assert [d.field for d in bad] == ["resolved_value"] and bad[0].resolved.startswith("the query does not run")
    with pytest.raises(ValueError, match="not in ehrxqa.silver"):
        check_resolved(records, {}, _databases(db_path))


def test_release_asset_check_blocks_a_planted_mismatch(frame, db_path, tmp_path):
    """The blocking asset check ``resolved_studies`` on a small release laid out as the pipeline writes it: the
    gold side's check reads test.json and the gold database only."""
    from assets.ehrxqa import RELEASE_CHECKS, RELEASE_KEYS
    from resources import PipelineConfig, Warehouse

    home = tmp_path / "home"
    out = home / "release" / "ehrxqa"
    for which in ("silver", "gold"):
        (out / "databases" / which).mkdir(parents=True)
        shutil.copy(db_path, out / "databases" / which / "mimic_iv_cxr.db")
    paths = write_release(build_records(frame), out)
    con = duckdb.connect(str(home / "warehouse.duckdb"))
    con.execute("CREATE SCHEMA ehrxqa")
    con.register("_f", frame)
    for which, splits in (("silver", "('train', 'valid')"), ("gold", "('test')")):  # each side's table
        con.execute(f"CREATE TABLE ehrxqa.{which} AS SELECT * FROM _f WHERE split IN {splits}")
    con.close()
    config = PipelineConfig(home=str(home))
    resolved_studies = _check(RELEASE_CHECKS, "gold", "resolved_studies")
    spec = next(iter(resolved_studies.check_specs))
    assert spec.blocking and spec.asset_key == RELEASE_KEYS["gold"]

    result = resolved_studies(pipeline_config=config, warehouse=Warehouse(config=config))
    assert result.passed and result.metadata["differences"].value == 0
    assert 0 < result.metadata["records_with_studies"].value <= result.metadata["records"].value == \
        len(json.loads(paths["test"].read_text()))

    records = json.loads(paths["test"].read_text())
    r = next(r for r in records if "study_id2" in r["resolved_value"])
    r["resolved_value"]["study_id2"] += 1
    paths["test"].write_text(json.dumps(records, indent=4))
    result = resolved_studies(pipeline_config=config, warehouse=Warehouse(config=config))
    assert not result.passed and result.metadata["differences"].value == 1
    shown = result.metadata["first_differences"].value[0]
    assert (shown["split"], shown["id"], shown["field"]) == ("test", r["id"], "resolved_value")


def test_release_shape_check_blocks_a_query_outside_the_published_shapes(frame, tmp_path):
    """The blocking asset check ``neuralsql_shapes``: the sampled release passes; one query rewritten with
    func_vqa in a where over tb_cxr (the pre-issue-14 form of the N-study templates) fails it, named: the
    silver side's check, which reads train.json and valid.json."""
    from assets.ehrxqa import RELEASE_CHECKS, RELEASE_KEYS
    from resources import PipelineConfig

    home = tmp_path / "home"
    paths = write_release(build_records(frame), home / "release" / "ehrxqa")
    config = PipelineConfig(home=str(home))
    neuralsql_shapes = _check(RELEASE_CHECKS, "silver", "neuralsql_shapes")
    spec = next(iter(neuralsql_shapes.check_specs))
    assert spec.blocking and spec.asset_key == RELEASE_KEYS["silver"]
    result = neuralsql_shapes(pipeline_config=config)
    assert result.passed and result.metadata["refused"].value == 0
    assert {"P1", "P2", "P3"} <= set(result.metadata["per_shape"].value)  # image templates only here

    records = json.loads(paths["train"].read_text())
    r = next(r for r in records if r["query"] and r["query"].startswith("select count(*) > 0 from (select * from tb_cxr"))
    inner = r["query"][len("select count(*) > 0 from ("):r["query"].index(") as t1 where func_vqa(")]
    vqa = r["query"][r["query"].index("func_vqa("):].replace("t1.study_id", "tb_cxr.study_id")
    r["query"] = f"select count(*) > 0 from tb_cxr{inner[len('select * from tb_cxr'):]} and {vqa}"
    paths["train"].write_text(json.dumps(records, indent=4))
    result = neuralsql_shapes(pipeline_config=config)
    assert not result.passed and result.metadata["refused"].value == 1
    shown = result.metadata["first_refused"].value[0]
    assert (shown["split"], shown["id"]) == ("train", r["id"]) and "outside the published shapes" in shown["reason"]


def _check(checks, which: str, name: str):
    """The asset check ``name`` of release/ehrxqa/<which>."""
    (found,) = [c for c in checks if next(iter(c.check_specs)).key.name == name
                and next(iter(c.check_specs)).asset_key.path[-1] == which]
    return found


def test_derived_tables_come_from_the_template_shape_as_from_the_query_itself(released):
    """``study_subqueries`` parses a query's value-free shape once per template and puts its values back: every
    released query's derived tables are those of its own parse (and so are a few edge cases), and two queries of
    one shape parse once."""
    import sqlglot
    from sqlglot import exp

    from ehrxqa_pipeline.questions.ehrxqa import resolved
    from ehrxqa_pipeline.questions.neuralsql import postprocess_query

    def own(query: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for node in sqlglot.parse_one(postprocess_query(query), read="sqlite").find_all(exp.Subquery):
            if node.alias in ("t1", "t2") and isinstance(node.this, exp.Query):
                out.setdefault(node.alias, []).append(node.this.sql(dialect="sqlite"))
        return out

    base = ("select func_vqa(\"is there {q} in the left lung?\", t1.study_id) from (select tb_cxr.study_id from "
            "tb_cxr where tb_cxr.subject_id = {s} and tb_cxr.image_id = '{i}' and tb_cxr.studydatetime > 2.5 "
            "order by tb_cxr.studydatetime desc limit 1) as t1")
    queries = [r["query"] for recs in released[0].values() for r in recs if r["query"] not in (None, "null")]
    queries += [base.format(q="pleural effusion", s=10000032, i="it''s"),
                base.format(q="a \"\"quoted\"\" finding", s=0, i=""), "select 1"]
    assert len(queries) > 100
    assert all(resolved.study_subqueries(q) == own(q) for q in queries)
    resolved._subqueries.cache_clear()
    resolved.study_subqueries(base.format(q="x", s=11, i="a"))
    resolved.study_subqueries(base.format(q="y", s=12, i="b"))
    assert resolved._subqueries.cache_info().misses == 1
