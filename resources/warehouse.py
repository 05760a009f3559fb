"""The DuckDB warehouse under EHRXQA_HOME (one file; asset key [group, name] = table group.name)."""


from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
import duckdb
from dagster_duckdb import DuckDBResource

from resources.config import PipelineConfig


class Warehouse(dg.ConfigurableResource):
    config: PipelineConfig
    memory_limit: str = "8GB"  # DuckDB spills to EHRXQA_HOME/cache/duckdb beyond this
    threads: int = 2

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
                yield con
            finally:  # dagster-duckdb closes only on success: a failed step would keep the file locked
                con.close()
