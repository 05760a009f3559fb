"""Polars frames into the DuckDB warehouse, the one way every step writes: whole tables, or the rows of one
partition, inside ``transaction`` so that a failed or killed step leaves the previous tables as they were; and
``content_digest``, what a table holds as one digest (data versions, the steps' memos)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import duckdb
import polars as pl

from ehrxqa_pipeline.hashing import combine

_FRAME = "_warehouse_frame"


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT; ROLLBACK when the block raises (the exception goes on)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:  # the connection itself failed: nothing was committed
            pass
        raise
    con.execute("COMMIT")


def content_digest(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> str:
    """Order-independent digest of the tables' columns and rows (hash of every row, summed): a table name or a
    parenthesised query each (0.02 s for a million rows)."""
    parts = []
    for table in tables:
        columns = con.execute(f"DESCRIBE SELECT * FROM {table}").fetchall()
        n, total = con.execute(f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0)::VARCHAR "
                               f"FROM (SELECT * FROM {table}) t").fetchone()
        parts.append(combine(table, repr([c[:2] for c in columns]), str(n), total))
    return combine(*parts)


def replace_table(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    """``table`` (schema.name) becomes ``frame``: columns and types from the frame, rows in its order."""
    con.register(_FRAME, frame)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM {_FRAME}")
    finally:
        con.unregister(_FRAME)


def replace_tables(con: duckdb.DuckDBPyConnection, schema: str, frames: Mapping[str, pl.DataFrame]) -> None:
    """``schema.name`` becomes ``frame`` for every (name, frame), all in one transaction."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    with transaction(con):
        for name, frame in frames.items():
            replace_table(con, f"{schema}.{name}", frame)


def replace_partition(con: duckdb.DuckDBPyConnection, table: str, columns: str, partition: str,
                      frame: pl.DataFrame) -> None:
    """The rows of ``partition`` in ``table`` become ``frame``'s (matched by column name, the "partition"
    column set). ``columns``: the table's column DDL, "partition" among them, used when it does not exist yet.
    Call it inside ``transaction`` to replace several tables' rows of one partition at once."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
    con.execute(f'DELETE FROM {table} WHERE "partition" = ?', [partition])
    if frame.height:
        con.register(_FRAME, frame.with_columns(partition=pl.lit(partition)))
        try:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {_FRAME}")
        finally:
            con.unregister(_FRAME)
