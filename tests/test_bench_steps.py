"""The build stage's per-step report of `make bench` (benchmarks/steps.py): memory samples attributed to step
intervals, the process tree's RSS read from a /proc tree, a real sampler watching this process allocate, and the
steps of a Dagster instance, per partition."""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from benchmarks.steps import RssSampler, dagster_steps, step_lines, step_peaks, step_table, tree_rss_bytes

SAMPLES = [(10.0, 100), (11.0, 300), (12.0, 200), (13.0, 50), (14.0, 400)]


def test_each_interval_gets_the_largest_sample_inside_it():
    assert step_peaks(SAMPLES, [(10.5, 12.5), (10.0, 12.0), (13.0, 13.0)]) == [300, 300, 50]  # ends included


def test_overlapping_intervals_share_their_samples():
    assert step_peaks(SAMPLES, [(11.0, 14.0), (10.0, 12.0), (11.5, 13.5)]) == [400, 300, 200]


def test_an_interval_without_a_sample_takes_the_last_one_before_its_end():
    assert step_peaks(SAMPLES, [(12.2, 12.4), (20.0, 20.1)]) == [200, 400]
    assert step_peaks(SAMPLES, [(8.0, 9.0)]) == [None]  # before the first sample: nothing to attribute
    assert step_peaks([], [(10.0, 11.0)]) == [None]


def test_step_table_is_longest_first_per_partition():
    rows = [{"step": "ingest__admissions", "partition": None, "run_id": "r1", "start": 10.2, "end": 10.4,
             "status": "SUCCESS"},
            {"step": "vqa__predictions", "partition": "p10", "run_id": "r2", "start": 11.0, "end": 14.0,
             "status": "SUCCESS"},
            {"step": "vqa__predictions", "partition": "p11", "run_id": "r3", "start": 14.0, "end": None,
             "status": "IN_PROGRESS"}]  # its process died: it ends when the build exited
    gib = [(t, v * 2**30) for t, v in SAMPLES]
    table = step_table(rows, gib, stopped=16.0)
    assert [(s["step"], s["partition"], s["seconds"], s["peak_rss_gib"]) for s in table] == [
        ("vqa__predictions", "p10", 3.0, 400.0), ("vqa__predictions", "p11", 2.0, 400.0),
        ("ingest__admissions", None, 0.2, 100.0)]
    assert table[2]["run_id"] == "r1"
    lines = step_lines(table, n=2)
    assert len(lines) == 2 and lines[0].endswith("vqa__predictions[p10]") and lines[1].endswith("IN_PROGRESS")


def _proc(root, pid: int, ppid: int | None, rss_kb: int | None = None) -> None:
    """/proc/<pid> with a status file (none when ``ppid`` is None: the process vanished mid-scan)."""
    folder = root / str(pid)
    folder.mkdir()
    if ppid is not None:
        lines = [f"Name:\tp{pid}", f"Pid:\t{pid}", f"PPid:\t{ppid}"]
        lines += [f"VmRSS:\t{rss_kb:8d} kB"] if rss_kb is not None else []
        (folder / "status").write_text("\n".join(lines) + "\nThreads:\t1\n")


def test_tree_rss_sums_the_descendants_and_skips_a_vanished_child(tmp_path):
    _proc(tmp_path, 1, 0, 10_000)
    _proc(tmp_path, 100, 1, 1_000)  # the parent
    _proc(tmp_path, 101, 100, 2_000)  # a child ...
    _proc(tmp_path, 102, None)  # ... and one that vanished (its status file gone)
    _proc(tmp_path, 103, 101, 500)  # a grandchild
    _proc(tmp_path, 104, 101)  # a zombie: no VmRSS
    _proc(tmp_path, 200, 1, 9_999)  # not in the tree
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")
    assert tree_rss_bytes(100, tmp_path) == (1_000 + 2_000 + 500) * 1024
    assert tree_rss_bytes(101, tmp_path) == 2_500 * 1024
    assert tree_rss_bytes(102, tmp_path) == 0  # gone


def test_sampler_sees_this_process_allocate():
    sampler = RssSampler(os.getpid(), interval=0.1).start()  # the first sample is taken before start returns
    block = b"\x01" * (200 * 2**20)  # written, hence resident
    seen = len(sampler.samples)
    deadline = time.monotonic() + 10
    while len(sampler.samples) < seen + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    samples = sampler.stop()
    first, (peak,) = samples[0][1], step_peaks(samples, [(samples[0][0], samples[-1][0])])
    assert len(block) and peak - first >= 150 * 2**20


@dg.asset(partitions_def=dg.StaticPartitionsDefinition(["p10", "p11"]))
def scored():
    return None


@dg.asset
def catalog():
    return None


@pytest.mark.slow  # two Dagster runs
def test_dagster_steps_lists_every_step_with_its_partition():
    with dg.DagsterInstance.ephemeral() as instance:  # in memory: no storage to set up
        assert dg.materialize([catalog], instance=instance).success
        for partition in ("p10", "p11"):
            assert dg.materialize([scored], instance=instance, partition_key=partition).success
        rows = dagster_steps(instance)
    assert sorted((r["step"], r["partition"], r["status"]) for r in rows) == [
        ("catalog", None, "SUCCESS"), ("scored", "p10", "SUCCESS"), ("scored", "p11", "SUCCESS")]
    assert all(r["start"] <= r["end"] <= time.time() for r in rows)  # epoch seconds, like the sampler's


def test_build_steps_reads_an_ehrxqa_home_without_dagster_home_set(tmp_path, monkeypatch, exported_settings):
    """The bench opens the instance of the home it built by path; that home's dagster.yaml names its storage by
    DAGSTER_HOME (cli.DAGSTER_YAML_BLOCKS), which the bench process need not have set."""
    from benchmarks.steps import build_steps
    from ehrxqa_pipeline.cli import prepare_instance
    from ehrxqa_pipeline.config import Settings

    settings = Settings.resolve(str(tmp_path / "home"))
    prepare_instance(settings)
    with dg.DagsterInstance.get() as instance:
        assert dg.materialize([catalog], instance=instance).success
    monkeypatch.delenv("DAGSTER_HOME")
    rows = build_steps(settings.dagster_home, [(time.time(), 1)], time.time())
    assert [r["step"] for r in rows] == ["catalog"] and "DAGSTER_HOME" not in os.environ
