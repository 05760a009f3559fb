"""One instantiated EHRXQA template and its record fields (reference-builders.md 6.7)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.catalog import _VSLOT
from ehrxqa_pipeline.questions.ehrxqa.registry import modality
from ehrxqa_pipeline.questions.vqa_templates import SLOT_COLUMNS

DB_VALUES = ("patient_id", "study_id", "study_id1", "study_id2", "diagnosis_name", "procedure_name", "drug_name",
             "gender",
             # table templates (reference-builders.md 6.2)
             "drug_name1", "drug_name2", "drug_name3", "drug_route", "diagnosis_name1", "diagnosis_name2",
             "procedure_name1", "procedure_name2", "lab_name", "lab_value", "vital_name", "vital_value",
             "intake_name", "output_name", "culture_name", "test_name", "careunit", "admission_route",
             "abbreviation")  # the record's "value": database values a question names
_OPERATIONS = {"unit_count": slots.UNIT_COUNT, "age_group": slots.AGE_GROUP,  # o_tag slots: nlq -> sql
               "agg_function": slots.AGG_FUNCTION, "comparison": slots.VALUE_COMPARISON, "n_rank": slots.N_RANK,
               "n_times": slots.N_TIMES, "n_survival_period": slots.N_SURVIVAL, "sort": slots.SORT,
               "unit_average": slots.UNIT_AVERAGE}


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
    studies: list[int] = field(default_factory=list)  # the resolved study references

    def record(self) -> dict:
        """The published record fields this step fills, in the published order, plus the internal keys
        ``_gold_program``, ``template_index``, ``scope`` and ``modality``; ``is_impossible`` is true only for the
        unanswerable items (``unanswerable.py``)."""
        v, t = self.values, self.template
        return {"db_id": "mimic_iv_cxr", "template": self.question, "query": self.neural_sql.lower(),
                "value": {k: v[k] for k in DB_VALUES if k in v}, "q_tag": t.text, "t_tag": t_tag(v),
                "o_tag": o_tag(v), "v_tag": v_tag(v), "tag": tag(t.text, v), "answer": self.answer,
                "_gold_program": self.gold_sql.lower(), "template_index": t.index, "scope": t.scope,
                "modality": modality(t.scope), "is_impossible": bool(getattr(t, "impossible", False))}
