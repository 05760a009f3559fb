"""EHRSQL-style unanswerable questions (off by default): questions about data the EHRXQA schema cannot hold.

EHRSQL (and TrustSQL) mix such questions into the data so that a model can learn to abstain; EHRXQA has
none (``is_impossible`` is always false there). ``unanswerable_items(conn, seed, n)`` gives up to ``n`` of them
as ``FilledItem``s whose template has ``impossible = True``: the record says ``is_impossible: true``, the
query and gold program are the EHRSQL marker ``null`` and the answer is ``[]``. They are not in ``CATALOG``
(indices 9000+, ``UNANSWERABLE``); a sampler adds them only when asked (e.g. an ``unanswerable`` count
option, default 0), and the gold-vs-NeuralSQL consistency check must skip them (they have no SQL).

Each template says why it is unanswerable: the EHRSQL templates about allergies and ward ids
(``table_text.SCHEMA_LACKS``; 22, 23 and 85 are left out by the paper but answerable here, so not reused)
plus questions about things no table here records.
Values (patient ids, names, time filters) come from the database, so the questions look like real ones.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.catalog import render
from ehrxqa_pipeline.questions.ehrxqa.item import FilledItem
from ehrxqa_pipeline.questions.ehrxqa.table_text import EXCLUDED, SCHEMA_LACKS, scope_of
from ehrxqa_pipeline.rng import generator

NULL_QUERY = "null"  # the EHRSQL / TrustSQL query of an unanswerable question
_SLOT = re.compile(r"\{(\w+)\}|\[(\w+)\]")


@dataclass(frozen=True)
class UnanswerableTemplate:
    """A question the schema cannot answer (same interface as the catalog templates, plus ``reason``)."""

    index: int
    scope: str
    text: str
    reason: str
    vqa_key: None = None
    one_row: bool = False
    impossible: bool = True

    @property
    def slots(self) -> frozenset[str]:
        return frozenset(a or b for a, b in _SLOT.findall(self.text))

    def question(self, values: dict) -> str:
        return render(self.text, values)

    def references(self, values: dict) -> list[str]:
        return []

    def queries(self, values: dict) -> tuple[str, str]:
        return NULL_QUERY, NULL_QUERY


_OUTSIDE = (  # (scope, text, reason): questions about data no EHRXQA table holds
    ("TABLE-SINGLE", "What is the blood type of patient {patient_id}?", "no blood type is recorded"),
    ("TABLE-SINGLE", "What is the ethnicity of patient {patient_id}?", "race / ethnicity is not in the schema"),
    ("TABLE-SINGLE", "What is the name of the doctor who treated patient {patient_id} [time_filter_global1]?",
     "no caregiver names (de-identified, no provider table)"),
    ("TABLE-SINGLE", "What did the discharge summary of patient {patient_id} say [time_filter_global1]?",
     "no clinical notes"),
    ("TABLE-SINGLE", "What was the ECG rhythm of patient {patient_id} [time_filter_global1]?",
     "no ECG / waveform data"),
    ("TABLE-SINGLE", "What is the home address of patient {patient_id}?", "addresses are removed by de-identification"),
    ("TABLE-SINGLE", "What was the room number of patient {patient_id} [time_filter_global1]?",
     "no room or bed numbers"),
    ("TABLE-SINGLE", "Has_verb patient {patient_id} received a flu vaccine [time_filter_global1]?",
     "no immunization table"),
    ("TABLE-NONE", "What are the side effects of {drug_name}?", "no drug knowledge base"),
    ("TABLE-NONE", "What is the brand name of {drug_name}?", "no brand names (generic drug strings only)"),
    ("TABLE-NONE", "What is the normal range of a {lab_name} lab test?",
     "lab reference ranges are not in the schema"),
    ("TABLE-GROUP", "Count the number of patients who were vaccinated against influenza [time_filter_global1].",
     "no immunization table"),
    ("TABLE-GROUP", "What is the average waiting time of patients in the radiology department "
                    "[time_filter_global1]?", "no radiology scheduling data"),
)
UNANSWERABLE: tuple[UnanswerableTemplate, ...] = (
    *(UnanswerableTemplate(9000 + i, scope_of(i), *EXCLUDED[i]) for i in SCHEMA_LACKS),
    *(UnanswerableTemplate(9100 + j, scope, text, reason) for j, (scope, text, reason) in enumerate(_OUTSIDE)),
)
UNANSWERABLE_BY_INDEX = {t.index: t for t in UNANSWERABLE}
_FILTERS = (slots.TimeFilter(), slots.TimeFilter("rel-year-this"), slots.TimeFilter("rel-year-last"),
            *(slots.TimeFilter("abs-year-since", str(y)) for y in range(2100, 2106)))
_VISITS = (slots.TimeFilter("rel-hosp-cur"), slots.TimeFilter("rel-hosp-first"), slots.TimeFilter("rel-hosp-last"))
_POOLS = {"patient_id": "select distinct subject_id from patients order by 1",
          "drug_name": "select distinct drug from prescriptions order by 1",
          "lab_name": "select distinct label from d_labitems order by 1",
          "procedure_name": "select distinct long_title from d_icd_procedures order by 1"}


def unanswerable_items(conn: sqlite3.Connection, seed: int, n: int,
                       templates: tuple[UnanswerableTemplate, ...] = UNANSWERABLE) -> list[FilledItem]:
    """Up to ``n`` distinct unanswerable items (round-robin over ``templates``), deterministic in ``seed``."""
    rng = generator(seed, "ehrxqa.unanswerable")
    pools = {k: [r[0] for r in conn.execute(sql)] for k, sql in _POOLS.items()}
    out, seen = [], set()
    for attempt in range(4 * n):
        if len(out) >= n:
            break
        t = templates[attempt % len(templates)]
        v: dict = {}
        for slot in t.slots:
            if slot in pools and pools[slot]:
                v[slot] = pools[slot][int(rng.integers(len(pools[slot])))]
        if "ward_id" in t.slots:
            v["ward_id"] = int(rng.integers(7, 80))  # ward numbers as EHRSQL's MIMIC-III questions show them
        if "time_filter_global1" in t.slots:
            options = _FILTERS + (_VISITS if "patient_id" in t.slots else ())
            v["global1"] = options[int(rng.integers(len(options)))]
        if "time_filter_exact1" in t.slots:
            v["exact1"] = ("first", "last")[int(rng.integers(2))]
        if "unit_count" in t.slots:
            v["unit_count"] = ("days", "hours")[int(rng.integers(2))]
        if any(s in pools and s not in v for s in t.slots):
            continue  # an empty pool (e.g. no prescriptions)
        question = t.question(v)
        if question not in seen:
            seen.add(question)
            out.append(FilledItem(t, v, question, NULL_QUERY, NULL_QUERY, []))
    return out
