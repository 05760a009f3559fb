"""What a build reports as still out of date, on a three-asset graph with a blocking check (a few seconds; the
full graph is exercised in tests/test_pipeline.py)."""

import dagster as dg
import pytest

from assets.freshness import out_of_date
from tests.instances import instance_for_test

pytestmark = pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process): not in `make test-fast`

STATE = {"a": 1, "check_passes": True}


@dg.asset(code_version="1")
def a():
    return dg.MaterializeResult(data_version=dg.DataVersion(str(STATE["a"])))


@dg.asset_check(asset=a, blocking=True)
def a_is_good():
    return dg.AssetCheckResult(passed=STATE["check_passes"], description="a is bad" if not STATE["check_passes"] else "")


@dg.asset(deps=[a], code_version="1")
def b():
    return dg.MaterializeResult(data_version=dg.DataVersion("b"))


@dg.asset(deps=[b], code_version="1")
def c():
    return dg.MaterializeResult(data_version=dg.DataVersion("c"))


DEFS = dg.Definitions(assets=[a, b, c], asset_checks=[a_is_good])
JOB = DEFS.resolve_implicit_global_asset_job_def()


def run(instance, *keys):
    return JOB.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(k) for k in keys],
                                  raise_on_error=False)


def test_out_of_date_names_the_cause_and_the_blocking_check():
    with instance_for_test() as instance:
        assert set(out_of_date(DEFS, instance)) == {"a", "b", "c"}  # never materialized
        assert "never materialized" in out_of_date(DEFS, instance)["a"]
        run(instance, "a", "b", "c")
        assert out_of_date(DEFS, instance) == {}

        STATE.update(a=2, check_passes=False)  # a changes and fails its blocking check: b and c are not run
        result = run(instance, "a", "b", "c")
        assert not result.success or not any(e.asset_key == dg.AssetKey("b")
                                             for e in result.get_asset_materialization_events())
        stale = out_of_date(DEFS, instance)
        assert set(stale) == {"b", "c"}
        assert "a changed since it was built" in stale["b"] and "blocking check a:a_is_good failed: a is bad" in stale["b"]
        assert stale["c"] == "upstream out of date: b"
        assert out_of_date(DEFS, instance, [dg.AssetKey("c")]) == {"c": "upstream out of date: b"}

        STATE.update(a=3, check_passes=True)  # a changes again and its check is never run
        JOB.get_subset(asset_selection={dg.AssetKey("a")}, asset_check_selection=set()).execute_in_process(
            instance=instance)
        assert "blocking check a:a_is_good not evaluated on its latest materialization" in out_of_date(DEFS, instance)["b"]

        run(instance, "a", "b", "c")  # the check passes, everything is rebuilt
        assert out_of_date(DEFS, instance) == {}


def test_a_code_version_change_is_out_of_date():
    with instance_for_test() as instance:
        STATE.update(a=1, check_passes=True)
        run(instance, "a", "b", "c")
        bumped = dg.Definitions(assets=[a, b.map_asset_specs(lambda s: s.replace_attributes(code_version="2")), c],
                                asset_checks=[a_is_good])
        stale = out_of_date(bumped, instance)
        assert stale == {"b": "code version 1 -> 2", "c": "upstream out of date: b"}
