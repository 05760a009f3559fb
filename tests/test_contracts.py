"""Contracts: the ingest contracts consistent with the source layout, each rule quarantining with its exact reason;
every table-backed asset with contracts, their structural checks and metadata."""

import datetime as dt

import polars as pl
import pytest

from ehrxqa_pipeline.contracts import (CONTRACTS_DIR, ContractError, all_contracts, contracts_by_asset, load_contract,
                                       parse_contract, reason_expr)
from ehrxqa_pipeline.sources.schema import TABLES

ALL = sorted(p.stem.replace(".", "/") for p in CONTRACTS_DIR.glob("ingest.*.yaml"))


def test_one_contract_per_source_table():
    assert sorted(a.split("/")[1] for a in ALL) == sorted(TABLES)


@pytest.mark.parametrize("asset", ALL)
def test_contract_matches_schema(asset):
    c = load_contract(asset)
    spec = TABLES[c.table]
    for col in c.columns:
        assert spec.types.get(col.name) == col.type, f"{asset}: {col.name}"
        assert col.why, f"{asset}: column {col.name} has no reason"
    assert set(c.primary_key) <= set(spec.types)
    for fk in c.foreign_keys:
        assert fk.references in TABLES and fk.why
    for rule in (*c.row_rules, *c.scope):
        pl.sql_expr(rule.sql)  # parses
        assert rule.why
    assert c.grain and c.why_max_rejected


def _frame(**cols):
    n = len(next(iter(cols.values())))
    return pl.DataFrame({**cols, "_parse_error": [None] * n}, schema_overrides={"_parse_error": pl.String})


def test_reasons_for_each_rule_kind():
    c = load_contract("ingest/admissions")
    t0 = dt.datetime(2150, 1, 1, 8)
    df = _frame(
        subject_id=[10000001, None, 10000003, 10000004, 10000005],
        hadm_id=[20000001, 20000002, 20000003, 20000004, 20000005],
        admittime=[t0, t0, t0, dt.datetime(2050, 1, 1), t0],
        dischtime=[t0 + dt.timedelta(days=2), t0, t0 - dt.timedelta(hours=1), t0, t0],
        admission_type=["URGENT", "URGENT", "URGENT", "URGENT", None],
    )
    reasons = df.with_columns(reason_expr(c, df.columns))["_reason"].to_list()
    assert reasons == [None, "null:subject_id", "dischtime_before_admittime", "out_of_range:admittime",
                       "null:admission_type"]


def test_parse_error_wins_and_names_column():
    c = load_contract("ingest/patients")
    df = pl.DataFrame({"subject_id": [10000001], "gender": ["X"], "anchor_age": [None], "anchor_year": [2150],
                       "dod": [None], "_parse_error": ["anchor_age='abc'"]},
                      schema_overrides={"anchor_age": pl.Int64, "dod": pl.Date})
    assert df.with_columns(reason_expr(c, df.columns))["_reason"].item() == "unparsable:anchor_age"


def test_allowed_values():
    c = load_contract("ingest/patients")
    df = _frame(subject_id=[10000001, 10000002], gender=["F", "U"], anchor_age=[40, 40],
                anchor_year=[2150, 2150], dod=[None, None])
    assert df.with_columns(reason_expr(c, df.columns))["_reason"].to_list() == [None, "not_allowed:gender"]


def test_malformed_contract_names_file_and_entry(tmp_path):
    with pytest.raises(ContractError, match="missing required entry 'grain'"):
        parse_contract({"asset": "ingest/x", "source": "s", "columns": {}}, tmp_path / "x.yaml")
    with pytest.raises(ContractError, match="column 'a' has unknown type 'blob'"):
        parse_contract({"asset": "ingest/x", "grain": "g", "source": "s", "columns": {"a": {"type": "blob"}}})


def test_scope_rule_comes_after_every_validity_rule():
    c = load_contract("ingest/silver_relations")
    df = _frame(study_id=[50000001] * 4, image_id=["a.dcm"] * 4, row_id=["a|1"] * 4, bbox=["left lung"] * 4,
                relation=[1, 1, 1, 5], label_name=["x"] * 4,
                categoryID=["disease", "texture", "no such category", "temporal"], sent_loc=[1.0] * 4)
    assert df.with_columns(reason_expr(c, df.columns))["_reason"].to_list() == [
        None, "out_of_scope:builder_category", "not_allowed:categoryID", "not_allowed:relation"]


