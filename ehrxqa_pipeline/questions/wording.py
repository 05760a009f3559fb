"""How question templates write their placeholders, and how a template or a paraphrase of it is filled.

Four forms: ``${name}`` (visual slots: object, attribute, category, comparison, viewpos, gender), ``[name]``
(EHRSQL time and operation slots: time_filter_exact1, unit_count, agg_function), ``{name}`` (database values:
patient_id, study_id) and EHRSQL's tense slots written as bare words (``has_verb``, ``Has_verb``: "has" /
"had"). A placeholder's name is what is inside the marks; tense slots compare lower-cased.

A sampled question is ``fill(template text, words)``, where ``words`` (placeholder name -> the words written
for it) are worked out once, when the question is sampled, and stored with it; a paraphrase of the template is
filled with the same ``words`` (``paraphrase.apply``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PLACEHOLDER = re.compile(r"\$\{(\w+)\}|\[(\w+)\]|(?<!\$)\{(\w+)\}|\b([A-Za-z]+_verb)\b")


def placeholder_name(m: re.Match) -> str:
    """The name of a ``PLACEHOLDER`` match: "${object_1}" -> "object_1", "Has_verb" -> "has_verb"."""
    name = next(g for g in m.groups() if g)
    return name.lower() if name.lower().endswith("_verb") else name


def tidy(text: str) -> str:
    """The finishing of a filled question: spaces collapsed, none before , ? . ; stripped; lower-cased."""
    out = re.sub(r"\s+", " ", text)
    return re.sub(r" ([,?.])", r"\1", out).strip().lower()


def fill(text: str, words: Mapping[str, str]) -> str:
    """``text`` (a template or a paraphrase of it) with every placeholder replaced by its words, tidied.
    Raises KeyError naming a placeholder that ``words`` has no entry for."""
    def one(m: re.Match) -> str:
        name = placeholder_name(m)
        if name not in words:
            raise KeyError(f"no words for placeholder {m.group(0)} (known: {sorted(words)})")
        return words[name]
    return tidy(PLACEHOLDER.sub(one, text))
