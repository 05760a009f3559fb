"""Worker processes (``ehrxqa_pipeline.workers``): a contract's Great Expectations suite gives the same verdict in
the worker as here, and a server started ahead with Great Expectations hands the check to its worker only while
this process has not loaded it."""

import subprocess
import sys
import textwrap

import duckdb

from ehrxqa_pipeline import workers
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.quality import gx_verdict


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


def test_a_server_started_with_great_expectations_holds_it_while_this_process_has_not_loaded_it():
    """As `ehrxqa build` starts it: the worker has Great Expectations loaded before its first task, and checks
    go there (``workers.holds``) until this process imports it itself."""
    code = textwrap.dedent("""
        import sys
        from ehrxqa_pipeline import workers
        assert not workers.holds(workers.GX)  # no server yet
        workers.start(workers.GX)
        assert "great_expectations" not in sys.modules and workers.holds(workers.GX)
        from tests.test_workers import loaded
        assert workers.call(loaded, "great_expectations")  # in the worker before its first task
        import ehrxqa_pipeline.gx
        assert not workers.holds(workers.GX)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
