"""The LLM resource: an OpenAI-compatible chat endpoint for paraphrasing, or none (offline).

Every field left unset comes from the environment when a step runs (never at import; read by
``ehrxqa_pipeline.config.Environment``):
EHRXQA_LLM_BASE_URL (unset: the offline rule-based paraphraser), EHRXQA_LLM_MODEL (default gpt-4),
EHRXQA_LLM_API_KEY (local servers need none), EHRXQA_LLM_DEADLINE_S (the whole
paraphrase fan-out, default 300 s), EHRXQA_LLM_TIMEOUT_S (one request, default 60 s) and EHRXQA_LLM_FALLBACK
(unset or ``none``: templates without a usable LLM answer fail the step; ``offline``: they get the offline
rule-based paraphraser's candidates). Only template text with placeholders is ever sent, after the privacy
guard has scanned every prompt.
"""


import dagster as dg

from ehrxqa_pipeline.config import ENVIRONMENT, Environment
from ehrxqa_pipeline.paraphrase.llm import ChatClient, LlmSettings

FALLBACKS = ("none", "offline")
DEFAULT_MODEL = "gpt-4"


def _seconds(field: str, explicit: float | None, default: float) -> float:
    """An explicit value, else the setting ``field`` of the environment, else ``default``."""
    if explicit is not None:
        return float(explicit)
    raw, name = getattr(Environment.read(), field), ENVIRONMENT[field]
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r} must be > 0")
    return value


class LLMResource(dg.ConfigurableResource):
    """OpenAI-compatible endpoint settings; ``settings()`` is None when no base URL is configured."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None  # e.g. dg.EnvVar("MY_KEY"); unset: EHRXQA_LLM_API_KEY when a step runs
    timeout_s: float | None = None  # one request; None: EHRXQA_LLM_TIMEOUT_S, else 60
    deadline_s: float | None = None  # the whole fan-out; None: EHRXQA_LLM_DEADLINE_S, else 300
    breaker_failures: int = 5  # consecutive failures of the same kind (per request or template): stop asking
    preflight_timeout_s: float = 10.0
    fallback: str | None = None  # none | offline; None: EHRXQA_LLM_FALLBACK, else none
    max_retries: int = 4
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    concurrency: int = 4  # requests in flight at once
    temperature: float = 1.0
    seed: int | None = None  # None: the pipeline seed
    mimic_cxr_vqa_count: int | None = None  # candidates asked per template; None: env, else the paper's 30
    ehrxqa_count: int | None = None  # None: env, else the paper's 15

    def settings(self, default_seed: int = 0) -> LlmSettings | None:
        env = Environment.read()
        base_url = self.base_url or env.llm_base_url
        if not base_url:
            return None
        return LlmSettings(
            base_url=base_url, model=self.model or env.llm_model or DEFAULT_MODEL,
            api_key=self.api_key or env.llm_api_key or "unused",
            timeout_s=_seconds("llm_timeout_s", self.timeout_s, 60.0),
            deadline_s=_seconds("llm_deadline_s", self.deadline_s, 300.0),
            breaker_failures=self.breaker_failures, preflight_timeout_s=self.preflight_timeout_s,
            max_retries=self.max_retries, backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
            concurrency=self.concurrency, temperature=self.temperature,
            seed=default_seed if self.seed is None else self.seed)

    def fallback_mode(self) -> str:
        """``none`` (a template without a usable LLM answer fails the step) or ``offline``."""
        raw = self.fallback if self.fallback is not None else (Environment.read().llm_fallback or "none")
        mode = raw.strip().lower()
        if mode not in FALLBACKS:
            raise ValueError(f"{ENVIRONMENT['llm_fallback']}={raw!r}: expected one of {', '.join(FALLBACKS)}")
        return mode

    def counts(self) -> dict[str, int]:
        """Candidates per template and dataset (explicit field, else environment, else the paper's count)."""
        out = {}
        for dataset, explicit in (("mimic_cxr_vqa", self.mimic_cxr_vqa_count), ("ehrxqa", self.ehrxqa_count)):
            env = getattr(Environment.read(), f"count_{dataset}")
            if explicit is not None:
                out[dataset] = explicit
            elif env:
                out[dataset] = int(env)
        return out

    def client(self, default_seed: int = 0) -> ChatClient | None:
        s = self.settings(default_seed)
        return ChatClient(s) if s is not None else None
