"""Lineage stated once and checked (ehrxqa_pipeline.lineage): the tables a statement reads and writes, the
catalog (the data contracts), the recording warehouse, and the check on a tiny graph with a planted undeclared
read (the whole graph: tests/test_pipeline.py)."""

import dagster as dg
import duckdb
import pytest

from ehrxqa_pipeline.lineage import (Finding, RecordingConnection, StatementLog, catalog, parse_statement, read_log,
                                     recorded_keys, table_assets, undeclared_reads)
from resources import PipelineConfig, Warehouse
from tests.pipeline_graph import TEST_DEFS, declared_reads


@pytest.mark.parametrize("sql, reads, writes", [
    ("WITH kept AS (SELECT * FROM s.a WHERE k IN (SELECT k FROM s.b)) SELECT * FROM kept JOIN s.c USING (k)",
     {"s.a", "s.b", "s.c"}, set()),  # a CTE is no table; a subquery's table is read
    ("SELECT * FROM (SELECT k FROM s.a) x LEFT JOIN s.b y ON x.k = y.k, LATERAL (SELECT 1) z", {"s.a", "s.b"}, set()),
    ('SELECT count(*) FROM ingest."Admissions"', {"ingest.admissions"}, set()),  # identifiers are case-insensitive
    ("CREATE OR REPLACE TABLE s.t AS SELECT x FROM s.a", {"s.a"}, {"s.t"}),
    ("CREATE TABLE IF NOT EXISTS s.t (k INT, \"partition\" VARCHAR)", set(), {"s.t"}),
    ("INSERT INTO s.t BY NAME SELECT * FROM _frame", {"_frame"}, {"s.t"}),
    ("DELETE FROM s.t WHERE k IN (SELECT k FROM s.gone)", {"s.gone"}, {"s.t"}),
    ("UPDATE s.t SET v = u.v FROM s.u WHERE s.t.k = u.k", {"s.u"}, {"s.t"}),
    ("ALTER TABLE s.t RENAME TO t_old", set(), {"s.t", "s.t_old"}),
    ("CREATE INDEX i ON s.t (k)", set(), {"s.t"}),
    ("SELECT * FROM warehouse.s.t", {"warehouse.s.t"}, set()),
    ("DESCRIBE SELECT * FROM s.t", {"s.t"}, set()),
    ("COPY (SELECT * FROM s.t) TO 'out.csv'", {"s.t"}, set()),  # writes a file, reads the table
    ("SELECT table_name FROM duckdb_tables() WHERE schema_name = 's'", set(), set()),  # a table function
    ("BEGIN TRANSACTION; SELECT * FROM s.a; COMMIT", {"s.a"}, set()),
])
def test_tables_read_and_written(sql, reads, writes):
    st = parse_statement(sql)
    assert (st.reads, st.writes, st.files) == (reads, writes, ())


@pytest.mark.parametrize("sql, files", [
    ("CREATE TEMP TABLE staged AS SELECT * FROM read_parquet('/home/staging/x.parquet')", ("/home/staging/x.parquet",)),
    ("SELECT * FROM read_csv('a/b.csv.gz', header = true) JOIN s.t USING (k)", ("a/b.csv.gz",)),
    ("SELECT * FROM read_csv_auto('a.csv')", ("a.csv",)),
    ("SELECT * FROM 'data/x.parquet'", ("data/x.parquet",)),
    ("COPY s.t FROM 'in.csv' (HEADER)", ("in.csv",)),
])
def test_files_read(sql, files):
    assert parse_statement(sql).files == files


def test_temporary_tables_schemas_and_attached_databases():
    assert parse_statement("CREATE OR REPLACE TEMP TABLE staged AS SELECT * FROM s.a").temporary == {"staged"}
    assert parse_statement("CREATE TEMP TABLE staged AS SELECT 1").writes == frozenset()
    assert parse_statement("CREATE TABLE temp.staged AS SELECT 1").temporary == {"temp.staged"}
    assert parse_statement("DROP TABLE IF EXISTS staged, s.t").dropped == {"staged", "s.t"}
    assert parse_statement("DROP SCHEMA IF EXISTS ehr_gold_next CASCADE").dropped_schemas == {"ehr_gold_next"}
    assert parse_statement("CREATE SCHEMA IF NOT EXISTS s") == parse_statement("DETACH DATABASE IF EXISTS e")
    assert parse_statement("ATTACH '/release/x.duckdb' AS export").attached == "export"
    assert parse_statement('USE "warehouse"."main"').use == "warehouse.main"


