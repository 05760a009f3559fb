"""Question forms: what kind of answer a question asks for, read from its wording.

A paraphrase must keep its template's form (the paper's prompt asks for it: "answered with a yes or no",
"include 'which' ... selecting one of two placeholders", "elicit multiple possible answers"):

- ``verify``: a yes/no question: its main clause opens with an auxiliary verb (is, are, does, has_verb ...);
- ``choose``: a which/what question offering the template's two options joined by "or";
- ``list``: asks for a list (list, enumerate, name, identify, what are ... ; also "Can you list ...");
- ``what``: asks for one value (what / which / identify ...), not yes/no;
- ``count``: asks for a number (how many, count, number of, how long);
- ``when``: asks for a date or time (when, what date, what time).

The checks are deliberately simple wording rules, stated here once; tests/paraphrase/test_forms.py pins
that every template of both catalogs passes its own form and that planted wrong forms fail.
"""

from __future__ import annotations

import functools
import re

from ehrxqa_pipeline.paraphrase.placeholders import PLACEHOLDER

FORMS = ("verify", "choose", "list", "what", "count", "when")
AUX = frozenset("is are was were do does did has have had can could would will should shall may might must "
                "am".split())
_REQUEST = re.compile(r"^(can|could|would|will) you (please )?(list|name|identify|enumerate|tell|show|provide|"
                      r"give|specify|state|indicate|determine|find|report|count|point)\b")
_LIST_CUE = re.compile(r"\b(list|enumerate|name|identify|itemi[sz]e|catalog(ue)?|provide|give|show|report|mention|"
                       r"outline|specify|indicate|point out|what are|which \S+( \S+)? (are|were)|all|every|each)\b")
_COUNT_CUE = re.compile(r"\b(how many|count|number of|how long|how much time|how much)\b")
_WHEN_CUE = re.compile(r"\b(when|what (date|time|day)|which (date|time|day)|on what date|date (and time )?of|"
                       r"the date)\b")
_WHAT_CUE = re.compile(r"\b(what|which|identify|specify|state|determine|tell|indicate|name)\b")
_GIVEN = re.compile(r"^(given|for|regarding|considering|concerning|about|on|in|looking at|based on|with|from|"
                    r"according to|referring to|as for|in terms of)\b[^,]*,\s*")


@functools.lru_cache(maxsize=4096)  # a form check reads one text's words three to five times
def _words(text: str) -> str:
    """Lower-cased, placeholders as ``ph_<name>`` words (tense slots keep their name), spaces tidied."""
    t = PLACEHOLDER.sub(lambda m: " ph_" + next(g for g in m.groups() if g) + " ", text.lower())
    return re.sub(r"\s+", " ", t).strip()


def _clauses(text: str) -> list[str]:
    """The question's main clause candidates: the whole text, and each part after a comma."""
    w = _words(text)
    parts = [w] + [p.strip() for p in w.split(",")[1:]]
    stripped = _GIVEN.sub("", w)
    return [stripped] + parts if stripped != w else parts


def _first(clause: str) -> str:
    return clause.split(" ", 1)[0] if clause else ""


def is_request(text: str) -> bool:
    return any(_REQUEST.match(c) for c in _clauses(text))


def is_yes_no(text: str) -> bool:
    """A yes/no question: a clause opens with an auxiliary (or a tense slot) and it is not a polite request
    ("Can you list ...") nor a wh-/list question."""
    if not text.rstrip().endswith("?") or is_request(text):
        return False
    head = _first(_words(text))
    if head in ("what", "which", "when", "how", "list", "where", "who", "whom", "name"):
        return False
    return any(_first(c) in AUX or _first(c).endswith("_verb") for c in _clauses(text))


def options(text: str) -> tuple[str, ...]:
    """The two options a choose template offers: "..., ${attribute_1} or ${attribute_2}?" -> both slots."""
    m = re.search(r"(\$\{\w+\}|\w+) or (?:the )?(\$\{\w+\}|\w+)\s*\?\s*$", text)
    return (m.group(1), m.group(2)) if m else ()


def template_form(text: str) -> str:
    """The form of a template text (the catalogs' wording)."""
    w = _words(text)
    main = _clauses(text)[0]
    if _COUNT_CUE.search(w):
        return "count"
    if re.search(r"\bwhen\b", w):
        return "when"
    if _first(main) == "list" or _first(w) == "list" or re.search(r", list\b", w):
        return "list"
    if re.search(r"\b(which|what)\b", w) and len(options(text)) == 2:
        return "choose"
    if is_yes_no(text):
        return "verify"
    return "what"


def _has_options(text: str, opts: tuple[str, ...]) -> bool:
    if len(opts) != 2:
        return False
    low = text.lower()
    a, b = (re.escape(o.lower()) for o in opts)
    return bool(re.search(rf"{a}.*\bor\b.*{b}|{b}.*\bor\b.*{a}", low))


def form_problem(form: str, text: str, opts: tuple[str, ...] = ()) -> str | None:
    """None when ``text`` keeps ``form``; else a short reason."""
    w = _words(text)
    if form == "verify":
        return None if is_yes_no(text) else "not a yes/no question"
    if is_yes_no(text):
        return f"a yes/no question where the template asks for {form}"
    if form == "choose":
        if not _has_options(text, opts):
            return "does not offer both options joined by 'or'"
        return None if re.search(r"\b(which|what)\b", w) else "no 'which'/'what'"
    if form == "list":
        return None if _LIST_CUE.search(w) else "does not ask for a list"
    if form == "count":
        return None if _COUNT_CUE.search(w) else "does not ask for a number"
    if form == "when":
        return None if _WHEN_CUE.search(w) else "does not ask for a date or time"
    if form == "what":
        return None if _WHAT_CUE.search(w) or is_request(text) else "does not ask for a value"
    raise ValueError(f"unknown form {form!r}; known: {FORMS}")
