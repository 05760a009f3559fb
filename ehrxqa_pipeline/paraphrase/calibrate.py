"""Measurements behind ``validate.MEANING_THRESHOLD``: similarities of good and corrupted paraphrases.

``python -m ehrxqa_pipeline.paraphrase.calibrate`` prints, for every template of both catalogs, the
similarity distribution of
- ``good``: the offline paraphraser's candidates (meaning kept by construction);
- ``other_template``: another template of the same dataset (a different question);
- ``unrelated_frame``: the template's placeholders in an unrelated clinical question;
- ``negated``: the template with its main verb negated (the weak spot of sentence embeddings);
- ``swapped_concept``: a content word swapped for a different clinical concept (abnormal -> normal,
  chest X-ray -> lab test, related to -> unrelated to, List -> Count).
docs/paraphrase.md records the numbers and the choice.
"""

from __future__ import annotations

import re

import numpy as np

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.placeholders import placeholders, surrogate_fill
from ehrxqa_pipeline.paraphrase.templates import ParaTemplate, all_templates
from ehrxqa_pipeline.rng import generator

FRAMES = ("Who billed the insurance for {a} after {b}?", "What was the cost of the medication for {a} and {b}?",
          "Which nurse recorded the blood pressure for {a} and {b}?",
          "How long was the hospital stay for {a} with {b}?")
_SWAPS = ((r"\babnormal", "normal"), (r"\bchest X-ray", "blood test"), (r"\brelated to\b", "unrelated to"),
          (r"^List\b", "Count"), (r"\bwider\b", "narrower"), (r"\bany\b", "no"), (r"\bindicating\b", "excluding"))


def negate(text: str) -> str:
    t = re.sub(r"\b(Is|is) there\b", r"\1 there no", text, count=1)
    t = re.sub(r"\b(Are|are) there any\b", r"\1 there not any", t, count=1) if t == text else t
    t = re.sub(r"\b(is|are|Is|Are|was|were)\b(?! there)", r"\1 not", t, count=1) if t == text else t
    return re.sub(r"\b(List|list) all\b", r"\1 all except", t, count=1) if t == text else t


def swap_concept(text: str) -> str:
    for pattern, repl in _SWAPS:
        new = re.sub(pattern, repl, text, count=1)
        if new != text:
            return new
    return "Is the weather " + text[0].lower() + text[1:]


def corruptions(t: ParaTemplate, others: list[ParaTemplate], seed: int = 0) -> dict[str, list[str]]:
    rng = generator(seed, f"paraphrase.calibrate.{t.template_id}")
    ph = list(placeholders(t.text)) + ["it", "them"]
    return {"other_template": [others[int(rng.integers(len(others)))].text],
            "unrelated_frame": [FRAMES[int(rng.integers(len(FRAMES)))].format(a=ph[0], b=ph[1])],
            "negated": [negate(t.text)], "swapped_concept": [swap_concept(t.text)]}


def measure(embedder, seed: int = 0) -> dict[str, np.ndarray]:
    """Similarities to the template per category, over every template of both catalogs."""
    templates = all_templates()
    pairs: dict[str, list[tuple[str, str]]] = {"good": []}
    for t in templates:
        others = [o for o in templates if o.dataset == t.dataset and o.template_id != t.template_id]
        pairs["good"] += [(t.text, c) for c in rules.paraphrase(t, 30, seed)]
        for kind, texts in corruptions(t, others, seed).items():
            pairs.setdefault(kind, []).extend((t.text, c) for c in texts if c != t.text)
    return {k: embedder.similarity([surrogate_fill(a) for a, _ in v], [surrogate_fill(b) for _, b in v])
            for k, v in pairs.items()}


def report(sims: dict[str, np.ndarray], threshold: float) -> str:
    lines = [f"{'category':<16} {'n':>5} {'min':>6} {'p01':>6} {'p10':>6} {'median':>6} {'p90':>6} {'max':>6} "
             f"{'< ' + str(threshold):>7}"]
    for k, s in sims.items():
        q = np.percentile(s, [1, 10, 50, 90])
        lines.append(f"{k:<16} {len(s):>5} {s.min():>6.3f} {q[0]:>6.3f} {q[1]:>6.3f} {q[2]:>6.3f} {q[3]:>6.3f} "
                     f"{s.max():>6.3f} {np.mean(s < threshold):>7.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    from ehrxqa_pipeline.paraphrase.embed import Embedder
    from ehrxqa_pipeline.paraphrase.validate import MEANING_THRESHOLD

    print(report(measure(Embedder()), MEANING_THRESHOLD))
