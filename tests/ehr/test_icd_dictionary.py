"""ehr.tables.icd_dictionary on hand-made rows: one kept row per (lower-cased) code, the newest version's, and
of two spellings of one code in one version the first by code and title (a total order: the kept title must
not depend on the order in which DuckDB's threads deliver the rows)."""

import duckdb

from ehrxqa_pipeline.ehr.tables import icd_dictionary

ROWS = [
    ("0010", 9, "Cholera due to vibrio cholerae"),
    ("0010", 10, "Cholera, newer title"),  # the same code in ICD-10: kept, the ICD-9 row collides
    ("a01 ", 10, "typhoid, second spelling"),
    ("A01", 10, "Typhoid fever"),  # sorts before "a01 ": kept, whatever the row order
    ("B02", 10, None),  # no title: set aside for that, not as a collision
]


def _kept(rows) -> dict:
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest")
    con.execute("CREATE TABLE ingest.d_icd_diagnoses (icd_code VARCHAR, icd_version BIGINT, long_title VARCHAR)")
    con.executemany("INSERT INTO ingest.d_icd_diagnoses VALUES (?, ?, ?)", rows)
    out = con.execute(f"SELECT icd_code, icd_version, long_title, reason FROM ({icd_dictionary('d_icd_diagnoses')}) "
                      "ORDER BY ALL").fetchall()
    return {(c, v, t): r for c, v, t, r in out}


def test_newest_version_and_first_spelling_are_kept_in_any_row_order():
    expected = {("0010", 9, "Cholera due to vibrio cholerae"): "icd_version_collision",
                ("0010", 10, "Cholera, newer title"): None,
                ("a01", 10, "Typhoid fever"): None,
                ("a01", 10, "typhoid, second spelling"): "icd_version_collision",
                ("b02", 10, None): "missing_value"}
    assert _kept(ROWS) == expected
    assert _kept(ROWS[::-1]) == expected