def test_scope_rules_parse():
    c = parse_contract({"asset": "ingest/x", "grain": "g", "source": "s", "columns": {"a": {"type": "int"}},
                        "scope": [{"name": "small", "sql": "a < 3", "why": "w"}]})
    assert [(r.name, r.sql, r.why) for r in c.scope] == [("small", "a < 3", "w")]
    df = _frame(a=[1, 5, None])
    assert df.with_columns(reason_expr(c, df.columns))["_reason"].to_list() == [None, "out_of_scope:small", None]


# --- every contract-backed table: contracts, the structural check, the Dagster metadata --------------------

def test_every_contract_parses_with_its_reasons():
    """Each file: grain, source, a reason per column, keys among its columns; named after its table
    (``schema.name``), or for a shape sibling side assets write after their group and table (the EHR databases:
    ``ehr_db.patients``; one schema's side tables: ``splits.rejected`` for splits.silver_rejected and
    splits.gold_rejected, ``splits.images`` for splits.silver and splits.gold themselves)."""
    for contract in all_contracts():
        assert contract.grain and contract.source, contract.name
        assert all(c.why for c in contract.columns), contract.name
        assert all(fk.why for fk in contract.foreign_keys), contract.name
        tables = {t for _, t in contract.tables}
        if len(tables) == 1:
            assert contract.name == next(iter(tables)), contract.name
        else:
            groups = {a.split("/")[0] for a, _ in contract.tables}
            names = {t.split(".")[1] for t in tables}
            assert len(groups) == 1, contract.name
            group = groups.pop()
            if len(names) == 1:  # the same table in each side's schema: ehr_silver.patients, ehr_gold.patients
                assert contract.name == f"{group}.{names.pop()}"
            else:  # one schema, each side's table named after its asset: splits.silver, splits.silver_rejected
                shapes = {t.split(".")[1].removeprefix(a.split("/")[1]).lstrip("_") for a, t in contract.tables}
                assert len(shapes) == 1, contract.name
                shape = shapes.pop()
                assert contract.name == f"{group}.{shape}" if shape else contract.name.startswith(f"{group}."), \
                    contract.name


def test_polars_schema_and_ddl_follow_the_column_order():
    c = load_contract("vqa_scoring.predicted_images")
    assert c.polars_schema() == {"partition": pl.String, "image_id": pl.String, "p_pa": pl.Float32,
                                 "p_male": pl.Float32, "ctr": pl.Float64, "mtr": pl.Float64}
    assert list(c.polars_schema(without=("partition",))) == ["image_id", "p_pa", "p_male", "ctr", "mtr"]
    assert c.duckdb_columns() == ('"partition" VARCHAR, "image_id" VARCHAR, "p_pa" FLOAT, "p_male" FLOAT, '
                                  '"ctr" DOUBLE, "mtr" DOUBLE')
    assert load_contract("mimic_cxr_vqa.questions").polars_schema()["answer"] == pl.List(pl.String)


def test_malformed_contracts_are_named(tmp_path):
    with pytest.raises(ContractError, match=r"primary_key names \['b'\]"):
        parse_contract({"asset": "x/y", "grain": "g", "source": "s", "primary_key": ["b"],
                        "columns": {"a": {"type": "int"}}})
    with pytest.raises(ContractError, match="write an asset as group/name"):
        parse_contract({"asset": "x", "grain": "g", "source": "s", "columns": {}})
    (tmp_path / "x.y.yaml").write_text("asset: x/y\ngrain: one row: per thing\n")
    with pytest.raises(ContractError, match=r"x\.y\.yaml: not valid YAML"):
        load_contract("x.y", tmp_path)


