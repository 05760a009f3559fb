"""Checks of a built database; each returns ``(passed, details)``.

``schema`` / ``answers_schema`` may name warehouse schemas (``ehr_silver``) or the main schema of an
attached export (``x.main``). Checks: declared keys (row_id 0..n-1, UNIQUE, NOT NULL, foreign keys
resolve), every time inside [start, current time] (dob excepted: it only has to precede the current
time), the exact current-patient count with one open admission each (their latest), ages, every TB_CXR
image present in the image tree, and the answer sheet's one row per TB_CXR image x pair.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from ehrxqa_pipeline.ehr.config import DbConfig
from ehrxqa_pipeline.ehr.ddl import ANSWER_TABLE, TABLES, Table
from ehrxqa_pipeline.ehr.tb_cxr import LABELS
from ehrxqa_pipeline.sources.schema import image_relpath

Check = tuple[bool, dict]


def _one(con, sql: str) -> int:
    return int(con.execute(sql).fetchone()[0] or 0)


def _targets(schema: str | None, answers_schema: str | None) -> list[tuple[Table, str]]:
    """The database's tables in ``schema`` and the answer sheet in ``answers_schema`` (either may be None)."""
    return ([(t, schema) for t in TABLES] if schema else []) + ([(ANSWER_TABLE, answers_schema)] if answers_schema
                                                               else [])


def check_keys(con: duckdb.DuckDBPyConnection, schema: str | None, answers_schema: str | None = None) -> Check:
    """PRIMARY KEY / UNIQUE / NOT NULL / FOREIGN KEY declarations of ``ddl`` hold on the data (of the database
    in ``schema`` and / or the answer sheet in ``answers_schema``)."""
    problems: dict[str, int] = {}
    targets = _targets(schema, answers_schema)
    for table, sch in targets:
        src = f"{sch}.{table.name}"
        n = _one(con, f"SELECT count(*) FROM {src}")
        if _one(con, f"SELECT count(DISTINCT row_id) FILTER (row_id BETWEEN 0 AND {n - 1}) FROM {src}") != n:
            problems[f"{table.name}.row_id_not_0_to_n-1"] = n
        for col in (c.name for c in table.columns if c.not_null):
            if bad := _one(con, f"SELECT count(*) FROM {src} WHERE {col} IS NULL"):
                problems[f"{table.name}.{col}_null"] = bad
        for key in table.unique:
            cols = ", ".join(key)
            if bad := _one(con, f"SELECT count(*) FROM (SELECT {cols} FROM {src} GROUP BY ALL HAVING count(*) > 1)"):
                problems[f"{table.name}.({cols})_duplicated"] = bad
        for col, parent, pcol in table.foreign_keys:
            bad = _one(con, f"SELECT count(*) FROM {src} c WHERE c.{col} IS NOT NULL AND NOT EXISTS "
                            f"(SELECT 1 FROM {sch}.{parent} p WHERE p.{pcol} = c.{col})")
            if bad:
                problems[f"{table.name}.{col}->{parent}.{pcol}_orphans"] = bad
    return not problems, {"problems": problems, "tables": len(targets)}


def check_time_bounds(con: duckdb.DuckDBPyConnection, schema: str | None, answers_schema: str | None,
                      config: DbConfig) -> Check:
    """Every timestamp lies in [start, current time]; dob precedes the current time (of the database in
    ``schema`` and / or the answer sheet in ``answers_schema``)."""
    start, now = config.sql_bounds()
    problems: dict[str, int] = {}
    targets = _targets(schema, answers_schema)
    checked = 0
    for table, sch in targets:
        for col in (c.name for c in table.columns if c.type == "ts"):
            low = "" if (table.name, col) == ("patients", "dob") else f"{col} < {start} OR "
            checked += 1
            if bad := _one(con, f"SELECT count(*) FROM {sch}.{table.name} WHERE {low}{col} > {now}"):
                problems[f"{table.name}.{col}"] = bad
    details = {"problems": problems, "columns_checked": checked}
    if schema:
        details["latest_admittime"] = str(con.execute(f"SELECT max(admittime) FROM {schema}.admissions").fetchone()[0])
    return not problems, details


def check_current_patients(con: duckdb.DuckDBPyConnection, schema: str, expected: int) -> Check:
    """Exactly ``expected`` patients have an open admission (null dischtime); each has one, its latest."""
    row = con.execute(f"""
        WITH open AS (SELECT subject_id, count(*) AS n, max(admittime) AS t FROM {schema}.admissions
                      WHERE dischtime IS NULL GROUP BY 1),
        last AS (SELECT subject_id, max(admittime) AS t FROM {schema}.admissions GROUP BY 1)
        SELECT count(*), count(*) FILTER (o.n > 1), count(*) FILTER (o.t < l.t)
        FROM open o JOIN last l USING (subject_id)""").fetchone()
    details = {"current_patients": row[0], "expected": expected, "with_several_open_admissions": row[1],
               "open_admission_not_latest": row[2]}
    return row[0] == expected and row[1] == 0 and row[2] == 0, details


