"""One instantiated EHRXQA template and its record fields (reference-builders.md 6.7).

``value`` holds exactly the database values written into the question: one entry per ``{name}`` placeholder
of the template text (the record's ``q_tag``; ``${...}`` visual slots are not database values), in the order
they first appear. ``resolved_value`` (an addition to the published fields, after ``answer``) holds the
studies the query resolves at sampling time (``FilledItem.studies``): ``study_id`` for a 1-image template,
``study_id1`` (the target study) and ``study_id2`` (the compared, earlier study) for a 2-image template
(equal to the written ids where the question names them), ``{}`` for a template that picks no single study.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.catalog import _VSLOT, slot_words
from ehrxqa_pipeline.questions.ehrxqa.registry import modality
from ehrxqa_pipeline.questions.vqa_templates import SLOT_COLUMNS

DB_PLACEHOLDER = re.compile(r"(?<!\$)\{(\w+)\}")  # {patient_id}, not the visual ${object}
STUDY_KEYS = {"IMAGE-SINGLE-1": ("study_id",), "IMAGE-SINGLE-2": ("study_id1", "study_id2")}  # resolved_value keys
RESOLVED_KEYS = tuple(dict.fromkeys(k for keys in STUDY_KEYS.values() for k in keys))  # every key it may hold
_OPERATIONS = {"unit_count": slots.UNIT_COUNT, "age_group": slots.AGE_GROUP,  # o_tag slots: nlq -> sql
               "agg_function": slots.AGG_FUNCTION, "comparison": slots.VALUE_COMPARISON, "n_rank": slots.N_RANK,
               "n_times": slots.N_TIMES, "n_survival_period": slots.N_SURVIVAL, "sort": slots.SORT,
               "unit_average": slots.UNIT_AVERAGE}


def placeholders(text: str) -> list[str]:
    """The database-value placeholders of a template text, in order of first appearance."""
    return list(dict.fromkeys(DB_PLACEHOLDER.findall(text)))


def study_keys(scope: str) -> tuple[str, ...]:
    """The ``resolved_value`` keys of a template scope: the study references its queries resolve."""
    return STUDY_KEYS.get(scope, ())


def written_values(template, values: dict) -> dict:
    """The record's ``value``: the value of each ``{name}`` placeholder of the template text."""
    names = placeholders(template.text)
    missing = [n for n in names if n not in values]
    if missing:
        raise ValueError(f"template {template.index}: no value for placeholder(s) {missing} of {template.text!r}")
    return {n: values[n] for n in names}


def resolved_values(template, studies: list[int]) -> dict:
    """The record's ``resolved_value``: ``study_keys(template.scope)`` -> the studies resolved at sampling."""
    keys = study_keys(template.scope)
    if len(studies) != len(keys):
        raise ValueError(f"template {template.index} ({template.scope}) resolves {len(keys)} stud(ies) "
                         f"{keys}, got {studies!r}; build items with ImageFiller.instantiate")
    return dict(zip(keys, studies))


def t_tag(values: dict) -> list[str]:
    """[global1, global2, within, exact1, exact2] tags; '' where the template has no such slot."""
    out = [values[k].tag if k in values else "" for k in ("global1", "global2", "within")]
    return out + [f"exact-{values[k].replace(' ', '_')}" if k in values else "" for k in ("exact1", "exact2")]


def o_tag(values: dict) -> dict:
    """Operation slots as {slot: {nlq, sql, type, sql_pattern}} (the published EHRXQA form)."""
    out = {}
    for slot, table in _OPERATIONS.items():
        if values.get(slot) in table:  # (an image comparison label is a visual value, not an operation)
            nlq = values[slot]
            sql = f"{table[nlq]} * " if slot == "unit_count" else table[nlq]
            out[slot] = {"nlq": nlq, "sql": sql, "type": nlq, "sql_pattern": f"[{slot}]"}
    if values.get("vital_name") in slots.VITAL_RANGES and values.get("normal_range"):  # "been normal": the range
        out["normal_range"] = {"nlq": "normal", "sql": slots.normal_range_sql(values["vital_name"]),
                               "type": values["vital_name"], "sql_pattern": "[normal_range]"}
    return out


def v_tag(values: dict) -> dict:
    out = {kind: [values[c] for c in (f"{kind}_1", f"{kind}_2") if c in values]
           for kind in ("object", "category", "attribute")}
    if values.get("comparison") in slots.COMPARISONS:
        out["comparison"] = [values["comparison"]]
    return out


def tag(text: str, values: dict) -> str:
    """The template text with [slot:tag] annotations and visual values filled; {db values} left as slots."""
    tags = dict(zip(("time_filter_global1", "time_filter_global2", "time_filter_within", "time_filter_exact1",
                     "time_filter_exact2"), t_tag(values)))
    out = _VSLOT.sub(lambda m: values["comparison"] if m.group(1) == "comparison"
                     else str(values[SLOT_COLUMNS[m.group(1)]]), text)
    out = slots.tense(out, values.get("global1"))

    def slot(m: re.Match) -> str:
        name = m.group(1)
        value = tags.get(name) or values.get(name, "")
        return f"[{name}:{value}]"
    return re.sub(r"\[(\w+)\]", slot, out)


@dataclass
class FilledItem:
    """One instantiated template: question, both queries and the gold answer."""

    template: object  # catalog.ImageTemplate or multimodal.MultimodalTemplate
    values: dict
    question: str
    gold_sql: str
    neural_sql: str
    answer: list
    studies: list[int] = field(default_factory=list)  # the resolved study references (study 1, study 2)

    @property
    def fills(self) -> dict[str, str]:
        """Placeholder name -> the words written for it in ``question`` (``catalog.slot_words``): stored with
        the item, so that a paraphrase of the template is filled with the same words."""
        return slot_words(self.template.text, self.values)

    def record(self) -> dict:
        """The published record fields this step fills, in the published order, then ``resolved_value``,
        plus the internal keys ``_gold_program``, ``template_index``, ``scope`` and ``modality``;
        ``is_impossible`` is true only for the unanswerable items (``unanswerable.py``)."""
        v, t = self.values, self.template
        return {"db_id": "mimic_iv_cxr", "template": self.question, "query": self.neural_sql.lower(),
                "value": written_values(t, v), "q_tag": t.text, "t_tag": t_tag(v),
                "o_tag": o_tag(v), "v_tag": v_tag(v), "tag": tag(t.text, v), "answer": self.answer,
                "resolved_value": resolved_values(t, self.studies),
                "_gold_program": self.gold_sql.lower(), "template_index": t.index, "scope": t.scope,
                "modality": modality(t.scope), "is_impossible": bool(getattr(t, "impossible", False))}
