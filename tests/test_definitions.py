"""The code location loads, and the asset graph has the shape the design states."""

import json
from pathlib import Path

import dagster as dg
import pytest

from ehrxqa_pipeline import names
from ehrxqa_pipeline.definitions import defs
from ehrxqa_pipeline.gc_settings import THRESHOLDS
from ehrxqa_pipeline.sources.schema import TABLES


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)


SNAPSHOT = Path(__file__).with_name("snapshots") / "asset_graph.json"


def graph_snapshot(definitions: dg.Definitions = defs) -> dict:
    """What users and the automation see of the code location: per asset its group, deps, partitions,
    automation condition (by its name in assets.automation), kinds and checks (blocking or not); the observable
    sources; the jobs, schedules and sensors. Code versions are left out (they change with every fix)."""
    import assets.automation as automation

    named = [(name, getattr(automation, name)) for name in ("OBSERVE_SOURCES", "ON_CHANGE", "RELEASE_ON_CHANGE",
                                                           "WITH_ITS_ASSET")]

    def condition(c) -> str | None:
        if c is None:
            return None
        return next((name for name, v in named if v == c), f"other: {c.get_label() or type(c).__name__}")

    graph = definitions.resolve_asset_graph()
    checks: dict[str, dict] = {}
    for key in sorted(graph.asset_check_keys, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        node = graph.get(key)
        checks.setdefault(key.asset_key.to_user_string(), {})[key.name] = {
            "blocking": bool(node.blocking), "automation": condition(node.automation_condition)}
    assets = {}
    for key in sorted(graph.materializable_asset_keys, key=lambda k: k.to_user_string()):
        node, name = graph.get(key), key.to_user_string()
        pdef = node.partitions_def
        assets[name] = {
            "group": node.group_name, "deps": sorted(p.to_user_string() for p in node.parent_keys),
            "partitions": None if pdef is None else f"{type(pdef).__name__}: "
                          + ",".join(pdef.get_partition_keys()),
            "automation": condition(node.automation_condition), "kinds": sorted(node.kinds),
            "checks": checks.get(name, {})}
    return {"assets": assets, "observable": sorted(k.to_user_string() for k in graph.observable_asset_keys),
            "jobs": sorted(j.name for j in definitions.jobs or ()),
            "schedules": {s.name: s.cron_schedule for s in definitions.schedules or ()},
            "sensors": sorted(s.name for s in definitions.sensors or ())}


def snapshot_diff(want: dict, got: dict) -> list[str]:
    """The assets, and the other parts (jobs, schedules, ...), in which two ``graph_snapshot`` results differ."""
    got = json.loads(json.dumps(got))  # as read back from the file: lists, not tuples
    return (sorted(k for k in set(want["assets"]) | set(got["assets"]) if want["assets"].get(k) != got["assets"].get(k))
            + sorted(k for k in set(want) | set(got) if k != "assets" and want.get(k) != got.get(k)))


def test_graph_snapshot():
    """The graph equals tests/snapshots/asset_graph.json; after an intended change, write it again with
    `python -m tests.test_definitions` and review the diff."""
    changed = snapshot_diff(json.loads(SNAPSHOT.read_text()), graph_snapshot())
    assert changed == [], f"what differs from {SNAPSHOT.name}: {changed} (see the docstring)"


def test_a_planted_graph_change_fails_the_snapshot():
    """The snapshot test can fail: the code location with one asset moved to another group and its automation
    condition removed differs from the snapshot in that asset alone."""
    key = dg.AssetKey(["release", "plots"])

    def plant(a):
        if isinstance(a, dg.AssetsDefinition) and key in a.keys:
            return a.map_asset_specs(lambda s: s.replace_attributes(automation_condition=None, group_name="planted")
                                     if s.key == key else s)
        return a

    planted = dg.Definitions(assets=[plant(a) for a in defs.assets], asset_checks=list(defs.asset_checks or ()),
                             jobs=list(defs.jobs or ()), schedules=list(defs.schedules or ()),
                             sensors=list(defs.sensors or ()), resources=defs.resources)
    assert snapshot_diff(json.loads(SNAPSHOT.read_text()), graph_snapshot(planted)) == ["release/plots"]


def test_graph_structure():
    graph = defs.resolve_asset_graph()
    observable = {k.to_user_string() for k in graph.observable_asset_keys}
    materializable = {k.to_user_string() for k in graph.materializable_asset_keys}
    assert observable == {f"sources/{t}" for t in TABLES} | {"sources/semantics", "sources/paraphrase_review"}
    assert {k for k in materializable if k.startswith("ingest/")} == {f"ingest/{t}" for t in TABLES}
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        assert node.code_version, key
        assert node.description and "Grain" in node.description, key
        assert node.group_name in names.GROUPS, key
    ingest_patients = graph.get(dg.AssetKey(["ingest", "patients"]))
    assert ingest_patients.parent_keys == {dg.AssetKey(["sources", "patients"])}


def test_only_the_assembly_imports_the_definitions():
    """definitions.py assembles the code location; nothing it assembles imports it back (issue 16: the release
    assets receive the Definitions through ``assets.release.release_assets``). The CLI and tests may."""
    from tests.test_imports import PACKAGES, ROOT, import_graph

    offenders = sorted(m for m, imported in import_graph(ROOT, PACKAGES).items()
                       if "ehrxqa_pipeline.definitions" in imported and m.split(".")[:2] != ["ehrxqa_pipeline", "cli"])
    assert offenders == []


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
            "cxr_labels/ontology", "cxr_labels/silver", "cxr_labels/gold", "splits/silver", "splits/gold",
            "mimic_cxr_vqa/silver", "mimic_cxr_vqa/gold", "mimic_cxr_vqa/statistics", "release/mimic_cxr_vqa"} <= keys
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
    ("mimic_cxr_vqa", {"mimic_cxr_vqa/silver", "mimic_cxr_vqa/gold", "release/mimic_cxr_vqa"}),
    ("ehrxqa", {"ehr_db/silver", "ehr_db/gold", "ehrxqa/silver", "ehrxqa/gold", "release/ehrxqa/silver",
                "release/ehrxqa/gold"}),
    ("paraphrase_review", {"paraphrase/pools", "release/mimic_cxr_vqa", "release/ehrxqa/silver", "release/ehrxqa/gold"}),
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
    check here has ``WITH_ITS_ASSET`` (or ``with_its_asset_only``: additional deps upstream of its asset)."""
    from assets.automation import WITH_ITS_ASSET, with_its_asset_only

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
    only = standalone(automation_condition=with_its_asset_only(a.key))
    assert _left_out(dg.Definitions(assets=[a], asset_checks=[only])) == set()
    graph = defs.resolve_asset_graph()
    for key in graph.asset_check_keys:  # a check in its asset's step (check_specs) runs with it anyway
        spec = key.asset_key in graph.get_execution_set_asset_and_check_keys(key)
        assert spec or graph.get(key).automation_condition in (WITH_ITS_ASSET, with_its_asset_only(key.asset_key)), key
    # on the whole graph: the cascades of tests/test_pipeline.py assert checks_left_out(...) == set() each tick


def test_a_check_with_its_asset_only_waits_for_its_asset():
    """release/ehrxqa/<side>:resolved_studies reads ehrxqa.<side> too (an additional dep, upstream of its asset): with
    ``with_its_asset_only`` it is not requested when only that dep is, which would check the new questions against
    the previous release files."""
    from assets.automation import WITH_ITS_ASSET, with_its_asset_only

    @dg.asset(automation_condition=dg.AutomationCondition.missing())
    def upstream():
        return None

    @dg.asset(deps=[upstream])
    def released():
        return None

    def requested(condition) -> set[str]:
        @dg.asset_check(asset=released, additional_deps=[upstream], automation_condition=condition)
        def check():
            return dg.AssetCheckResult(passed=True)

        with dg.instance_for_test() as instance:  # upstream missing: requested; released has no condition
            result = dg.evaluate_automation_conditions(
                defs=dg.Definitions(assets=[upstream, released], asset_checks=[check]), instance=instance)
        return {r.key.to_user_string() for r in result.results if r.true_subset.size}

    assert requested(WITH_ITS_ASSET) == {"upstream", "released:check"}
    assert requested(with_its_asset_only(released.key)) == {"upstream"}


if __name__ == "__main__":  # python -m tests.test_definitions: write the snapshot of the current graph
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_text(json.dumps(graph_snapshot(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")


PRELOAD = ["ehrxqa_pipeline.definitions", "ehrxqa_pipeline.gx", "ehrxqa_pipeline.cli.dagster_private", "dagster._daemon",
           "ehrxqa_pipeline.forkserver_gc"]


def test_the_ui_runs_fork_their_steps_from_a_server_that_loaded_the_code_location():
    """Under `dagster dev` every step is a process of its own: forked from a forkserver that preloaded this code
    location, Great Expectations (with the environment it reads set first) and the instance's storage, not spawned
    (a spawned step imports Dagster and the project again: 2-3 s of CPU a step), then froze it for the collector."""
    from ehrxqa_pipeline import definitions

    config = definitions.EXECUTOR.apply_config_mapping({}).value["config"]
    assert config["start_method"] == {"forkserver": {"preload_modules": PRELOAD}} and config["max_concurrent"] == 2


@pytest.mark.slow  # a fresh interpreter importing the whole preload: 4-5 s of CPU
def test_the_forkservers_preload_starts_no_thread_and_imports_no_torch():
    """What the forkserver imports starts no Python thread (a fork copies only the thread that forks), leaves
    torch out (the code location never imports it), turns Great Expectations' usage analytics off first, leaves
    scipy.stats unloaded until used (ehrxqa_pipeline.gx.DEFERRED), and at the end freezes what it loaded and sets
    the collector's thresholds (ehrxqa_pipeline.gc_settings)."""
    import os
    import subprocess
    import sys

    probe = ("import gc, os, sys, threading\n"
             f"for m in {PRELOAD!r}: __import__(m)\n"
             "print(threading.active_count(), 'torch' in sys.modules, os.environ['GX_ANALYTICS_ENABLED'], "
             "gc.get_freeze_count() > 100_000, gc.get_threshold()[0], 'scipy.stats._stats_py' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "GX_ANALYTICS_ENABLED"}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stdout.split() == ["1", "False", "false", "True", str(THRESHOLDS[0]), "False"], \
        out.stdout + out.stderr[-2000:]
