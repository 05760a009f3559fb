"""Paraphrase candidates per template: from an LLM (cached) or, offline, from the rule-based paraphraser.

Every prompt is scanned by the privacy guard before anything is sent (``PrivacyViolation``: nothing sent).
With an LLM, usable answers (at least one candidate passes machine validation) are cached by (endpoint,
model, prompt version, template, temperature, seed, count), so a re-run asks only for templates whose text
or settings changed; failed requests, refusals and unusable answers are recorded as failures with their kind
and asked again next time. Candidates keep the generator's order (``rank``).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.cache import OK, LlmCache, cache_key
from ehrxqa_pipeline.paraphrase.llm import NOT_ASKED, ChatClient, Completion, Gate, parse_paraphrases
from ehrxqa_pipeline.paraphrase.privacy import PrivacyGuard
from ehrxqa_pipeline.paraphrase.prompts import PAPER_COUNTS, PROMPT_VERSION, build_prompt
from ehrxqa_pipeline.paraphrase.templates import ParaTemplate

CANDIDATE_SCHEMA = load_contract("paraphrase.candidates").polars_schema()
LLM_SOURCE = "llm"


@dataclass
class GenerationReport:
    generator: str  # "rule-based" or "llm:<model>"
    templates: int = 0
    candidates: int = 0
    cache_hits: int = 0
    requests: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # template id -> failure kind (no usable answer)
    usage: dict = field(default_factory=dict)
    breaker: str | None = None  # the failure kind that opened the circuit breaker
    elapsed_s: float = 0.0

    def failure_kinds(self) -> dict[str, int]:
        return dict(sorted(Counter(self.errors.values()).items()))

    def as_metadata(self) -> dict:
        return {"generator": self.generator, "templates": self.templates, "candidates": self.candidates,
                "cache_hits": self.cache_hits, "requests": self.requests, "failed_templates": len(self.errors),
                "failure_kinds": self.failure_kinds(), "errors": dict(sorted(self.errors.items())),
                **{f"llm/{k}": v for k, v in self.usage.items()}}


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


_REFUSAL = re.compile(r"^\W*(?:i(?:'m| am)\s+(?:sorry|unable|not able)|i\s+(?:cannot|can't|can\s+not|won't|will not)"
                      r"|sorry\b|as an ai\b|unfortunately\b)", re.IGNORECASE)
Usable = Callable[[ParaTemplate, list[str]], int]


def validator(embedder=None) -> Usable:
    """How many of a template's candidates pass machine validation (``validate.validate_template``)."""
    from ehrxqa_pipeline.paraphrase.validate import validate_template

    state = {"embedder": embedder}

    def usable(template: ParaTemplate, texts: list[str]) -> int:
        if state["embedder"] is None:
            from ehrxqa_pipeline.paraphrase.embed import Embedder

            state["embedder"] = Embedder()
        verdicts = validate_template(template, [(x, LLM_SOURCE) for x in texts], state["embedder"])
        return sum(v.reason is None for v in verdicts)
    return usable


def judge(template: ParaTemplate, text: str, usable: Usable) -> tuple[list[str], str | None]:
    """(candidates, failure kind or None) for one answer: ``malformed`` (nothing parsed), ``refusal`` (it
    declines and no candidate is usable) or ``unusable`` (every candidate fails machine validation)."""
    texts = parse_paraphrases(text)
    if not texts:
        return [], "malformed"
    if usable(template, texts) > 0:
        return texts, None
    return texts, "refusal" if _REFUSAL.match(text.strip()) else "unusable"


