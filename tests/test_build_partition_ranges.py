"""`ehrxqa build` runs the partitions of a stage whose assets all have a single-run backfill policy as one run per
range of consecutive partitions, as Dagster's backfills and automation do (vqa_scoring/predictions: one VQA worker
launch for all ten top folders); a stage with any other partitioned asset runs one partition a run."""

import dagster as dg
import pytest

from ehrxqa_pipeline.cli.build import _Runner, materialize
from tests.instances import instance_for_test

PARTS = dg.StaticPartitionsDefinition(["p10", "p11", "p12", "p13"])
SEEN: list[tuple[str, tuple[str, ...]]] = []


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run())
def ranged(context: dg.AssetExecutionContext) -> None:
    SEEN.append(("ranged", tuple(context.partition_keys)))


@dg.asset(partitions_def=PARTS)
def one_each(context: dg.AssetExecutionContext) -> None:
    SEEN.append(("one_each", (context.partition_key,)))


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process): not in `make test-fast`
def test_a_single_run_stage_runs_each_range_of_requested_partitions_once():
    defs = dg.Definitions(assets=[ranged])
    SEEN.clear()
    with instance_for_test() as instance:
        summary = materialize([ranged.key], instance, defs)
        assert summary.success and SEEN == [("ranged", ("p10", "p11", "p12", "p13"))]
        assert sorted(summary.materialized) == [f"ranged[{p}]" for p in PARTS.get_partition_keys()]
        SEEN.clear()
        runner = _Runner(defs, defs.resolve_implicit_global_asset_job_def(), {})
        runner.run_stages(instance, [ranged.key], {ranged.key: ["p13", "p10", "p11"]})  # as automation requests
        assert runner.ok and SEEN == [("ranged", ("p10", "p11")), ("ranged", ("p13",))]
        assert runner.partitions == ["p10...p11", "p13...p13"]


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process): not in `make test-fast`
def test_a_stage_with_another_partitioned_asset_runs_one_partition_a_run():
    defs = dg.Definitions(assets=[ranged, one_each])
    SEEN.clear()
    with instance_for_test() as instance:
        assert materialize([ranged.key, one_each.key], instance, defs).success
    assert sorted(SEEN) == sorted((name, (p,)) for name in ("ranged", "one_each") for p in PARTS.get_partition_keys())


@dg.multi_asset(specs=[dg.AssetSpec("labels"), dg.AssetSpec("labelled_images")])
def label_step():
    SEEN.append(("label_step", ()))
    yield dg.MaterializeResult(asset_key="labels")
    yield dg.MaterializeResult(asset_key="labelled_images")


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process): not in `make test-fast`
def test_one_asset_of_a_multi_asset_that_cannot_be_subset_runs_with_its_siblings():
    """As `build --changed` repairs an output a home built before it existed never materialized (cxr_labels/silver
    beside its new cxr_labels/silver_images): Dagster refuses a run of part of the step, so the build runs it whole."""
    defs = dg.Definitions(assets=[label_step])
    SEEN.clear()
    with instance_for_test() as instance:
        runner = _Runner(defs, defs.resolve_implicit_global_asset_job_def(), {})
        runner.run_stages(instance, [dg.AssetKey("labelled_images")])
        assert runner.ok and SEEN == [("label_step", ())]
        assert {k.to_user_string() for k in runner.results[0].dagster_run.asset_selection} == {"labels",
                                                                                                "labelled_images"}
