"""The 174 EHRXQA table-related templates (paper appendix, EHRSQL indices 0-182 less ``EXCLUDED``) as data.

A template = the paper's text (``table_text.TEXTS``) + a spec line ``SPEC``: "<index> <kind> <event> [> or ~
<event>] [out=<column>] [fixed=<time filter tag>] [visits=only|no]". An event is "<source>[:<slot>,...]"
(``table_sql.SOURCES``): the value slots that filter it; the kind names the SQL shape (``table_sql.Query``).
Scopes TABLE-NONE (0-5), TABLE-SINGLE (6-121), TABLE-GROUP (122-182). The gold SQL and the "NeuralSQL" are the
same plain SQL. ``values`` keys: patient_id; the {db value} slots of the text (drug_name, drug_name1, ...,
lab_value, vital_value); global1 / global2 (``slots.TimeFilter``), exact1 / exact2 (``slots.EXACT`` keys),
within (``slots.WithinFilter``); the operation slots with their nlq (``slots.AGG_FUNCTION``,
``VALUE_COMPARISON``, ``N_RANK``, ``N_TIMES``, ``N_SURVIVAL``, ``SORT``, ``UNIT_AVERAGE``, ``UNIT_COUNT``,
``AGE_GROUP``); gender ('f' / 'm').

Semantics (the paper gives only the wording; reference-builders.md 6.3 the slot grammar):
- events and times: admissions.admittime (discharges: dischtime), icustays.intime, transfers.intime (care unit
  not null), diagnoses_icd / procedures_icd / labevents / microbiologyevents / outputevents / chartevents
  .charttime, prescriptions / inputevents .starttime, cost.chargetime. A patient is ``subject_id``. Names:
  ICD long titles, d_labitems / d_items labels, prescriptions.drug; a name matches every code / itemid with
  that label (ICD-9 and ICD-10 titles collide). Vital signs are the seven chartevents items of
  ``slots.VITAL_RANGES``; weight / height are the items "admission weight (kg)" / "height (cm)"; a culture is
  microbiologyevents.spec_type_desc, a test test_name, an organism org_name; "via route" filters
  prescriptions.route, "admitted via" admissions.admission_location, "an emergency room" is admission
  location 'emergency room'.
- global filter: on the event's time column; on both events of a pair; visit filters (rel-hosp-*, rel-icu-*)
  only for one patient (ICU ones only on ICU tables). Templates with "on the current hospital / ICU visit" in
  their text carry it as ``fixed`` (recorded in t_tag as global1).
- exact (first, second, last, second to last) picks a *distinct event time*; the answer is what happened
  at that time: every name there (ties are all answered, never broken arbitrarily), or the value there (an
  item is drawn only where that value is unique). Organism / "any organism found" look at all tests of the
  culture or test name at that time, with or without an organism. EHRSQL's exact-default (an explicit
  timestamp, "at 2103-09-16 14:24:00") is not drawn.
- "how many [unit_count] since": unit x Julian-day difference to now (fractional); length of stay: Julian
  days (fractional) of a discharged admission / finished ICU stay.
- change / comparison: value at [exact2] [global2] minus (compared with) value at [exact1] [global1].
- percentile: percent_rank of {lab_value} among all values of that lab in admissions whose age equals the
  patient's age at the visit of [global1] (visit filters only).
- counts: "number of times" / "cases" count event rows; "number of drugs" distinct drug names; visits
  distinct hadm_id / stay_id; patients distinct subject_id. Totals and aggregates are over the rows in the
  filter (doses cast to numbers); "[unit_average] [agg_function]" lists one aggregate per day / month / year
  with events (empty periods do not count).
- "has ... been normal": every measurement in the filter lies in the vital's normal range (reference 5.10;
  the range is written into the SQL); no measurement gives no item.
- "new prescription [global2] compared to [global1]": drugs in global2 except those in global1.
- "[n_times]": a name (or patient) with exactly 2 / at least 2 events in the filter.
- pairs "X [within] after Y": an event X strictly after an event Y of the same patient, both in the global
  filter, with the within condition on the pair (``slots.WithinFilter``); "prescribed A and B [within]" keeps
  A's times with a B prescription at the same time / in the same visit / month.
- top [n_rank]: names whose dense rank by frequency is at most N (ties share a rank, so lists can be longer);
  frequency = event rows, for pairs the later events that follow a qualifying earlier one; "also prescribed
  {drug_name} [time_filter_within]": other drugs prescribed at the same start time / in the same visit / month. Age groups (and gender) restrict the first
  event's admission (patient).
- cost: the cost of an event name = the distinct cost rows of its events (cost.event_type = table,
  event_id = row_id); "total hospital cost that involves X": per admission with an X event, the sum of its
  costs charged in the filter, then [agg_function] over those admissions.
- survival / mortality from each patient's first diagnosis of the name (t0): among patients with t0 at
  least N x 365 days before now (and, for 125, a prescription of the drug after t0), the percentage not dead
  N x 365 days after t0 (dod null or later); mortality rank over diagnosis titles with a rate above 0.
- "dead after diagnosed [within]": first diagnosis in the filter, death (a date) on or after its day, within
  the window; "did not come back [within]": first diagnosis in the filter and no later admission in the window.
- "current patients": an admission without discharge time; aged [age_group]: that admission's age.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.catalog import render
from ehrxqa_pipeline.questions.ehrxqa.table_sources import NAME, SOURCES
from ehrxqa_pipeline.questions.ehrxqa.table_sql import build
from ehrxqa_pipeline.questions.ehrxqa.table_text import EXCLUDED, TEXTS, scope_of

SCOPES = ("TABLE-NONE", "TABLE-SINGLE", "TABLE-GROUP")
# kinds whose answer is a list (any number of rows); every other kind answers exactly one row
LIST_KINDS = frozenset({"names", "cost_of", "exact_names", "after_names", "n_times_names", "new_names", "times",
                        "per_period", "patient_ids", "top", "top_after", "top_same", "mortality"})
_SLOT = re.compile(r"\{(\w+)\}|\[(\w+)\]")

SPEC = """
0 names prescription:drug_name out=route
1 cost_of procedure:procedure_name
2 cost_of lab:lab_name
3 cost_of prescription:drug_name
4 cost_of diagnosis:diagnosis_name
5 names item:abbreviation
6 column patient out=gender
7 column patient out=dob
8 los admission
9 change weight
10 change lab:lab_name
11 change vital:vital_name
12 compare lab:lab_name
13 compare vital:vital_name
14 column admission out=age visits=only
15 column admission out=insurance visits=only
16 column admission out=marital_status visits=only
17 percentile admission > lab:lab_name visits=only
18 since_current admission
19 since_current icu
20 since_exact transfer:careunit fixed=rel-hosp-cur
24 since_exact diagnosis:diagnosis_name fixed=rel-hosp-cur
25 since_exact prescription:drug_name fixed=rel-hosp-cur
26 since_exact lab:lab_name fixed=rel-hosp-cur
27 since_exact intake:intake_name fixed=rel-icu-cur
28 exact_names admission out=admission_type visits=no
30 exact_names transfer
31 exact_value height
32 exact_value weight
33 exact_names diagnosis
34 exact_names procedure
35 exact_names prescription:drug_route
36 exact_names prescription
37 after_names diagnosis:diagnosis_name > prescription
38 after_names procedure:procedure_name > prescription
39 exact_value prescription:drug_name
40 total prescription:drug_name
41 n_times_names prescription
42 new_names prescription
43 exact_value lab:lab_name
44 exact_names lab
45 agg lab:lab_name
48 exact_names micro:culture_name out=org_name
49 exact_names micro:test_name out=org_name
50 exact_names micro out=spec_type_desc
51 exact_names micro out=test_name
52 exact_names intake
53 total intake:intake_name
54 total intake
55 exact_names output
56 total output:output_name
57 total output
58 io_diff intake > output
59 exact_value vital:vital_name
60 agg vital:vital_name
61 total cost
62 exact_time admission visits=no
63 exact_time admission:admission_route visits=no
64 exact_time discharge visits=no
65 los icu
66 exact_time diagnosis:diagnosis_name
67 exact_time procedure
68 exact_time procedure:procedure_name
69 exact_time prescription
70 exact_time prescription:drug_name
71 pair_time prescription:drug_name1 ~ prescription:drug_name2
72 exact_time prescription:drug_route
73 exact_time lab
74 exact_time lab:lab_name
75 exact_sorted lab:lab_name
76 exact_time micro
77 exact_time micro:culture_name
78 exact_time micro:test_name
79 exact_time intake:intake_name
80 exact_time intake
81 exact_time output:output_name
82 exact_time vital:vital_name
83 exact_time vital:vital_name,vital_value
84 exact_sorted vital:vital_name
86 has admission visits=no
87 has emergency visits=no
88 has procedure
89 has procedure:procedure_name
90 n_times_names procedure
91 has diagnosis
92 has diagnosis:diagnosis_name
93 has prescription:drug_name1,drug_name2,drug_name3
94 has prescription
95 has prescription:drug_name
96 has lab
97 has lab:lab_name
99 has micro
100 has micro:culture_name
101 has micro:test_name
102 has_org micro:culture_name
103 has_org micro:test_name
104 has intake:intake_name
105 has output:output_name
106 has vital:vital_name,vital_value
107 normal vital:vital_name
108 times admission visits=no
109 per_period lab:lab_name
110 per_period weight
111 per_period intake:intake_name
112 per_period output:output_name
113 per_period vital:vital_name
114 count admission out=hadm_id visits=no
115 count icu out=stay_id
116 count procedure:procedure_name
117 count prescription out=drug
118 count prescription:drug_name
119 count lab:lab_name
120 count intake:intake_name
121 count output:output_name
122 patients current
123 patients current
124 survival diagnosis:diagnosis_name
125 survival diagnosis:diagnosis_name > prescription:drug_name
126 mortality diagnosis
127 cost_agg procedure:procedure_name
128 cost_agg lab:lab_name
129 cost_agg prescription:drug_name
130 cost_agg diagnosis:diagnosis_name
131 patient_ids diagnosis:diagnosis_name
132 records_agg diagnosis:diagnosis_name
133 dead_after diagnosis:diagnosis_name
134 no_return diagnosis:diagnosis_name
135 patients admission
136 patients discharge
138 patients transfer:careunit
139 patients_after procedure:procedure_name > diagnosis:diagnosis_name
140 patients_after diagnosis:diagnosis_name1 > diagnosis:diagnosis_name2
141 patients diagnosis:diagnosis_name
142 patients procedure:procedure_name
143 patients_n_times procedure:procedure_name
144 patients_after procedure:procedure_name1 > procedure:procedure_name2
145 patients_after diagnosis:diagnosis_name > procedure:procedure_name
146 cases procedure:procedure_name
147 patients prescription:drug_name
148 cases prescription:drug_name
149 patients_after procedure:procedure_name > prescription:drug_name
150 patients_after diagnosis:diagnosis_name > prescription:drug_name
151 patients lab:lab_name
152 patients micro:culture_name
153 patients micro:test_name
154 patients intake:intake_name
155 top diagnosis
156 top diagnosis
157 top_after procedure:procedure_name > diagnosis
158 top_after diagnosis:diagnosis_name > diagnosis
159 top procedure
160 top procedure
161 top_after procedure:procedure_name > procedure
162 top_after diagnosis:diagnosis_name > procedure
163 top prescription
164 top prescription
165 top_same prescription:drug_name ~ prescription
166 top_after prescription:drug_name > prescription
167 top_after procedure:procedure_name > prescription
168 top_after diagnosis:diagnosis_name > prescription
169 top_after diagnosis:diagnosis_name > prescription
170 top_after diagnosis:diagnosis_name > prescription
171 top lab
172 top lab
173 top_after diagnosis:diagnosis_name > lab
174 top_after procedure:procedure_name > lab
175 top micro out=spec_type_desc
176 top micro out=test_name
177 top_after diagnosis:diagnosis_name > micro out=spec_type_desc
178 top_after diagnosis:diagnosis_name > micro out=test_name
179 top_after procedure:procedure_name > micro out=spec_type_desc
180 top_after procedure:procedure_name > micro out=test_name
181 top intake
182 top output
"""


@dataclass(frozen=True)
class Ev:
    """One event reference of a template: a source and the value slots that filter it."""

    source: str
    slots: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableTemplate:
    """One EHRXQA table-related template (same interface as ``catalog.ImageTemplate``)."""

    index: int
    scope: str  # one of SCOPES
    text: str  # the paper's wording
    kind: str  # SQL shape (a ``table_sql.Query`` method)
    events: tuple[Ev, ...]  # one event, or the earlier and the later event of a pair
    out: str = NAME  # answered column (names by default)
    fixed: slots.TimeFilter | None = None  # the visit the text names ("on the current hospital visit")
    visits: str = "any"  # global filters drawn: any / only (visit filters) / no (no visit filters)
    vqa_key: None = None

    @functools.cached_property  # read at every draw: worked out once (fields are frozen)
    def slots(self) -> frozenset[str]:
        """Every {db value} and [operation / time] slot of the text."""
        return frozenset(a or b for a, b in _SLOT.findall(self.text))

    @property
    def one_row(self) -> bool:
        return self.kind not in LIST_KINDS

    def question(self, values: dict) -> str:
        return render(self.text, values)

    def references(self, values: dict) -> list[str]:
        return []

    def queries(self, values: dict) -> tuple[str, str]:
        """(gold SQL, NeuralSQL): the same plain SQL, with the ``current_time`` placeholder."""
        sql = build(self, values)
        return sql, sql


def _event(token: str) -> Ev:
    source, _, names = token.partition(":")
    if source not in SOURCES:
        raise ValueError(f"unknown event source {source!r}")
    return Ev(source, tuple(names.split(",")) if names else ())


def _build() -> tuple[TableTemplate, ...]:
    out = []
    for line in SPEC.strip().splitlines():
        idx, kind, *rest = line.split()
        opts = dict(r.split("=", 1) for r in rest if "=" in r)
        events = tuple(_event(r) for r in rest if "=" not in r and r not in (">", "~"))
        index = int(idx)
        fixed = slots.TimeFilter(opts["fixed"]) if "fixed" in opts else None
        t = TableTemplate(index, scope_of(index), TEXTS[index], kind, events, opts.get("out", NAME), fixed,
                          opts.get("visits", "any"))
        named = {s for e in events for s in e.slots} | {"patient_id", "gender", "lab_value"}
        if not {s for s in t.slots if f"{{{s}}}" in t.text} <= named:
            raise RuntimeError(f"table template {index}: a value slot of its text filters no event")
        out.append(t)
    if sorted(t.index for t in out) != sorted(TEXTS):
        raise RuntimeError("SPEC must give exactly one line per table template text")
    return tuple(out)


TABLE_TEMPLATES: tuple[TableTemplate, ...] = _build()
__all__ = ["EXCLUDED", "LIST_KINDS", "SCOPES", "TABLE_TEMPLATES", "TableTemplate"]
