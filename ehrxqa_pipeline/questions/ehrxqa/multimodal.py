"""The 75 EHRXQA image+table templates (paper Table C12) as data, built compositionally.

A template = a table event (diagnosis, procedure, prescription: named, or "any") x a temporal form x a CXR
"indicating" predicate (``catalog.INDICATORS``: one MIMIC-CXR-VQA verify template). Families and indices
(reference-builders.md 6.1; +10 per event, +j the predicate's position in INDICATORS):
- 5000-5053 (27) "same period": the event and an indicating study both inside [time_filter_global1]; the
  named events take all 6 predicates, the "any" events the three the paper lists (0, 1, 3);
- 5100-5125 (18) "CXR after event": a study indicating the finding [time_filter_within] after the event;
- 5200-5225 (18) "event after CXR": the event [time_filter_within] after an indicating study;
- 6000-6033 (12) group: count / list the patients aged [age_group] (6000 / 6010), also of one {gender}
  (6020 / 6030), with an indicating study during a hospital visit [time_filter_global1]; predicates 0, 1, 3.

Semantics (written out because the paper gives only the wording):
- event times: diagnoses_icd.charttime, procedures_icd.charttime, prescriptions.starttime; a diagnosis /
  procedure name matches every ICD code with that long title (ICD-9 and ICD-10 titles collide);
- the global filter applies to both events ("within the same period" needs one: null is not drawn for the
  5000 family); the "after" forms need the earlier event strictly before the later one, plus the within
  condition on the pair (``slots.WithinFilter``);
- group: the study lies in an admission whose age at admission is in the age group (and the patient has
  the gender); a study outside any admission never counts.
NeuralSQL in the published shapes (``neuralsql.shapes``): "same period" P3 (``select (event exists) and
(a study in the period shows it)``), the "after" forms P4 (the CXR join side reaches its studies through
``tb_cxr.study_id in (select distinct t1.study_id ... func_vqa)``), the group forms P2. Texts are the published
q_tags byte for byte (with the list's stray " ?" of ``SPACE_BEFORE_QUESTION_MARK``).
``values`` keys: patient_id, diagnosis_name / procedure_name / drug_name, global1 (``TimeFilter``), within
(``WithinFilter``), age_group, gender ('f' / 'm'), and the VQA argument columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.catalog import INDICATORS, EHRXQA_WORDING, indicator, over_studies, render
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import q

SCOPES = ("MULTIMODAL-SINGLE", "MULTIMODAL-GROUP")


@dataclass(frozen=True)
class Event:
    """A table event kind: its table, time column, name slot and the condition matching a name."""

    key: str
    table: str
    time: str
    slot: str | None  # None: "any" event
    same: str  # words of the "same period" form
    after: str  # words after "after having" / the event in the "event after CXR" form

    def condition(self, values: dict) -> str:
        if self.slot is None:
            return ""
        name = q(values[self.slot])
        if self.table == "prescriptions":
            return f"prescriptions.drug = {name}"
        lookup = "d_icd_diagnoses" if self.table == "diagnoses_icd" else "d_icd_procedures"
        return f"{self.table}.icd_code in (select {lookup}.icd_code from {lookup} where {lookup}.long_title = {name})"

    def _where(self, values: dict, flt: slots.TimeFilter) -> str:
        t, pid = self.table, int(values["patient_id"])
        return slots.where(f"{t}.subject_id = {pid}", self.condition(values), flt.sql(pid, f"{t}.{self.time}"))

    def rows(self, values: dict, flt: slots.TimeFilter) -> str:
        """The patient's events (of the name) inside the global filter: subject_id, hadm_id, event_time."""
        t = self.table
        return f"select {t}.subject_id, {t}.hadm_id, {t}.{self.time} as event_time from {t}{self._where(values, flt)}"

    def exists(self, values: dict, flt: slots.TimeFilter) -> str:
        """Whether the patient has such an event inside the global filter (one boolean row)."""
        return f"select count(*) > 0 from {self.table}{self._where(values, flt)}"


