"""The DuckDB warehouse under EHRXQA_HOME (one file; asset key [group, name] = table group.name)."""


from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource

from resources.config import PipelineConfig


class Warehouse(dg.ConfigurableResource):
    config: PipelineConfig
    memory_limit: str = "8GB"  # DuckDB spills to EHRXQA_HOME/cache/duckdb beyond this
    threads: int = 2
    # A JSON Lines file that receives every statement a step runs on the warehouse, with the step's asset and
    # check keys (ehrxqa_pipeline.lineage checks them against the declared deps); None: nothing is recorded.
    statement_log: str | None = None

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection; DuckDBResource retries while another process holds the file lock. Within
        ``kept_open()`` the first one also opens a connection that stays open until its end."""
        settings = self.config.settings()
        settings.home.mkdir(parents=True, exist_ok=True)
        spill = settings.cache_dir / "duckdb"
        spill.mkdir(parents=True, exist_ok=True)
        resource = DuckDBResource(database=str(settings.warehouse), connection_config={
            "memory_limit": self.memory_limit, "threads": self.threads, "temp_directory": str(spill)})
        if _held is not None and resource.database not in _held.files:
            _held.files.add(resource.database)
            kept = _held.stack.enter_context(resource.get_connection())  # the same settings as every step's
            _held.stack.callback(kept.close)  # dagster-duckdb closes only on success
        with resource.get_connection() as con:
            try:
                yield con if self.statement_log is None else _recording(con, Path(self.statement_log))
            finally:  # dagster-duckdb closes only on success: a failed step would keep the file locked
                con.close()


class _Held:
    def __init__(self):
        self.stack, self.files = ExitStack(), set()


_held: _Held | None = None  # inside kept_open(): the connections held open, one per warehouse file


@contextmanager
def kept_open() -> Iterator[None]:
    """Inside, the warehouse stays open in this process: the first ``Warehouse.connect`` opens one more
    connection, closed on leaving, and every later ``connect`` attaches to the open database (0.2 ms) instead of
    opening the file (about 30 ms: DuckDB reads the catalog of ~200 tables; a step or check connects once or
    twice, a small test build about 200 times). `ehrxqa build` holds it around each run it executes in its own
    process, whose steps run one after another there. Meanwhile nothing else in the process may open the file
    with other settings (DuckDB refuses, e.g. read-only), and no other process may open it: as while a step
    holds it, for the length of a run. Nothing is opened for a run that does not touch the warehouse."""
    global _held
    outer, _held = _held, _Held()
    try:
        with _held.stack:
            yield
    finally:
        _held = outer


def _recording(con: duckdb.DuckDBPyConnection, path: Path):
    """``con`` logging its statements to ``path`` (imported here: sqlglot and the contracts only when recording)."""
    from ehrxqa_pipeline.lineage import RecordingConnection, StatementLog

    return RecordingConnection(con, StatementLog(path, running_step()))


def running_step() -> dict:
    """The step that calls: run id, step (op) name, partition, and the asset and check keys it materializes
    or evaluates (user strings); None and empty lists outside a step."""
    try:
        context = dg.OpExecutionContext.get()
    except dg.DagsterInvariantViolationError:
        return {"run": None, "step": None, "partition": None, "assets": [], "checks": []}
    return {"run": context.run_id, "step": context.op.name,
            "partition": context.partition_key if context.has_partition_key else None,
            "assets": sorted(k.to_user_string() for k in context.selected_asset_keys),
            "checks": sorted(k.to_user_string() for k in context.selected_asset_check_keys)}
