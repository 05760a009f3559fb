"""Blocking checks generated from the data contracts, for every ingested table.

- contract: column types and key uniqueness in DuckDB, then the Great Expectations suite;
- quarantine: the share of refused source rows stays under the contract's limit;
- foreign_keys: every reference resolves to a row of the parent source (tables that declare any).
"""


import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, WITH_ITS_ASSET
from assets.ingest import CONTRACTS, ingest_key
from ehrxqa_pipeline.contracts import Contract
from ehrxqa_pipeline.quality import (CheckOutcome, check_foreign_keys, check_gx, check_quarantine,
                                     check_types_and_keys)
from resources import Warehouse


def _result(outcome: CheckOutcome) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=outcome.passed, description=outcome.description,
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