EVENTS = {
    "diagnosis": Event("diagnosis", "diagnoses_icd", "charttime", "diagnosis_name",
                       "been diagnosed with {diagnosis_name}", "been diagnosed with {diagnosis_name}"),
    "procedure": Event("procedure", "procedures_icd", "charttime", "procedure_name",
                       "received a {procedure_name} procedure", "received {procedure_name} procedure"),
    "prescription": Event("prescription", "prescriptions", "starttime", "drug_name",
                          "been prescribed with {drug_name}", "been prescribed with {drug_name}"),
    "any-diagnosis": Event("any-diagnosis", "diagnoses_icd", "charttime", None, "received any diagnosis", ""),
    "any-procedure": Event("any-procedure", "procedures_icd", "charttime", None, "received any procedure", ""),
    "any-prescription": Event("any-prescription", "prescriptions", "starttime", None,
                              "been prescribed any medication", ""),
}
NAMED = ("diagnosis", "procedure", "prescription")
ANY_PREDICATES = (0, 1, 3)  # the predicates the paper pairs with "any" events and with the group forms
_SAME = "has_verb patient {patient_id} {event} [time_filter_global1] and also had a chest x-ray study indicating " \
        "{ind} within the same period?"
_CXR_AFTER = "has_verb patient {patient_id} had a chest x-ray study indicating {ind} [time_filter_within] after " \
             "having {event} [time_filter_global1]?"
_EVENT_AFTER = "has_verb patient {patient_id} {event} [time_filter_within] after having had a chest x-ray study " \
               "indicating {ind} [time_filter_global1]?"
# the published template list writes " ?" at the end of these (template_idx_to_template_info.json); kept byte for byte
SPACE_BEFORE_QUESTION_MARK = frozenset(range(5110, 5126)) | frozenset(range(5200, 5226))
GROUP_FORMS = {  # form -> (index base, text)
    "count": (6000, "count the number of patients aged [age_group] who had a chest x-ray study during hospital visit "
                    "indicating {ind} [time_filter_global1]."),
    "list": (6010, "list the ids of patients aged [age_group] who had a chest x-ray study during hospital visit "
                   "indicating {ind} [time_filter_global1]."),
    "gender-count": (6020, "count the number of {gender} patients aged [age_group] who had a chest x-ray study "
                           "during hospital visit indicating {ind} [time_filter_global1]."),
    "gender-list": (6030, "list the ids of {gender} patients aged [age_group] who had a chest x-ray study during "
                          "hospital visit indicating {ind} [time_filter_global1]."),
}


def _patient_studies(patient_id: int, flt: slots.TimeFilter) -> str:
    cond = slots.where(f"tb_cxr.subject_id = {int(patient_id)}", flt.sql(patient_id))
    return f"select tb_cxr.study_id from tb_cxr{cond}"


def _cxr_rows(patient_id: int, flt: slots.TimeFilter, predicate: str) -> str:
    """The patient's studies in the filter that show the predicate (on ``t1.study_id``), as a join side: the
    published NeuralSQL reaches them through ``tb_cxr.study_id in (select distinct t1.study_id ... func_vqa)``."""
    shown = over_studies("distinct t1.study_id", _patient_studies(patient_id, flt), predicate)
    return f"select tb_cxr.subject_id, tb_cxr.hadm_id, tb_cxr.studydatetime from tb_cxr where tb_cxr.study_id in ({shown})"


