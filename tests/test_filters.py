"""filters: first failing rule names the row, NULL drops nothing, counts and funnels, both engines agree."""

import duckdb
import polars as pl
import pytest

from ehrxqa_pipeline import filters
from ehrxqa_pipeline.filters import Rule

ROWS = pl.DataFrame({"id": [1, 2, 3, 4, 5, 6], "age": [30, 5, 120, None, 40, 7],
                     "unit": ["mg", "mg", None, "ml", "ml", "ml"]})
# polars and SQL statements of the same three rules
POLARS_RULES = (Rule("too_young", pl.col("age") < 11, "children are out of the cohort"),
                Rule("too_old", pl.col("age") > 89, "ages above 89 are shifted in MIMIC"),
                Rule("not_mg", pl.col("unit") != "mg", "one unit per item"))
SQL_RULES = tuple(Rule(r.name, sql, r.why) for r, sql in zip(POLARS_RULES, ("age < 11", "age > 89", "unit <> 'mg'")))
# id 1: kept; 2: too young; 3: too old (its unit is null); 4: age null, not mg; 5: not mg; 6: too young AND not mg
EXPECTED = [None, "too_young", "too_old", "not_mg", "not_mg", "too_young"]


def test_the_first_failing_rule_names_the_row():
    out = filters.apply(ROWS, POLARS_RULES)
    assert out.kept.to_dict(as_series=False) == {"id": [1], "age": [30], "unit": ["mg"]}
    assert out.rejected.columns == ["id", "age", "unit", "reason"]
    assert out.rejected.select("id", "reason").rows() == [(2, "too_young"), (3, "too_old"), (4, "not_mg"),
                                                          (5, "not_mg"), (6, "too_young")]
    assert out.counts == {"too_young": 2, "too_old": 1, "not_mg": 2}


def test_rule_order_decides_the_reason():
    out = filters.apply(ROWS, tuple(reversed(POLARS_RULES)))
    assert out.rejected.filter(pl.col("id") == 6)["reason"].item() == "not_mg"
    assert list(out.counts) == ["not_mg", "too_old", "too_young"]  # rule order, not sorted
    assert out.counts == {"not_mg": 3, "too_old": 1, "too_young": 1}


def test_a_null_condition_drops_nothing():
    # id 3 (unit null) passes not_mg and id 4 (age null) passes both age rules: only a true condition drops
    only_unit = filters.apply(ROWS.filter(pl.col("id").is_in([3, 4])), POLARS_RULES[2:])
    assert only_unit.kept["id"].to_list() == [3]
    assert only_unit.rejected.select("id", "reason").rows() == [(4, "not_mg")]
    ages = filters.apply(ROWS.filter(pl.col("id") == 4), POLARS_RULES[:2])
    assert ages.kept["id"].to_list() == [4] and ages.rejected.height == 0


def test_a_rule_that_must_refuse_nulls_says_so():
    strict = (Rule("no_unit", pl.col("unit").is_null() | (pl.col("unit") != "mg"), "unit required"),)
    assert filters.apply(ROWS, strict).kept["id"].to_list() == [1, 2]


def test_sql_and_polars_statements_agree_in_both_engines():
    in_polars = ROWS.with_columns(filters.reason_expr(POLARS_RULES))["reason"].to_list()
    from_sql_in_polars = ROWS.with_columns(filters.reason_expr(SQL_RULES))["reason"].to_list()
    con = duckdb.connect()
    con.register("src", ROWS)
    in_duckdb = [r[0] for r in con.execute(f"SELECT {filters.reason_sql(SQL_RULES)} FROM src ORDER BY id").fetchall()]
    assert in_polars == from_sql_in_polars == in_duckdb == EXPECTED


def test_no_rules_keep_everything():
    out = filters.apply(ROWS, ())
    assert out.kept.equals(ROWS)
    assert out.rejected.height == 0 and out.rejected.schema["reason"] == pl.String
    assert out.counts == {}
    assert duckdb.connect().execute(f"SELECT {filters.reason_sql(())}").fetchone() == (None,)


