"""A build killed in the middle of the label stage (SIGKILL to the `ehrxqa build` process group), then run
again, gives exactly the tables of an uninterrupted build: the warehouse's open write-ahead log and lock, the
killed run's pool slots and any half-written files do not get in the way. Stages up to the labels only."""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

EHRXQA = str(Path(sys.executable).with_name("ehrxqa"))
SELECT = "+key:cxr_labels/silver or +key:cxr_labels/gold"  # sources, ingestion, cohorts, ontology, labels
KILL_AT = "refining ingest."  # cxr_labels logs this as a label refinement starts
TIMEOUT = 300


def _env(home: Path, source: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env.update(EHRXQA_HOME=str(home), EHRXQA_SOURCE_ROOT=str(source), EHRXQA_CHECK_IMAGES="0")
    return env


def _build(home: Path, source: Path) -> str:
    run = subprocess.run([EHRXQA, "build", "--select", SELECT], env=_env(home, source), capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout + run.stderr


def _kill_during_labels(home: Path, source: Path) -> str:
    """Start a build, SIGKILL its process group when the label stage logs its start; return its output."""
    proc = subprocess.Popen([EHRXQA, "build", "--select", SELECT], env=_env(home, source), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    seen, lines = threading.Event(), []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if KILL_AT in line:
                os.killpg(proc.pid, signal.SIGKILL)
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and not seen.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None and not seen.is_set():
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    assert seen.is_set(), "the build ended before the label stage:\n" + "".join(lines)[-3000:]
    assert proc.returncode == -signal.SIGKILL
    return "".join(lines)


def _table_digests(home: Path) -> dict[str, str]:
    """Ordered content hash of every cxr_labels.* table (and splits.*, when built)."""
    out = {}
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        tables = con.execute("SELECT schema_name || '.' || table_name FROM duckdb_tables() WHERE schema_name IN "
                             "('cxr_labels', 'splits') ORDER BY 1").fetchall()
        for (table,) in tables:
            columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
            rows = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            out[table] = hashlib.sha256(repr((columns, rows)).encode()).hexdigest()
    return out


@pytest.mark.slow
def test_killed_label_stage_then_rerun_equals_uninterrupted_build(small_source, tmp_path):
    source, _ = small_source
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    _build(reference, source)

    _kill_during_labels(resumed, source)
    output = _build(resumed, source)  # the same command again, to completion
    assert "marked failed; their pool slots are free again" in output  # the killed run did not block this one

    want, got = _table_digests(reference), _table_digests(resumed)
    assert {"cxr_labels.silver", "cxr_labels.gold"} <= set(want)
    assert got == want


def test_a_failed_step_leaves_the_warehouse_unlocked(tmp_path):
    """A step that raises inside ``Warehouse.connect`` closes its connection at once (dagster-duckdb closes only
    on success): the file lock is free for the next step, which may run in another process (a re-execution from
    the UI, the daemon) while this one is still alive."""
    from resources import PipelineConfig, Warehouse

    warehouse = Warehouse(config=PipelineConfig(home=str(tmp_path / "home")))
    with pytest.raises(RuntimeError, match="the step failed"):
        with warehouse.connect() as con:
            con.execute("CREATE TABLE t AS SELECT 1 AS x")
            raise RuntimeError("the step failed")
    held = con  # still referenced, as a traceback kept by Dagster would
    other = subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).close()",
                            str(tmp_path / "home" / "warehouse.duckdb")], capture_output=True, text=True)
    assert other.returncode == 0, other.stderr
    assert held is con
