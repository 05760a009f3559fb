"""Data contracts (data_contracts/*.yaml): loading, and the rules generated from them.

A contract states an asset's grain, columns (type, nullability, allowed values, range), keys, row rules,
scope rules and foreign keys. From it come (1) the reason each refused source row gets (`reason_expr`),
(2) the Great Expectations suite of the blocking contract check (`gx_expectations`) and (3) the SQL of the
key, rule and foreign-key checks (`ehrxqa_pipeline.quality`).

Two kinds of refusal, both written to ``<table>_rejected`` with their reason: a row that breaks a column
rule or a row rule is bad input (quarantined; its share is limited by ``max_rejected_fraction``); a valid
row that fails a scope rule is out of scope (``out_of_scope:<rule>``: real data the pipeline does not use,
e.g. Chest ImaGenome categories other than the six of the builders), counted separately and never against
the limit.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl
import yaml

CONTRACTS_DIR = Path(__file__).resolve().parents[1] / "data_contracts"

POLARS_TYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "datetime": pl.Datetime("us"),
                "date": pl.Date}
DUCKDB_TYPES = {"int": "BIGINT", "float": "DOUBLE", "str": "VARCHAR", "datetime": "TIMESTAMP", "date": "DATE"}


class ContractError(ValueError):
    """A contract file is malformed (names the file and the entry)."""


@dataclass(frozen=True)
class ColumnRule:
    name: str
    type: str
    nullable: bool = True
    allowed: tuple | None = None
    min: object = None
    max: object = None
    why: str = ""


@dataclass(frozen=True)
class RowRule:
    name: str
    sql: str  # a condition every valid row satisfies (polars SQL expression; null counts as satisfied)
    why: str = ""


@dataclass(frozen=True)
class ScopeRule:
    name: str
    sql: str  # a condition every row the pipeline uses satisfies (polars SQL; null counts as in scope)
    why: str = ""


OUT_OF_SCOPE = "out_of_scope:"


def is_out_of_scope(reason: str) -> bool:
    return reason.startswith(OUT_OF_SCOPE)


def split_reasons(reasons: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(quarantine reasons, out-of-scope reasons) of a reason -> count mapping."""
    return ({r: n for r, n in reasons.items() if not is_out_of_scope(r)},
            {r: n for r, n in reasons.items() if is_out_of_scope(r)})


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    references: str
    ref_columns: tuple[str, ...]
    max_orphan_fraction: float = 0.0
    why: str = ""


@dataclass(frozen=True)
class Contract:
    asset: str  # "group/name"
    grain: str
    source: str
    columns: tuple[ColumnRule, ...]
    primary_key: tuple[str, ...] = ()
    min_rows: int = 1
    max_rejected_fraction: float = 0.0
    why_max_rejected: str = ""
    row_rules: tuple[RowRule, ...] = ()
    scope: tuple[ScopeRule, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    path: Path | None = field(default=None, compare=False)

    @property
    def group(self) -> str:
        return self.asset.split("/")[0]

    @property
    def table(self) -> str:
        return self.asset.split("/")[1]

    def column(self, name: str) -> ColumnRule:
        return next(c for c in self.columns if c.name == name)


def _bound(value, typ: str):
    """Contract bounds are written as YAML scalars; datetimes and dates as ISO strings."""
    if value is None:
        return None
    if typ == "datetime":
        return dt.datetime.fromisoformat(str(value))
    if typ == "date":
        return dt.date.fromisoformat(str(value))
    return value


def parse_contract(raw: dict, path: Path | None = None) -> Contract:
    where = str(path or "<contract>")
    try:
        columns = []
        for name, spec in raw["columns"].items():
            typ = spec["type"]
            if typ not in POLARS_TYPES:
                raise ContractError(f"{where}: column {name!r} has unknown type {typ!r}; use one of "
                                    f"{sorted(POLARS_TYPES)}")
            allowed = tuple(spec["allowed"]) if spec.get("allowed") is not None else None
            columns.append(ColumnRule(name, typ, bool(spec.get("nullable", True)), allowed,
                                      _bound(spec.get("min"), typ), _bound(spec.get("max"), typ),
                                      spec.get("why", "")))
        return Contract(
            asset=raw["asset"], grain=raw["grain"], source=raw["source"], columns=tuple(columns),
            primary_key=tuple(raw.get("primary_key") or ()), min_rows=int(raw.get("min_rows", 1)),
            max_rejected_fraction=float(raw.get("max_rejected_fraction", 0.0)),
            why_max_rejected=raw.get("why_max_rejected", ""),
            row_rules=tuple(RowRule(r["name"], r["sql"], r.get("why", "")) for r in raw.get("row_rules") or ()),
            scope=tuple(ScopeRule(r["name"], r["sql"], r.get("why", "")) for r in raw.get("scope") or ()),
            foreign_keys=tuple(
                ForeignKey(tuple(f["columns"]), f["references"], tuple(f["ref_columns"]),
                           float(f.get("max_orphan_fraction", 0.0)), f.get("why", ""))
                for f in raw.get("foreign_keys") or ()),
            path=path)
    except KeyError as e:
        raise ContractError(f"{where}: missing required entry {e.args[0]!r}") from None


@cache
def load_contract(asset: str, directory: Path = CONTRACTS_DIR) -> Contract:
    """Load the contract of ``group/name`` from ``data_contracts/group.name.yaml``."""
    path = directory / (asset.replace("/", ".") + ".yaml")
    if not path.exists():
        raise ContractError(f"no contract for {asset}: expected {path}")
    return parse_contract(yaml.safe_load(path.read_text()), path)


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
