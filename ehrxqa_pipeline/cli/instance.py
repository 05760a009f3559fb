"""State the `ehrxqa` command keeps in the Dagster instance: concurrency pool limits, the key of the automation
cursor of `ehrxqa build --changed` (stored by ``dagster_private``), and the clean-up after a build that was
killed (SIGKILL, OOM, power loss)."""

from __future__ import annotations

import os
import socket
import sys

import dagster as dg

from ehrxqa_pipeline.pids import alive

# One step at a time across runs: DuckDB has a single writer; one GPU; one LLM endpoint's rate limit.
POOL_LIMITS = {"duckdb": 1, "gpu": 1, "llm": 1}
CURSOR_KEY = "ehrxqa/automation_cursor"
HOST_TAG, PID_TAG = "ehrxqa/host", "ehrxqa/pid"
BUILD_TAG, COMMAND_TAG = "ehrxqa/build", "ehrxqa/command"  # every run of one `ehrxqa build`: filter by it in the UI
COMMAND_MAX = 200
UNFINISHED = (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED)


def configure_pools(instance: dg.DagsterInstance) -> None:
    """Give the pools their explicit limits (visible in the UI's concurrency page; idempotent)."""
    storage = instance.event_log_storage
    for pool, limit in POOL_LIMITS.items():
        if storage.get_concurrency_info(pool).slot_count != limit:
            storage.set_concurrency_slots(pool, limit)


def run_tags(build_id: str | None = None) -> dict[str, str]:
    """Tags of the runs this process launches: who runs them (so a later build can tell a dead one), and with
    ``build_id`` the build they belong to and its command line."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    if build_id is not None:
        tags[BUILD_TAG] = build_id
        tags[COMMAND_TAG] = " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:COMMAND_MAX]
    return tags


def recover_interrupted(instance: dg.DagsterInstance, log=print) -> list[str]:
    """Mark the unfinished runs of dead `ehrxqa` processes on this host as failed and free the pool slots
    they held (a killed build would otherwise block every later `duckdb` step). Returns their run ids."""
    host, recovered = socket.gethostname(), []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=list(UNFINISHED), tags={HOST_TAG: host})):
        pid = run.tags.get(PID_TAG, "")
        if not pid.isdigit() or int(pid) == os.getpid() or alive(int(pid)):
            continue
        instance.report_run_failed(run, message=f"the ehrxqa process {pid} that ran it is gone (killed?)")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        recovered.append(run.run_id)
    if recovered:
        log(f"{len(recovered)} run(s) of an interrupted build marked failed; their pool slots are free again")
    return recovered
