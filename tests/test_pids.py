"""A process that has ended but that its parent has not collected (a zombie) is not running: the runs and
temporary files of a killed `ehrxqa` process are cleaned up though its children linger so (a killed build's run
beside it held the `gpu` pool slot, and the next build waited on that slot for ever)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from ehrxqa_pipeline.atomic import _host, remove_stale_temps
from ehrxqa_pipeline.cli.instance import HOST_TAG, PID_TAG, recover_interrupted
from ehrxqa_pipeline.pids import alive
from tests.instances import instance_for_test

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="zombies are read from /proc")


@pytest.fixture
def zombie():
    """The pid of a child that has exited and is not collected yet."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not end"
        time.sleep(0.02)
    os.kill(child.pid, 0)  # the pid is still taken: kill alone says "running"
    yield child.pid
    child.wait()


def test_a_zombie_is_not_alive_and_this_process_is(zombie):
    assert not alive(zombie) and alive(os.getpid())


def test_a_zombie_builds_run_and_pool_slot_are_recovered(zombie):
    with instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
        run = DagsterRun(job_name="__ASSET_JOB", run_id="f" * 36, status=DagsterRunStatus.STARTED,
                         tags={HOST_TAG: socket.gethostname(), PID_TAG: str(zombie)})
        instance.add_run(run)
        assert instance.event_log_storage.claim_concurrency_slot("gpu", run.run_id, "train").is_claimed
        lines = []
        assert recover_interrupted(instance, log=lines.append) == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
        assert not instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        assert lines == ["1 run(s) of an interrupted build marked failed; their pool slots are free again"]


def test_a_zombie_writers_temporary_file_is_removed(zombie, tmp_path):
    stale = tmp_path / f".test.json.{_host()}-{zombie}.0123abcd.tmp"
    stale.write_bytes(b"half")
    assert remove_stale_temps(tmp_path) == [(stale, 4)] and not stale.exists()
