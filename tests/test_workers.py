"""Worker processes (``ehrxqa_pipeline.workers``): a contract's Great Expectations suite gives the same verdict in
the worker as here, and a server started ahead with Great Expectations hands the check to its worker only while
this process has not loaded it."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from ehrxqa_pipeline import workers
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.pids import alive
from ehrxqa_pipeline.quality import gx_verdict


@pytest.mark.slow  # Great Expectations imported here and in the worker: about 5 s
def test_a_suite_gives_the_same_verdict_in_the_worker_as_here():
    """d_labitems with a planted null key and a key below its range: those two expectations fail, named, in the
    worker and here; the clean table meets every expectation in both."""
    contract = load_contract("ingest/d_labitems")
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest")
    con.execute(f"CREATE TABLE ingest.d_labitems ({contract.duckdb_columns()})")
    con.execute(f"INSERT INTO ingest.d_labitems SELECT {', '.join(_value(c) for c in contract.columns)} "
                "FROM range(20) t(i)")
    clean = con.execute("SELECT * FROM ingest.d_labitems").df()
    here, there = gx_verdict(clean, contract), workers.call(gx_verdict, clean, contract)
    assert here == there and here.success and here.failed == [] and here.expectations > 3

    bad = clean.copy()
    bad.loc[0, "itemid"] = None
    bad.loc[1, "itemid"] = -5
    here, there = gx_verdict(bad, contract), workers.call(gx_verdict, bad, contract)
    assert here == there and not here.success
    assert here.failed == ["expect_column_values_to_not_be_null(itemid)",
                           "expect_column_values_to_be_between(itemid)"], here.failed


def _value(column) -> str:
    """A valid value of ``column`` for row ``i`` of ``range``."""
    if column.allowed:
        return f"'{sorted(column.allowed)[0]}'"
    if column.type in ("int", "float"):
        low = column.min if column.min is not None else 0
        return f"{low} + i"
    return "'x' || i::VARCHAR"


def loaded(module: str) -> bool:
    return module in sys.modules


@pytest.mark.slow  # a process whose server imports Great Expectations: about 5 s
def test_while_serving_with_great_expectations_the_kept_worker_holds_it_until_this_process_loads_it():
    """As `ehrxqa build` serves: the worker has Great Expectations loaded before its first task, and checks go
    there (``workers.holds``) until this process imports it itself; after serving, nothing is kept."""
    code = textwrap.dedent("""
        import sys
        from ehrxqa_pipeline import workers
        from tests.test_workers import loaded
        assert not workers.holds(workers.GX)  # not serving
        with workers.serving(workers.GX):
            assert "great_expectations" not in sys.modules and workers.holds(workers.GX)
            assert workers.call(loaded, "great_expectations")  # in the worker before its first task
            first = workers.call(__import__("os").getpid)
            assert workers.call(__import__("os").getpid) == first  # kept
            import ehrxqa_pipeline.gx
            assert not workers.holds(workers.GX)
        assert workers._worker is None and not workers.holds(workers.GX)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


@pytest.mark.parametrize("end", ["exit at once", "killed"])
def test_nothing_outlives_the_process_that_served(end):
    """The process that served ends without shutting anything down (``os._exit``, as the ``ehrxqa`` script does
    when a thread is still alive; stopped at the end of serving) or is killed inside serving (SIGKILL): its kept
    worker and the server are gone within seconds, and so nothing holds its output pipes open (this
    ``subprocess.run`` returns; a worker that outlived a build held them, and the bench waited forever)."""
    code = textwrap.dedent(f"""
        import os, signal
        from ehrxqa_pipeline import workers
        with workers.serving():
            print(workers.call(os.getpid), flush=True)
            if {end == "killed"!r}:
                os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    worker = int(run.stdout.split()[0])
    deadline = time.monotonic() + 10
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(worker), (end, run.stderr[-1000:])

