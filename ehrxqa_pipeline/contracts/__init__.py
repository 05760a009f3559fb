"""Data contracts (data_contracts/*.yaml): the model and loading (``model``), the quarantine rules and
Great Expectations suites of the ingested tables (``rules``). The checks that run them are in
``ehrxqa_pipeline.quality``; the Dagster side (column schema metadata, the generated checks) in
``assets/contract_checks.py``."""

from ehrxqa_pipeline.contracts.model import (CONTRACTS_DIR, DUCKDB_TYPES, POLARS_TYPES, TYPES, ColumnRule, Contract,
                                             ContractError, ForeignKey, RowRule, ScopeRule, all_contracts,
                                             contracts_by_asset, load_contract, parse_contract)
from ehrxqa_pipeline.contracts.rules import (OUT_OF_SCOPE, gx_expectations, is_out_of_scope, reason_expr,
                                             split_reasons)

__all__ = ["CONTRACTS_DIR", "DUCKDB_TYPES", "OUT_OF_SCOPE", "POLARS_TYPES", "TYPES", "ColumnRule", "Contract",
           "ContractError", "ForeignKey", "RowRule", "ScopeRule", "all_contracts", "contracts_by_asset",
           "gx_expectations", "is_out_of_scope", "load_contract", "parse_contract", "reason_expr",
           "split_reasons"]
