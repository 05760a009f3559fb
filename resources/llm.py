"""The LLM resource: an OpenAI-compatible chat endpoint for paraphrasing, or none (offline).

Every field left unset is read from the environment when a step runs (never at import):
EHRXQA_LLM_BASE_URL (unset: the offline rule-based paraphraser), EHRXQA_LLM_MODEL (default gpt-4),
EHRXQA_LLM_API_KEY (through ``dg.EnvVar``; local servers need none). Only template text with placeholders
is ever sent, after the privacy guard has scanned every prompt.
"""


import dagster as dg

from ehrxqa_pipeline.paraphrase.llm import ChatClient, LlmSettings

BASE_URL_ENV = "EHRXQA_LLM_BASE_URL"
MODEL_ENV = "EHRXQA_LLM_MODEL"
API_KEY_ENV = "EHRXQA_LLM_API_KEY"
COUNT_ENV = {"mimic_cxr_vqa": "EHRXQA_PARAPHRASE_COUNT_MIMIC_CXR_VQA", "ehrxqa": "EHRXQA_PARAPHRASE_COUNT_EHRXQA"}
DEFAULT_MODEL = "gpt-4"


class LLMResource(dg.ConfigurableResource):
    """OpenAI-compatible endpoint settings; ``settings()`` is None when no base URL is configured."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None  # e.g. dg.EnvVar("MY_KEY"); unset: EHRXQA_LLM_API_KEY when a step runs
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    concurrency: int = 4  # requests in flight at once
    temperature: float = 1.0
    seed: int | None = None  # None: the pipeline seed
    mimic_cxr_vqa_count: int | None = None  # candidates asked per template; None: env, else the paper's 30
    ehrxqa_count: int | None = None  # None: env, else the paper's 15

    def settings(self, default_seed: int = 0) -> LlmSettings | None:
        base_url = self.base_url or dg.EnvVar(BASE_URL_ENV).get_value()
        if not base_url:
            return None
        return LlmSettings(
            base_url=base_url, model=self.model or dg.EnvVar(MODEL_ENV).get_value() or DEFAULT_MODEL,
            api_key=self.api_key or dg.EnvVar(API_KEY_ENV).get_value() or "unused", timeout_s=self.timeout_s,
            max_retries=self.max_retries, backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
            concurrency=self.concurrency, temperature=self.temperature,
            seed=default_seed if self.seed is None else self.seed)

    def counts(self) -> dict[str, int]:
        """Candidates per template and dataset (explicit field, else environment, else the paper's count)."""
        out = {}
        for dataset, explicit in (("mimic_cxr_vqa", self.mimic_cxr_vqa_count), ("ehrxqa", self.ehrxqa_count)):
            env = dg.EnvVar(COUNT_ENV[dataset]).get_value()
            if explicit is not None:
                out[dataset] = explicit
            elif env:
                out[dataset] = int(env)
        return out

    def client(self, default_seed: int = 0) -> ChatClient | None:
        s = self.settings(default_seed)
        return ChatClient(s) if s is not None else None
