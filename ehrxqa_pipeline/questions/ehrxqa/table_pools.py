"""Candidate pools of the table templates: event rows per source, read once per filler (``pools_of``), the
rows a template may anchor on (``candidate_rows``) and why a template has none (``empty_pool_reason``).

A row is (subject, hadm, stay, time, fields): ``fields`` holds the values of the value slots the source
fills (drug_name, drug_route, lab_name, lab_value, ...), read from the database -- never invented.
"""

from __future__ import annotations

from collections import Counter, namedtuple

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.reads import TableReads, cached_read
from ehrxqa_pipeline.questions.ehrxqa.table_sources import SOURCES
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import q

Row = namedtuple("Row", "subject hadm stay time fields")
_ADM = "select subject_id, hadm_id, null, {t}, admission_location, age, dischtime from admissions{w} order by 1, 4, 2"
_DICT = ("select e.subject_id, e.hadm_id, {stay}, e.{t}, d.{label}{extra} from {table} e join {d} d on "
         "d.{k} = e.{k}{w} order by 1, 4, 5, e.row_id")
_VITALS = ", ".join(q(v) for v in slots.VITAL_RANGES)
POOLS = {  # source -> (SQL: subject_id, hadm_id, stay_id, time, fields...; field names)
    "patient": ("select subject_id, null, null, dob, gender from patients order by 1", ("gender",)),
    "item": ("select null, null, null, null, abbreviation, label from d_items where abbreviation is not null "
             "order by 5, 6", ("abbreviation", "label")),
    "admission": (_ADM.format(t="admittime", w=""), ("admission_route", "age", "end")),
    "discharge": (_ADM.format(t="dischtime", w=" where dischtime is not null"), ("admission_route", "age", "end")),
    "current": (_ADM.format(t="admittime", w=" where dischtime is null"), ("admission_route", "age", "end")),
    "icu": ("select subject_id, hadm_id, stay_id, intime, outtime from icustays order by 1, 4", ("end",)),
    "transfer": ("select subject_id, hadm_id, null, intime, careunit from transfers where careunit is not null "
                 "order by 1, 4, 5", ("careunit",)),
    "diagnosis": (_DICT.format(stay="null", t="charttime", label="long_title", extra="", table="diagnoses_icd",
                               d="d_icd_diagnoses", k="icd_code", w=""), ("diagnosis_name",)),
    "procedure": (_DICT.format(stay="null", t="charttime", label="long_title", extra="", table="procedures_icd",
                               d="d_icd_procedures", k="icd_code", w=""), ("procedure_name",)),
    "prescription": ("select subject_id, hadm_id, null, starttime, drug, route from prescriptions order by 1, 4, 5, "
                     "row_id", ("drug_name", "drug_route")),
    "lab": (_DICT.format(stay="null", t="charttime", label="label", extra=", e.valuenum", table="labevents",
                         d="d_labitems", k="itemid", w=""), ("lab_name", "lab_value")),
    "micro": ("select subject_id, hadm_id, null, charttime, spec_type_desc, test_name, org_name from "
              "microbiologyevents order by 1, 4, row_id", ("culture_name", "test_name", "org_name")),
    "intake": (_DICT.format(stay="e.stay_id", t="starttime", label="label", extra=", e.amount", table="inputevents",
                            d="d_items", k="itemid", w=""), ("intake_name", "value")),
    "output": (_DICT.format(stay="e.stay_id", t="charttime", label="label", extra=", e.value", table="outputevents",
                            d="d_items", k="itemid", w=""), ("output_name", "value")),
    "vital": (_DICT.format(stay="e.stay_id", t="charttime", label="label", extra=", e.valuenum", table="chartevents",
                           d="d_items", k="itemid", w=f" where d.label in ({_VITALS})"), ("vital_name", "vital_value")),
    "weight": (_DICT.format(stay="e.stay_id", t="charttime", label="label", extra=", e.valuenum", table="chartevents",
                            d="d_items", k="itemid", w=f" where d.label = {q(slots.WEIGHT_LABEL)}"), ("x", "value")),
    "height": (_DICT.format(stay="e.stay_id", t="charttime", label="label", extra=", e.valuenum", table="chartevents",
                            d="d_items", k="itemid", w=f" where d.label = {q(slots.HEIGHT_LABEL)}"), ("x", "value")),
    "cost": ("select subject_id, hadm_id, null, chargetime from cost order by 1, 4, row_id", ()),
}
POOLS["emergency"] = POOLS["admission"]  # anchored at any admission: "has been to an emergency room" varies
class TablePools:
    """Event rows per source (read on first use) and each patient's visits, kept through ``trace`` (the filler's:
    each use counts the tables read to make it, ``reads``)."""

    def __init__(self, trace: TableReads):
        self.trace, self.conn = trace, trace.conn

    def rows(self, source: str, visit: str | None = None, finished: bool = False) -> list[Row]:
        """The source's rows (in a ``visit`` such as 'rel-hosp-cur' of their patient; with an end time)."""
        return self.trace.cached(("rows", source, visit, finished), lambda: self._rows(source, visit, finished))

    def _rows(self, source: str, visit: str | None, finished: bool) -> list[Row]:
        if visit is None and not finished:
            sql, fields = POOLS[source]
            return [Row(r[0], r[1], r[2], r[3], dict(zip(fields, r[4:]))) for r in self.conn.execute(sql)]
        rows = self.rows(source)
        if visit is not None:
            kind, tags = visit.split("-")[1], self.visit_tags
            rows = [r for r in rows if visit in tags.get((kind, r.stay if kind == "icu" else r.hadm), [])]
        if finished:
            rows = [r for r in rows if r.fields["end"] is not None]
        return rows

    def by_patient(self, source: str, visit: str | None = None, finished: bool = False) -> dict[int, list[Row]]:
        def per_patient() -> dict[int, list[Row]]:
            per: dict[int, list[Row]] = {}
            for r in self.rows(source, visit, finished):
                per.setdefault(r.subject, []).append(r)
            return per
        return self.trace.cached(("by_patient", source, visit, finished), per_patient)

    def values(self, source: str, field: str) -> list:
        """The distinct non-null values of one field of a source, sorted."""
        return self.trace.cached(("values", source, field),
                                 lambda: sorted({r.fields[field] for r in self.rows(source)} - {None}))

    @cached_read
    def visit_tags(self) -> dict[tuple[str, int], list[str]]:
        """(hosp / icu, hadm_id / stay_id) -> the visit filters selecting that visit of its patient."""
        out: dict[tuple[str, int], list[str]] = {}
        for kind, sql in (("hosp", "select subject_id, hadm_id, admittime, dischtime from admissions"),
                          ("icu", "select subject_id, stay_id, intime, outtime from icustays")):
            per: dict[int, list[tuple]] = {}
            for subject, key, start, end in self.conn.execute(sql):
                per.setdefault(subject, []).append((start, key, end))
            for visits in per.values():
                done = sorted(v for v in visits if v[2] is not None)
                for start, key, end in visits:
                    tags = out.setdefault((kind, key), [])
                    if end is None:
                        tags.append(f"rel-{kind}-cur")
                    if done and key == done[0][1]:
                        tags.append(f"rel-{kind}-first")
                    if done and key == done[-1][1]:
                        tags.append(f"rel-{kind}-last")
        return out

    @cached_read
    def gender_of(self) -> dict[int, str]:
        return dict(self.conn.execute("select subject_id, gender from patients"))

    @cached_read
    def age_of(self) -> dict[int, int]:
        return dict(self.conn.execute("select hadm_id, age from admissions"))

    @cached_read
    def dod_of(self) -> dict[int, str]:
        return dict(self.conn.execute("select subject_id, dod from patients where dod is not null"))


