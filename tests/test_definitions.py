"""The code location loads, and the asset graph has the shape the design states."""

import dagster as dg
import pytest

from ehrxqa_pipeline import names
from ehrxqa_pipeline.definitions import defs
from ehrxqa_pipeline.sources.schema import TABLES


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)


def test_graph_snapshot():
    graph = defs.resolve_asset_graph()
    observable = {k.to_user_string() for k in graph.observable_asset_keys}
    materializable = {k.to_user_string() for k in graph.materializable_asset_keys}
    assert observable == {f"sources/{t}" for t in TABLES} | {"sources/semantics"}
    assert {k for k in materializable if k.startswith("ingest/")} == {f"ingest/{t}" for t in TABLES}
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        assert node.code_version, key
        assert node.description and "Grain" in node.description, key
        assert node.group_name in names.GROUPS, key
    ingest_patients = graph.get(dg.AssetKey(["ingest", "patients"]))
    assert ingest_patients.parent_keys == {dg.AssetKey(["sources", "patients"])}


def test_every_ingest_asset_has_blocking_contract_checks():
    checks = {}
    for c in defs.asset_checks or []:
        for spec in c.check_specs:
            checks[(spec.asset_key.to_user_string(), spec.name)] = spec
    for t in TABLES:
        for name in ("contract", "quarantine"):
            assert checks[(f"ingest/{t}", name)].blocking
    assert ("ingest/admissions", "foreign_keys") in checks


def test_schedule_and_sensor_run_by_default():
    sched = defs.resolve_schedule_def("weekly_rebuild")
    assert sched.default_status == dg.DefaultScheduleStatus.RUNNING and sched.cron_schedule == "0 3 * * 1"
    sensor = defs.resolve_sensor_def("ehrxqa_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_every_stage_present_and_automated():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.materializable_asset_keys}
    assert {"cxr_cohort/image_rules", "cxr_cohort/image_integrity", "cxr_cohort/silver", "cxr_cohort/gold",
            "cxr_labels/ontology", "cxr_labels/silver", "cxr_labels/gold", "splits/images",
            "mimic_cxr_vqa/questions", "mimic_cxr_vqa/statistics", "release/mimic_cxr_vqa"} <= keys
    for key in graph.materializable_asset_keys:
        assert graph.get(key).automation_condition is not None, key
    integrity = graph.get(dg.AssetKey(["cxr_cohort", "image_integrity"]))
    assert integrity.partitions_def.get_partition_keys() == [f"p{n}" for n in range(10, 20)]


def test_every_asset_documented_owned_and_kinded():
    """The UI shows for every asset what one row is, where it comes from, who owns it and what it is stored
    as; new assets are held to the same (design.md: docstrings state grain and source)."""
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        text = node.description or ""
        assert "Grain" in text and "Source" in text, key
        assert node.owners, key
        assert node.kinds, key


def test_every_check_has_a_description():
    graph = defs.resolve_asset_graph()
    for check_key in graph.asset_check_keys:
        assert graph.get_check_spec(check_key).description, check_key


def test_weekly_schedule_targets_every_asset_in_utc():
    import datetime

    sched = defs.resolve_schedule_def("weekly_rebuild")
    assert (sched.cron_schedule, sched.execution_timezone) == ("0 3 * * 1", "UTC")  # README: Monday 03:00 UTC
    graph = defs.resolve_asset_graph()
    job = defs.resolve_job_def(sched.job_name)
    assert set(job.asset_layer.selected_asset_keys) == set(graph.materializable_asset_keys)
    tick = datetime.datetime(2026, 11, 23, 3, tzinfo=datetime.timezone.utc)  # a Monday
    assert tick.weekday() == 0
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        assert len(sched.evaluate_tick(context).run_requests) == 1


@pytest.mark.parametrize("name, must", [
    ("mimic_cxr_vqa", {"mimic_cxr_vqa/questions", "release/mimic_cxr_vqa"}),
    ("ehrxqa", {"ehr_db/silver", "ehr_db/gold", "ehrxqa/questions", "release/ehrxqa"}),
    ("paraphrase_review", {"paraphrase/pools", "release/mimic_cxr_vqa", "release/ehrxqa"}),
    ("release", {"release/manifest", "release/datasheet"}),
])
def test_named_jobs_for_what_users_rebuild(name, must):
    graph = defs.resolve_asset_graph()
    job = defs.resolve_job_def(name)
    keys = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    assert must <= keys, must - keys
    assert not any(graph.get(dg.AssetKey.from_user_string(k)).partitions_def for k in keys)  # one run each


def _left_out(defs_: dg.Definitions) -> set[str]:
    from tests.pipeline_graph import checks_left_out

    with dg.instance_for_test() as instance:  # everything missing
        result = dg.evaluate_automation_conditions(defs=defs_, instance=instance)
        assert result.total_requested
        return checks_left_out(result, defs_.resolve_asset_graph())


def test_sensor_runs_every_check_of_what_it_materializes():
    """Dagster 1.13 leaves a standalone check (without a condition of its own) out of a sensor run of an asset that
    has check_specs: a blocking check never evaluated holds everything downstream (issue 19). Every standalone
    check here has ``WITH_ITS_ASSET``."""
    from assets.automation import WITH_ITS_ASSET

    @dg.asset(check_specs=[dg.AssetCheckSpec("spec", asset="a", blocking=True)],
              automation_condition=dg.AutomationCondition.missing())
    def a():
        yield dg.MaterializeResult()
        yield dg.AssetCheckResult(check_name="spec", passed=True)

    def standalone(**condition):
        @dg.asset_check(asset=a, name="standalone", blocking=True, **condition)
        def check():
            return dg.AssetCheckResult(passed=True)
        return check

    assert _left_out(dg.Definitions(assets=[a], asset_checks=[standalone()])) == {"a:standalone"}
    with_condition = standalone(automation_condition=WITH_ITS_ASSET)
    assert _left_out(dg.Definitions(assets=[a], asset_checks=[with_condition])) == set()
    graph = defs.resolve_asset_graph()
    for key in graph.asset_check_keys:  # a check in its asset's step (check_specs) runs with it anyway
        spec = key.asset_key in graph.get_execution_set_asset_and_check_keys(key)
        assert spec or graph.get(key).automation_condition == WITH_ITS_ASSET, key
    # on the whole graph: the cascades of tests/test_pipeline.py assert checks_left_out(...) == set() each tick
