"""DuckDB and SQLite deliveries: same contents, declared keys, answer sheet in its own folder."""

import re
import sqlite3

import duckdb
import pytest

from ehrxqa_pipeline.ehr.checks import check_keys
from ehrxqa_pipeline.ehr.ddl import ANSWER_TABLE, TABLES, select_sql

TS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


def _sqlite_rows(path, table):
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT * FROM {table.name} ORDER BY row_id").fetchall()


def _duckdb_rows(path, table):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(select_sql(table, table.name, "sqlite")).fetchall()  # timestamps as the same text


@pytest.mark.parametrize("which", ("silver", "gold"))
def test_sqlite_and_duckdb_hold_identical_contents(exported, exported_sheets, built, which):
    e, sheet = exported[which], exported_sheets[which]
    con, results = built
    for table in TABLES:
        rows = _sqlite_rows(e.sqlite_path, table)
        assert rows == _duckdb_rows(e.duckdb_path, table), table.name
        assert len(rows) == results[which].rows[table.name]
        for i, col in enumerate(table.columns):
            if col.type == "ts":
                assert all(r[i] is None or TS.match(r[i]) for r in rows), (table.name, col.name)
    assert _sqlite_rows(sheet.sqlite_path, ANSWER_TABLE) == _duckdb_rows(sheet.duckdb_path, ANSWER_TABLE)


def test_files_layout_and_declared_keys(exported, exported_sheets):
    e, sheet = exported["gold"], exported_sheets["gold"]
    assert e.sqlite_path.name == "mimic_iv_cxr.db" and e.duckdb_path.name == "mimic_iv_cxr.duckdb"
    assert sheet.sqlite_path.name == "tb_cxr_plus.db" and sheet.duckdb_path.name == "tb_cxr_plus.duckdb"
    with sqlite3.connect(e.sqlite_path) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert names == {t.name for t in TABLES}  # no answer sheet in the user-facing file
        fks = db.execute("SELECT \"table\", \"from\" FROM pragma_foreign_key_list('chartevents')").fetchall()
        assert set(fks) == {("patients", "subject_id"), ("admissions", "hadm_id"), ("icustays", "stay_id"),
                            ("d_items", "itemid")}
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        pk = [r[1] for r in db.execute("PRAGMA table_info(patients)") if r[5]]
        assert pk == ["row_id"]
        assert db.execute("SELECT typeof(hadm_id) FROM admissions LIMIT 1").fetchone()[0] == "integer"
        plan = db.execute("EXPLAIN QUERY PLAN SELECT * FROM diagnoses_icd WHERE subject_id = 1").fetchall()
        assert "USING INDEX idx_diagnoses_icd_subject_id" in str(plan)  # foreign keys are indexed
    with sqlite3.connect(sheet.sqlite_path) as db:
        plan = db.execute("EXPLAIN QUERY PLAN SELECT * FROM tb_cxr_plus WHERE study_id = 1 AND relation = 1").fetchall()
        assert "idx_tb_cxr_plus_study_id_relation" in str(plan)
    con = duckdb.connect()
    con.execute(f"ATTACH '{e.duckdb_path}' AS x (READ_ONLY)")
    con.execute(f"ATTACH '{sheet.duckdb_path}' AS y (READ_ONLY)")
    ok, details = check_keys(con, "x.main", "y.main")
    assert ok, details
    n_fk = con.execute("SELECT count(*) FROM duckdb_constraints() WHERE database_name = 'x' "
                       "AND constraint_type = 'FOREIGN KEY'").fetchone()[0]
    assert n_fk == sum(len(t.foreign_keys) for t in TABLES)


def test_export_replaces_previous_files(built, exported, tmp_path):
    from ehrxqa_pipeline.ehr.export import export_database

    con, results = built
    r = results["silver"]
    first = export_database(con, r.schema, tmp_path / "silver")
    again = export_database(con, r.schema, tmp_path / "silver")
    assert first.sqlite_sha256 == again.sqlite_sha256 == exported["silver"].sqlite_sha256
    assert sorted(p.name for p in (tmp_path / "silver").iterdir()) == ["mimic_iv_cxr.db", "mimic_iv_cxr.duckdb",
                                                                     "tables.json"]


def test_an_answer_sheet_edit_patches_its_files_to_the_rows_a_fresh_export_writes(built, sheets, tmp_path):
    """Relations flipped in a few rows (a label edit): both answer-sheet files are patched in exactly those rows
    and then hold what a fresh export writes; nothing changed: nothing rewritten. Written whole instead: after a
    file changed since the last export, a key column changed, or a row went."""
    import os

    from ehrxqa_pipeline.ehr.export import export_answer_sheet

    con, _ = built
    rows = con.execute(f"SELECT * FROM {sheets['gold'].schema}.tb_cxr_plus").fetch_arrow_table()
    mem = duckdb.connect()  # a private copy of the gold answer sheet to edit
    mem.execute("CREATE SCHEMA s")
    mem.execute("CREATE TABLE s.tb_cxr_plus AS SELECT * FROM rows")
    out = tmp_path / "sheet"

    def export(fresh: bool = False):
        return export_answer_sheet(mem, "s", tmp_path / "fresh" if fresh else out)

    def same_as_fresh(result) -> None:
        again = export(fresh=True)
        assert again.patched_rows is None
        assert _sqlite_rows(result.sqlite_path, ANSWER_TABLE) == _sqlite_rows(again.sqlite_path, ANSWER_TABLE)
        assert _duckdb_rows(result.duckdb_path, ANSWER_TABLE) == _duckdb_rows(again.duckdb_path, ANSWER_TABLE)
        with sqlite3.connect(result.sqlite_path) as a, sqlite3.connect(again.sqlite_path) as b:
            schema = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
            assert a.execute(schema).fetchall() == b.execute(schema).fetchall()
            assert a.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        (tmp_path / "fresh" / ".tb_cxr_plus.state.json").unlink()  # the next fresh export writes anew too

    assert export().patched_rows is None  # nothing to patch yet
    inodes = [os.stat(p).st_ino for p in (out / "tb_cxr_plus.db", out / "tb_cxr_plus.duckdb")]
    assert export().patched_rows == 0
    assert [os.stat(p).st_ino for p in (out / "tb_cxr_plus.db", out / "tb_cxr_plus.duckdb")] == inodes

    mem.execute("UPDATE s.tb_cxr_plus SET relation = 1 - relation WHERE row_id IN (1, 5, 9)")
    patched = export()
    assert patched.patched_rows == 3 and patched.rows == {"tb_cxr_plus": rows.num_rows}
    same_as_fresh(patched)

    mem.execute("UPDATE s.tb_cxr_plus SET relation = 1 - relation WHERE row_id = 2")
    os.utime(out / "tb_cxr_plus.db", ns=(1, 1))  # altered since the last export: written whole
    written = export()
    assert written.patched_rows is None
    same_as_fresh(written)

    mem.execute("UPDATE s.tb_cxr_plus SET attribute = 'edited' WHERE row_id = 3")  # a key column: written whole
    assert export().patched_rows is None
    mem.execute("DELETE FROM s.tb_cxr_plus WHERE row_id = (SELECT max(row_id) FROM s.tb_cxr_plus)")  # a row gone
    gone = export()
    assert gone.patched_rows is None
    same_as_fresh(gone)
