"""A run of its own, in a second process, beside the run `ehrxqa build` executes in its own.

`ehrxqa build` executes each stage as one run in its process, one step at a time, holding the DuckDB warehouse
open. A step that holds no warehouse and spends its time waiting on a worker process (VQA training: half a
minute on the demo, hours at MIMIC scale) would keep a core idle there; ``Beside`` runs such assets in a run of
their own, in a process started here (``python -m ehrxqa_pipeline.cli.beside REQUEST``), while the rest of their
stage runs in the build's process. The second process opens the same instance, carries the build's tags (its own
process id, so a later build can tell when it died) and writes its run id to the file the request names; the
build then reads that run's events from the instance as if it had executed it itself. It stops when the build's
process is gone (``stop_with_parent``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

INTERRUPT_GRACE_SECONDS = 30  # after Ctrl-C, how long the run beside may take to record its end before it is killed
# The run beside runs at this lower CPU priority (its worker processes inherit it). The build's own process is the
# longer of the two (the stage's EHRXQA sampling and consistency check, each in two processes of its own, against
# training's one thread), so on a machine with fewer cores than runnable processes it goes first and training
# takes the cores it leaves; on a machine with cores to spare, nothing changes. Same results: only the order of
# the work on the cores moves. Measured on the demo, 2 cores: at +10 the build's process ended 17 s before training,
# at +5 both ended within 6 s of each other; a mild value also costs little where training is the longer side (a
# CPU-only build at MIMIC scale). Since the model runs channels-last (0fddf9f) training ends about 30 s before the
# build's process at +5, and +10 measured the same span (221.8 against 221.6 s): +5 kept.
NICENESS = 5
PARENT_POLL_SECONDS = 1.0  # how often the run beside looks whether the build's process is still there


class Beside:
    """``with Beside(...) as other:`` starts the run of ``keys`` in a second process; leaving the block waits for
    it (or, on an exception such as Ctrl-C, interrupts it). Then ``result``: that run's
    ``dg.ExecuteInProcessResult``, or None when the process ended without a run (``error`` says why)."""

    def __init__(self, job: dg.JobDefinition, instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey],
                 tags: Mapping[str, str], run_config: Mapping):
        self.job, self.instance = job, instance
        self.request = {"instance_ref": dg.serialize_value(instance.get_ref()),
                        "keys": [k.to_user_string() for k in keys], "tags": dict(tags),
                        "run_config": dict(run_config), "parent": os.getpid()}
        self.result: dg.ExecuteInProcessResult | None = None
        self.error = ""

    def __enter__(self) -> Beside:
        self._folder = tempfile.TemporaryDirectory(prefix="ehrxqa-beside-")
        folder = Path(self._folder.name)
        self._run_id_file = folder / "run_id"
        (folder / "request.json").write_text(json.dumps({**self.request, "run_id_file": str(self._run_id_file)}))
        self._process = subprocess.Popen([sys.executable, "-m", __name__, str(folder / "request.json")])
        return self

    def __exit__(self, kind, value, traceback) -> None:
        try:
            if kind is not None:  # the build stops: so does the run beside, recorded as Dagster records a Ctrl-C
                self._process.send_signal(signal.SIGINT)
                try:
                    self._process.wait(INTERRUPT_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    self._process.kill()
            code = self._process.wait()
            run_id = self._run_id_file.read_text().strip() if self._run_id_file.is_file() else ""
            if not run_id:
                self.error = f"the process of the run beside ended with exit code {code} before its run began"
                return
            run = self.instance.get_run_by_id(run_id)
            if not run.is_finished:  # the process died mid-run (killed): nobody else will record its end
                self.instance.report_run_failed(run, message=f"its process ended with exit code {code} mid-run")
                self.error = f"run {run_id} beside: its process ended with exit code {code} mid-run"
            self.result = _result(self.job, self.instance, run_id)
        finally:
            self._folder.cleanup()


def _result(job: dg.JobDefinition, instance: dg.DagsterInstance, run_id: str) -> dg.ExecuteInProcessResult:
    """The run ``run_id`` as ``execute_in_process`` would have returned it: its events, read from the instance."""
    events = [e.dagster_event for e in instance.all_logs(run_id) if e.dagster_event is not None]
    return dg.ExecuteInProcessResult(job_def=job, event_list=events, dagster_run=instance.get_run_by_id(run_id),
                                     output_capture={})


def stop_with_parent(parent: int, grace: float = INTERRUPT_GRACE_SECONDS,
                     poll: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """In the process beside: once the build's process ``parent`` has ended without stopping it (SIGKILL, the OOM
    killer; at once when it has ended already), interrupt the run as the build does on Ctrl-C (SIGINT: the run
    records its end and frees its pool slot), and exit if it has not ended ``grace`` seconds later. Left alone, the
    orphan trained on for hours, or waited for ever on a pool slot, holding what the next build needs. Returns the
    watching thread. (The build's kept worker is a forkserver's child, whose parent is not the build: it watches a
    pipe instead, ``workers._exit_with``.)

    The interrupt is this process's own stop signal, so it is made to arrive as Ctrl-C's does whatever the process
    inherited: a build started from a background shell passes SIGINT on ignored, and a process started from a
    thread that blocks it passes it on blocked (in a fresh clone's `make test`, run from a background shell, the
    orphans of tests/test_beside.py lived on until their grace ran out)."""
    if threading.current_thread() is threading.main_thread():
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(grace)
        os._exit(1)

    thread = threading.Thread(target=watch, name="ehrxqa-parent-watch", daemon=True)
    thread.start()
    return thread


def main(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    stop_with_parent(request["parent"])  # (the build's pid as it wrote it: it may have died since)
    from ehrxqa_pipeline import gc_settings
    from ehrxqa_pipeline.cli.dagster_private import execute, job_origin
    from ehrxqa_pipeline.cli.instance import PID_TAG
    from ehrxqa_pipeline.definitions import defs

    if hasattr(os, "nice"):  # POSIX
        os.nice(NICENESS)
    keys = [dg.AssetKey.from_user_string(k) for k in request["keys"]]
    job = defs.resolve_implicit_global_asset_job_def()
    gc_settings.for_many_steps()  # after the job is resolved, as `ehrxqa build` does: it too lives to the end
    tags = {**request["tags"], PID_TAG: str(os.getpid())}
    run_id_file = Path(request["run_id_file"])  # written as soon as the run exists: were this process killed
    # mid-run, the build still finds the run, marks it failed and names it (``Beside.__exit__``)
    with dg.DagsterInstance.from_ref(dg.deserialize_value(request["instance_ref"])) as instance:
        result = execute(job, instance, keys, None, tags, request["run_config"], job_origin(),
                         on_run=run_id_file.write_text)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
