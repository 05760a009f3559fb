"""`ehrxqa build --changed` after a build that was killed part-way (issue 22 point 4): the assets the killed
build never reached are not a change the automation conditions react to, yet the build must not report
success without them; it materializes them (and what lies below), or fails naming them. The interrupted state
is simulated on a five-asset graph shaped like the pipeline's (an observed source, ON_CHANGE assets, release
assets under RELEASE_ON_CHANGE): the run that was killed in the release step materialized the upper assets
only. A real kill -9 of the whole graph is measured by hand (see the commit message). Also: the temporary
files of a killed writer are removed at the start of the next build."""

import os

import dagster as dg
import pytest

from assets.automation import OBSERVE_SOURCES, ON_CHANGE, RELEASE_ON_CHANGE
from ehrxqa_pipeline.cli.build import build, format_summary
from ehrxqa_pipeline.config import Settings
from tests.instances import instance_for_test

STATE = {"check_passes": True}


@dg.observable_source_asset(automation_condition=OBSERVE_SOURCES)
def src():
    return dg.DataVersion("1")


@dg.asset(deps=[src], code_version="1", automation_condition=ON_CHANGE)
def upper():
    return dg.MaterializeResult(data_version=dg.DataVersion(STATE.get("upper", "u")))


@dg.asset_check(asset=upper, blocking=True)
def upper_is_good():
    return dg.AssetCheckResult(passed=STATE["check_passes"])


@dg.asset(deps=[upper], code_version="1", automation_condition=ON_CHANGE)
def middle():
    return dg.MaterializeResult(data_version=dg.DataVersion("m"))


@dg.asset(deps=[middle], code_version="1", automation_condition=RELEASE_ON_CHANGE)
def statistics():
    return dg.MaterializeResult(data_version=dg.DataVersion("s"))


@dg.asset(deps=[statistics], code_version="1", automation_condition=RELEASE_ON_CHANGE)
def manifest():
    return dg.MaterializeResult(data_version=dg.DataVersion("f"))


DEFS = dg.Definitions(assets=[src, upper, middle, statistics, manifest], asset_checks=[upper_is_good])
KILLED_RUN = ["src", "upper", "middle"]  # the run killed in the release step got this far


def _materialized(summary) -> set[str]:
    return set(summary.materialized)


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process, build): not in `make test-fast`
def test_changed_after_a_killed_build_materializes_what_it_never_reached(tmp_path):
    settings = Settings.resolve(home=str(tmp_path))
    STATE["check_passes"] = True
    with instance_for_test() as instance:
        job = DEFS.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance,
                                      asset_selection=[dg.AssetKey(k) for k in KILLED_RUN]).success
        lines = []
        first = build(settings, instance=instance, defs=DEFS, changed=True, log=lines.append)
        assert first.success, format_summary(first, settings)
        assert {"statistics", "manifest"} <= _materialized(first)
        assert any("never materialized: statistics, manifest" in line for line in lines), lines
        again = build(settings, instance=instance, defs=DEFS, changed=True, log=lines.append)
        assert again.success and again.materialized == {} and again.stale == {}  # nothing changed: nothing runs


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process, build): not in `make test-fast`
def test_changed_after_a_kill_between_an_asset_and_its_blocking_check(tmp_path):
    """Killed after ``upper`` was materialized and before its blocking check ran (the full-graph kill test of
    tests/test_pipeline.py met this): ``upper`` is not out of date, but what lies below waits on that check, so
    `--changed` evaluates the check (an asset check of its own: it runs without ``upper``, on what ``upper``
    holds), then materializes the rest (before: a KeyError on ``upper``; then ``upper`` again with its check)."""
    settings = Settings.resolve(home=str(tmp_path))
    STATE["check_passes"] = True
    with instance_for_test() as instance:
        job = DEFS.resolve_implicit_global_asset_job_def()
        keys = {dg.AssetKey(k) for k in KILLED_RUN[:2]}
        assert job.get_subset(asset_selection=keys, asset_check_selection=set()).execute_in_process(
            instance=instance).success
        lines = []
        summary = build(settings, instance=instance, defs=DEFS, changed=True, log=lines.append)
        assert summary.success, format_summary(summary, settings)
        assert _materialized(summary) == {"middle", "statistics", "manifest"}
        assert any("never materialized: middle, statistics, manifest" in line for line in lines), lines
        assert any("evaluating upper:upper_is_good" in line for line in lines), lines
        check = dg.AssetCheckKey(dg.AssetKey("upper"), "upper_is_good")
        assert instance.get_latest_asset_check_evaluation_record(check).status.value == "SUCCEEDED"