def _splits_tables(con) -> None:
    """Small splits.* tables that keep their contracts."""
    con.execute("CREATE SCHEMA splits")
    con.execute("""CREATE TABLE splits.silver AS SELECT * FROM (VALUES
        ('a', 10000001::BIGINT, 50000001::BIGINT, 'train', 'PA', 'F', 'p10/a.jpg', 0.5::DOUBLE, 0.3::DOUBLE, TRUE),
        ('b', 10000002::BIGINT, 50000002::BIGINT, 'valid', 'AP', NULL, 'p10/b.jpg', NULL, 0.3, FALSE))
        t(image_id, subject_id, study_id, split, view_position, gender, image_path, ctr, mtr, abnormal)""")
    con.execute("""CREATE TABLE splits.silver_rejected AS SELECT * FROM (VALUES
        ('c', 10000003::BIGINT, 50000003::BIGINT, 'silver', 'no_labels'))
        t(image_id, subject_id, study_id, cohort, reason)""")
    con.execute("""CREATE TABLE splits.silver_ratio_gaps AS SELECT * FROM (VALUES
        ('b', 'valid', 'ctr', 'no_boxes', NULL::VARCHAR)) t(image_id, split, ratio, silver_reason, gold_reason)""")


def test_generated_structure_check_names_table_column_and_rule(tmp_path):
    """The generated ``contract`` check of splits/silver passes on tables as contracted, and fails on a wrong
    type, a duplicate key and a null in a non-nullable column, each named with its table, column and rule."""
    import duckdb

    from assets.contract_checks import STRUCTURE_CHECKS
    from ehrxqa_pipeline.config import Settings
    from resources import PipelineConfig, Warehouse

    check = next(c for c in STRUCTURE_CHECKS if c.check_key.asset_key.to_user_string() == "splits/silver")
    warehouse = Warehouse(config=PipelineConfig(home=str(tmp_path / "home"), source_root=str(tmp_path)))
    path = Settings.resolve(str(tmp_path / "home"), str(tmp_path)).warehouse
    path.parent.mkdir(parents=True)
    with duckdb.connect(str(path)) as con:
        _splits_tables(con)
    result = check(warehouse=warehouse)
    assert result.passed, result.description
    assert result.description == ("3 tables as contracted: splits.silver, splits.silver_ratio_gaps, "
                                  "splits.silver_rejected")
    with duckdb.connect(str(path)) as con:
        con.execute("INSERT INTO splits.silver SELECT * FROM splits.silver WHERE image_id = 'a'")  # duplicate key
        con.execute("UPDATE splits.silver_rejected SET subject_id = NULL")  # null in a non-nullable column
        con.execute("ALTER TABLE splits.silver_ratio_gaps ALTER split TYPE INTEGER USING 1")  # wrong type
    result = check(warehouse=warehouse)
    assert not result.passed
    assert result.metadata["problems"].value == [
        "splits.silver.(image_id): 1 duplicate rows (rule: primary_key)",
        "splits.silver_ratio_gaps.split: INTEGER, the contract says VARCHAR (rule: type)",
        "splits.silver_rejected.subject_id: 1 of 1 rows break it (rule: nullable: false)"]


def test_structure_check_columns_order_values():
    """Columns a full contract does not list, another order, values outside allowed and min/max."""
    import duckdb

    from ehrxqa_pipeline.quality import check_structure

    c = load_contract("cxr_cohort.funnel")
    with duckdb.connect() as con:
        con.execute("CREATE SCHEMA cxr_cohort")
        con.execute("CREATE TABLE cxr_cohort.funnel (cohort VARCHAR, step INTEGER, rule VARCHAR, images BIGINT, x INT)")
        assert check_structure(con, c, "cxr_cohort.funnel").metadata["problems"] == [
            "cxr_cohort.funnel.x: not in the contract (rule: columns)"]
        con.execute("CREATE OR REPLACE TABLE cxr_cohort.funnel (step INTEGER, cohort VARCHAR, rule VARCHAR, "
                    "images BIGINT)")
        assert check_structure(con, c, "cxr_cohort.funnel").metadata["problems"] == [
            "cxr_cohort.funnel: columns in the order ['step', 'cohort', 'rule', 'images'], the contract says "
            "['cohort', 'step', 'rule', 'images'] (rule: column order)"]
        s = load_contract("cxr_cohort.silver")
        con.execute("CREATE TABLE cxr_cohort.silver AS SELECT 1::BIGINT AS subject_id, 2::BIGINT AS study_id, "
                    "'i' AS image_id, 'LL' AS view_position, TIMESTAMP '2150-01-01' AS study_datetime, "
                    "21::BIGINT AS study_order, 3::BIGINT AS n_rows, 4::BIGINT AS n_columns")
        assert check_structure(con, s, "cxr_cohort.silver").metadata["problems"] == [
            "cxr_cohort.silver.view_position: 1 of 1 rows break it (rule: allowed ['AP', 'PA'])",
            "cxr_cohort.silver.study_order: 1 of 1 rows break it (rule: min: 1, max: 20)"]
        assert check_structure(con, s, "cxr_cohort.gone").metadata["problems"] == [
            "cxr_cohort.gone: no such table (rule: exists)"]


