"""The 48 MIMIC-CXR-VQA question templates, as data.

Source: the EHRXQA paper, Appendix B.2.2, "Full list of 48 VQA question templates" (Table B9 in seed
001, the untitled long table in seed 000) for index, content type and exact wording; template keys and
the ``program_{index}`` naming follow the published record format (reference-builders.md 4.3).
reference-builders.md calls the presence-vs-attribute split "not public"; the paper's table does state
it per template, so the content types below are copied from that table, not inferred. Semantic types
follow the paper's definitions (B.2.2 "template component"): yes/no -> verify, "Which ..., X or Y?" ->
choose, "List ..." / "What is ...?" -> query.

Slots are written as in the paper (``${object}``, ``${object_1}`` ...). Internally every slot maps to one
argument column (``SLOT_COLUMNS``): a lone ``${object}`` is ``object_1``. Argument values are stored as
the published records store them: raw category ids (``anatomicalfinding``), viewpos ``AP``/``PA`` and
gender ``M``/``F``; the question text shows readable forms (``CATEGORY_PLURAL`` / ``CATEGORY_TEXT``,
``GENDER_TEXT``), which fixes the raw-id wording noted in reference-builders.md section 8 item 12.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

CONTENT_TYPES = ("presence", "anatomy", "attribute", "abnormality", "size", "plane", "gender")
SEMANTIC_TYPES = ("verify", "choose", "query")
CATEGORIES = ("anatomicalfinding", "device", "disease", "technicalassessment", "tubesandlines")
ABN4 = frozenset({"anatomicalfinding", "disease", "device", "tubesandlines"})  # "abnormality"; not technicalassessment
# Readable category names as the paper's paraphrase prompt spells them ("anatomical finding", "tubes/lines");
# plural after "any" / "all" as in the paper's sample questions ("List all detected anatomical findings"),
# singular after "Which".
CATEGORY_TEXT = {"anatomicalfinding": "anatomical finding", "device": "device", "disease": "disease",
                 "technicalassessment": "technical assessment", "tubesandlines": "tubes/lines"}
CATEGORY_PLURAL = {"anatomicalfinding": "anatomical findings", "device": "devices", "disease": "diseases",
                   "technicalassessment": "technical assessments", "tubesandlines": "tubes/lines"}
VIEW_POSITIONS = ("AP", "PA")
GENDERS = ("F", "M")
GENDER_TEXT = {"F": "female", "M": "male"}

# Argument columns, in the order they appear in candidate/question frames.
ARGUMENT_COLUMNS = ("object_1", "object_2", "attribute_1", "attribute_2", "category_1", "category_2",
                    "viewpos", "gender")
SLOT_COLUMNS = {"object": "object_1", "attribute": "attribute_1", "category": "category_1",
                **{c: c for c in ARGUMENT_COLUMNS}}
# Record field template_arguments: argument kind -> its columns, in "0", "1" order.
ARGUMENT_KINDS = {"object": ("object_1", "object_2"), "attribute": ("attribute_1", "attribute_2"),
                  "category": ("category_1", "category_2"), "viewpos": ("viewpos",), "gender": ("gender",)}
_SLOT = re.compile(r"\$\{(\w+)\}")


@dataclass(frozen=True)
class VqaTemplate:
    """One question template: fixed position, published key, paper wording and types."""

    index: int  # 1..48, the fixed order of the published template_program numbering
    key: str  # e.g. "base_1"
    text: str  # exact paper wording with ${...} slots
    content_type: str
    semantic_type: str

    @property
    def program(self) -> str:
        return f"program_{self.index}"

    @property
    def slots(self) -> tuple[str, ...]:
        """Slot names in order of appearance in the text, e.g. ("category", "object")."""
        return tuple(_SLOT.findall(self.text))

    @property
    def columns(self) -> tuple[str, ...]:
        """The argument columns this template fills, in ARGUMENT_COLUMNS order."""
        used = {SLOT_COLUMNS[s] for s in self.slots}
        return tuple(c for c in ARGUMENT_COLUMNS if c in used)

    @property
    def abnormality(self) -> bool:
        """True when the program tests the ABN4 categories rather than a category/attribute argument."""
        return "abn" in self.key


_P, _AN, _AT, _AB = "presence", "anatomy", "attribute", "abnormality"
_V, _C, _Q = "verify", "choose", "query"
_ROWS = (
    ("base_1", _P, _V, "Are there any ${category} in the ${object}?"),
    ("base_2", _P, _V, "Is there ${attribute} in the ${object}?"),
    ("base_abn_1", _AB, _V, "Is the ${object} abnormal?"),
    ("base_4", _P, _V, "Are there any ${category_1} or ${category_2} in the ${object}?"),
    ("base_5", _P, _V, "Are there both ${attribute_1} and ${attribute_2} in the ${object}?"),
    ("base_6", _P, _V, "Is there either ${attribute_1} or ${attribute_2} in the ${object}?"),
    ("base_9", _AT, _Q, "List all ${category} in the ${object}."),
    ("base_abn_2", _AB, _Q, "List all abnormalities in the ${object}."),
    ("base_10", _AT, _Q, "List all ${category_1} and ${category_2} in the ${object}."),
    ("base_11", _AT, _C, "Which ${category} is related to the ${object}, ${attribute_1} or ${attribute_2}?"),
    ("base_abn_3", _AB, _V, "Are there any abnormalities in either the ${object_1} or the ${object_2}?"),
    ("base_abn_4", _AB, _V, "Are there any abnormalities in both the ${object_1} and the ${object_2}?"),
    ("base_25", _AT, _Q, "List all ${category} in either the ${object_1} or the ${object_2}."),
    ("base_26", _AT, _Q, "List all common ${category} in both the ${object_1} and the ${object_2}."),
    ("base_27", _AT, _Q, "List all ${category} only in the ${object_1} but not in the ${object_2}."),
    ("base_abn_5", _AB, _Q, "List all abnormalities in either the ${object_1} or the ${object_2}."),
    ("base_abn_6", _AB, _Q, "List all common abnormalities in both the ${object_1} and the ${object_2}."),
    ("base_abn_7", _AB, _Q, "List all abnormalities only in the ${object_1} but not in the ${object_2}."),
    ("base_30", _P, _V, "Are there any ${category}?"),
    ("base_abn_8", _AB, _V, "Are there any abnormalities?"),
    ("base_32", _P, _V, "Are there any ${category_1} or ${category_2}?"),
    ("base_33", _P, _V, "Is there ${attribute}?"),
    ("base_34", _P, _V, "Are there both ${attribute_1} and ${attribute_2}?"),
    ("base_35", _P, _V, "Is there either ${attribute_1} or ${attribute_2}?"),
    ("base_40", _AT, _Q, "List all ${category}."),
    ("base_41", _AT, _Q, "List all ${category_1} and ${category_2}."),
    ("base_abn_9", _AB, _Q, "List all abnormalities."),
    ("base_42", _AT, _C, "Which ${category} is related, ${attribute_1} or ${attribute_2}?"),
    ("base_45", _P, _V, "Are both the ${object_1} and the ${object_2} related to ${attribute}?"),
    ("base_46", _P, _V, "Is either the ${object_1} or the ${object_2} related to ${attribute}?"),
    ("base_49", _AN, _Q, "List all anatomical locations related to ${attribute}."),
    ("base_50", _AN, _C, "Which anatomical location is related to ${attribute}, the ${object_1} or the ${object_2}?"),
    ("base_abn_10", _AB, _C, "Which anatomical location is abnormal, the ${object_1} or the ${object_2}?"),
    ("base_58", _AN, _Q, "List all anatomical locations related to either ${attribute_1} or ${attribute_2}."),
    ("base_59", _AN, _Q, "List all common anatomical locations related to both ${attribute_1} and ${attribute_2}."),
    ("base_60", _AN, _Q, "List all anatomical locations related to ${attribute_1} but not ${attribute_2}."),
    ("base_64", _P, _V, "Are there any ${category} related to the ${object_1} and the ${object_2}?"),
    ("base_65", _P, _V, "Are there any ${category} related to the ${object_1} or the ${object_2}?"),
    ("base_66", _AN, _Q, "List all anatomical locations related to any ${category}."),
    ("base_73", _AN, _Q, "List all anatomical locations related to any ${category_1} or ${category_2}."),
    ("viewpos_1", "plane", _V, "Is this an ${viewpos} view?"),
    ("viewpos_2", "plane", _C, "Which view is in this image, AP or PA?"),
    ("viewpos_3", "plane", _Q, "What is the view of this image?"),
    ("gender_1", "gender", _V, "Is this patient ${gender}?"),
    ("gender_2", "gender", _C, "What is the gender of this patient, male or female?"),
    ("gender_3", "gender", _Q, "What is the gender of this patient?"),
    ("ct_ratio_1", "size", _V, "Is the width of the cardiac silhouette wider than 1/2 of the thorax width?"),
    ("mt_ratio_1", "size", _V, "Is the width of the upper mediastinum wider than 1/3 of the thorax width?"),
)

TEMPLATES: tuple[VqaTemplate, ...] = tuple(
    VqaTemplate(i, key, text, ct, st) for i, (key, ct, st, text) in enumerate(_ROWS, start=1))
TEMPLATE_BY_KEY: dict[str, VqaTemplate] = {t.key: t for t in TEMPLATES}
# EHRXQA embeds these questions in its image templates with the wording of its published template list
# (template_idx_to_template_info.json, ``vqa_template``): lower-case first letter and the singular
# "abnormality" ("list all abnormality in the ${object}."); as an "indicating" predicate or a 2-study
# comparison, "Is the ${object} abnormal?" reads "are there any abnormality in the ${object}?".
EHRXQA_WORDING: dict[str, str] = {t.key: (t.text[0].lower() + t.text[1:]).replace("abnormalities", "abnormality")
                                  for t in TEMPLATES}
EHRXQA_ANY_ABNORMALITY = "are there any abnormality in the ${object}?"  # base_abn_1, as EHRXQA also words it


def get_template(template: VqaTemplate | str) -> VqaTemplate:
    """A template by key (or the template itself); KeyError names the unknown key."""
    if isinstance(template, VqaTemplate):
        return template
    try:
        return TEMPLATE_BY_KEY[template]
    except KeyError:
        raise KeyError(f"unknown MIMIC-CXR-VQA template key {template!r}") from None


def wordings(template: VqaTemplate | str) -> tuple[str, ...]:
    """Every wording that asks this template's question: the paper's and EHRXQA's (the oracle reads them all)."""
    t = get_template(template)
    extra = (EHRXQA_ANY_ABNORMALITY,) if t.key == "base_abn_1" else ()
    return tuple(dict.fromkeys((t.text, EHRXQA_WORDING[t.key], *extra)))