@dg.asset(code_version="1", automation_condition=ON_CHANGE,
          check_specs=[dg.AssetCheckSpec("whole", asset="bound", blocking=True)])
def bound():
    """An asset whose blocking check is part of its step (``check_specs``), killed between the two when STATE says."""
    yield dg.MaterializeResult(data_version=dg.DataVersion(STATE.get("bound", "b")))
    if STATE.get("killed"):
        raise RuntimeError("killed between the materialization and the check")
    yield dg.AssetCheckResult(check_name="whole", passed=True)


@dg.asset(deps=[bound], code_version="1", automation_condition=ON_CHANGE)
def reader():
    return dg.MaterializeResult(data_version=dg.DataVersion("r"))


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process, build): not in `make test-fast`
def test_changed_after_a_kill_inside_a_step_between_its_asset_and_check(tmp_path):
    """As above, with the check part of its asset's step: it cannot run alone, so `--changed` materializes the
    asset again with it, then what reads it."""
    settings = Settings.resolve(home=str(tmp_path))
    defs = dg.Definitions(assets=[bound, reader])
    with instance_for_test() as instance:
        assert build(settings, instance=instance, defs=defs).success
        STATE.update(bound="b2", killed=True)
        try:
            assert not build(settings, instance=instance, defs=defs, select="bound").success
            STATE.pop("killed")
            lines = []
            summary = build(settings, instance=instance, defs=defs, changed=True, log=lines.append)
        finally:
            STATE.pop("bound")
            STATE.pop("killed", None)
        assert summary.success, format_summary(summary, settings)
        assert _materialized(summary) == {"bound", "reader"} and summary.stale == {}
        check = dg.AssetCheckKey(dg.AssetKey("bound"), "whole")
        assert instance.get_latest_asset_check_evaluation_record(check).status.value == "SUCCEEDED"


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process, build): not in `make test-fast`
def test_changed_after_a_kill_before_a_blocking_check_rebuilds_below_only_as_far_as_outputs_change(tmp_path):
    """A partial re-run killed in its first round: ``upper`` materialized with new content, its blocking check not
    yet run, the automation's cursor as the last build left it (which then requests nothing: a blocking check
    stands between ``upper`` and what reads it). `--changed` evaluates that check, then materializes ``middle``,
    which read the old ``upper``; ``middle``'s output comes out unchanged, so ``statistics`` and
    ``manifest``, out of date only because ``middle`` was, are left as they are. (They were rebuilt too, and with
    them everything below: a gold label edit killed as it began then retrained the model and rebuilt the silver
    side, issue 23.)"""
    settings = Settings.resolve(home=str(tmp_path))
    STATE["check_passes"] = True
    with instance_for_test() as instance:
        assert build(settings, instance=instance, defs=DEFS).success  # a full build, which saves the cursor
        job = DEFS.resolve_implicit_global_asset_job_def()
        STATE["upper"] = "u2"
        try:
            assert job.get_subset(asset_selection={dg.AssetKey("upper")}, asset_check_selection=set()
                                  ).execute_in_process(instance=instance).success
            lines = []
            summary = build(settings, instance=instance, defs=DEFS, changed=True, log=lines.append)
            assert summary.success, format_summary(summary, settings)
            assert _materialized(summary) == {"middle"} and summary.stale == {}
            assert any("3 asset(s) out of date that no change requests" in line for line in lines), lines
            check = dg.AssetCheckKey(dg.AssetKey("upper"), "upper_is_good")
            assert instance.get_latest_asset_check_evaluation_record(check).status.value == "SUCCEEDED"
            again = build(settings, instance=instance, defs=DEFS, changed=True, log=lines.append)
            assert again.success and again.materialized == {} and again.stale == {}
        finally:
            STATE.pop("upper")