@dataclass(frozen=True)
class MultimodalTemplate:
    """One EHRXQA image+table template (same interface as ``catalog.ImageTemplate``)."""

    index: int
    scope: str  # one of SCOPES
    text: str
    vqa_key: str  # the indicating predicate's MIMIC-CXR-VQA verify template
    form: str  # same / cxr-after / event-after, or a GROUP_FORMS key
    event: str = ""  # an EVENTS key (single-patient forms)
    wording: str = ""  # the published vqa_template where it is not EHRXQA_WORDING[vqa_key]

    @property
    def vqa_text(self) -> str:
        return self.wording or EHRXQA_WORDING[self.vqa_key]

    @property
    def one_row(self) -> bool:
        """The answer must be exactly one row (every form but the group lists)."""
        return not self.form.endswith("list")

    def question(self, values: dict) -> str:
        return render(self.text, values)

    def references(self, values: dict) -> list[str]:
        return []

    def queries(self, values: dict) -> tuple[str, str]:
        """(gold SQL, NeuralSQL), both with the ``current_time`` placeholder."""
        flt = values.get("global1", slots.TimeFilter())
        out = []
        for pred in indicator(self.vqa_key, self.vqa_text, values):
            out.append(self._group(values, flt, pred) if self.scope == "MULTIMODAL-GROUP"
                       else self._single(values, flt, pred))
        return out[0], out[1]

    def _single(self, v: dict, flt: slots.TimeFilter, pred: str) -> str:
        event, pid = EVENTS[self.event], int(v["patient_id"])
        if self.form == "same":
            shown = over_studies("count(*) > 0", _patient_studies(pid, flt), pred)
            return f"select ({event.exists(v, flt)}) and ({shown})"
        events, cxr = event.rows(v, flt), _cxr_rows(pid, flt, pred)
        within: slots.WithinFilter = v["within"]
        if self.form == "cxr-after":
            first, then, t1, t2 = events, cxr, "t1.event_time", "t2.studydatetime"
        else:
            first, then, t1, t2 = cxr, events, "t1.studydatetime", "t2.event_time"
        return (f"select count(*) > 0 from ({first}) as t1 join ({then}) as t2 on t1.subject_id = t2.subject_id "
                f"where datetime({t1}) < datetime({t2}) and {within.sql(t1, t2, 't1.hadm_id', 't2.hadm_id')}")

    def _group(self, v: dict, flt: slots.TimeFilter, pred: str) -> str:
        ages = f"admissions.age {slots.AGE_GROUP[v['age_group']]}"
        cond = [f"tb_cxr.hadm_id in (select admissions.hadm_id from admissions where {ages})"]
        if self.form.startswith("gender"):
            cond.append(f"tb_cxr.subject_id in (select patients.subject_id from patients where patients.gender = "
                        f"{q(v['gender'])})")
        counting = self.form.endswith("count")
        select = "count(distinct t1.subject_id)" if counting else "distinct t1.subject_id"
        tail = "" if counting else " order by t1.subject_id"  # a set of patients: sorted
        return over_studies(select, f"select * from tb_cxr{slots.where(*cond, flt.sql(None))}", pred, tail)


def _build() -> tuple[MultimodalTemplate, ...]:
    out: list[MultimodalTemplate] = []
    for base, form, text in ((5000, "same", _SAME), (5100, "cxr-after", _CXR_AFTER), (5200, "event-after",
                                                                                      _EVENT_AFTER)):
        for e, key in enumerate(EVENTS if form == "same" else NAMED):
            ev = EVENTS[key]
            for j, (ind, vqa_key, wording) in enumerate(INDICATORS):
                if ev.slot is None and j not in ANY_PREDICATES:
                    continue
                words = ev.same if form != "cxr-after" else ev.after
                t = text.replace("{event}", words).replace("{ind}", ind)
                index = base + 10 * e + j
                if index in SPACE_BEFORE_QUESTION_MARK:
                    t = t[:-1] + " ?"
                out.append(MultimodalTemplate(index, "MULTIMODAL-SINGLE", t, vqa_key, form, key, wording))
    for form, (base, text) in GROUP_FORMS.items():
        for j in ANY_PREDICATES:
            ind, vqa_key, wording = INDICATORS[j]
            out.append(MultimodalTemplate(base + j, "MULTIMODAL-GROUP", text.replace("{ind}", ind), vqa_key, form,
                                          wording=wording))
    return tuple(out)


MULTIMODAL_TEMPLATES: tuple[MultimodalTemplate, ...] = _build()