def test_the_catalog_is_the_data_contracts():
    """Every table's asset as its contract names it; the ingested tables' quarantines and the EHR build
    workspaces (not contracted) by convention; a table no contract names and no asset is named after: none."""
    tables, assets = catalog(), {"ingest/patients", "demo/a"}
    assert table_assets("ingest.patients", tables, assets) == ("ingest/patients",)
    assert table_assets("ingest.patients_rejected", tables, assets) == ("ingest/patients",)
    assert table_assets("splits.gold_ratio_gaps", tables, assets) == ("splits/gold",)
    assert table_assets("cxr_labels.silver_pairs", tables, assets) == ("cxr_labels/silver",)
    assert table_assets("cxr_labels.ontology_object_closure", tables, assets) == ("cxr_labels/ontology",)
    assert table_assets("ehr_gold.patients", tables, assets) == ("ehr_db/gold",)
    assert table_assets("ehr_silver_answers.tb_cxr_plus", tables, assets) == ("ehr_db/silver_answers",)
    assert table_assets("cxr_labels.gold_images", tables, assets) == ("cxr_labels/gold_images",)
    assert table_assets("ehr_gold_build.patients_rejected", tables, assets) == ("ehr_db/gold",)
    assert table_assets("cxr_cohort.funnel", tables, assets) == ("cxr_cohort/silver", "cxr_cohort/gold")
    assert table_assets("demo.a_rejected", tables, assets) == ("demo/a",)  # a graph without contracts
    assert table_assets("ingest.nothing", tables, assets) == ()
    assert table_assets("ingest.nothing_rejected", tables, assets) == ()


def _records(assets, *statements, checks=(), connection="c1"):
    """Log records of one step: each statement a SQL text, or ("register", name)."""
    step = {"run": "r", "step": "op", "partition": None, "assets": list(assets), "checks": list(checks)}
    return [{**step, "connection": connection, "kind": s[0], "text": s[1]} if isinstance(s, tuple)
            else {**step, "connection": connection, "kind": "sql", "text": s} for s in statements]


DECLARED = {"s/a": {"s/a"}, "s/b": {"s/b", "s/a"}, "s/c": {"s/c", "s/b"}, "s/b:check": {"s/b"},
            "ingest/x": {"ingest/x"}}


def _found(records) -> list[tuple]:
    return [(f.step, f.kind, f.table, f.owners) for f in undeclared_reads(records, DECLARED, tables={})]


def test_reads_of_own_scratch_temporary_and_registered_tables_are_the_steps_own():
    records = _records(
        ["s/c"], ("register", "_frame"), "CREATE TEMP TABLE tmp AS SELECT * FROM s.b",
        "CREATE SCHEMA IF NOT EXISTS s_next", "CREATE TABLE s_next.c AS SELECT * FROM tmp JOIN _frame USING (k)",
        "CREATE OR REPLACE TABLE s.c AS WITH w AS (SELECT * FROM s_next.c) SELECT * FROM w",
        "CREATE OR REPLACE TABLE s.c_rejected AS SELECT * FROM s.c", "DROP SCHEMA s_next CASCADE")
    assert _found(records) == []


def test_a_read_of_an_undeclared_asset_is_found_once_with_its_fix():
    records = _records(["s/c"], "SELECT * FROM s.a", "SELECT count(*) FROM s.a_rejected JOIN s.b USING (k)",
                       "SELECT max(k) FROM s.a")
    assert _found(records) == [("s/c", "undeclared", "s.a", ("s/a",)),  # once per table, its first statement
                               ("s/c", "undeclared", "s.a_rejected", ("s/a",))]
    finding = undeclared_reads(records, DECLARED, tables={})[0]
    assert str(finding) == ("s/c reads s.a, a table of s/a, which it does not declare: declare deps=[s/a] on it, "
                            "or read the table of an asset it declares. Statement: SELECT * FROM s.a")
    # a check may read its asset and its additional deps, not its asset's deps
    assert _found(_records([], "SELECT * FROM s.b JOIN s.a USING (k)", checks=["s/b:check"])) == [
        ("s/b:check", "undeclared", "s.a", ("s/a",))]


def test_writes_unknown_tables_files_and_unparsed_statements():
    assert _found(_records(["s/c"], "INSERT INTO s.b SELECT 1")) == [("s/c", "foreign_write", "s.b", ("s/b",))]
    assert _found(_records(["s/c"], "CREATE TABLE s.mystery AS SELECT 1")) == [
        ("s/c", "unlisted_write", "s.mystery", ())]
    assert _found(_records(["s/c"], "SELECT * FROM s.mystery", "SELECT * FROM unqualified")) == [
        ("s/c", "unknown", "s.mystery", ()), ("s/c", "unknown", "main.unqualified", ())]
    assert _found(_records(["s/c"], "SELECT * FROM read_csv('raw/x.csv')")) == [("s/c", "file", "raw/x.csv", ())]
    assert _found(_records(["ingest/x"], "CREATE TABLE ingest.x AS SELECT * FROM read_csv('raw/x.csv')")) == []
    assert _found(_records(["s/c"], "SELEC * FROM s.a")) == [("s/c", "unparsed", "", ())]


