"""Placeholders of question templates in paraphrases (their four forms: ``questions.wording``).

A paraphrase is usable only if it keeps exactly the template's set of placeholders and holds no other bracket
or brace (a half-written or misspelt placeholder would leak into questions).
"""

from __future__ import annotations

import re

from ehrxqa_pipeline.questions.wording import PLACEHOLDER

_STRAY = re.compile(r"[${}\[\]]")

# Natural stand-ins used when a template is embedded for the meaning check: a sentence with values reads
# like the questions the model was trained on, and is shorter than one with "${attribute_1}" tokens.
SURROGATES = {
    "object": "left lung", "object_1": "left lung", "object_2": "right lung",
    "attribute": "pleural effusion", "attribute_1": "pleural effusion", "attribute_2": "pneumonia",
    "category": "diseases", "category_1": "diseases", "category_2": "devices",
    "viewpos": "AP", "gender": "female", "comparison": "newly detected",
    "time_filter_exact1": "first", "time_filter_exact2": "last", "time_filter_global1": "last year",
    "time_filter_global2": "this year", "unit_count": "days", "patient_id": "10001", "study_id": "50001",
    "study_id1": "50001", "study_id2": "50002", "time_filter_within": "within 2 days", "age_group": "30s",
    "diagnosis_name": "sepsis", "procedure_name": "intubation", "drug_name": "heparin",
}


def placeholders(text: str) -> tuple[str, ...]:
    """Placeholder tokens in order of appearance, as written: ("${object}", "[unit_count]", "{patient_id}")."""
    return tuple(m.group(0) for m in PLACEHOLDER.finditer(text))


def placeholder_set(text: str) -> frozenset[str]:
    """The set a paraphrase must keep (tense slots lower-cased: "Has_verb" == "has_verb")."""
    return frozenset(p.lower() if p.endswith("_verb") else p for p in placeholders(text))


def stray_marks(text: str) -> list[str]:
    """Characters of ``${}[]`` outside well-formed placeholders (e.g. "${object" or "{{object}}")."""
    return _STRAY.findall(PLACEHOLDER.sub("", text))


def name(token: str) -> str:
    """"${object_1}" -> "object_1"."""
    return token.strip("${}[]").lower() if token.endswith("_verb") else token.strip("${}[]")


def surrogate_fill(text: str) -> str:
    """The text with every placeholder replaced by a natural stand-in (unknown names: the name in words)."""
    def one(m: re.Match) -> str:
        n = next(g for g in m.groups() if g)
        if n.lower().endswith("_verb"):
            return n[:-5]
        return SURROGATES.get(n, re.sub(r"[_\d]+", " ", n).strip())
    return re.sub(r"\s+", " ", PLACEHOLDER.sub(one, text)).strip()


def leftovers(question: str) -> list[str]:
    """Placeholder-like fragments left in a filled question (well-formed placeholders and stray marks)."""
    return list(placeholders(question)) + stray_marks(question)
