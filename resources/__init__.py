"""Dagster resources: configuration and the DuckDB warehouse (LLM, VQA device and image store follow)."""

from resources.config import PipelineConfig
from resources.warehouse import Warehouse

__all__ = ["PipelineConfig", "Warehouse", "default_resources"]


def default_resources() -> dict:
    """Resources of the code location: every value resolved from the environment when a step runs."""
    config = PipelineConfig()
    return {"pipeline_config": config, "warehouse": Warehouse(config=config)}
