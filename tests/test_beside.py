"""The run beside of `ehrxqa build` (ehrxqa_pipeline.cli.beside): which steps go there, and a second process that
ends before its run begins is a named failure, not a silent success. The run itself is exercised by the
end-to-end build (tests/test_end_to_end.py: training ran beside the EHRXQA sampling, in a run of its own)."""

import os
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from ehrxqa_pipeline.cli.beside import Beside
from ehrxqa_pipeline.cli.build import _Runner
from ehrxqa_pipeline.definitions import defs
from ehrxqa_pipeline.pids import alive
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


# A build's process (PARENT) whose run beside (CHILD) waits; the build is killed with SIGKILL, as the OOM killer
# does: the orphan interrupts itself (``stop_with_parent``), then exits if the interrupt did not end it.
CHILD = """
import sys, time
from ehrxqa_pipeline.cli.beside import stop_with_parent
parent, grace, flag, linger = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4] == "linger"
try:
    stop_with_parent(parent, grace=grace, poll=0.05)
    open(flag + ".watched", "w").close()
    time.sleep(120)
except KeyboardInterrupt:
    open(flag, "w").write("interrupted")
    if linger:  # a run that does not end on the interrupt
        time.sleep(120)
"""
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), *sys.argv[2:]])
print(child.pid, flush=True)
time.sleep(120)
"""


# The grace before the orphan exits on its own: long where the interrupt ends it (a loaded machine -- a fresh
# clone's first `make test` compiling every module in both workers -- took more than 0.5 s to run the handler, and
# the exit came first), short where it does not (the test waits it out).
GRACE = {"end": "30", "linger": "2"}


@pytest.mark.parametrize("linger", [False, True])
def test_the_run_beside_stops_when_the_build_is_killed(tmp_path, linger):
    flag, mode = tmp_path / "flag", "linger" if linger else "end"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, GRACE[mode], str(flag), mode],
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 60
    while not (tmp_path / "flag.watched").exists() and time.monotonic() < deadline:  # (it imports Dagster first)
        time.sleep(0.05)
    assert alive(child) and not flag.exists()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child) and flag.read_text() == "interrupted"


def _sigint_ignored_and_blocked() -> None:  # (in the child, before exec: both are inherited)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@pytest.mark.parametrize("inherited", ["default", "ignored and blocked"])
def test_the_run_beside_stops_at_once_when_the_build_has_ended_before_it_looks(tmp_path, inherited):
    """The build's pid comes with the request: a build that died while its run beside was starting is not taken
    for the reaper that adopted it. SIGINT is the orphan's own stop signal: it arrives even when the process
    inherited it ignored (a build started from a background shell) and blocked."""
    flag, gone = tmp_path / "flag", 2 ** 22 + 12345  # above pid_max's default: no such process
    child = subprocess.run([sys.executable, "-c", CHILD, str(gone), GRACE["end"], str(flag), "end"], timeout=60,
                           preexec_fn=_sigint_ignored_and_blocked if inherited != "default" else None)
    assert child.returncode == 0 and flag.read_text() == "interrupted"
