"""The one way steps write the warehouse (ehrxqa_pipeline/warehouse.py): whole tables in one transaction, one
partition's rows replaced by column name; a failure leaves the previous tables as they were."""

import duckdb
import polars as pl
import pytest

from ehrxqa_pipeline.warehouse import replace_partition, replace_tables, transaction


def test_tables_are_replaced_together_or_not_at_all():
    con = duckdb.connect()
    replace_tables(con, "s", {"a": pl.DataFrame({"x": [1, 2]}), "b": pl.DataFrame({"y": ["p"]})})
    assert con.execute("SELECT x FROM s.a ORDER BY x").fetchall() == [(1,), (2,)]
    with pytest.raises(duckdb.Error):  # the second write fails (a name that is no identifier)
        replace_tables(con, "s", {"a": pl.DataFrame({"x": [9]}), "no such": pl.DataFrame({"y": ["q"]})})
    assert con.execute("SELECT x FROM s.a ORDER BY x").fetchall() == [(1,), (2,)]  # "a" rolled back
    assert con.execute("SELECT * FROM s.b").fetchall() == [("p",)]


def test_a_partition_is_replaced_by_column_name_and_the_others_kept():
    con = duckdb.connect()
    columns = 'id VARCHAR, "partition" VARCHAR, v DOUBLE'
    replace_partition(con, "t", columns, "p10", pl.DataFrame({"v": [1.0], "id": ["a"]}))
    replace_partition(con, "t", columns, "p11", pl.DataFrame({"id": ["b", "c"], "v": [2.0, 3.0]}))
    with transaction(con):
        replace_partition(con, "t", columns, "p10", pl.DataFrame({"id": ["d"], "v": [4.0]}))
    assert con.execute("SELECT * FROM t ORDER BY id").fetchall() == [
        ("b", "p11", 2.0), ("c", "p11", 3.0), ("d", "p10", 4.0)]
    with pytest.raises(RuntimeError), transaction(con):
        replace_partition(con, "t", columns, "p11", pl.DataFrame({"id": [], "v": []}, schema={"id": pl.String,
                                                                                           "v": pl.Float64}))
        raise RuntimeError("the step failed")
    assert con.execute("SELECT count(*) FROM t WHERE \"partition\" = 'p11'").fetchone() == (2,)


def test_kept_open_holds_the_warehouse_from_the_first_connect_to_its_end(tmp_path):
    """``resources.warehouse.kept_open`` (around each run of `ehrxqa build`): nothing is opened until a step
    connects; from then on the database stays open in this process (DuckDB then refuses a connection with other
    settings, here read-only, which it accepts once the file is closed), what a step wrote is there for the next,
    and leaving it, also by an exception, closes the file."""
    from resources import PipelineConfig, Warehouse
    from resources.warehouse import kept_open

    warehouse = Warehouse(config=PipelineConfig(home=str(tmp_path / "home"), source_root=str(tmp_path)))
    path = tmp_path / "home" / "warehouse.duckdb"
    with kept_open():
        pass
    assert not path.exists()  # a run that does not touch the warehouse
    with pytest.raises(RuntimeError, match="the step failed"), kept_open():
        with warehouse.connect() as con:
            con.execute("CREATE TABLE t AS SELECT 1 AS x")
        with pytest.raises(duckdb.ConnectionException, match="different configuration"):
            duckdb.connect(str(path), read_only=True)  # still open: held by kept_open
        with warehouse.connect() as con:  # the next step attaches to the open database
            assert con.execute("SELECT x FROM t").fetchall() == [(1,)]
        raise RuntimeError("the step failed")
    with duckdb.connect(str(path), read_only=True) as con:  # closed on leaving
        assert con.execute("SELECT x FROM t").fetchall() == [(1,)]
