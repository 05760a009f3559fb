"""tables.json beside each exported database: Spider's shape, and every table, column, type and key as the
built SQLite and DuckDB files declare them; the same bytes on every export."""

import json
import sqlite3

import duckdb
import pytest

from ehrxqa_pipeline.ehr.ddl import TABLES, Column, Table
from ehrxqa_pipeline.ehr.spider import spider_schema

SPIDER_KEYS = ["column_names", "column_names_original", "column_types", "db_id", "foreign_keys", "primary_keys",
               "table_names", "table_names_original"]
# SQLite's declared type -> the Spider types it may stand for (timestamps are TEXT in SQLite)
SQLITE_TO_SPIDER = {"INTEGER": {"number"}, "REAL": {"number"}, "TEXT": {"text", "time"}}
DUCKDB_TO_SPIDER = {"BIGINT": "number", "DOUBLE": "number", "VARCHAR": "text", "TIMESTAMP": "time"}


def _entry(export) -> dict:
    doc = json.loads(export.tables_json_path.read_text())
    assert isinstance(doc, list) and len(doc) == 1
    return doc[0]


@pytest.mark.parametrize("which", ("silver", "gold"))
def test_tables_json_matches_the_built_sqlite_database(exported, which):
    e = exported[which]
    entry = _entry(e)
    assert e.tables_json_path == e.sqlite_path.parent / "tables.json"
    assert sorted(entry) == SPIDER_KEYS and entry["db_id"] == "mimic_iv_cxr"  # the records' db_id
    columns, types = entry["column_names_original"], entry["column_types"]
    assert columns[0] == [-1, "*"] and entry["column_names"][0] == [-1, "*"]
    assert len(columns) == len(entry["column_names"]) == len(types)
    assert set(types) <= {"text", "number", "time", "boolean", "others"}
    tables = entry["table_names_original"]
    assert entry["table_names"] == [t.replace("_", " ") for t in tables]
    assert [[t, n.replace("_", " ")] for t, n in columns[1:]] == entry["column_names"][1:]
    with sqlite3.connect(e.sqlite_path) as db:
        # every table of the file, in creation order (parents first)
        created = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid").fetchall()
        assert tables == [r[0] for r in created]
        declared = {t: db.execute(f"PRAGMA table_info({t})").fetchall() for t in tables}
        keys = {t: db.execute(f"PRAGMA foreign_key_list({t})").fetchall() for t in tables}
        # every column of every table, in order, with its type mapped
        assert columns[1:] == [[i, c[1]] for i, t in enumerate(tables) for c in declared[t]]
        for (i, name), kind in zip(columns[1:], types[1:]):
            sqlite_type = next(c[2] for c in declared[tables[i]] if c[1] == name)
            assert kind in SQLITE_TO_SPIDER[sqlite_type], (tables[i], name, sqlite_type, kind)
            if kind == "time":  # a time column holds timestamps
                value = db.execute(f"SELECT {name} FROM {tables[i]} WHERE {name} IS NOT NULL LIMIT 1").fetchone()
                assert value is None or (len(value[0]) == 19 and value[0][10] == " "), (tables[i], name, value)

    def resolve(index: int) -> tuple[str, str]:
        t, name = columns[index]
        return tables[t], name

    # primary keys: exactly the columns PRAGMA table_info marks, one per table
    assert sorted(resolve(i) for i in entry["primary_keys"]) == sorted(
        (t, c[1]) for t in tables for c in declared[t] if c[5])
    # foreign keys: exactly those of PRAGMA foreign_key_list, each resolving to a column of its parent table
    assert sorted(resolve(a) + resolve(b) for a, b in entry["foreign_keys"]) == sorted(
        (t, k[3], k[2], k[4]) for t in tables for k in keys[t])
    assert len(entry["foreign_keys"]) == sum(len(t.foreign_keys) for t in TABLES) > 0


def test_tables_json_types_agree_with_the_duckdb_file(exported):
    e = exported["gold"]
    entry = _entry(e)
    tables, columns = entry["table_names_original"], entry["column_names_original"]
    with duckdb.connect(str(e.duckdb_path), read_only=True) as con:
        got = con.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                          "WHERE database_name = current_database()").fetchall()
    duck = {(t, c): DUCKDB_TO_SPIDER[d] for t, c, d in got}
    assert duck == {(tables[t], n): k for (t, n), k in zip(columns[1:], entry["column_types"][1:])}
    assert "time" in duck.values() and "number" in duck.values() and "text" in duck.values()


def test_tables_json_is_the_same_on_every_export(built, exported, tmp_path):
    from ehrxqa_pipeline.ehr.export import export_database

    con, results = built
    r = results["silver"]
    again = export_database(con, r.schema, tmp_path / "silver")
    assert again.tables_json_path.read_bytes() == exported["silver"].tables_json_path.read_bytes()
    # silver and gold share the DDL, so their schemas are the same too
    assert exported["gold"].tables_json_path.read_bytes() == exported["silver"].tables_json_path.read_bytes()


def test_spider_schema_indices_and_a_dangling_reference():
    parent = Table("a_b", (Column("row_id", "int", True), Column("key_id", "int", True)), unique=(("key_id",),))
    child = Table("c", (Column("row_id", "int", True), Column("key_id", "int", True), Column("at_time", "ts", False),
                        Column("x", "float", False), Column("s", "str", False)),
                  foreign_keys=(("key_id", "a_b", "key_id"),))
    entry = spider_schema("db", (parent, child))
    assert entry["column_names_original"] == [[-1, "*"], [0, "row_id"], [0, "key_id"], [1, "row_id"], [1, "key_id"],
                                              [1, "at_time"], [1, "x"], [1, "s"]]
    assert entry["column_names"][5] == [1, "at time"] and entry["table_names"] == ["a b", "c"]
    assert entry["column_types"] == ["text", "number", "number", "number", "number", "time", "number", "text"]
    assert entry["primary_keys"] == [1, 3] and entry["foreign_keys"] == [[4, 2]]
    with pytest.raises(ValueError, match="c.key_id references a_b.key_id"):
        spider_schema("db", (child,))
