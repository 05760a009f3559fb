"""Checks and metadata generated from the data contracts (data_contracts/).

Every ingested table (blocking):
- contract: column types and key uniqueness in DuckDB, then the Great Expectations suite;
- quarantine: the share of refused source rows stays under the contract's limit;
- foreign_keys: every reference resolves to a row of the parent source (tables that declare any).

Every other asset that writes warehouse tables: one ``contract`` check over all its tables (columns and
types in order, non-nullable columns without nulls, allowed values, ranges, unique keys; ``check_structure``),
not blocking: its failure is a code defect to fix, never a reason to stop a running build. A standalone
check, except on a partitioned asset, which declares it (``contract_check_spec``) and yields its result
(``contract_check_result``) in each partition's run. And
``with_contract_metadata`` gives these assets their main table's ``dagster/column_schema`` (with each
column's ``why``), ``dagster/table_name`` and the contract files, from the contracts at definition time.
"""


import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, WITH_ITS_ASSET
from assets.ingest import CONTRACTS, ingest_key
from assets.metadata import contract_schema
from ehrxqa_pipeline import names
from ehrxqa_pipeline.contracts import Contract, contracts_by_asset
from ehrxqa_pipeline.quality import (CheckOutcome, check_foreign_keys, check_gx, check_quarantine, check_structure,
                                     check_types_and_keys)
from resources import Warehouse


def _result(outcome: CheckOutcome, **which) -> dg.AssetCheckResult:
    """The check result of ``outcome``; ``which``: asset_key and check_name where the asset yields it."""
    return dg.AssetCheckResult(**which, passed=outcome.passed, description=outcome.description[:2000],
                               severity=dg.AssetCheckSeverity.ERROR,
                               metadata={k: dg.MetadataValue.json(v) if isinstance(v, (dict, list)) else v
                                         for k, v in outcome.metadata.items()})


def _checks(contract: Contract) -> list[dg.AssetChecksDefinition]:
    key = ingest_key(contract.table)
    common = dict(asset=key, blocking=True, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
                  automation_condition=WITH_ITS_ASSET)

    @dg.asset_check(name="contract", description=f"Types, keys and the GX suite of {contract.path.name}.",
                    **common)
    def contract_check(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            structural = check_types_and_keys(con, contract)
            gx = check_gx(con, contract)
        outcome = CheckOutcome(structural.passed and gx.passed, {**structural.metadata, **gx.metadata},
                               f"{structural.description}; {gx.description}")
        return _result(outcome)

    @dg.asset_check(name="quarantine", description=f"At most {contract.max_rejected_fraction:.2%} of the "
                    f"source rows refused ({contract.why_max_rejected}).", **common)
    def quarantine_check(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            return _result(check_quarantine(con, contract))

    checks = [contract_check, quarantine_check]
    if contract.foreign_keys:
        parents = sorted({fk.references for fk in contract.foreign_keys} - {contract.table})

        @dg.asset_check(name="foreign_keys", additional_deps=[ingest_key(p) for p in parents],
                        description="References resolve: " + "; ".join(
                            f"{','.join(fk.columns)} -> {fk.references} ({fk.why})"
                            for fk in contract.foreign_keys), **common)
        def fk_check(warehouse: Warehouse) -> dg.AssetCheckResult:
            with warehouse.connect() as con:
                return _result(check_foreign_keys(con, contract))

        checks.append(fk_check)
    return checks


CONTRACT_CHECKS = [check for c in CONTRACTS for check in _checks(c)]


# asset key ("group/name") -> the contracts of the tables it writes (main table first), ingestion left out
DERIVED: dict[str, list[Contract]] = {asset: contracts for asset, contracts in contracts_by_asset().items()
                                      if not asset.startswith(f"{names.INGEST}/")}


def structure_outcome(con, asset: str, contracts: list[Contract]) -> CheckOutcome:
    """``check_structure`` of every table ``asset`` writes, as one outcome (problems of all tables)."""
    outcomes = [check_structure(con, c, t) for c in contracts for t in c.tables_of(asset)]
    problems = [p for o in outcomes for p in o.metadata["problems"]]
    rows = {o.metadata["table"]: o.metadata.get("rows") for o in outcomes}
    return CheckOutcome(not problems, {"problems": problems, "rows": rows},
                        "; ".join(problems) or f"{len(outcomes)} tables as contracted: "
                                               + ", ".join(o.metadata["table"] for o in outcomes))


def _description(contracts: list[Contract]) -> str:
    return (f"The tables as {', '.join(sorted({c.path.name for c in contracts}))} state them: columns and types in "
            "order, non-nullable columns without nulls, allowed values, ranges, unique keys.")


def _partitioned(contracts: list[Contract]) -> bool:
    """The asset writes a table one partition at a time (its contract has a ``partition`` column)."""
    return any(c.name == "partition" for contract in contracts for c in contract.columns)


def _co_writers(asset: str, contracts: list[Contract]) -> list[dg.AssetKey]:
    """The other assets that write a table ``asset`` writes (one step writes cxr_cohort.funnel for both
    cohorts): the check reads their rows too, so it declares them."""
    return [dg.AssetKey.from_user_string(a) for a in sorted(
        {a for c in contracts for a, t in c.tables if t in c.tables_of(asset)} - {asset})]


def _structure_check(asset: str, contracts: list[Contract]) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=dg.AssetKey.from_user_string(asset), name="contract", blocking=False, pool=DUCKDB_POOL,
                    op_tags=DUCKDB_TAGS, automation_condition=WITH_ITS_ASSET, description=_description(contracts),
                    additional_deps=_co_writers(asset, contracts))
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            return _result(structure_outcome(con, asset, contracts))

    return _check


# one standalone check per asset, except partitioned ones: Dagster runs a standalone check of a partitioned
# asset in none of its partitions' runs, so those declare the check themselves (contract_check_spec)
STRUCTURE_CHECKS = [_structure_check(asset, contracts) for asset, contracts in DERIVED.items()
                    if not _partitioned(contracts)]


def contract_check_spec(key: dg.AssetKey) -> dg.AssetCheckSpec:
    """The ``contract`` check of a partitioned asset, declared with it (``check_specs``): the asset yields its
    result (``contract_check_result``) in every partition's run, once its rows are written."""
    return dg.AssetCheckSpec("contract", asset=key, blocking=False,
                             description=_description(DERIVED[key.to_user_string()]))


def contract_check_result(con, key: dg.AssetKey) -> dg.AssetCheckResult:
    """The result of ``contract_check_spec``'s check: the whole tables, every partition written so far."""
    outcome = structure_outcome(con, key.to_user_string(), DERIVED[key.to_user_string()])
    return _result(outcome, asset_key=key, check_name="contract")


def _with_metadata(spec: dg.AssetSpec) -> dg.AssetSpec:
    contracts = DERIVED.get(spec.key.to_user_string())
    if not contracts:
        return spec
    main = contracts[0]
    return spec.merge_attributes(metadata={
        "dagster/column_schema": contract_schema(main),
        "dagster/table_name": main.tables_of(spec.key.to_user_string())[0],
        "contracts": dg.MetadataValue.json(sorted({c.path.name for c in contracts}))})


def with_contract_metadata(assets_defs: list) -> list:
    """``assets_defs`` with the contract metadata on every asset that writes contracted tables."""
    return list(dg.map_asset_specs(_with_metadata, assets_defs))
