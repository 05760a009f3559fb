"""The Dagster layer end to end on a small synthetic source, on a real (temporary) instance:
build, all contract checks green, quarantine counts equal the planted ones, and change-driven re-runs."""

import dagster as dg
import pytest

from assets.automation import ON_CHANGE
from assets.ehrxqa import sampling_run_config
from ehrxqa_pipeline.cli.build import build
from ehrxqa_pipeline.config import Settings
from ehrxqa_pipeline.definitions import defs
from ehrxqa_pipeline.sources.readers import resolve
from tests.textfiles import edit


# EHRXQA sampling at full caps takes minutes; these tests are about the graph, not the dataset size.
SMALL_EHRXQA = sampling_run_config(train_valid_cap=2, test_cap=1, patience=10, workers=1)


def _requested(result, graph) -> set[str]:
    return {k.to_user_string() for k in graph.materializable_asset_keys if result.get_num_requested(k)}


@pytest.fixture
def env(source_copy, tmp_path, monkeypatch):
    root, manifest = source_copy
    monkeypatch.setenv("EHRXQA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EHRXQA_SOURCE_ROOT", str(root))
    monkeypatch.setenv("EHRXQA_CHECK_IMAGES", "0")  # this source has no JPEGs
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield Settings.resolve(), instance, root, manifest


def test_build_then_change_driven_rerun(env):
    settings, instance, root, manifest = env
    summary = build(settings, instance=instance, run_config=SMALL_EHRXQA)
    assert summary.success, summary.failures
    assert {k for k in summary.materialized if k.startswith("ingest/")} == {f"ingest/{t}" for t in manifest["rows"]}
    assert summary.checks and all(c[2] for c in summary.checks), [c for c in summary.checks if not c[2]]
    assert summary.materialized["ingest/admissions"]["rejected_rows"] == \
        manifest["planted"]["ehr"]["admissions_dischtime_before_admittime"]

    graph = defs.resolve_asset_graph()
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert _requested(first, graph) == set()

    # Change one source file: only its ingestion asset is requested.
    edit(resolve(root, "d_labitems"), lambda text: text.replace("Glucose", "Glucose (edited)", 1))
    assert build(settings, select="group:sources", instance=instance).success  # observe only
    second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(second, graph) == {"ingest/d_labitems"}

    assert build(settings, select="key:ingest/d_labitems", instance=instance).success
    # New content in ingest.d_labitems: exactly its downstream assets are due next, nothing else.
    third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
    downstream = {k.to_user_string() for k in graph.materializable_asset_keys
                  if dg.AssetKey(["ingest", "d_labitems"]) in graph.get(k).parent_keys}
    assert downstream == {"ehr_db/silver", "ehr_db/gold"}
    assert _requested(third, graph) == downstream
    # ... and the EHRXQA questions drawn from the databases (and their statistics / release) after them.
    assert build(settings, select="group:ehr_db or group:ehrxqa or key:release/ehrxqa", instance=instance,
                 run_config=SMALL_EHRXQA).success
    fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
    assert _requested(fourth, graph) == set()


def test_failed_blocking_check_stops_downstream(env):
    settings, instance, root, manifest = env

    @dg.asset(key=["downstream", "of_patients"], deps=[dg.AssetKey(["ingest", "patients"])],
              automation_condition=ON_CHANGE, code_version="1")
    def of_patients() -> None:
        return None

    full = dg.Definitions.merge(defs, dg.Definitions(assets=[of_patients]))
    assert build(settings, instance=instance, defs=full, run_config=SMALL_EHRXQA).success
    graph = full.resolve_asset_graph()
    first = dg.evaluate_automation_conditions(defs=full, instance=instance)
    assert _requested(first, graph) == set()

    # Break the contract: every patient's gender becomes 'U' -> everything quarantined -> blocking failure.
    def breaker(text):
        lines = text.splitlines()
        return "\n".join([lines[0]] + [",".join([l.split(",")[0], "U", *l.split(",")[2:]]) for l in lines[1:]]) + "\n"
    edit(resolve(root, "patients"), breaker)
    assert build(settings, select="group:sources", instance=instance).success
    second = dg.evaluate_automation_conditions(defs=full, instance=instance, cursor=first.cursor)
    assert _requested(second, graph) == {"ingest/patients"}
    broken = build(settings, select="key:ingest/patients", instance=instance, defs=full)
    assert not broken.success or any(not c[2] for c in broken.checks)
    assert ("ingest/patients", "quarantine", False) in {(c[0], c[1], c[2]) for c in broken.checks}
    third = dg.evaluate_automation_conditions(defs=full, instance=instance, cursor=second.cursor)
    assert "downstream/of_patients" not in _requested(third, graph)
