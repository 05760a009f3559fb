"""Checks on refined labels (``labels.refine_labels`` output); each returns ``(passed, details)``.

The checks recompute what they verify from the ontology, not from the tables under test, so a wrong
``_pairs`` table or a broken propagation is caught rather than trusted. Details hold counts and up to
five example rows, ready for Dagster check metadata.
"""

from __future__ import annotations

import duckdb

from ehrxqa_pipeline.cxr.labels import dense_labels_sql, ontology_frames, temp_tables
from ehrxqa_pipeline.cxr.ontology import Ontology

N_EXAMPLES = 5


def _examples(con: duckdb.DuckDBPyConnection, sql: str) -> list[list]:
    return [list(r) for r in con.execute(f"SELECT * FROM ({sql}) LIMIT {N_EXAMPLES}").fetchall()]


def check_closure(con: duckdb.DuckDBPyConnection, out_table: str, ontology: Ontology) -> tuple[bool, dict]:
    """Every ancestor pair (ancestor-or-self object x ancestor-or-self attribute) of an affirmed row that
    lies in the pool is affirmed for the same image."""
    with temp_tables(con, ontology_frames(ontology)) as (t, _):
        missing = f"""
            SELECT DISTINCT l.image_id, ou.ancestor AS object, au.ancestor AS attribute,
                   l.object AS from_object, l.attribute AS from_attribute
            FROM {out_table} l
            JOIN {t['ou']} ou ON l.object = ou.object
            JOIN {t['au']} au ON l.attribute = au.attribute
            SEMI JOIN {t['pool']} q ON q.object = ou.ancestor AND q.attribute = au.ancestor
            ANTI JOIN {out_table} m
                ON m.image_id = l.image_id AND m.object = ou.ancestor AND m.attribute = au.ancestor"""
        n = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT image_id, object, attribute FROM ({missing}))"
                        ).fetchone()[0]
        examples = _examples(con, missing + " ORDER BY 1, 2, 3, 4, 5") if n else []
    return n == 0, {"missing_ancestor_rows": n, "examples": examples}


def check_in_pool(con: duckdb.DuckDBPyConnection, out_table: str, ontology: Ontology) -> tuple[bool, dict]:
    """No affirmed row outside the ontology's pool, none for an image outside ``{out_table}_images``, and
    the stored ``{out_table}_pairs`` equals the pool."""
    with temp_tables(con, ontology_frames(ontology)) as (t, _):
        outside = f"""SELECT * FROM {out_table} l
                      ANTI JOIN {t['pool']} q ON q.object = l.object AND q.attribute = l.attribute"""
        n_outside = con.execute(f"SELECT count(*) FROM ({outside})").fetchone()[0]
        n_no_image = con.execute(f"SELECT count(*) FROM {out_table} l "
                                 f"ANTI JOIN {out_table}_images i ON i.image_id = l.image_id").fetchone()[0]
        diff = con.execute(f"""SELECT count(*) FROM (
            (SELECT object, attribute, category FROM {out_table}_pairs EXCEPT
             SELECT object, attribute, category FROM {t['pool']})
            UNION ALL (SELECT object, attribute, category FROM {t['pool']} EXCEPT
             SELECT object, attribute, category FROM {out_table}_pairs))""").fetchone()[0]
        examples = _examples(con, outside + " ORDER BY 1, 2, 3") if n_outside else []
    passed = n_outside == 0 and n_no_image == 0 and diff == 0
    return passed, {"rows_outside_pool": n_outside, "rows_of_unknown_images": n_no_image,
                    "pairs_table_differences": diff, "examples": examples}


def check_dense_unique(con: duckdb.DuckDBPyConnection, out_table: str) -> tuple[bool, dict]:
    """The dense view has exactly one row per image x pool pair.

    Every dense row is an (image row, pair row) combination, repeated once per matching sparse row; so
    its row count equals distinct images x distinct pairs exactly when image ids and pairs are unique
    and no (image, pair) is affirmed twice.
    """
    n_rows = con.execute(f"SELECT count(*) FROM ({dense_labels_sql(out_table)})").fetchone()[0]
    n_images = con.execute(f"SELECT count(DISTINCT image_id) FROM {out_table}_images").fetchone()[0]
    n_pairs = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT object, attribute FROM {out_table}_pairs)"
                          ).fetchone()[0]
    expected = n_images * n_pairs
    return n_rows == expected, {"dense_rows": n_rows, "images": n_images, "pairs": n_pairs,
                                "expected_rows": expected}


def check_same_pool(con: duckdb.DuckDBPyConnection, table_a: str, table_b: str) -> tuple[bool, dict]:
    """Two refined label sets (e.g. silver and gold) use the identical pool (object, attribute, category)."""
    def minus(x: str, y: str) -> str:
        return (f"SELECT object, attribute, category FROM {x}_pairs "
                f"EXCEPT SELECT object, attribute, category FROM {y}_pairs")
    only_a = con.execute(f"SELECT count(*) FROM ({minus(table_a, table_b)})").fetchone()[0]
    only_b = con.execute(f"SELECT count(*) FROM ({minus(table_b, table_a)})").fetchone()[0]
    both = f"SELECT * FROM (({minus(table_a, table_b)}) UNION ALL ({minus(table_b, table_a)})) ORDER BY 1, 2"
    examples = _examples(con, both) if only_a or only_b else []
    return only_a == 0 and only_b == 0, {f"only_in_{table_a}": only_a, f"only_in_{table_b}": only_b,
                                         "examples": examples}
