"""Dagster resources: configuration, the DuckDB warehouse, the LLM endpoint, the VQA device and the client that
launches the VQA worker process (Dagster Pipes: ehrxqa_pipeline.cli.vqa_worker)."""

import dagster as dg

from resources.config import PipelineConfig
from resources.device import VqaDevice
from resources.llm import LLMResource
from resources.warehouse import Warehouse

__all__ = ["LLMResource", "PipelineConfig", "VqaDevice", "Warehouse", "default_resources"]


def default_resources() -> dict:
    """Resources of the code location: every value resolved from the environment when a step runs."""
    config = PipelineConfig()
    return {"pipeline_config": config, "warehouse": Warehouse(config=config), "llm": LLMResource(),
            "vqa_device": VqaDevice(), "vqa_pipes": dg.PipesSubprocessClient()}
