"""Contracts: consistent with the source layout, and each rule quarantines with its exact reason."""

import datetime as dt

import polars as pl
import pytest

from ehrxqa_pipeline.contracts import (CONTRACTS_DIR, ContractError, load_contract, parse_contract,
                                       reason_expr)
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
