"""Machine validation of paraphrase candidates: each rejection has one named reason.

Checks, in order (the first failing one is the reason):
- ``empty``: nothing but whitespace/punctuation, or fewer than 3 words;
- ``placeholder_mismatch``: the set of placeholders differs from the template's, or a stray ``$ { } [ ]``;
- ``semantic_form``: the question no longer asks for what the template asks (``forms.form_problem``);
- ``duplicate``: the same question as the template or an earlier kept candidate, ignoring case, spacing
  and final punctuation;
- ``near_duplicate``: one word away from the template or an earlier kept candidate (word edit distance <= 1
  after dropping punctuation and articles): no new phrasing;
- ``meaning_drift``: sentence-embedding cosine similarity to the template below ``MEANING_THRESHOLD``.
  Both texts are embedded with placeholders replaced by natural stand-ins (``placeholders.SURROGATES``).

MEANING_THRESHOLD = 0.70, from measurements with all-MiniLM-L6-v2 over every template of both catalogs
(``python -m ehrxqa_pipeline.paraphrase.calibrate``; numbers in docs/paraphrase.md): the offline
paraphraser's candidates (meaning kept by construction, n=6570) fall below 0.70 in 1.3% of cases (short
templates with a lead-in: "Are there any diseases?" vs "On this chest X-ray, are there any diseases?" is
0.55); another template's question falls below it in 74% of cases and an unrelated question frame keeping
the placeholders in 99.7%. 0.75 would reject 2.0% of good candidates for 82% / 100%; 0.60 only 54% of
wrong-template questions. Negations and swapped findings score 0.90+ (embeddings barely see them): the
check cannot catch those, human review must.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.paraphrase.forms import form_problem
from ehrxqa_pipeline.paraphrase.placeholders import placeholder_set, stray_marks, surrogate_fill
from ehrxqa_pipeline.paraphrase.split import loose_words, within_one_edit
from ehrxqa_pipeline.paraphrase.templates import ParaTemplate

MEANING_THRESHOLD = 0.70
REASONS = ("empty", "placeholder_mismatch", "semantic_form", "duplicate", "near_duplicate", "meaning_drift")
# the columns of paraphrase.validated (and validated_rejected), and whether the candidate is valid
VALIDATED_SCHEMA = {**load_contract("paraphrase.validated").polars_schema(), "valid": pl.Boolean}


def _loose(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip("?.! ")


@dataclass
class Verdict:
    rank: int
    text: str
    source: str
    reason: str | None = None
    detail: str = ""
    similarity: float | None = None


def validate_template(template: ParaTemplate, candidates: Sequence[tuple[str, str]], embedder,
                      threshold: float = MEANING_THRESHOLD) -> list[Verdict]:
    """Verdicts for one template's candidates, given as (text, source) in generation order."""
    verdicts = [Verdict(i, text, source) for i, (text, source) in enumerate(candidates)]
    want = template.placeholders
    kept: list[Verdict] = []
    for v in verdicts:
        t = v.text.strip()
        if len(re.findall(r"[A-Za-z0-9_$\[{]+", t)) < 3:
            v.reason, v.detail = "empty", "fewer than 3 words"
            continue
        got = placeholder_set(t)
        if got != want or stray_marks(t):
            missing, extra = sorted(want - got), sorted(got - want)
            v.reason = "placeholder_mismatch"
            v.detail = f"missing {missing} extra {extra} stray {stray_marks(t)}"
            continue
        problem = form_problem(template.form, t, template.options)
        if problem:
            v.reason, v.detail = "semantic_form", f"{template.form}: {problem}"
            continue
        same = next((k for k in kept if _loose(k.text) == _loose(t)), None)
        if _loose(t) == _loose(template.text) or same is not None:
            v.reason, v.detail = "duplicate", "of the template" if same is None else f"of candidate {same.rank}"
            continue
        near = next((k for k in kept if within_one_edit(loose_words(k.text), loose_words(t))), None)
        if within_one_edit(loose_words(template.text), loose_words(t)) or near is not None:
            v.reason = "near_duplicate"
            v.detail = "of the template" if near is None else f"of candidate {near.rank}"
            continue
        kept.append(v)
    if kept:
        sims = embedder.similarity([surrogate_fill(template.text)] * len(kept), [surrogate_fill(k.text) for k in kept])
        for k, s in zip(kept, sims):
            k.similarity = round(float(s), 4)
            if k.similarity < threshold:
                k.reason, k.detail = "meaning_drift", f"similarity {k.similarity:.4f} < {threshold}"
    return verdicts


def validate(templates: Sequence[ParaTemplate], candidates: pl.DataFrame, embedder,
             threshold: float = MEANING_THRESHOLD) -> pl.DataFrame:
    """One row per candidate (columns: VALIDATED_SCHEMA); ``candidates`` has template_id, rank, text, source."""
    rows = []
    by_template = {k[0]: g.sort("rank") for k, g in candidates.group_by("template_id")} if candidates.height else {}
    prefetch = getattr(embedder, "prefetch", None)
    if prefetch is not None:  # one cache read and one batched encode instead of one per template
        prefetch([surrogate_fill(t.text) for t in templates if t.template_id in by_template]
                 + [surrogate_fill(x) for x in candidates["text"].to_list()] if candidates.height else [])
    for t in templates:
        part = by_template.get(t.template_id)
        if part is None:
            continue
        ranks = part["rank"].to_list()
        for v in validate_template(t, list(zip(part["text"], part["source"])), embedder, threshold):
            rows.append({"template_id": t.template_id, "rank": ranks[v.rank], "text": v.text, "source": v.source,
                         "valid": v.reason is None, "reason": v.reason, "detail": v.detail,
                         "similarity": v.similarity})
    return pl.DataFrame(rows, schema=VALIDATED_SCHEMA)
