"""Keep or drop with a named reason: the one way the pipeline's filters split their rows.

A filter states its rules as data, in order: ``Rule(name, drop, why)``. A row is dropped by the FIRST rule
whose ``drop`` condition is true and gets that rule's name as its ``reason``; a row no rule drops has a null
reason and is kept. The helper evaluates the rules, splits the rows, counts them per reason and (in DuckDB)
writes the refused rows to ``<table>_rejected``; the filter only says what it refuses and why.

Semantics, the same in both engines and the same as the SQL ``CASE WHEN .. THEN 'reason' .. END`` every
filter used before:

* every condition is evaluated over all input rows; a rule that must see only the rows earlier rules kept (a
  first row per key, a quantile of the survivors) states it itself, e.g. with a window over (key, earlier
  rules passed) -- as ``cxr.selection``'s rule columns do;
* a condition that is NULL drops nothing (SQL's ``CASE WHEN NULL`` does not fire, and the polars side fills
  NULL with false to match). A rule that must refuse a missing value says so: ``x IS NULL OR x > 3`` /
  ``coalesce(x > 3, TRUE)``. This is the data contracts' convention too (a row rule that is NULL is met);
* two rules may share a name (two ways to fail one criterion); their rows are counted together.

Two engines, one statement of the rules:

* polars: ``drop`` is a polars expression (or a SQL condition string, read with ``pl.sql_expr``).
  ``apply(frame, rules)`` returns a ``Filtered``: kept rows, rejected rows with a ``reason`` column, counts.
  ``split(frame)`` does the same for a frame that already carries its reason (a check that cannot be written
  as an expression, e.g. paraphrase validation, which compares each candidate with the earlier kept ones).
* DuckDB: ``drop`` is a SQL condition. ``reason_sql(rules)`` is the CASE that names the first rule a row
  fails; ``write_split`` writes the kept table and the rejected table from a relation with a ``reason``
  column and returns the counts. Call it inside ``warehouse.transaction`` when both tables must change
  together.

Counts (``tally``) are ``reason -> rows``: the names of ``reasons`` first, in that order, with 0 for a
reason that dropped nothing, then every other reason met, sorted by name. ``funnel`` turns them into the
rows remaining after each rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import duckdb
import polars as pl

REASON = "reason"


@dataclass(frozen=True)
class Rule:
    """One way a row is refused: its ``name`` is the reason a dropped row gets, ``drop`` the condition
    (true = dropped; a polars expression, or a SQL condition string), ``why`` one line on why it exists."""

    name: str
    drop: pl.Expr | str
    why: str


@dataclass(frozen=True)
class Filtered:
    """The outcome of a polars filter: ``kept`` rows and ``rejected`` rows (with the reason column), both in
    input order, and ``counts`` (reason -> rejected rows, see the module docstring)."""

    kept: pl.DataFrame
    rejected: pl.DataFrame
    counts: dict[str, int]


def reasons_of(rules: Iterable[Rule]) -> tuple[str, ...]:
    """The rules' reasons in rule order, each once."""
    return tuple(dict.fromkeys(r.name for r in rules))


def reason_expr(rules: Sequence[Rule], column: str = REASON) -> pl.Expr:
    """The polars expression naming the first rule a row fails (null when no rule drops it)."""
    if not rules:
        return pl.lit(None, dtype=pl.String).alias(column)
    out = pl  # pl.when(..).then(..).when(..).then(..)...: one chained expression, first match wins
    for rule in rules:
        drop = pl.sql_expr(rule.drop) if isinstance(rule.drop, str) else rule.drop
        out = out.when(drop.fill_null(False)).then(pl.lit(rule.name, dtype=pl.String))
    return out.otherwise(pl.lit(None, dtype=pl.String)).alias(column)


def reason_sql(rules: Sequence[Rule]) -> str:
    """The DuckDB CASE naming the first rule a row fails (NULL when no rule drops it)."""
    for rule in rules:
        if not isinstance(rule.drop, str):
            raise TypeError(f"filter rule {rule.name!r}: DuckDB needs its condition as SQL, got a polars "
                            f"expression; state it as a SQL string or apply the rules in polars")
    if not rules:
        return "CAST(NULL AS VARCHAR)"
    whens = " ".join(f"WHEN {r.drop} THEN '{_sql_string(r.name)}'" for r in rules)
    return f"CASE {whens} END"


def apply(frame: pl.DataFrame | pl.LazyFrame, rules: Sequence[Rule], column: str = REASON) -> Filtered:
    """Evaluate ``rules`` on ``frame`` (vectorised, one pass) and split it: kept rows with the frame's
    columns, rejected rows with ``column`` (the reason) added, counts with every rule's name."""
    if column in frame.collect_schema().names():
        raise ValueError(f"filters.apply: the frame already has a {column!r} column; rename it or pass "
                         f"another column name for the reason")
    tagged = frame.lazy().with_columns(reason_expr(rules, column)).collect()
    out = split(tagged, reasons_of(rules), column)
    return Filtered(out.kept.drop(column), out.rejected, out.counts)


def split(frame: pl.DataFrame, reasons: Sequence[str] = (), column: str = REASON) -> Filtered:
    """Split a frame that carries its reason in ``column`` (null = kept); the frame's columns stay as they
    are on both sides. ``reasons``: the names counted first, with 0 when absent."""
    dropped = pl.col(column).is_not_null()
    rejected = frame.filter(dropped)
    met = rejected.group_by(column).len()
    return Filtered(frame.filter(~dropped), rejected, tally(dict(met.iter_rows()), reasons))


def tally(met: Mapping[str, int], reasons: Sequence[str] = ()) -> dict[str, int]:
    """``reasons`` in order (0 when not met), then every other reason met, sorted by name."""
    out = {r: int(met.get(r, 0)) for r in reasons}
    out.update({r: int(met[r]) for r in sorted(met) if r not in out})
    return out


def write_split(con: duckdb.DuckDBPyConnection, source: str, *, kept: str, rejected: str,
                kept_columns: str = "*", kept_order: str = "", rejected_columns: str = "*",
                rejected_order: str = "", reasons: Sequence[str] = ()) -> tuple[int, dict[str, int]]:
    """Write the rows of ``source`` (a table, or a parenthesised SELECT, with a ``reason`` column) whose
    reason is NULL to ``kept`` and the others to ``rejected`` (tables replaced; columns and ORDER BY as given);
    return (kept rows, counts per reason)."""
    def create(table: str, columns: str, where: str, order: str) -> None:
        con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {columns} FROM {source} WHERE {where}"
                    + (f" ORDER BY {order}" if order else ""))

    create(kept, kept_columns, f"{REASON} IS NULL", kept_order)
    create(rejected, rejected_columns, f"{REASON} IS NOT NULL", rejected_order)
    met = dict(con.execute(f"SELECT {REASON}, count(*) FROM {source} GROUP BY {REASON}").fetchall())
    n_kept = met.pop(None, 0)
    return int(n_kept), tally(met, reasons)


def funnel(total: int, counts: Mapping[str, int], steps: Sequence[str | tuple[str, Iterable[str]]],
           start: str) -> list[tuple[str, int]]:
    """Rows remaining after each step: [(start, total), (step, remaining), ...]. A step is a reason, or
    (label, reasons) when several reasons make one step (e.g. every kind of unsound JPEG)."""
    out, remaining = [(start, total)], total
    for step in steps:
        label, reasons = (step, (step,)) if isinstance(step, str) else step
        remaining -= sum(counts.get(r, 0) for r in reasons)
        out.append((label, remaining))
    return out


def _sql_string(text: str) -> str:
    return text.replace("'", "''")
