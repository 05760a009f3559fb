"""The pipeline configuration resource: EHRXQA_HOME, EHRXQA_SOURCE_ROOT, EHRXQA_SOURCE_VERSIONS, the seed."""


import dagster as dg

from ehrxqa_pipeline.config import Settings


class PipelineConfig(dg.ConfigurableResource):
    """Explicit values win; unset fields fall back to the environment when a step runs (not at import)."""

    home: str | None = None
    source_root: str | None = None
    seed: int | None = None
    source_versions: str | None = None  # e.g. "mimiciv=3.1": releases read instead of the paper's

    def settings(self) -> Settings:
        return Settings.resolve(self.home, self.source_root, self.seed, source_versions=self.source_versions)