def check_ages(con: duckdb.DuckDBPyConnection, schema: str, config: DbConfig) -> Check:
    """Ages at admission within [min_age, max_age] and within one year of year(admittime) - year(dob)."""
    row = con.execute(f"""
        SELECT count(*) FILTER (a.age NOT BETWEEN {config.min_age} AND {config.max_age}),
               count(*) FILTER (abs(year(a.admittime) - year(p.dob) - a.age) > 1),
               min(a.age), max(a.age), count(*)
        FROM {schema}.admissions a JOIN {schema}.patients p USING (subject_id)""").fetchone()
    details = {"outside_range": row[0], "inconsistent_with_dob": row[1], "min_age": row[2], "max_age": row[3],
               "admissions": row[4]}
    return row[0] == 0 and row[1] == 0, details


def check_images_present(con: duckdb.DuckDBPyConnection, schema: str, files_dir: Path | None) -> Check:
    """Every TB_CXR image has its JPEG ``files/pNN/pSUBJECT/sSTUDY/IMAGE.jpg``; skipped without a tree."""
    if files_dir is None or not Path(files_dir).is_dir():
        return True, {"skipped": f"no image tree at {files_dir}"}
    rows = con.execute(f"SELECT subject_id, study_id, image_id FROM {schema}.tb_cxr ORDER BY row_id").fetchall()
    missing = [p for p in (image_relpath(*r) for r in rows) if not os.path.isfile(os.path.join(files_dir, p))]
    return not missing, {"images": len(rows), "missing": len(missing), "first_missing": missing[:5]}


def check_answer_sheet(con: duckdb.DuckDBPyConnection, schema: str, answers_schema: str,
                       pairs_table: str) -> Check:
    """TB_CXR_PLUS has exactly one row per TB_CXR image x pair of ``pairs_table``, with TB_CXR's values.

    As counts: a sheet row that matches an expected row (its image's TB_CXR values, a pair of the pool) covers
    that (image, object, attribute) once; missing = expected rows - keys covered, unexpected = sheet rows - keys
    covered (so a duplicate is unexpected). The same counts as both ``EXCEPT ALL``s of expected and sheet rows,
    through joins with the small image and pair tables instead (0.1 s for the gold sheet at full scale, not 0.9)."""
    row = con.execute(f"""
        SELECT (SELECT count(*) FROM {schema}.tb_cxr) * (SELECT count(*) FROM {pairs_table}),
               (SELECT count(*) FROM {answers_schema}.tb_cxr_plus),
               (SELECT count(DISTINCT (a.image_id, a.object, a.attribute))
                FROM {answers_schema}.tb_cxr_plus a
                JOIN {schema}.tb_cxr t ON t.image_id = a.image_id AND t.study_id = a.study_id
                    AND t.subject_id = a.subject_id AND t.hadm_id IS NOT DISTINCT FROM a.hadm_id
                    AND t.studydatetime = a.studydatetime
                JOIN {pairs_table} p ON lower(p.object) = a.object AND lower(p.attribute) = a.attribute),
               (SELECT count(*) FROM {answers_schema}.tb_cxr_plus WHERE relation NOT IN (0, 1))""").fetchone()
    details = {"expected_rows": row[0], "rows": row[1], "missing_rows": row[0] - row[2],
               "unexpected_rows": row[1] - row[2], "bad_relation_values": row[3]}
    return row[0] == row[2] == row[1] and row[3] == 0, details


def run_checks(con: duckdb.DuckDBPyConnection, result, config: DbConfig,
               files_dir: Path | None = None) -> dict[str, Check]:
    """All checks of one database build (``result``: the ``DbResult`` of ``build_database``)."""
    s = result.schema
    return {
        "keys": check_keys(con, s),
        "time_bounds": check_time_bounds(con, s, None, config),
        "current_patients": check_current_patients(con, s, result.current_patients_drawn),
        "ages": check_ages(con, s, config),
        "images_present": check_images_present(con, s, files_dir),
    }


def run_answer_sheet_checks(con: duckdb.DuckDBPyConnection, sheet, config: DbConfig) -> dict[str, Check]:
    """All checks of one answer-sheet build (``sheet``: the ``AnswerSheetResult`` of ``build_answer_sheet``)."""
    return {
        "keys": check_keys(con, None, sheet.schema),
        "time_bounds": check_time_bounds(con, None, sheet.schema, config),
        "one_row_per_image_pair": check_answer_sheet(con, sheet.database_schema, sheet.schema,
                                                     f"{LABELS[sheet.which]}_pairs"),
    }