def test_an_attached_database_and_use_are_followed_per_connection():
    """The database export: USE of an attached file, where unqualified names are that file's, until USE of the
    warehouse again; another connection of the step keeps its own default."""
    records = _records(["s/c"], "ATTACH 'release/c.duckdb' AS export", "USE export.main",
                       "CREATE TABLE c AS SELECT * FROM warehouse.s.c", "CREATE TABLE a AS SELECT * FROM s.a",
                       'USE "warehouse"."main"', "SELECT * FROM b")
    records += _records(["s/c"], "SELECT * FROM c", connection="c2")
    assert _found(records) == [("s/c", "unknown", "main.b", ()), ("s/c", "unknown", "main.c", ())]


def test_the_recording_connection_logs_every_statement_of_its_step(tmp_path):
    log = tmp_path / "log" / "statements.jsonl"
    con = RecordingConnection(duckdb.connect(), StatementLog(log, {"step": "op", "assets": ["s/a"]}))
    con.execute("CREATE SCHEMA s")
    con.executemany("CREATE TABLE IF NOT EXISTS s.a AS SELECT ? AS x", [[1]])
    con.register("_frame", con.sql("SELECT 2 AS x").pl())
    assert con.execute("SELECT count(*) FROM s.a").fetchone() == (1,)
    assert con.table("s.a").fetchall() == [(1,)]
    with con.cursor() as cur:
        assert cur.query("SELECT x + 1 FROM s.a").fetchall() == [(2,)]
    con.close()
    records = read_log(log)
    assert [(r["kind"], r["text"]) for r in records] == [
        ("sql", "CREATE SCHEMA s"), ("sql", "CREATE TABLE IF NOT EXISTS s.a AS SELECT ? AS x"),
        ("sql", "SELECT 2 AS x"), ("register", "_frame"), ("sql", "SELECT count(*) FROM s.a"),
        ("sql", "SELECT * FROM s.a"), ("sql", "SELECT x + 1 FROM s.a")]
    assert {r["step"] for r in records} == {"op"} and len({r["connection"] for r in records}) == 2  # the cursor


def test_the_warehouse_records_only_when_asked(tmp_path):
    config = PipelineConfig(home=str(tmp_path / "home"))
    with Warehouse(config=config).connect() as con:
        assert type(con) is duckdb.DuckDBPyConnection
    with Warehouse(config=config, statement_log=str(tmp_path / "log.jsonl")).connect() as con:
        con.execute("SELECT 1")
    (record,) = read_log(tmp_path / "log.jsonl")  # outside a step: no step, which the check leaves out
    assert {k: v for k, v in record.items() if k != "connection"} == {
        "run": None, "step": None, "partition": None, "assets": [], "checks": [], "kind": "sql", "text": "SELECT 1"}


