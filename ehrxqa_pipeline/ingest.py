"""Source file -> typed DuckDB table, with refused rows quarantined under a reason.

The reader's lazy scan is typed, tagged with each row's refusal reason (contract rules), streamed to a
Parquet staging file, then loaded into DuckDB where duplicate keys are found. Valid rows go to
``<group>.<table>`` and refused rows to ``<group>.<table>_rejected`` in one transaction, so a failure
leaves the previous materialization intact and readers never see half a table. Refused rows are either
bad input (quarantined) or out of scope (``out_of_scope:<rule>``, a contract scope rule); the result
counts the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ehrxqa_pipeline.contracts import Contract, reason_expr, split_reasons
from ehrxqa_pipeline.names import rejected
from ehrxqa_pipeline.sources.files import quoting
from ehrxqa_pipeline.sources.readers import scan_table

HELPER_COLUMNS = ("_row", "_parse_error", "_reason", "reason")


@dataclass(frozen=True)
class IngestResult:
    table: str
    rows: int
    rejected: int  # quarantined: bad input
    reasons: dict[str, int]  # quarantine reason -> rows
    columns: list[tuple[str, str]]  # (name, DuckDB type) of the ingested table
    out_of_scope: dict[str, int] = field(default_factory=dict)  # out_of_scope:<rule> -> rows (not bad input)
    quoting: str | None = None  # why quotes were read as ordinary characters (sources.files.quoting), if so

    @property
    def out_of_scope_rows(self) -> int:
        return sum(self.out_of_scope.values())

    @property
    def source_rows(self) -> int:
        return self.rows + self.rejected + self.out_of_scope_rows


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def ingest_table(con: duckdb.DuckDBPyConnection, root: Path, contract: Contract, staging_dir: Path,
                 cache_dir: Path | None = None) -> IngestResult:
    schema, table = contract.group, contract.table
    lf = scan_table(root, table, cache_dir=cache_dir)
    present = lf.collect_schema().names()
    staging_dir.mkdir(parents=True, exist_ok=True)
    stage = staging_dir / f"{schema}.{table}.parquet"
    lf.with_columns(reason_expr(contract, present)).sink_parquet(stage)

    key = [k for k in contract.primary_key if k in present]
    if key:
        # The first row of a key (in file order) is kept; later ones are quarantined as duplicates.
        partition = ", ".join(quote(k) for k in key)
        reason_sql = (f"CASE WHEN _reason IS NULL AND row_number() OVER (PARTITION BY {partition}, "
                      f"_reason IS NULL ORDER BY _row) > 1 THEN 'duplicate_key' ELSE _reason END")
    else:
        reason_sql = "_reason"
    data_cols = ", ".join(quote(c) for c in present if c not in HELPER_COLUMNS)
    target, quarantine = f"{schema}.{quote(table)}", f"{schema}.{quote(rejected(table))}"
    staged = f"__staged_{table}"
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {staged} AS SELECT *, {reason_sql} AS reason "
                f"FROM read_parquet('{stage}')")
    try:
        con.execute("BEGIN TRANSACTION")
        con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT {data_cols} FROM {staged} "
                    f"WHERE reason IS NULL ORDER BY _row")
        con.execute(f"CREATE OR REPLACE TABLE {quarantine} AS SELECT _row AS source_row, reason, "
                    f"_parse_error AS detail, {data_cols} FROM {staged} WHERE reason IS NOT NULL ORDER BY _row")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.execute(f"DROP TABLE IF EXISTS {staged}")
        stage.unlink(missing_ok=True)

    rows = con.execute(f"SELECT count(*) FROM {target}").fetchone()[0]
    reasons = dict(con.execute(f"SELECT reason, count(*) FROM {quarantine} GROUP BY reason ORDER BY reason")
                   .fetchall())
    columns = [(r[0], r[1]) for r in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = ? "
        "AND table_name = ? ORDER BY ordinal_position", [schema, table]).fetchall()]
    quarantined, out_of_scope = split_reasons(reasons)
    return IngestResult(table, rows, sum(quarantined.values()), quarantined, columns, out_of_scope,
                        quoting(root, table).reason)
