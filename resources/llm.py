"""The LLM resource: an OpenAI-compatible chat endpoint for paraphrasing, or none (offline).

Every field left unset is read from the environment when a step runs (never at import):
EHRXQA_LLM_BASE_URL (unset: the offline rule-based paraphraser), EHRXQA_LLM_MODEL (default gpt-4),
EHRXQA_LLM_API_KEY (through ``dg.EnvVar``; local servers need none), EHRXQA_LLM_DEADLINE_S (the whole
paraphrase fan-out, default 300 s), EHRXQA_LLM_TIMEOUT_S (one request, default 60 s) and EHRXQA_LLM_FALLBACK
(unset or ``none``: templates without a usable LLM answer fail the step; ``offline``: they get the offline
rule-based paraphraser's candidates). Only template text with placeholders is ever sent, after the privacy
guard has scanned every prompt.
"""


import dagster as dg

from ehrxqa_pipeline.paraphrase.llm import ChatClient, LlmSettings

BASE_URL_ENV = "EHRXQA_LLM_BASE_URL"
MODEL_ENV = "EHRXQA_LLM_MODEL"
API_KEY_ENV = "EHRXQA_LLM_API_KEY"
COUNT_ENV = {"mimic_cxr_vqa": "EHRXQA_PARAPHRASE_COUNT_MIMIC_CXR_VQA", "ehrxqa": "EHRXQA_PARAPHRASE_COUNT_EHRXQA"}
DEADLINE_ENV = "EHRXQA_LLM_DEADLINE_S"
TIMEOUT_ENV = "EHRXQA_LLM_TIMEOUT_S"
FALLBACK_ENV = "EHRXQA_LLM_FALLBACK"
FALLBACKS = ("none", "offline")
DEFAULT_MODEL = "gpt-4"


def _seconds(name: str, explicit: float | None, default: float) -> float:
    if explicit is not None:
        return float(explicit)
    raw = dg.EnvVar(name).get_value()
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
        base_url = self.base_url or dg.EnvVar(BASE_URL_ENV).get_value()
        if not base_url:
            return None
        return LlmSettings(
            base_url=base_url, model=self.model or dg.EnvVar(MODEL_ENV).get_value() or DEFAULT_MODEL,
            api_key=self.api_key or dg.EnvVar(API_KEY_ENV).get_value() or "unused",
            timeout_s=_seconds(TIMEOUT_ENV, self.timeout_s, 60.0),
            deadline_s=_seconds(DEADLINE_ENV, self.deadline_s, 300.0),
            breaker_failures=self.breaker_failures, preflight_timeout_s=self.preflight_timeout_s,
            max_retries=self.max_retries, backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
            concurrency=self.concurrency, temperature=self.temperature,
            seed=default_seed if self.seed is None else self.seed)

    def fallback_mode(self) -> str:
        """``none`` (a template without a usable LLM answer fails the step) or ``offline``."""
        raw = self.fallback if self.fallback is not None else (dg.EnvVar(FALLBACK_ENV).get_value() or "none")
        mode = raw.strip().lower()
        if mode not in FALLBACKS:
            raise ValueError(f"{FALLBACK_ENV}={raw!r}: expected one of {', '.join(FALLBACKS)}")
        return mode

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