@dg.observable_source_asset(automation_condition=OBSERVE_SOURCES)
def feed():
    return dg.DataVersion(STATE.get("feed", "1"))


@dg.asset(deps=[feed], code_version="1", automation_condition=ON_CHANGE)
def left():
    return dg.MaterializeResult(data_version=dg.DataVersion(STATE.get("feed", "1")))


@dg.asset(deps=[feed], code_version="1", automation_condition=ON_CHANGE)
def right():
    if STATE.get("right_fails"):
        raise RuntimeError("right failed after left was materialized")
    return dg.MaterializeResult(data_version=dg.DataVersion(STATE.get("feed", "1")))


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process, build): not in `make test-fast`
def test_changed_after_a_failed_round_keeps_what_that_round_materialized(tmp_path):
    """A round of `--changed` that materialized ``left`` and then failed in ``right``: its cursor is not saved, and
    the next `--changed` evaluates from the one before, which saw neither; it runs ``right`` alone, since ``left``
    was updated after the change that requested it (the eager condition's "since last handled")."""
    settings = Settings.resolve(home=str(tmp_path))
    defs = dg.Definitions(assets=[feed, left, right])
    with instance_for_test() as instance:
        assert build(settings, instance=instance, defs=defs).success
        STATE.update(feed="2", right_fails=True)
        try:
            failed = build(settings, instance=instance, defs=defs, changed=True, log=lambda _: None)
            assert not failed.success and set(failed.materialized) == {"left"}
            STATE.pop("right_fails")
            summary = build(settings, instance=instance, defs=defs, changed=True, log=lambda _: None)
        finally:
            STATE.pop("feed")
            STATE.pop("right_fails", None)
        assert summary.success, format_summary(summary, settings)
        assert _materialized(summary) == {"right"} and summary.stale == {}


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process, build): not in `make test-fast`
def test_changed_never_runs_past_a_failed_blocking_check_and_names_what_is_missing(tmp_path):
    settings = Settings.resolve(home=str(tmp_path))
    with instance_for_test() as instance:
        job = DEFS.resolve_implicit_global_asset_job_def()
        STATE["check_passes"] = False
        job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(k) for k in KILLED_RUN[:2]],
                               raise_on_error=False)
        summary = build(settings, instance=instance, defs=DEFS, changed=True, log=lambda _: None)
        STATE["check_passes"] = True
        assert not summary.success
        assert not {"middle", "statistics", "manifest"} & _materialized(summary)
        text = format_summary(summary, settings)
        assert "OUT OF DATE manifest: never materialized" in text and text.endswith("build FAILED")


def test_temporary_files_of_a_dead_writer_are_removed(tmp_path):
    from ehrxqa_pipeline.atomic import _host, remove_stale_temps

    release = tmp_path / "release" / "ehrxqa"
    release.mkdir(parents=True)
    dead = 2 ** 22 + 12345  # above pid_max's default: no such process
    stale = release / f".test.json.{_host()}-{dead}.0123abcd.tmp"
    stale.write_bytes(b"x" * 1000)
    wal = tmp_path / f".warehouse.duckdb.{_host()}-{dead}.89abcdef.tmp.wal"
    wal.write_bytes(b"y")
    mine = release / f".test.json.{_host()}-{os.getpid()}.0123abcd.tmp"  # a live writer's: kept
    mine.write_bytes(b"z")
    other_host = release / f".test.json.otherhost-{dead}.0123abcd.tmp"  # a shared volume's: kept
    other_host.write_bytes(b"z")
    source = tmp_path / "source"
    source.mkdir()
    skipped = source / stale.name
    skipped.write_bytes(b"s")
    removed = remove_stale_temps(tmp_path, skip=("source",))
    assert sorted((p, n) for p, n in removed) == sorted([(stale, 1000), (wal, 1)])
    assert mine.exists() and other_host.exists() and skipped.exists() and not stale.exists()
