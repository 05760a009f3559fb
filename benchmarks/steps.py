"""Per-step wall time and peak memory of the ``build`` stage of `make bench` (benchmarks/run.py).

While ``ehrxqa build`` runs, ``RssSampler`` records (``time.time()``, resident bytes of the build's process tree)
every 0.25 s from /proc; afterwards ``dagster_steps`` reads every step's start and end (epoch seconds, the same
clock) from the Dagster instance the build used, and ``step_table`` gives each step its wall time and the largest
sample taken while it ran.

``ehrxqa build`` executes the steps in its own process, one after another (plus the worker processes some
steps start, e.g. the VQA worker through Dagster Pipes), so a step's peak is the RSS of the build's whole process
tree while that step ran, memory still held from earlier steps included (allocator arenas, caches, imported
modules): an upper bound on what the step itself needs, not its own allocation. The tree's RSS is the sum of its
processes' VmRSS, so pages shared between processes (a forked worker's) count once per process.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

PROC = Path("/proc")
SAMPLE_S = 0.25
PARTITION_TAG = "dagster/partition"  # the run's partition; ehrxqa build runs each partition of a stage alone


def _ppid_rss(status: Path) -> tuple[int, int] | None:
    """(PPid, VmRSS in bytes) of one /proc/<pid>/status file; None when the process has gone."""
    try:
        text = status.read_text()
    except OSError:  # exited between the listing and the read (FileNotFoundError, ProcessLookupError)
        return None
    ppid, rss = 0, 0  # kernel threads and zombies have no VmRSS line
    for line in text.splitlines():
        if line.startswith("PPid:"):
            ppid = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024  # "VmRSS:  1234 kB"
    return ppid, rss


def tree_rss_bytes(pid: int, proc: Path = PROC) -> int:
    """Resident bytes of ``pid`` and all its descendants: the sum of VmRSS over the processes under ``proc`` whose
    PPid chain leads to ``pid`` (one scan of every /proc/<n>/status: /proc/<pid>/task/*/children needs a kernel
    option that not every kernel has). A process that exits mid-scan is left out; 0 once ``pid`` itself has gone."""
    children: dict[int, list[int]] = defaultdict(list)
    rss: dict[int, int] = {}
    for entry in os.scandir(proc):
        if entry.name.isdigit() and (found := _ppid_rss(Path(entry.path) / "status")) is not None:
            children[found[0]].append(int(entry.name))
            rss[int(entry.name)] = found[1]
    total, todo = 0, [pid] if pid in rss else []
    while todo:
        n = todo.pop()
        total += rss[n]
        todo.extend(children[n])
    return total


class RssSampler:
    """Samples ``tree_rss_bytes(pid)`` every ``interval`` seconds in a background thread, as (``time.time()``,
    bytes) in ``samples``: wall-clock seconds, so that they compare with Dagster's step times. The first sample
    is taken by ``start`` itself, before it returns."""

    def __init__(self, pid: int, interval: float = SAMPLE_S, proc: Path = PROC):
        self.pid, self.interval, self.proc = pid, interval, proc
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def sample(self) -> None:
        self.samples.append((time.time(), tree_rss_bytes(self.pid, self.proc)))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def step_peaks(samples: list[tuple[float, int]], intervals: list[tuple[float, float]]) -> list[int | None]:
    """Per interval [start, end] (overlapping ones each on their own): the largest sample value whose time lies
    inside it; when none does (a step shorter than the sampling interval), the last sample before ``end``; None
    when there is none before ``end`` either. ``samples`` are (time, value) in time order."""
    times = [t for t, _ in samples]
    peaks: list[int | None] = []
    for start, end in intervals:
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        inside = [v for _, v in samples[lo:hi]]
        peaks.append(max(inside) if inside else samples[hi - 1][1] if hi else None)
    return peaks


def dagster_steps(instance) -> list[dict]:
    """Every step of every run on a Dagster ``instance``: step key (asset keys joined with ``__``, a multi-asset
    or a check its own key), partition (the run's ``dagster/partition`` tag; None for unpartitioned runs), run id,
    start and end (epoch seconds; end None for a step still marked in progress) and status. Steps that never
    started (skipped after an upstream failure) have no times and are left out."""
    rows = []
    for run in instance.get_runs(ascending=True):
        partition = run.tags.get(PARTITION_TAG)
        for stats in instance.get_run_step_stats(run.run_id):
            if stats.start_time is None:
                continue
            rows.append({"step": stats.step_key, "partition": partition, "run_id": run.run_id,
                         "start": stats.start_time, "end": stats.end_time,
                         "status": stats.status.value if stats.status else None})
    return rows


def step_table(rows: list[dict], samples: list[tuple[float, int]], stopped: float) -> list[dict]:
    """The per-step list of the bench: {step, partition, run_id, seconds, peak_rss_gib, status} per row of
    ``dagster_steps``, longest first. A step without an end (its process died) ends at ``stopped``, the time the
    build exited; ``peak_rss_gib`` is None when no sample was taken before the step ended."""
    ends = [r["end"] if r["end"] is not None else max(stopped, r["start"]) for r in rows]
    peaks = step_peaks(samples, [(r["start"], end) for r, end in zip(rows, ends)])
    table = [{"step": r["step"], "partition": r["partition"], "run_id": r["run_id"],
              "seconds": round(end - r["start"], 3), "peak_rss_gib": None if peak is None else round(peak / 2**30, 3),
              "status": r["status"]}
             for r, end, peak in zip(rows, ends, peaks)]
    return sorted(table, key=lambda s: (-s["seconds"], s["step"], s["partition"] or ""))


def build_steps(dagster_home: Path, samples: list[tuple[float, int]], stopped: float) -> list[dict]:
    """``step_table`` of the Dagster instance in ``dagster_home`` (EHRXQA_HOME/dagster, ``Settings.dagster_home``);
    empty when the build stopped before it wrote the instance."""
    if not (dagster_home / "dagster.yaml").exists():
        return []
    from unittest import mock

    import dagster as dg

    # the dagster.yaml `ehrxqa` writes names its storage folder by DAGSTER_HOME
    with mock.patch.dict(os.environ, DAGSTER_HOME=str(dagster_home)), \
            dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        return step_table(dagster_steps(instance), samples, stopped)


def step_lines(table: list[dict], n: int = 15) -> list[str]:
    """The ``n`` longest steps of ``step_table``, one line each, as the bench prints them below the stage line."""
    lines = []
    for s in table[:n]:
        peak = "     ?" if s["peak_rss_gib"] is None else f"{s['peak_rss_gib']:6.2f}"
        where = f"[{s['partition']}]" if s["partition"] else ""
        status = "" if s["status"] == "SUCCESS" else f"  {s['status']}"
        lines.append(f"  {s['seconds']:8.1f} s {peak} GiB  {s['step']}{where}{status}")
    return lines