def category_names(before: str) -> dict[str, str]:
    """How a ${category} slot reads after the text ``before`` it: singular after "which", else plural."""
    return CATEGORY_TEXT if before.lower().endswith("which ") else CATEGORY_PLURAL


def _slot_text(slot: str, before: str) -> pl.Expr:
    col = pl.col(SLOT_COLUMNS[slot])
    if slot.startswith("category"):
        names = category_names(before)
        return col.replace_strict(names, return_dtype=pl.String)
    if slot == "gender":
        return col.replace_strict(GENDER_TEXT, return_dtype=pl.String)
    return col


def question_expr(template: VqaTemplate | str) -> pl.Expr:
    """A polars expression that fills the template's slots from the argument columns of a frame."""
    t = get_template(template)
    parts = _SLOT.split(t.text)  # literal, slot, literal, slot, ..., literal
    exprs = [pl.lit(p) if i % 2 == 0 else _slot_text(p, parts[i - 1]) for i, p in enumerate(parts) if p or i % 2]
    return pl.concat_str(exprs).alias("question") if len(exprs) > 1 else pl.lit(t.text).alias("question")


def render_question(template: VqaTemplate | str, arguments: dict[str, str]) -> str:
    """One question from argument columns, e.g. {"object_1": "left lung", "attribute_1": "pneumonia"}."""
    t = get_template(template)
    frame = pl.DataFrame({c: [arguments[c]] for c in t.columns}, schema={c: pl.String for c in t.columns})
    return frame.select(question_expr(t)).item() if t.columns else t.text
