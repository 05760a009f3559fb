"""Paraphrase candidates per template: from an LLM (cached) or, offline, from the rule-based paraphraser.

Every prompt is scanned by the privacy guard before anything is sent (``PrivacyViolation``: nothing sent).
With an LLM, answers are cached by (model, prompt version, template, temperature, seed, count), so a
re-run asks only for templates whose text or settings changed; failed requests are reported and asked
again next time. Candidates keep the generator's order (``rank``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.cache import LlmCache, cache_key
from ehrxqa_pipeline.paraphrase.llm import ChatClient, Completion, parse_paraphrases
from ehrxqa_pipeline.paraphrase.privacy import PrivacyGuard
from ehrxqa_pipeline.paraphrase.prompts import PAPER_COUNTS, PROMPT_VERSION, build_prompt
from ehrxqa_pipeline.paraphrase.templates import ParaTemplate

CANDIDATE_SCHEMA = {"template_id": pl.String, "rank": pl.Int64, "text": pl.String, "source": pl.String,
                    "model": pl.String}
LLM_SOURCE = "llm"


@dataclass
class GenerationReport:
    generator: str  # "rule-based" or "llm:<model>"
    templates: int = 0
    candidates: int = 0
    cache_hits: int = 0
    requests: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # template id -> error name
    usage: dict = field(default_factory=dict)

    def as_metadata(self) -> dict:
        return {"generator": self.generator, "templates": self.templates, "candidates": self.candidates,
                "cache_hits": self.cache_hits, "requests": self.requests, "failed_templates": len(self.errors),
                "errors": dict(sorted(self.errors.items())), **{f"llm/{k}": v for k, v in self.usage.items()}}


def prompts_for(templates: Sequence[ParaTemplate], counts: Mapping[str, int] | None = None) -> dict[str, str]:
    counts = {**PAPER_COUNTS, **(counts or {})}
    return {t.template_id: build_prompt(t, counts[t.dataset]) for t in templates}


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=CANDIDATE_SCHEMA)


def rule_based(templates: Sequence[ParaTemplate], counts: Mapping[str, int] | None, seed: int
               ) -> tuple[pl.DataFrame, GenerationReport]:
    counts = {**PAPER_COUNTS, **(counts or {})}
    rows = [{"template_id": t.template_id, "rank": i, "text": text, "source": rules.SOURCE, "model": rules.VERSION}
            for t in templates for i, text in enumerate(rules.paraphrase(t, counts[t.dataset], seed))]
    return _frame(rows), GenerationReport(rules.SOURCE, len(templates), len(rows))


def from_llm(templates: Sequence[ParaTemplate], counts: Mapping[str, int] | None, client: ChatClient,
             cache: LlmCache, guard: PrivacyGuard) -> tuple[pl.DataFrame, GenerationReport]:
    counts = {**PAPER_COUNTS, **(counts or {})}
    s = client.settings
    prompts = prompts_for(templates, counts)
    guard.check(prompts)  # raises before any request
    by_id = {t.template_id: t for t in templates}
    keys = {t.template_id: cache_key(s.model, PROMPT_VERSION, t.template_id, t.text, s.temperature, s.seed,
                                     counts[t.dataset]) for t in templates}
    cached = cache.get(sorted(keys.values()))
    answers = {tid: cached[k] for tid, k in keys.items() if k in cached}
    report = GenerationReport(f"{LLM_SOURCE}:{s.model}", len(templates), cache_hits=len(answers))
    todo = [(t.template_id, prompts[t.template_id]) for t in templates if t.template_id not in answers]
    report.requests = len(todo)

    def keep(c: Completion) -> None:
        texts = parse_paraphrases(c.text) if c.ok else []
        if not c.ok or not texts:
            report.errors[c.key] = c.error or "malformed"
            return
        t = by_id[c.key]
        cache.put(keys[c.key], model=s.model, prompt_version=PROMPT_VERSION, template_id=c.key,
                  template_text=t.text, temperature=s.temperature, seed=s.seed, count=counts[t.dataset],
                  response=c.text, paraphrases=texts, usage=c.usage)
        answers[c.key] = texts

    client.complete(todo, on_result=keep)
    report.usage = client.usage.as_dict()
    rows = [{"template_id": t.template_id, "rank": i, "text": text, "source": LLM_SOURCE, "model": s.model}
            for t in templates for i, text in enumerate(answers.get(t.template_id, []))]
    report.candidates = len(rows)
    return _frame(rows), report
