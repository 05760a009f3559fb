"""The offline paraphraser: clinical synonyms and syntactic rewrites that keep every placeholder.

Used when no LLM endpoint is configured, so ``make build`` runs with no network. Each rule is a regex over
the template text (never touching a placeholder) with alternative wordings; a template's candidates are
every combination of "keep" or one alternative per matching rule (longer MIMIC-CXR-VQA image questions may
also get a lead-in such as "On this chest X-ray, "), in a fixed order. ``count`` of them are drawn with the
step's own generator, skipping any that is one word away from the template or from one already drawn (the
validator would reject it as a near-duplicate). Candidates are marked ``source = "rule-based"`` and go through the same
validation and review as LLM candidates.
"""

from __future__ import annotations

import itertools
import re

from ehrxqa_pipeline.paraphrase.split import loose_words, within_one_edit
from ehrxqa_pipeline.paraphrase.templates import MIMIC_CXR_VQA, ParaTemplate
from ehrxqa_pipeline.rng import generator

SOURCE = "rule-based"
VERSION = "rules-2"  # part of the candidates asset's code version
MAX_COMBINATIONS = 4096

_OBJ = r"(\$\{object(?:_\d)?\})"
_M = (MIMIC_CXR_VQA,)
# (pattern, alternatives[, datasets]); alternatives may use the pattern's groups (\1). Matching is
# case-insensitive and the first letter keeps the case of the text it replaces.
RULES: tuple[tuple, ...] = (
    (r"\bIs the " + _OBJ + r" abnormal\?$", (r"Does the \1 look abnormal?", r"Is there any abnormality in the \1?",
                                            r"Are there abnormal findings in the \1?")),
    (r"\bAre there any abnormalities\?$", ("Are there any abnormal findings?", "Do you see any abnormalities?",
                                           "Does this image show any abnormality?")),
    (r"^Are there any (\$\{category\}|\$\{category_1\} or \$\{category_2\})\?$",
     (r"Does this image show any \1?", r"Can any \1 be seen on this chest X-ray?", r"Are any \1 present?",
      r"Are any \1 seen?", r"Is there any sign of \1?")),
    (r"^Is this patient (\$\{gender\})\?$", (r"Is this a \1 patient?", r"Does this image belong to a \1 patient?")),
    (r"^What is the gender of this patient\?$", ("Which gender is this patient?", "What is the sex of the patient?",
                                                 "What is this patient's gender?")),
    (r"^What is the gender of this patient, male or female\?$", (
        "Which is the sex of the patient, male or female?", "Which gender does this patient have, male or female?")),
    (r"^What is the view of this image\?$", ("Which view was used for this image?", "In which view was this image "
                                             "taken?", "What is the projection of this image?")),
    (r"(?<=[}s])\.$", (" seen in this image.", " visible on this chest X-ray.", " that are present."), _M),
    (r"\bAre there any\b(?! abnormalities\?$)", ("Can you see any", "Do you see any", "Is there evidence of any")),
    (r"^Is there either (.+)\?$", (r"Do you see either \1?", r"Does this image show either \1?",
                                  r"Can either \1 be seen on this chest X-ray?")),
    (r"^Are there both (.+)\?$", (r"Do you see both \1?", r"Does this image show both \1?",
                                 r"Can both \1 be seen on this chest X-ray?")),
    (r"^Is there (\$\{attribute\})\?$", (r"Do you see \1?", r"Does this image show \1?",
                                         r"Can \1 be seen on this chest X-ray?")),
    (r"\bIs there either\b", ("Do you see either", "Is there evidence of either")),
    (r"\bAre there both\b", ("Do you see both", "Is there evidence of both")),
    (r"\bIs there (?!either\b|both\b)", ("Do you see ", "Is there evidence of ", "Does the image show ")),
    (r"\bList all common\b", ("Name all shared", "Identify every shared", "List every shared")),
    (r"\bList all (?!common\b)", ("Enumerate all ", "Name all ", "Identify all ", "Please list all ")),
    (r"\brelated to\b", ("associated with", "linked to")),
    (r"\bis related, ", ("is present in this image, ", "can be seen on this chest X-ray, ")),
    (r"\babnormalities\b(?!\?$)", ("abnormal findings",)),
    (r"\banatomical locations\b", ("anatomical regions", "anatomical sites")),
    (r"\banatomical location\b", ("anatomical region", "anatomical site")),
    (r"\bin the " + _OBJ, (r"within the \1", r"in the region of the \1")),
    (r"\bthis image\b", ("this chest X-ray", "this radiograph")),
    (r"\bthis patient\b", ("the patient",)),
    (r"\bWhat is the gender of\b", ("What is the sex of",)),
    (r"\bIs this an (\$\{viewpos\}) view\?", (r"Was this image taken in \1 view?", r"Is this image an \1 projection?",
                                              r"Does this image show an \1 view?")),
    (r"\bWhich view is in\b", ("Which view is used for", "Which projection is used for")),
    (r"\bWhat is the view of\b", ("What is the view position of", "What projection is used for")),
    (r"^Is the width of the (cardiac silhouette|upper mediastinum) wider than", (r"Is the \1 wider than",
                                                                                 r"Is the \1 broader than")),
    (r"\b1/2 of the thorax width\b", ("half of the thoracic width", "half the width of the thorax")),
    (r"\b1/3 of the thorax width\b", ("one third of the thoracic width", "a third of the width of the thorax")),
    (r"^Given\b", ("For", "Regarding", "Considering")),
    (r"\bchest X-ray stud(y|ies)\b", (r"chest radiograph stud\1", r"CXR stud\1")),
    (r"\bindicating\b", ("showing", "revealing")),
    (r"\bcompared to\b", ("in comparison to", "relative to")),
    (r"\bhave passed since\b", ("have elapsed since", "has it been since")),
    (r"^When was the\b", ("At what time was the", "On what date was the")),
    (r"^Count the number of\b", ("Determine the number of", "Give the number of")),
    (r"^List the IDs of patients\b", ("Provide the IDs of patients", "Give the IDs of the patients")),
    (r"\bthe previous study\b", ("the prior study", "the preceding study")),
    (r"\bbeen diagnosed with\b", ("received a diagnosis of",)),
    (r"\bwithin the same period\b", ("during that same period", "in the same time frame")),
    (r"\bHas (\{patient_id\}) had any\b", (r"Did \1 have any", r"Has patient \1 had any")),
    (r"\bduring hospital visit\b", ("during a hospital visit",)),
)
_COMPILED = tuple((re.compile(r[0], re.IGNORECASE), r[1], r[2] if len(r) > 2 else None) for r in RULES)
LEAD_INS = ("On this chest X-ray, ", "Looking at this radiograph, ")
_LEAD_IN_CONTENT = frozenset({"condition", "presence", "anatomy", "attribute", "abnormality"})
_LEAD_IN_MIN_WORDS = 8  # shorter questions are dominated by a lead-in (the meaning check rejects them)