def pools_of(filler) -> TablePools:
    """The filler's table pools, created on first use."""
    if getattr(filler, "_table_pools", None) is None:
        filler._table_pools = TablePools(filler.trace)
    return filler._table_pools


def _restriction(t, i: int) -> tuple[str, str | None, bool]:
    """(source, visit, finished) of event reference i: the current visit for "currently" / fixed-visit
    templates, finished stays for lengths of stay."""
    src = t.events[i].source
    visit = t.fixed.tag if t.fixed is not None else None
    if t.kind == "since_current":
        visit = "rel-icu-cur" if src == "icu" else "rel-hosp-cur"
    return src, visit, t.kind == "los"


def candidate_rows(pools: TablePools, t, i: int, pid: int | None = None) -> list[Row]:
    """Rows event reference i of template t may anchor on (all patients, or patient ``pid``)."""
    key = _restriction(t, i)
    return pools.rows(*key) if pid is None else pools.by_patient(*key).get(pid, [])


def candidate_patients(pools: TablePools, t, *refs: int) -> list[int]:
    """Patients with candidate rows for every event reference in ``refs``, sorted."""
    return sorted(set.intersection(*(set(pools.by_patient(*_restriction(t, i))) for i in refs)))


def empty_pool_reason(filler, t) -> str | None:
    """Why template ``t`` has no candidates in the filler's database (None: it has some), for the statistics'
    list of templates that yielded nothing: a source without rows (in the visit the template needs), no
    pair of the two events, no repeated name, no death."""
    p = pools_of(filler)

    def rows(i: int) -> list[Row]:
        return candidate_rows(p, t, i)

    where_ = {"since_current": " in a current visit", "los": " with a finished stay"}.get(t.kind, "")
    if t.fixed is not None:
        where_ = f" in the {t.fixed.nl.replace('on the ', '')}"
    for i, e in enumerate(t.events):
        if not rows(i):
            return f"no {e.source} events ({SOURCES[e.source].table}{where_ if i == 0 else ''})"
    if t.kind == "mortality" and not p.dod_of:
        return "no patient has a date of death"
    pids = {r.subject for r in rows(0)}
    if len(t.events) == 2:
        pids &= {r.subject for r in rows(1)}
        if not pids:
            return f"no patient has both {t.events[0].source} and {t.events[1].source} events"
    if t.kind == "top_same":
        drugs: dict[tuple, set] = {}
        for r in rows(0):
            drugs.setdefault((r.subject, r.hadm), set()).add(r.fields["drug_name"])
        if max((len(x) for x in drugs.values()), default=0) < 2:
            return "no patient was prescribed two different drugs in one hospital visit"
    if t.kind in ("after_names", "top_after"):
        first = {}
        for r in rows(0):
            first[r.subject] = min(first.get(r.subject, r.time), r.time)
        if not any(r.subject in first and r.time > first[r.subject] for r in rows(1)):
            return f"no {t.events[1].source} event follows a {t.events[0].source} event of the same patient"
    if t.kind == "n_times_names":
        name = POOLS[t.events[0].source][1][0]
        seen = Counter((r.subject, r.fields[name]) for r in rows(0))
        if max(seen.values(), default=0) < 2:
            return f"no patient has the same {t.events[0].source} twice"
    return None
