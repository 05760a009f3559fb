"""The DuckDB warehouse under EHRXQA_HOME (one file; asset key [group, name] = table group.name)."""


from collections.abc import Iterator
from contextlib import contextmanager
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
        """A read-write connection; DuckDBResource retries while another process holds the file lock."""
        settings = self.config.settings()
        settings.home.mkdir(parents=True, exist_ok=True)
        spill = settings.cache_dir / "duckdb"
        spill.mkdir(parents=True, exist_ok=True)
        resource = DuckDBResource(database=str(settings.warehouse), connection_config={
            "memory_limit": self.memory_limit, "threads": self.threads, "temp_directory": str(spill)})
        with resource.get_connection() as con:
            try:
                yield con if self.statement_log is None else _recording(con, Path(self.statement_log))
            finally:  # dagster-duckdb closes only on success: a failed step would keep the file locked
                con.close()


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