def _case_like(text: str, like: str) -> str:
    if not text or not like or text[:2].isupper():  # keep acronyms ("CXR") as written
        return text
    return text[0].upper() + text[1:] if like[0].isupper() else text[0].lower() + text[1:]


def _spans(text: str, dataset: str) -> list[tuple[re.Match, tuple[str, ...]]]:
    """Non-overlapping rule matches, earliest rule first."""
    taken: list[tuple[int, int]] = []
    out = []
    for rx, alts, datasets in _COMPILED:
        if datasets is not None and dataset not in datasets:
            continue
        for m in rx.finditer(text):
            if all(m.end() <= a or m.start() >= b for a, b in taken):
                taken.append((m.start(), m.end()))
                out.append((m, alts))
    return sorted(out, key=lambda x: x[0].start())


def variants(template: ParaTemplate) -> list[str]:
    """Every rewrite of the template (the text itself excluded), in a fixed order, at most MAX_COMBINATIONS."""
    text = template.text
    spans = _spans(text, template.dataset)
    # each span's rewrites, expanded once (not once per combination: m.expand parses its template every call)
    choices = [(m.group(0), *(_case_like(m.expand(alt), m.group(0)) for alt in alts)) for m, alts in spans]
    lead_in = (template.dataset == MIMIC_CXR_VQA and template.content_type in _LEAD_IN_CONTENT
               and len(text.split()) >= _LEAD_IN_MIN_WORDS)
    leads = (None, *LEAD_INS) if lead_in else (None,)
    out, seen = [], {text}
    for combo in itertools.islice(itertools.product(leads, *choices), MAX_COMBINATIONS):
        lead, picks = combo[0], combo[1:]
        pieces, pos = [], 0
        for (m, _), piece in zip(spans, picks):
            pieces.append(text[pos:m.start()])
            pieces.append(piece)
            pos = m.end()
        s = "".join(pieces) + text[pos:]
        if lead is not None:
            s = lead + (s[0].lower() + s[1:] if not s.startswith(("AP", "PA", "CXR")) else s)
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def paraphrase(template: ParaTemplate, count: int, seed: int) -> list[str]:
    """Up to ``count`` rule-based candidates, each at least two words away from the template and from each
    other, drawn reproducibly (in draw order)."""
    pool = variants(template)
    rng = generator(seed, f"paraphrase.rules.{template.template_id}")
    seen = [loose_words(template.text)]
    picked = []
    for i in rng.permutation(len(pool)).tolist():
        w = loose_words(pool[i])
        if not any(within_one_edit(w, s) for s in seen):
            seen.append(w)
            picked.append(pool[i])
            if len(picked) == count:
                break
    return picked