def _tiny_graph(declare: bool, warehouse: Warehouse) -> dg.Definitions:
    """demo/a; demo/b from it (with a quarantine) and a check on b; demo/c from b. demo/c and the check also read
    demo.a: declared when ``declare``, else the planted undeclared reads."""

    @dg.asset(key=["demo", "a"])
    def a(warehouse: Warehouse) -> None:
        with warehouse.connect() as con:
            con.execute("CREATE SCHEMA IF NOT EXISTS demo")
            con.execute("CREATE OR REPLACE TABLE demo.a AS SELECT range AS x FROM range(6)")

    @dg.asset(key=["demo", "b"], deps=[a])
    def b(warehouse: Warehouse) -> None:
        with warehouse.connect() as con:
            con.execute("CREATE OR REPLACE TABLE demo.b AS SELECT x FROM demo.a WHERE x % 2 = 0")
            con.execute("CREATE OR REPLACE TABLE demo.b_rejected AS SELECT x, 'odd' AS reason FROM demo.a "
                        "WHERE x % 2 = 1")

    @dg.asset(key=["demo", "c"], deps=[b, a] if declare else [b])
    def c(warehouse: Warehouse) -> None:
        with warehouse.connect() as con:
            con.execute("CREATE OR REPLACE TABLE demo.c AS WITH kept AS (SELECT x FROM demo.b) "
                        "SELECT a.x FROM demo.a a JOIN kept USING (x)")

    @dg.asset_check(asset=b, additional_deps=[a] if declare else [])
    def b_within_a(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            (outside,) = con.execute("SELECT count(*) FROM demo.b WHERE x NOT IN (SELECT x FROM demo.a)").fetchone()
        return dg.AssetCheckResult(passed=outside == 0)

    return dg.Definitions(assets=[a, b, c], asset_checks=[b_within_a], resources={"warehouse": warehouse})


@pytest.mark.parametrize("declare", [False, True])
def test_a_planted_undeclared_read_fails_the_check_and_declaring_it_passes(tmp_path, declare):
    """A materialization of the tiny graph with the warehouse recording: the reads of demo.a by demo/c and by
    the check on demo/b are found exactly when they are not declared."""
    log = tmp_path / "statements.jsonl"
    defs = _tiny_graph(declare, Warehouse(config=PipelineConfig(home=str(tmp_path / "home")), statement_log=str(log)))
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    records = read_log(log)
    assert recorded_keys(records) == {"demo/a", "demo/b", "demo/c", "demo/b:b_within_a"}
    found = sorted(undeclared_reads(records, declared_reads(defs)), key=lambda f: f.step)
    assert found == ([] if declare else [
        Finding("demo/b:b_within_a", "undeclared", "demo.a", ("demo/a",),
                "SELECT count(*) FROM demo.b WHERE x NOT IN (SELECT x FROM demo.a)"),
        Finding("demo/c", "undeclared", "demo.a", ("demo/a",),
                "CREATE OR REPLACE TABLE demo.c AS WITH kept AS (SELECT x FROM demo.b) SELECT a.x FROM demo.a a "
                "JOIN kept USING (x)")])


def test_the_training_set_and_the_predictions_declare_what_their_workspace_reads(tmp_path):
    """vqa.workspace.snapshot, what vqa_scoring/training_set and /predictions read of the warehouse (the full
    build of tests/test_pipeline.py has no JPEGs, so predictions reads nothing there), reads only their declared
    deps."""
    from assets.vqa_scoring import predict_workspace, train_workspace

    con = duckdb.connect()
    image = "'i1' AS image_id, 10000001 AS subject_id, 50000001 AS study_id, 'PA' AS view_position"
    for ddl in ("CREATE SCHEMA splits", "CREATE SCHEMA cxr_labels", "CREATE SCHEMA cxr_cohort", "CREATE SCHEMA ingest",
                f"CREATE TABLE splits.silver AS SELECT {image}, 'train' AS split, 'F' AS gender, "
                f"'p10/p100/s1/i1.jpg' AS image_path, 0.5 AS ctr, 0.3 AS mtr",
                "CREATE TABLE splits.gold AS SELECT * FROM splits.silver WHERE false",
                f"CREATE TABLE cxr_cohort.gold AS SELECT {image}, 1 AS study_order",
                "CREATE TABLE cxr_labels.pairs AS SELECT 'o' AS object, 'a' AS attribute",
                "CREATE TABLE cxr_labels.silver AS SELECT 'i1' AS image_id, 'o' AS object, 'a' AS attribute",
                "CREATE TABLE ingest.silver_bbox AS SELECT 'i1_o' AS object_id, 'o' AS bbox_name, 1 AS x1, 2 AS x2",
                "CREATE TABLE ingest.gold_bbox AS SELECT 'i1.dcm' AS image_id, 'o' AS bbox_name, "
                "'[1, 2, 3, 4]' AS coord224"):
        con.execute(ddl)
    reads = {"vqa_scoring/training_set": {"splits.silver", "cxr_labels.pairs", "cxr_labels.silver"},
             "vqa_scoring/predictions": {"splits.silver", "cxr_cohort.gold", "cxr_labels.pairs", "ingest.gold_bbox"}}
    for asset, copy in (("vqa_scoring/training_set", lambda c: train_workspace(c)),
                        ("vqa_scoring/predictions", lambda c: predict_workspace(c, ["p10"]))):
        log = tmp_path / f"{asset.replace('/', '_')}.jsonl"
        step = {"run": "r", "step": asset, "partition": None, "assets": [asset], "checks": []}
        work = copy(RecordingConnection(con, StatementLog(log, step)))
        assert work.execute("SELECT count(*) FROM ingest.silver_bbox").fetchone() == (1,)
        records = read_log(log)
        assert {t for r in records if r["kind"] == "sql" for t in parse_statement(r["text"]).reads} == {
            *reads[asset], "ingest.silver_bbox", "_snapshot_ids"}
        assert undeclared_reads(records, declared_reads(TEST_DEFS)) == [], asset