def test_an_empty_frame_gives_empty_sides_and_zero_counts():
    out = filters.apply(ROWS.clear(), POLARS_RULES)
    assert out.kept.height == 0 and out.kept.schema == ROWS.schema
    assert out.rejected.height == 0 and out.rejected.columns == [*ROWS.columns, "reason"]
    assert out.counts == {"too_young": 0, "too_old": 0, "not_mg": 0}


def test_lazy_frames_are_accepted():
    assert filters.apply(ROWS.lazy(), POLARS_RULES).counts == filters.apply(ROWS, POLARS_RULES).counts


def test_rules_sharing_a_name_are_counted_together():
    rules = (Rule("bad_age", pl.col("age") < 11, "too young"), Rule("bad_age", pl.col("age") > 89, "too old"))
    out = filters.apply(ROWS, rules)
    assert out.counts == {"bad_age": 3}
    assert filters.reasons_of(rules) == ("bad_age",)


def test_split_keeps_the_frame_columns_and_counts_listed_reasons_first():
    frame = pl.DataFrame({"id": [1, 2, 3, 4], "reason": [None, "zeta", "alpha", "zeta"]})
    out = filters.split(frame, reasons=("empty", "zeta"))
    assert out.kept.to_dict(as_series=False) == {"id": [1], "reason": [None]}
    assert out.rejected["id"].to_list() == [2, 3, 4]
    assert list(out.counts.items()) == [("empty", 0), ("zeta", 2), ("alpha", 1)]


def test_a_frame_with_a_reason_column_is_refused():
    with pytest.raises(ValueError, match="already has a 'reason' column"):
        filters.apply(pl.DataFrame({"reason": ["x"]}), POLARS_RULES)
    out = filters.apply(pl.DataFrame({"reason": ["x"], "age": [3]}), POLARS_RULES[:1], column="why")
    assert out.rejected.rows() == [("x", 3, "too_young")]


def test_duckdb_needs_sql_conditions():
    with pytest.raises(TypeError, match="filter rule 'too_young'"):
        filters.reason_sql(POLARS_RULES)


def test_a_quote_in_a_rule_name_is_escaped():
    rule = Rule("patient's age", "age < 11", "quoted")
    assert duckdb.connect().execute(f"SELECT {filters.reason_sql([rule])} FROM (SELECT 5 AS age)").fetchone() == (
        "patient's age",)


def test_write_split_writes_both_tables_and_counts():
    con = duckdb.connect()
    con.register("src", ROWS)
    con.execute(f"CREATE TABLE staged AS SELECT *, {filters.reason_sql(SQL_RULES)} AS reason FROM src")
    kept, counts = filters.write_split(con, "staged", kept="kept", kept_columns="id, age", kept_order="id",
                                       rejected="refused", rejected_columns="reason, id",
                                       rejected_order="reason, id DESC", reasons=("too_old", "absent"))
    assert kept == 1
    assert con.execute("SELECT * FROM kept").fetchall() == [(1, 30)]
    assert con.execute("SELECT * FROM refused").fetchall() == [("not_mg", 5), ("not_mg", 4), ("too_old", 3),
                                                               ("too_young", 6), ("too_young", 2)]
    assert list(counts.items()) == [("too_old", 1), ("absent", 0), ("not_mg", 2), ("too_young", 2)]


def test_write_split_of_an_empty_source():
    con = duckdb.connect()
    con.execute("CREATE TABLE staged (id INTEGER, reason VARCHAR)")
    assert filters.write_split(con, "staged", kept="kept", rejected="refused") == (0, {})
    assert con.execute("SELECT count(*) FROM kept").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM refused").fetchone() == (0,)


def test_funnel_counts_the_rows_remaining_after_each_step():
    counts = {"too_young": 2, "too_old": 1, "missing_jpeg": 1, "undecodable_jpeg": 2}
    steps = ["too_young", "too_old", "not_mg", ("sound_jpeg", ("missing_jpeg", "undecodable_jpeg", "size"))]
    assert filters.funnel(10, counts, steps, start="all_rows") == [
        ("all_rows", 10), ("too_young", 8), ("too_old", 7), ("not_mg", 7), ("sound_jpeg", 4)]
    assert filters.funnel(0, {}, [], start="all_rows") == [("all_rows", 0)]
