"""Writing one database table: staged rows with a drop reason -> kept rows (renumbered) + rejected rows.

Every builder produces a SELECT with the table's columns (``row_id`` excepted) and a ``reason`` column
(NULL = kept). ``materialize`` casts the columns to the declared types, lower-cases and strips every
string (reference 5.3: all string cells, codes included), numbers the kept rows ``row_id`` 0..n-1 in a
total order (the given keys, then every column, so only fully identical rows can tie and the contents are
the same on every run), and writes the dropped rows with their reason to ``<build>.<table>_rejected``
(``filters.write_split``).
"""

from __future__ import annotations

import duckdb

from ehrxqa_pipeline.ehr.ddl import DUCKDB_TYPES, Table
from ehrxqa_pipeline.filters import write_split


def cast_sql(table: Table, alias: str = "") -> list[str]:
    out = []
    for c in table.columns:
        if c.name == "row_id":
            continue
        src = f"{alias}{c.name}"
        if c.type == "str":
            out.append(f"lower(trim(CAST({src} AS VARCHAR))) AS {c.name}")
        else:
            out.append(f"CAST({src} AS {DUCKDB_TYPES[c.type]}) AS {c.name}")
    return out


def materialize(con: duckdb.DuckDBPyConnection, table: Table, staged_sql: str, schema: str, build: str,
                order_by: tuple[str, ...]) -> tuple[int, dict[str, int]]:
    """Write ``schema.<table>`` and ``build.<table>_rejected``; return (kept rows, rejected rows per reason)."""
    cols = [c for c in table.names if c != "row_id"]
    stage = f"_stage_{table.name}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {stage} AS SELECT {', '.join(cast_sql(table))}, "
                f"CAST(reason AS VARCHAR) AS reason FROM ({staged_sql})")
    order = ", ".join([*order_by, *[c for c in cols if c not in order_by]])
    rows, reasons = write_split(
        con, stage, kept=f"{schema}.{table.name}", kept_order="row_id",
        kept_columns=f"CAST(row_number() OVER (ORDER BY {order}) - 1 AS BIGINT) AS row_id, {', '.join(cols)}",
        rejected=f"{build}.{table.name}_rejected", rejected_columns=f"reason, {', '.join(cols)}",
        rejected_order=f"reason, {order}")
    con.execute(f"DROP TABLE {stage}")
    return rows, reasons