# Assets that read the warehouse (kind duckdb) but write only files, no table.
READERS = {"cxr_cohort/image_downloads": "the image download list (CSV, URLs)",
           "release/images": "the per-split image lists (CSV, URLs, README.md)",
           "ehrxqa/statistics": "statistics.{md,json}", "mimic_cxr_vqa/statistics": "statistics.{md,json}",
           "paraphrase/statistics": "statistics.{md,json}",
           "vqa_scoring/training_set": "models/training_set.duckdb: copies of contracted warehouse tables"}


def test_every_asset_writing_a_table_has_a_contract():
    """Every asset of the code location that works on the warehouse (kind duckdb) has contracts for the tables it
    writes, unless it is a reader listed above; every contract names an asset of the code location, which has a
    `contract` check; its sources that are warehouse tables are tables its asset's ancestors (or itself) write."""
    import re

    from ehrxqa_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string(): k for k in graph.materializable_asset_keys}
    by_asset = contracts_by_asset()
    duckdb_assets = {name for name, k in keys.items() if "duckdb" in graph.get(k).kinds}
    assert duckdb_assets - set(READERS) <= set(by_asset), duckdb_assets - set(READERS) - set(by_asset)
    assert set(READERS) <= duckdb_assets and not set(READERS) & set(by_asset)
    assert set(by_asset) <= set(keys), set(by_asset) - set(keys)
    # and each has its `contract` check (standalone, or declared with a partitioned asset)
    checked = {k.asset_key.to_user_string() for k in graph.asset_check_keys if k.name == "contract"}
    assert set(by_asset) <= checked, set(by_asset) - checked
    writers = {t: a for c in all_contracts() for a, t in c.tables}
    for asset, contracts in by_asset.items():
        upstream = {k.to_user_string() for k in graph.get_ancestor_asset_keys(keys[asset])} | {asset}
        for c in contracts:
            for source in c.source:
                if re.fullmatch(r"[a-z_]+\.[a-z_]+", source):
                    assert writers.get(source) in upstream, (c.name, source)
    # the main table's schema, with each column's reason, is on the asset's definition
    meta = graph.get(keys["splits/gold"]).metadata
    assert meta["dagster/table_name"] == "splits.gold"
    column = meta["dagster/column_schema"].columns[3]
    assert (column.name, column.type, column.constraints.nullable) == ("split", "VARCHAR", False)
    assert column.description == load_contract("splits.images").column("split").why


def test_a_deferred_module_loads_on_first_use_and_is_the_real_one(tmp_path, monkeypatch):
    """ehrxqa_pipeline.gx defers scipy.stats, which Great Expectations imports for one expectation no contract
    uses: here on a package of its own, whose submodule counts its loads. ``from pkg import sub`` binds it
    without running it; the first attribute read runs it once; a module already imported is left as it is."""
    import sys

    from ehrxqa_pipeline.gx import defer

    pkg = tmp_path / "deferpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("loads = []\n")
    (pkg / "sub.py").write_text("import deferpkg\ndeferpkg.loads.append('sub')\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("deferpkg", "deferpkg.sub"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    defer("deferpkg.sub")
    import deferpkg

    from deferpkg import sub
    assert deferpkg.loads == [] and sys.modules["deferpkg.sub"] is sub
    assert sub.VALUE == 42 and deferpkg.loads == ["sub"]
    defer("deferpkg.sub")  # imported: untouched
    assert sub.VALUE == 42 and deferpkg.loads == ["sub"]
    defer("no_such_package.sub")  # not installed: nothing to do
    assert "no_such_package.sub" not in sys.modules
    # what Great Expectations holds is scipy's own stats module, which works
    from great_expectations.expectations.core import expect_column_kl_divergence_to_be_less_than as kl

    assert kl.stats is sys.modules["scipy.stats"] and abs(kl.stats.entropy([1, 1], [1, 1])) < 1e-12
