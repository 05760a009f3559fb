"""The quarantine rules of the ingest contracts: each refused source row's reason, and the Great
Expectations suite of the blocking contract check.

Two kinds of refusal, both written to ``<table>_rejected`` with their reason: a row that breaks a column
rule or a row rule is bad input (quarantined; its share is limited by ``max_rejected_fraction``); a valid
row that fails a scope rule is out of scope (``out_of_scope:<rule>``: real data the pipeline does not use,
e.g. Chest ImaGenome categories other than the six of the builders), counted separately and never against
the limit.
"""

from __future__ import annotations

import polars as pl

from ehrxqa_pipeline.contracts.model import POLARS_TYPES, Contract

OUT_OF_SCOPE = "out_of_scope:"


def is_out_of_scope(reason: str) -> bool:
    return reason.startswith(OUT_OF_SCOPE)


def split_reasons(reasons: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(quarantine reasons, out-of-scope reasons) of a reason -> count mapping."""
    return ({r: n for r, n in reasons.items() if not is_out_of_scope(r)},
            {r: n for r, n in reasons.items() if is_out_of_scope(r)})


def reason_expr(contract: Contract, present: list[str] | None = None) -> pl.Expr:
    """The refusal reason of a typed source row (null when the row is valid and in scope).

    Expects the reader's ``_parse_error`` column ("column='raw value'"); the first failing rule wins, in
    contract order: parse error, nulls, allowed values, ranges, row rules, then scope rules
    (``out_of_scope:<name>``) -- so only an otherwise valid row is out of scope, and bad input stays bad
    input whatever its scope.
    """
    present_set = set(present) if present is not None else None
    failures: list[tuple[pl.Expr, pl.Expr]] = [(
        pl.col("_parse_error").is_not_null(),
        pl.lit("unparsable:") + pl.col("_parse_error").str.extract(r"^([^=]+)=", 1),
    )]
    for c in contract.columns:
        if present_set is not None and c.name not in present_set:
            continue  # a missing required column is a reader error, raised before this point
        col = pl.col(c.name)
        if not c.nullable:
            failures.append((col.is_null(), pl.lit(f"null:{c.name}")))
        if c.allowed is not None:
            failures.append((col.is_not_null() & ~col.is_in(list(c.allowed)), pl.lit(f"not_allowed:{c.name}")))
        if c.min is not None:
            failures.append((col < pl.lit(c.min, dtype=POLARS_TYPES[c.type]), pl.lit(f"out_of_range:{c.name}")))
        if c.max is not None:
            failures.append((col > pl.lit(c.max, dtype=POLARS_TYPES[c.type]), pl.lit(f"out_of_range:{c.name}")))
    for rule in contract.row_rules:
        failures.append((~pl.sql_expr(rule.sql).fill_null(True), pl.lit(rule.name)))
    for rule in contract.scope:
        failures.append((~pl.sql_expr(rule.sql).fill_null(True), pl.lit(OUT_OF_SCOPE + rule.name)))
    expr = pl.when(failures[0][0]).then(failures[0][1])
    for cond, reason in failures[1:]:
        expr = expr.when(cond).then(reason)
    return expr.otherwise(pl.lit(None, dtype=pl.String)).alias("_reason")


def gx_expectations(contract: Contract, present: list[str]) -> list:
    """A fresh Great Expectations suite body for the ingested table (GX objects attach to one suite)."""
    import great_expectations.expectations as gxe

    out: list = [gxe.ExpectTableRowCountToBeBetween(min_value=contract.min_rows)]
    for c in contract.columns:
        if c.name not in present:
            out.append(gxe.ExpectColumnToExist(column=c.name))
            continue
        if not c.nullable:
            out.append(gxe.ExpectColumnValuesToNotBeNull(column=c.name))
        if c.allowed is not None:
            out.append(gxe.ExpectColumnValuesToBeInSet(column=c.name, value_set=list(c.allowed)))
        if c.type in ("int", "float") and (c.min is not None or c.max is not None):
            out.append(gxe.ExpectColumnValuesToBeBetween(column=c.name, min_value=c.min, max_value=c.max))
    if contract.primary_key:
        if len(contract.primary_key) == 1:
            out.append(gxe.ExpectColumnValuesToBeUnique(column=contract.primary_key[0]))
        else:
            out.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(contract.primary_key)))
    return out
