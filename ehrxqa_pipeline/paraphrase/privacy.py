"""The privacy guard of the LLM step: no record value may appear in a prompt (PhysioNet DUA, design.md 4).

Prompts are built from template text only, so a record value in one means a bug or a poisoned template.
``scan`` flags, per prompt:
- ``date``: anything date- or time-shaped (2105-03-04, 03/04/2105, 2105-03, 12:30);
- ``long_number``: a run of 5+ digits (MIMIC ids are 8 digits; no template needs such a number);
- ``record_id``: a number that is an id in the value set (subject, admission, stay, study ids);
- ``record_value``: a word sequence equal to a value of the set (drug names, image ids, ...), unless the
  same words are part of the paper's fixed prompt wording (it names 'aspirin' and 'danazol' as examples).
Findings name the template, the kind and the position, never the value itself (logs hold counts).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_DATE = re.compile(r"\b\d{4}-\d{1,2}(-\d{1,2})?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b\d{1,2}:\d{2}(:\d{2})?\b")
_LONG = re.compile(r"\b\d{5,}\b")
_NUMBER = re.compile(r"\b\d+\b")
_TOKEN = re.compile(r"[a-z0-9]+(?:[-.'][a-z0-9]+)*")
MAX_WORDS = 8  # longer values are matched on their first MAX_WORDS words
MIN_CHARS = 4  # shorter string values ("M", "iv", "po") are not distinctive enough to scan for


class PrivacyViolation(RuntimeError):
    """A prompt holds a record value; nothing was sent."""


@dataclass(frozen=True)
class Leak:
    key: str  # which prompt (template id)
    kind: str  # date | long_number | record_id | record_value
    start: int  # character offset in the prompt
    length: int

    def describe(self) -> str:
        return f"{self.key}: {self.kind} ({self.length} chars at offset {self.start})"


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text.lower())]


def _norm(value: str) -> tuple[str, ...]:
    return tuple(t for t, _, _ in _tokens(value))[:MAX_WORDS]


@dataclass(frozen=True)
class ValueSet:
    """Record values to keep out of prompts: ids (digit strings) and word sequences."""

    ids: frozenset[str] = frozenset()
    terms: frozenset[tuple[str, ...]] = frozenset()

    @classmethod
    def of(cls, values: Iterable[object]) -> ValueSet:
        ids, terms = set(), set()
        for v in values:
            if v is None:
                continue
            s = str(v).strip()
            if s.isdigit():
                ids.add(s.lstrip("0") or "0")
            elif len(s) >= MIN_CHARS and (words := _norm(s)):
                terms.add(words)
        return cls(frozenset(ids), frozenset(terms))

    def __len__(self) -> int:
        return len(self.ids) + len(self.terms)


def _ngrams(tokens: list[str], n_max: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for n in range(1, n_max + 1) for i in range(len(tokens) - n + 1)}


class PrivacyGuard:
    """Scans prompts against a value set; ``exempt`` texts (the paper's fixed prompt wording) are public."""

    def __init__(self, values: ValueSet, exempt: Iterable[str] = ()):
        self.values = values
        self.width = max((len(t) for t in values.terms), default=0)
        self.exempt = set()
        for text in exempt:
            self.exempt |= _ngrams([t for t, _, _ in _tokens(text)], self.width)

    def scan(self, key: str, prompt: str) -> list[Leak]:
        leaks = [Leak(key, "date", m.start(), len(m.group(0))) for m in _DATE.finditer(prompt)]
        leaks += [Leak(key, "long_number", m.start(), len(m.group(0))) for m in _LONG.finditer(prompt)]
        leaks += [Leak(key, "record_id", m.start(), len(m.group(0))) for m in _NUMBER.finditer(prompt)
                  if len(m.group(0)) < 5 and (m.group(0).lstrip("0") or "0") in self.values.ids]
        if self.width:
            toks = _tokens(prompt)
            words = [t for t, _, _ in toks]
            for n in range(1, self.width + 1):
                for i in range(len(words) - n + 1):
                    gram = tuple(words[i:i + n])
                    if gram in self.values.terms and gram not in self.exempt:
                        leaks.append(Leak(key, "record_value", toks[i][1], toks[i + n - 1][2] - toks[i][1]))
        return sorted(set(leaks), key=lambda x: (x.start, x.kind))

    def scan_all(self, prompts: Mapping[str, str]) -> list[Leak]:
        return [leak for key in sorted(prompts) for leak in self.scan(key, prompts[key])]

    def check(self, prompts: Mapping[str, str]) -> None:
        """Raise PrivacyViolation (naming templates and kinds, not values) if any prompt leaks."""
        leaks = self.scan_all(prompts)
        if leaks:
            shown = "; ".join(leak.describe() for leak in leaks[:10])
            raise PrivacyViolation(f"{len(leaks)} record value(s) found in {len({x.key for x in leaks})} prompt(s); "
                                   f"nothing was sent to the LLM. {shown}")
