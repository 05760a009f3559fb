"""Automation policy shared by every asset: re-run only what a real change touched.

Derived assets run when an upstream data version changed (not merely re-materialized with the same
content), when their own code version changed, or when they are missing, and never past a failed blocking
check (an upstream contract break stops the cascade across runs, not only within one run). The release
assets also wait until nothing upstream of them is out of date (``RELEASE_ON_CHANGE``): a release is never
assembled from a mix of old and new outputs.
"""

import dagster as dg

AC = dg.AutomationCondition

ON_CHANGE: dg.AutomationCondition = (
    AC.eager().replace("any_deps_updated", AC.any_deps_match(AC.data_version_changed()))
    | AC.code_version_changed()
) & AC.all_deps_blocking_checks_passed()


class UpstreamCurrent(dg.AutomationCondition):
    """True when no ancestor of the asset is out of date (``assets.freshness``: never built, built with other
    code, or from other versions of its parents, or below one of those). A cascade held back by a failed or
    unevaluated blocking check, or still under way in a later tick, keeps this false. Python, not a built-in
    condition: the sensor that evaluates it runs in the code server (``use_user_code_server``)."""

    @property
    def name(self) -> str:
        return "upstream_current"

    @property
    def description(self) -> str:
        return "No ancestor is out of date"

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        from assets.freshness import stale_assets

        if context.candidate_subset.is_empty:  # ON_CHANGE, before it in RELEASE_ON_CHANGE, is false: no freshness pass
            return dg.AutomationResult(context, context.candidate_subset)
        graph, instance = context.asset_graph, context.asset_graph_view.instance
        tick = (id(graph), id(instance), context.evaluation_time)  # one freshness pass per evaluation
        if _STALE.get("tick") != tick:
            _STALE.update(tick=tick, stale=set(stale_assets(graph, instance)))
        ancestors = {k.to_user_string() for k in graph.get_ancestor_asset_keys(context.key)}
        blocked = ancestors & _STALE["stale"]
        return dg.AutomationResult(context, context.get_empty_subset() if blocked else context.candidate_subset)


_STALE: dict = {}  # the out-of-date assets of the latest evaluation (UpstreamCurrent)

RELEASE_ON_CHANGE: dg.AutomationCondition = ON_CHANGE & UpstreamCurrent()

# Every standalone check (@asset_check) carries this: requested, and so run in the same run as its asset, in
# every tick that requests the asset (or an additional dependency of the check). Without a condition of its
# own a standalone check rides along only with an asset that has no check_specs: Dagster 1.13's run request
# then names the asset's requested spec checks and nothing else, so a blocking check was never evaluated and
# held everything downstream (issue 19; tests/test_definitions.py and the cascades of tests/test_pipeline.py).
WITH_ITS_ASSET: dg.AutomationCondition = AC.any_deps_match(AC.will_be_requested()).with_label(
    "its asset will be requested")


def with_its_asset_only(key: dg.AssetKey) -> dg.AutomationCondition:
    """``WITH_ITS_ASSET`` for a check of ``key`` whose additional deps are upstream of it: requested with its
    asset only, not ahead of it (with a dep, against the asset's previous output)."""
    return AC.any_deps_match(AC.will_be_requested()).allow(dg.AssetSelection.keys(key)).with_label(
        "its asset will be requested")


# Source files are re-hashed on this cadence; a changed hash makes only its downstream stale.
OBSERVE_SOURCES: dg.AutomationCondition = AC.on_cron("*/15 * * * *")

# Steps that open the DuckDB warehouse read-write: one at a time within a run (executor tag limit) and
# across runs (the `duckdb` pool; `ehrxqa` gives the pools duckdb, gpu and llm a limit of 1 in the instance,
# ehrxqa_pipeline/cli/instance.py, on top of dagster.yaml's default_limit 1).
DUCKDB_TAGS = {"ehrxqa/warehouse": "write"}
DUCKDB_POOL = "duckdb"

# Steps that call the paraphrase LLM endpoint: one at a time across runs (the `llm` pool).
LLM_POOL = "llm"

# Steps that need a GPU (VQA training and scoring): the `gpu` pool (one at a time across runs on one
# machine), the local tag the executors limit within a run, and the dagster-k8s step config that requests
# one NVIDIA GPU and tolerates the usual taint of GPU node pools (k8s_job_executor; see deploy/).
GPU_POOL = "gpu"
DEVICE_TAG = "ehrxqa/device"
GPU_K8S_CONFIG = {
    "container_config": {"resources": {"limits": {"nvidia.com/gpu": 1}}},
    "pod_spec_config": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
}
GPU_TAGS = {DEVICE_TAG: GPU_POOL, "dagster-k8s/config": GPU_K8S_CONFIG}
# What every step pod asks for under the k8s executor (ehrxqa_pipeline.definitions), and the VQA worker's own
# pod besides its GPU (EHRXQA_VQA_LAUNCH=k8s, resources.vqa_pipes).
K8S_STEP_RESOURCES = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "24Gi"}}


# When the conditions above are evaluated: the sensor (every minute; the sources every 15), and a weekly full
# rebuild.
weekly_rebuild = dg.ScheduleDefinition(
    name="weekly_rebuild", target=dg.AssetSelection.all(), cron_schedule="0 3 * * 1",
    execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Rebuild every asset from the current sources each Monday 03:00 UTC.")

automation_sensor = dg.AutomationConditionSensorDefinition(
    "ehrxqa_automation", target=dg.AssetSelection.all(include_sources=True),
    default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
    use_user_code_server=True,  # the release assets' condition is Python (UpstreamCurrent, above)
    description="Observes the sources every 15 minutes and re-materializes only what a change touched; the "
                "release assets once nothing upstream of them is out of date.")
