"""Contract checks over DuckDB tables: the structure of every contract-backed table (``check_structure``), and
for the ingested tables types, keys, quarantine share, foreign keys and the GX suite.

Each function returns a ``CheckOutcome`` (passed + metadata) so the Dagster layer only translates it.
Great Expectations sees pandas (its only dataframe backend) at this boundary; tables larger than
``gx_sample_rows`` are validated on a deterministic sample, and the whole-table rules (keys, foreign keys)
run in DuckDB SQL instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from ehrxqa_pipeline import workers
from ehrxqa_pipeline.config import quiet_third_parties
from ehrxqa_pipeline.contracts import DUCKDB_TYPES, OUT_OF_SCOPE, Contract, ForeignKey, gx_expectations
from ehrxqa_pipeline.ingest import quote
from ehrxqa_pipeline.names import rejected


@dataclass
class CheckOutcome:
    passed: bool
    metadata: dict = field(default_factory=dict)
    description: str = ""


def _count(con: duckdb.DuckDBPyConnection, sql: str, params=None) -> int:
    return con.execute(sql, params or []).fetchone()[0]


def _columns_in_order(con, table: str) -> list[tuple[str, str]]:
    """(column, DuckDB type) of ``table`` (schema.name) in table order; empty when it does not exist."""
    schema, name = table.split(".")
    return con.execute("SELECT column_name, data_type FROM information_schema.columns "
                       "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position", [schema, name]).fetchall()


def _column_problems(contract: Contract, table: str, actual: list[tuple[str, str]]) -> list[str]:
    """Contracted columns missing or of another type; for a contract that lists every column, columns it
    does not list and a different order."""
    found = dict(actual)
    problems = [f"{table}.{c.name}: missing, the contract says {c.duckdb_type} (rule: type)" if c.name not in found
                else f"{table}.{c.name}: {found[c.name]}, the contract says {c.duckdb_type} (rule: type)"
                for c in contract.columns if found.get(c.name) != c.duckdb_type]
    if contract.lists_every_column:
        listed = [c.name for c in contract.columns]
        problems += [f"{table}.{name}: not in the contract (rule: columns)" for name, _ in actual if name not in listed]
        if not problems and [name for name, _ in actual] != listed:
            problems.append(f"{table}: columns in the order {[n for n, _ in actual]}, the contract says {listed} "
                            "(rule: column order)")
    return problems


def _value_problems(con, contract: Contract, table: str) -> tuple[list[str], int]:
    """Nulls in non-nullable columns, values outside ``allowed`` or ``min``/``max``, duplicate keys; and the
    row count. One scan for the column rules, one GROUP BY per key."""
    rules: list[tuple[str, str, str, list]] = []  # (column, rule, SQL condition of a bad row, parameters)
    for c in contract.columns:
        col = quote(c.name)
        if not c.nullable:
            rules.append((c.name, "nullable: false", f"{col} IS NULL", []))
        if c.allowed is not None:
            rules.append((c.name, f"allowed {list(c.allowed)}", f"NOT list_contains(?, {col})", [list(c.allowed)]))
        if c.min is not None or c.max is not None:
            bounds = [b for b in (c.min, c.max) if b is not None]
            cond = " OR ".join(f"{col} {op} ?" for op, b in (("<", c.min), (">", c.max)) if b is not None)
            rule = ", ".join(f"{k}: {v}" for k, v in (("min", c.min), ("max", c.max)) if v is not None)
            rules.append((c.name, rule, cond, bounds))
    counts = con.execute("SELECT count(*)" + "".join(f", count(*) FILTER (WHERE {cond})" for _, _, cond, _ in rules)
                         + f" FROM {table}", [p for *_, params in rules for p in params]).fetchone()
    problems = [f"{table}.{column}: {n:,} of {counts[0]:,} rows break it (rule: {rule})"
                for (column, rule, _, _), n in zip(rules, counts[1:]) if n]
    for kind, cols in (("primary_key", contract.primary_key), *(("unique", u) for u in contract.unique)):
        if not cols:
            continue
        key = ", ".join(quote(c) for c in cols)
        surplus = _count(con, f"SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM {table} "
                              f"GROUP BY {key} HAVING count(*) > 1)")
        if surplus:
            problems.append(f"{table}.({', '.join(cols)}): {surplus} duplicate rows (rule: {kind})")
    return problems, int(counts[0])


def check_structure(con, contract: Contract, table: str) -> CheckOutcome:
    """``table`` (schema.name) against ``contract``: every contracted column with its type (and, when the
    contract lists every column, nothing else and in its order), then non-nullable columns without nulls,
    allowed values, ranges and unique keys. Each problem names the table, the column and the rule."""
    actual = _columns_in_order(con, table)
    if not actual:
        return CheckOutcome(False, {"table": table, "problems": [f"{table}: no such table (rule: exists)"]},
                            f"{table}: no such table (rule: exists)")
    problems = _column_problems(contract, table, actual)
    rows = None
    if not problems:  # the value rules read columns of the contracted types
        problems, rows = _value_problems(con, contract, table)
    return CheckOutcome(not problems, {"table": table, "rows": rows, "problems": problems},
                        "; ".join(problems) or f"{table}: columns, types, keys and values as contracted")


def check_types_and_keys(con, contract: Contract) -> CheckOutcome:
    """Column types, key uniqueness, and every row rule and scope rule on every ingested row (DuckDB SQL:
    the rules' conditions are plain SQL that polars and DuckDB read alike; null counts as satisfied)."""
    schema, table = contract.group, contract.table
    actual = dict(_columns_in_order(con, f"{schema}.{table}"))
    problems = [f"{c.name}: expected {DUCKDB_TYPES[c.type]}, found {actual.get(c.name, 'missing')}"
                for c in contract.columns if actual.get(c.name) != DUCKDB_TYPES[c.type]]
    duplicates = 0
    if contract.primary_key:
        key = ", ".join(quote(k) for k in contract.primary_key)
        duplicates = _count(con, f"SELECT count(*) - count(DISTINCT ({key})) FROM {schema}.{quote(table)}")
        if duplicates:
            problems.append(f"{duplicates} duplicate values of key ({key})")
    rules = [(r.name, r.sql) for r in contract.row_rules] + [(OUT_OF_SCOPE + r.name, r.sql) for r in contract.scope]
    violations = {}
    if rules and not problems:
        counts = con.execute("SELECT " + ", ".join(f"count(*) FILTER (WHERE NOT coalesce(({sql}), TRUE))"
                                                   for _, sql in rules)
                             + f" FROM {schema}.{quote(table)}").fetchone()
        violations = {name: n for (name, _), n in zip(rules, counts) if n}
        problems += [f"{n} ingested rows break rule {name}" for name, n in violations.items()]
    return CheckOutcome(not problems, {"problems": problems, "duplicate_keys": duplicates,
                                       "rule_violations": violations},
                        "; ".join(problems) or "types, keys and rules as contracted")


def check_quarantine(con, contract: Contract) -> CheckOutcome:
    """The share of bad input among the rows in scope stays under the limit. Out-of-scope rows (also in the
    rejected table, reason ``out_of_scope:<rule>``) are reported apart and count neither way."""
    schema, table = contract.group, contract.table
    kept = _count(con, f"SELECT count(*) FROM {schema}.{quote(table)}")
    refused, out_of_scope = con.execute(
        f"SELECT count(*) FILTER (WHERE NOT starts_with(reason, ?)), count(*) FILTER (WHERE starts_with(reason, ?)) "
        f"FROM {schema}.{quote(rejected(table))}", [OUT_OF_SCOPE, OUT_OF_SCOPE]).fetchone()
    share = refused / (kept + refused) if kept + refused else 0.0
    passed = share <= contract.max_rejected_fraction
    skipped = f"; {out_of_scope} rows out of scope, not counted" if out_of_scope else ""
    return CheckOutcome(passed, {"rejected_rows": refused, "rejected_fraction": round(share, 6),
                                 "max_rejected_fraction": contract.max_rejected_fraction,
                                 "out_of_scope_rows": out_of_scope},
                        f"{refused} of {kept + refused} rows quarantined ({share:.4%}); limit "
                        f"{contract.max_rejected_fraction:.2%}: {contract.why_max_rejected}{skipped}")


@dataclass(frozen=True)
class OrphanCount:
    """How many child rows (with a non-null key) point at no parent row: the measure of a foreign key's
    ``max_orphan_fraction``, shared by the build's check and ``ehrxqa validate-source``."""

    rows: int
    orphans: int
    orphan_keys: int  # distinct key values among the orphans

    @property
    def share(self) -> float:
        return self.orphans / self.rows if self.rows else 0.0

    def passes(self, fk: ForeignKey) -> bool:
        return self.share <= fk.max_orphan_fraction

    def summary(self, fk: ForeignKey) -> str:
        """``87 of 1,729 rows (5.03%; 15 distinct subject_id values)``."""
        return (f"{self.orphans:,} of {self.rows:,} rows ({self.share:.2%}; {self.orphan_keys:,} distinct "
                f"{', '.join(fk.columns)} value{'s' * (self.orphan_keys != 1)})")


def count_orphans(con, child: str, parents: list[str], fk: ForeignKey) -> OrphanCount:
    """Child rows of relation ``child`` whose key is in none of the ``parents`` relations (their union is
    the parent source: the build passes the parent table and its rejected rows)."""
    cols = [f"{quote(c)} AS _c{i}" for i, c in enumerate(fk.columns)]
    ref = ", ".join(f"{quote(c)} AS _p{i}" for i, c in enumerate(fk.ref_columns))
    not_null = " AND ".join(f"{quote(c)} IS NOT NULL" for c in fk.columns)
    on = " AND ".join(f"p._p{i} = c._c{i}" for i in range(len(fk.columns)))
    key = ", ".join(f"_c{i}" for i in range(len(fk.columns)))
    parent = " UNION ".join(f"SELECT {ref} FROM {p}" for p in parents)
    rows, orphans, keys = con.execute(f"""
        WITH c AS (SELECT {', '.join(cols)} FROM {child} WHERE {not_null}),
             p AS ({parent}),
             m AS (SELECT *, NOT EXISTS (SELECT 1 FROM p WHERE {on}) AS orphan FROM c)
        SELECT count(*), count(*) FILTER (WHERE orphan), count(DISTINCT ({key})) FILTER (WHERE orphan)
        FROM m""").fetchone()
    return OrphanCount(int(rows), int(orphans), int(keys))


def check_foreign_keys(con, contract: Contract) -> CheckOutcome:
    """Orphans are child keys the parent SOURCE lacks (kept or quarantined); rows pointing at quarantined
    parents are reported separately, since the quarantine already accounts for them. The check fails when
    the orphans' share of the rows passes the key's ``max_orphan_fraction`` (``OrphanCount``); orphans within
    the limit are named in the description and counted in the metadata."""
    schema, table = contract.group, contract.table
    metadata, failures, within, waiting = {}, [], [], []
    for fk in contract.foreign_keys:
        if not _columns_in_order(con, f"{schema}.{fk.references}"):
            # a build of a subset (e.g. the image download list, before MIMIC-IV is ingested): the check runs
            # again when the parent is built (it is one of the check's dependencies)
            waiting.append(f"{schema}.{fk.references}")
            continue
        on = " AND ".join(f"c.{quote(a)} = p.{quote(b)}" for a, b in zip(fk.columns, fk.ref_columns))
        not_null = " AND ".join(f"c.{quote(c)} IS NOT NULL" for c in fk.columns)
        parent, parent_rej = f"{schema}.{quote(fk.references)}", f"{schema}.{quote(rejected(fk.references))}"
        count = count_orphans(con, f"{schema}.{quote(table)}", [parent, parent_rej], fk)
        quarantined_parent = _count(con, f"""
            SELECT count(*) FROM {schema}.{quote(table)} c WHERE {not_null}
              AND NOT EXISTS (SELECT 1 FROM {parent} p WHERE {on})""") - count.orphans
        name = f"{'_'.join(fk.columns)}->{fk.references}"
        metadata[name] = {"rows": count.rows, "orphans": count.orphans, "orphan_keys": count.orphan_keys,
                          "orphan_fraction": round(count.share, 6), "max_orphan_fraction": fk.max_orphan_fraction,
                          "rows_with_quarantined_parent": quarantined_parent}
        what = f"{name}: {count.summary(fk)} point at no row of {fk.references}"
        if not count.passes(fk):
            failures.append(f"{what}; the contract allows {fk.max_orphan_fraction:.2%} ({fk.why})")
        elif count.orphans:
            within.append(f"{what}, within the contract's {fk.max_orphan_fraction:.2%} ({fk.why})")
    if waiting and not failures:
        return CheckOutcome(True, {**metadata, "parents_not_built": waiting},
                            "; ".join([*within, f"not checked against {', '.join(waiting)}, which is not built "
                                                "yet; checked when it is"]))
    return CheckOutcome(not failures, metadata, "; ".join(failures + within) or "every reference resolves")


def check_gx(con, contract: Contract, sample_rows: int = 100_000) -> CheckOutcome:
    """Run the contract's Great Expectations suite on the table (or a deterministic sample of it): in a worker
    process when one starts with Great Expectations loaded and this process has not loaded it (``workers``:
    `ehrxqa build` starts their server as it begins), else here."""
    schema, table = contract.group, contract.table
    rows = _count(con, f"SELECT count(*) FROM {schema}.{quote(table)}")
    sample = "" if rows <= sample_rows else f" USING SAMPLE reservoir({sample_rows} ROWS) REPEATABLE (7)"
    pdf = con.execute(f"SELECT * FROM {schema}.{quote(table)}{sample}").df()
    verdict = workers.call(gx_verdict, pdf, contract) if workers.holds(workers.GX) else gx_verdict(pdf, contract)
    return CheckOutcome(verdict.success, {
        "failed_expectations": verdict.failed, "expectations": verdict.expectations,
        "validated_rows": len(pdf), "table_rows": rows, "success_percent": verdict.success_percent},
        "; ".join(verdict.failed) or f"{verdict.expectations} expectations met")


@dataclass(frozen=True)
class GxVerdict:
    success: bool
    failed: list[str]  # expectation(column) of each that failed
    expectations: int
    success_percent: float


def gx_verdict(pdf, contract: Contract) -> GxVerdict:
    """The contract's Great Expectations suite run on the frame ``pdf``."""
    quiet_third_parties()  # privacy: no usage analytics leave the machine; no progress bars in the logs
    from ehrxqa_pipeline.gx import ProgressBarsConfig, gx

    name = f"{contract.group}.{contract.table}"
    ctx = gx.get_context(mode="ephemeral")
    # no "Calculating Metrics" bars in the build log: TQDM_DISABLE is read when tqdm is first imported, which
    # a step that imported torch before has already done
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    batch = (ctx.data_sources.add_pandas(name.replace(".", "_")).add_dataframe_asset(contract.table)
             .add_batch_definition_whole_dataframe("whole"))
    suite = ctx.suites.add(gx.ExpectationSuite(name=name, expectations=gx_expectations(contract, list(pdf.columns))))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    # BOOLEAN_ONLY: each expectation's verdict without its unexpected values, counts and lists, which nothing
    # here reads (a failure is named by expectation and column); the same verdicts, about a third less work
    result = vd.run(batch_parameters={"dataframe": pdf}, result_format="BOOLEAN_ONLY")
    failed = [f"{r.expectation_config.type}({r.expectation_config.kwargs.get('column', '')})"
              for r in result.results if not r.success]
    return GxVerdict(bool(result.success), failed, len(result.results),
                     float(result.statistics.get("success_percent") or 0.0))