def from_llm(templates: Sequence[ParaTemplate], counts: Mapping[str, int] | None, client: ChatClient,
             cache: LlmCache, guard: PrivacyGuard, usable: Usable | None = None,
             log: Callable[[str], None] | None = None, progress_every_s: float = 10.0
             ) -> tuple[pl.DataFrame, GenerationReport]:
    """Candidates from the endpoint for every template (cached answers first). A template with no usable
    answer is in ``report.errors`` with its failure kind and has no candidate; the caller decides (fail or
    fall back). Bounded by the settings' deadline and circuit breaker; ``log`` gets a progress line at most
    every ``progress_every_s`` seconds and one at the end."""
    counts = {**PAPER_COUNTS, **(counts or {})}
    usable = usable or validator()
    s = client.settings
    t0 = time.monotonic()
    prompts = prompts_for(templates, counts)
    guard.check(prompts)  # raises before any request
    by_id = {t.template_id: t for t in templates}
    keys = {t.template_id: cache_key(s.base_url, s.model, PROMPT_VERSION, t.template_id, t.text, s.temperature,
                                     s.seed, counts[t.dataset]) for t in templates}
    cached = cache.get(sorted(keys.values()))
    answers = {tid: cached[k] for tid, k in keys.items() if k in cached}
    report = GenerationReport(f"{LLM_SOURCE}:{s.model}", len(templates), cache_hits=len(answers))
    todo = [(t.template_id, prompts[t.template_id]) for t in templates if t.template_id not in answers]
    report.requests = len(todo)
    gate = Gate(s.deadline_s, s.breaker_failures)
    done, last = [0], [t0]

    def progress(final: bool = False) -> None:
        now = time.monotonic()
        if log is None or not (final or now - last[0] >= progress_every_s):
            return
        last[0] = now
        failed = len(report.errors)
        log(f"LLM paraphrasing: {done[0]}/{len(todo)} requested templates done ({done[0] - failed} answered, "
            f"{failed} failed: {report.failure_kinds() or 'none'}), {client.usage.retries_started} retries, "
            f"{report.cache_hits} from the cache, "
            f"{'finished' if final else f'{max(0.0, gate.remaining()):.0f} s left of the deadline'}"
            + (f"; circuit breaker open after {gate.threshold} consecutive {gate.tripped}" if gate.tripped else ""))

    def read(c: Completion) -> tuple[list[str], str | None]:
        return judge(by_id[c.key], c.text, usable)

    def keep(c: Completion) -> None:
        t = by_id[c.key]
        done[0] += 1
        if c.error not in NOT_ASKED:
            cache.put(keys[c.key], status=c.error or OK, model=s.model, prompt_version=PROMPT_VERSION,
                      template_id=c.key, template_text=t.text, temperature=s.temperature, seed=s.seed,
                      count=counts[t.dataset], response=c.text, paraphrases=c.candidates, usage=c.usage)
        if c.error is not None:
            report.errors[c.key] = c.error
        else:
            answers[c.key] = c.candidates
        progress()

    client.complete(todo, on_result=keep, gate=gate, judge=read, on_tick=progress)
    report.usage = client.usage.as_dict()
    report.breaker = gate.tripped
    report.elapsed_s = round(time.monotonic() - t0, 3)
    progress(final=True)
    rows = [{"template_id": t.template_id, "rank": i, "text": text, "source": LLM_SOURCE, "model": s.model}
            for t in templates for i, text in enumerate(answers.get(t.template_id, []))]
    report.candidates = len(rows)
    return _frame(rows), report


class LlmFailed(RuntimeError):
    """A configured LLM gave no usable paraphrase for some templates (and no fallback is set)."""

    def __init__(self, report: GenerationReport):
        failed = sorted(report.errors)
        shown = ", ".join(f"{t} ({report.errors[t]})" for t in failed[:10]) + (" ..." if len(failed) > 10 else "")
        super().__init__(
            f"the LLM endpoint gave no usable paraphrase for {len(failed)} of {report.templates} templates "
            f"(failure kinds: {report.failure_kinds()}"
            + (f"; circuit breaker opened after consecutive {report.breaker}" if report.breaker else "")
            + f"): {shown}. Fix the endpoint and build again (failures are not cached), or set "
              f"EHRXQA_LLM_FALLBACK=offline to use the offline rule-based paraphraser for such templates.")
        self.report = report


def fall_back(templates: Sequence[ParaTemplate], frame: pl.DataFrame, report: GenerationReport,
              counts: Mapping[str, int] | None, seed: int) -> pl.DataFrame:
    """``frame`` with the offline paraphraser's candidates for every template in ``report.errors``, in
    template order."""
    failed = [t for t in templates if t.template_id in report.errors]
    extra, _ = rule_based(failed, counts, seed)
    order = {t.template_id: i for i, t in enumerate(templates)}
    both = pl.concat([frame, extra])
    return both.sort(both["template_id"].replace_strict(order, return_dtype=pl.Int64), "rank")


def sources_per_dataset(templates: Sequence[ParaTemplate], frame: pl.DataFrame,
                        errors: Mapping[str, str] | None = None) -> dict[str, dict]:
    """Per dataset: templates whose candidates came from the LLM (``llm``), the offline paraphraser
    (``offline``) or nobody (``none``), and the LLM failure kinds (counts) of its templates."""
    by_source = dict(frame.group_by("template_id").agg(pl.col("source").first()).iter_rows())
    out: dict[str, dict] = {}
    for t in templates:
        d = out.setdefault(t.dataset, {"llm": 0, "offline": 0, "none": 0, "llm_failures": {}})
        src = by_source.get(t.template_id)
        d["llm" if src == LLM_SOURCE else "offline" if src == rules.SOURCE else "none"] += 1
        if errors and t.template_id in errors:
            kinds = d["llm_failures"]
            kinds[errors[t.template_id]] = kinds.get(errors[t.template_id], 0) + 1
    return {ds: {**d, "llm_failures": dict(sorted(d["llm_failures"].items()))} for ds, d in sorted(out.items())}
