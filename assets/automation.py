"""Automation policy shared by every asset: re-run only what a real change touched.

Derived assets run when an upstream data version changed (not merely re-materialized with the same
content), when their own code version changed, or when they are missing, and never past a failed blocking
check (an upstream contract break stops the cascade across runs, not only within one run).
"""


import dagster as dg

AC = dg.AutomationCondition

ON_CHANGE: dg.AutomationCondition = (
    AC.eager().replace("any_deps_updated", AC.any_deps_match(AC.data_version_changed()))
    | AC.code_version_changed()
) & AC.all_deps_blocking_checks_passed()

# Source files are re-hashed on this cadence; a changed hash makes only its downstream stale.
OBSERVE_SOURCES: dg.AutomationCondition = AC.on_cron("*/15 * * * *")

# Steps that open the DuckDB warehouse read-write: one at a time within a run (executor tag limit) and
# across runs (the `duckdb` pool, limited to 1 in the instance's dagster.yaml).
DUCKDB_TAGS = {"ehrxqa/warehouse": "write"}
DUCKDB_POOL = "duckdb"
