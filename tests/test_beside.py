"""The run beside of `ehrxqa build` (ehrxqa_pipeline.cli.beside): which steps go there, and a second process that
ends before its run begins is a named failure, not a silent success. The run itself is exercised by the
end-to-end build (tests/test_end_to_end.py: training ran beside the EHRXQA sampling, in a run of its own)."""

import dagster as dg
import pytest

from ehrxqa_pipeline.cli.beside import Beside
from ehrxqa_pipeline.cli.build import _Runner
from ehrxqa_pipeline.definitions import defs
from tests.instances import instance_for_test

K = dg.AssetKey.from_user_string


def test_only_training_runs_beside_and_its_stage_splits_around_it(tmp_path):
    graph = defs.resolve_asset_graph()
    stage = [K(k) for k in ("splits/silver", "cxr_labels/silver", "vqa_scoring/training_set",
                            "vqa_scoring/reference_model", "ehrxqa/silver", "ehr_db/silver")]
    with instance_for_test(str(tmp_path)) as instance:
        runner = _Runner(defs, defs.resolve_implicit_global_asset_job_def(), {})
        split = runner.split_beside(instance, stage)
        assert split.apart == [K("vqa_scoring/reference_model")]
        assert split.before == [K("splits/silver"), K("cxr_labels/silver"), K("vqa_scoring/training_set")]
        assert split.after == [] and split.rest == [K("ehrxqa/silver"), K("ehr_db/silver")]
        # steps that take the warehouse never go beside, whatever their pool
        assert runner.split_beside(instance, [K("vqa_scoring/predictions")]) is None
        assert runner.split_beside(instance, stage[:3]) is None
        # alone, or with only what it reads: nothing to run beside it, so no second process
        assert runner.split_beside(instance, stage[:4]) is None and runner.split_beside(instance, stage[3:4]) is None
    # definitions that no code location holds (the tests' graphs) cannot be loaded by a second process
    other = dg.Definitions.merge(defs, dg.Definitions())
    with instance_for_test() as instance:
        assert _Runner(other, other.resolve_implicit_global_asset_job_def(), {}).split_beside(instance, stage) is None
    assert graph.get(K("vqa_scoring/reference_model")).parent_keys == {K("vqa_scoring/training_set")}


@pytest.mark.slow  # starts a process that imports the code location
def test_a_process_that_ends_before_its_run_begins_is_a_named_failure(tmp_path):
    job = defs.resolve_implicit_global_asset_job_def()
    with instance_for_test(str(tmp_path)) as instance:
        with Beside(job, instance, [K("no/such_asset")], {}, {}) as other:
            pass
        assert other.result is None
        assert other.error == "the process of the run beside ended with exit code 1 before its run began"
        assert instance.get_runs() == []
