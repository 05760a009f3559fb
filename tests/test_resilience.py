"""A failed step leaves the warehouse unlocked. A build killed with SIGKILL in its release step, then
finished by `ehrxqa build --changed`: tests/test_pipeline.py (on the home that file builds once)."""

import subprocess
import sys

import pytest


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
