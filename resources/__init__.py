"""Dagster resources: configuration, the DuckDB warehouse, the LLM endpoint, the VQA device and the client that
launches the VQA worker (Dagster Pipes: ehrxqa_pipeline.cli.vqa_worker; a child process or a pod of its own,
resources.vqa_pipes)."""

from ehrxqa_pipeline.config import Environment
from resources.config import PipelineConfig
from resources.device import VqaDevice
from resources.llm import LLMResource
from resources.vqa_pipes import vqa_pipes_client
from resources.warehouse import Warehouse

__all__ = ["LLMResource", "PipelineConfig", "VqaDevice", "Warehouse", "default_resources"]


def default_resources() -> dict:
    """Resources of the code location: every value resolved from the environment when a step runs, except how
    the VQA worker is launched (EHRXQA_VQA_LAUNCH), chosen when the code location loads as the executor is."""
    config = PipelineConfig()
    return {"pipeline_config": config, "warehouse": Warehouse(config=config), "llm": LLMResource(),
            "vqa_device": VqaDevice(), "vqa_pipes": vqa_pipes_client(config, Environment.read())}
