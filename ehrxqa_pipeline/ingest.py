"""Source file -> typed DuckDB table, with refused rows quarantined under a reason.

The reader's lazy scan is typed, tagged with each row's refusal reason (contract rules), streamed to a
Parquet staging file, then loaded into DuckDB where duplicate keys are found (a ``filters.Rule`` after the
contract's). ``filters.write_split`` writes valid rows to ``<group>.<table>`` and refused rows to
``<group>.<table>_rejected`` in one transaction, so a failure leaves the previous materialization intact
and readers never see half a table. Refused rows are either bad input (quarantined) or out of scope
(``out_of_scope:<rule>``, a contract scope rule); the result counts the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ehrxqa_pipeline.contracts import Contract, reason_expr, split_reasons
from ehrxqa_pipeline.filters import Rule, reason_sql, write_split
from ehrxqa_pipeline.names import rejected
from ehrxqa_pipeline.sources.files import quoting
from ehrxqa_pipeline.sources.readers import scan_table
from ehrxqa_pipeline.warehouse import transaction

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
    reason = "_reason"  # the contract's rules (reason_expr), then the primary key
    if key:
        partition = ", ".join(quote(k) for k in key)
        duplicate = Rule("duplicate_key", f"row_number() OVER (PARTITION BY {partition}, _reason IS NULL "
                         f"ORDER BY _row) > 1", "a key names one row: its first valid row in file order is kept")
        reason = f"coalesce(_reason, {reason_sql([duplicate])})"
    data_cols = ", ".join(quote(c) for c in present if c not in HELPER_COLUMNS)
    staged = f"__staged_{table}"
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {staged} AS SELECT *, {reason} AS reason "
                f"FROM read_parquet('{stage}')")
    try:
        with transaction(con):
            rows, reasons = write_split(
                con, staged, kept=f"{schema}.{quote(table)}", kept_columns=data_cols, kept_order="_row",
                rejected=f"{schema}.{quote(rejected(table))}", rejected_order="_row",
                rejected_columns=f"_row AS source_row, reason, _parse_error AS detail, {data_cols}")
    finally:
        con.execute(f"DROP TABLE IF EXISTS {staged}")
        stage.unlink(missing_ok=True)

    columns = [(r[0], r[1]) for r in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = ? "
        "AND table_name = ? ORDER BY ordinal_position", [schema, table]).fetchall()]
    quarantined, out_of_scope = split_reasons(reasons)
    return IngestResult(table, rows, sum(quarantined.values()), quarantined, columns, out_of_scope,
                        quoting(root, table).reason)
