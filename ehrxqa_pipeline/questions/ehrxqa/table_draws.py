"""Value draws for the table templates: ``draw_table(filler, template, rng)``, called by ``ImageFiller``.

The same stages as the image templates (paper section 4.1.4): a patient with events of the template's
source (none / group scopes: any patient's event), an anchor event of that patient, the names of the
template's value slots read from the anchor (and, for a pair, from a later event of the same patient), time
filters anchored at the anchor's time (``ImageFiller.time_filter``; visit filters that contain the anchor's
visit where the template needs one; ICU visit filters for ICU tables), within filters that usually cover
the pair's gap, operation values from their tables (age group and gender usually the anchor's). To reach
"no" and zero answers, a quarter of the yes/no and count draws move the filter to another admission of the
patient or take a name from another patient. Pools are read once per filler (``TablePools``).

The filler keeps a draw when its SQL executes to a valid answer (no NULL, one row where ``one_row``); this
module also rejects empty answers of list templates (a list question presupposes its subject exists).
"""

from __future__ import annotations

import sqlite3

import numpy as np

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.slots import TimeFilter, WithinFilter
from ehrxqa_pipeline.questions.ehrxqa.table_pools import Row, candidate_patients, candidate_rows, pools_of
from ehrxqa_pipeline.questions.ehrxqa.table_sources import SOURCES
from ehrxqa_pipeline.questions.neuralsql import postprocess_query

PAIR_KINDS = frozenset({"after_names", "patients_after", "top_after", "top_same", "pair_time", "io_diff",
                        "percentile", "survival", "change", "compare", "new_names"})
_COUNTING = frozenset({"has", "has_org", "count", "cases", "patients", "normal"})


def _pick(rng: np.random.Generator, xs):
    return xs[int(rng.integers(len(xs)))] if len(xs) else None


def _number(x) -> int | float:
    """A drawn value as the question shows it: integral values without '.0'."""
    return int(x) if float(x).is_integer() else float(x)


def _age_group(age) -> str | None:
    return None if age is None or age < 20 else "60 or above" if age >= 60 else f"{age // 10 * 10}s"


class _Draw:
    def __init__(self, filler, t, rng: np.random.Generator):
        self.f, self.t, self.rng, self.p = filler, t, rng, pools_of(filler)
        self.patient = "patient_id" in t.slots
        self.v: dict = {}

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    # -- anchors -----------------------------------------------------------------------------------------
    def rows(self, i: int, pid: int | None = None) -> list[Row]:
        return candidate_rows(self.p, self.t, i, pid)

    def patient_with(self, *refs: int) -> int | None:
        return _pick(self.rng, candidate_patients(self.p, self.t, *refs))

    def name(self, i: int, row: Row) -> None:
        for slot in self.t.events[i].slots:
            if slot in ("vital_value", "drug_name1", "drug_name2", "drug_name3"):
                continue
            self.v[slot] = row.fields[slot.rstrip("0123456789")]

    # -- time filters ------------------------------------------------------------------------------------
    def global_filter(self, row: Row, allow_null: bool = True) -> TimeFilter:
        stay = all(SOURCES[e.source].stay for e in self.t.events)  # the filter applies to every event
        if self.patient and row.hadm is not None:
            hosp = self.p.visit_tags.get(("hosp", row.hadm), [])
            icu = self.p.visit_tags.get(("icu", row.stay), []) if stay and row.stay is not None else []
            if self.t.visits == "only":
                return TimeFilter(_pick(self.rng, hosp)) if hosp else None
            if self.t.visits != "no" and (hosp or icu) and self.chance(0.3):
                return TimeFilter(_pick(self.rng, hosp + icu))
        return self.f.time_filter(self.rng, row.time, patient=False, allow_null=allow_null)

    def within(self, t1: str, t2: str) -> WithinFilter:
        kind = self.t.kind
        if kind in ("pair_time", "top_same"):  # prescribed together: at the same time, same visit or month
            return WithinFilter("within-same") if t1 == t2 and self.chance(0.7) else \
                _pick(self.rng, [WithinFilter("within-hosp"), WithinFilter("within-month")])
        w = self.f.within(self.rng, t1, t2)
        if kind in ("dead_after", "no_return") and w.tag == "within-hosp":
            w = WithinFilter("within-n_month", int(self.rng.integers(1, 13)))
        return w

    # -- the draw ----------------------------------------------------------------------------------------
    def operations(self, anchor: Row | None) -> None:
        for slot, table in (("agg_function", slots.AGG_FUNCTION), ("comparison", slots.VALUE_COMPARISON),
                            ("n_rank", slots.N_RANK), ("n_times", slots.N_TIMES), ("sort", slots.SORT),
                            ("n_survival_period", slots.N_SURVIVAL), ("unit_average", slots.UNIT_AVERAGE),
                            ("unit_count", slots.UNIT_COUNT)):
            if slot in self.t.slots:
                self.v[slot] = _pick(self.rng, list(table))
        if "age_group" in self.t.slots:
            own = _age_group(self.p.age_of.get(anchor.hadm)) if anchor is not None else None
            self.v["age_group"] = own if own and self.chance(0.7) else _pick(self.rng, list(slots.AGE_GROUP))
        if "gender" in self.t.slots:
            own = self.p.gender_of.get(anchor.subject) if anchor is not None else None
            self.v["gender"] = own if own and self.chance(0.7) else _pick(self.rng, ["f", "m"])
        for k in ("1", "2"):
            if f"time_filter_exact{k}" in self.t.slots:
                self.v[f"exact{k}"] = _pick(self.rng, ["first", "last"] if self.chance(0.7) else
                                            ["second", "second to last"])

    def draw(self) -> dict | None:
        t = self.t
        if t.kind in ("survival", "mortality", "dead_after", "no_return"):
            return self.first_diagnosis()
        pair = t.kind in PAIR_KINDS and len(t.events) == 2
        pid = None
        if self.patient:
            pid = self.patient_with(0, 1) if pair else self.patient_with(0)
            if pid is None:
                return None
            self.v["patient_id"] = int(pid)
        anchor = _pick(self.rng, self.rows(0, pid))
        if anchor is None:
            return None
        if t.kind == "names" and t.events[0].source == "item":  # prefer abbreviations that differ from the label
            own = [r for r in self.rows(0) if r.fields["abbreviation"] != r.fields["label"]]
            anchor = _pick(self.rng, own) if own and self.chance(0.8) else anchor
        self.name(0, anchor)
        self.operations(anchor)
        if t.kind in ("change", "compare", "new_names"):
            return self.two_times(anchor, pid)
        later = self.second(anchor, pid) if pair else None
        if pair and later is None:
            return None
        if t.kind in ("has", "count") and self.chance(0.25):
            other = _pick(self.rng, self.p.rows(t.events[0].source))
            if t.events[0].slots and other is not None:
                self.name(0, other)
        if "vital_value" in t.events[0].slots:
            self.v["vital_value"] = _number(anchor.fields["vital_value"])
        if "lab_value" in t.slots:
            self.v["lab_value"] = _number(later.fields["lab_value"])
        if "drug_name1" in t.events[0].slots:
            self.multi_drugs(anchor, later)
        if t.kind == "normal":
            self.v["normal_range"] = "normal"  # o_tag records the vital's range
        if t.fixed is not None:
            self.v["global1"] = t.fixed
        elif "time_filter_global1" in t.slots:
            focus = later if later is not None and (t.kind == "percentile" or self.chance(0.5)) else anchor
            if t.kind in _COUNTING and self.patient and self.chance(0.25):
                focus = _pick(self.rng, self.p.by_patient("admission").get(pid, [])) or focus
            flt = self.global_filter(focus)
            if flt is None:
                return None
            self.v["global1"] = flt
        if "time_filter_within" in t.slots:
            self.v["within"] = self.within(anchor.time, later.time)
        return self.v

    def second(self, anchor: Row, pid: int | None) -> Row | None:
        """The pair's later event: same patient, usually after the anchor (percentile: a lab of the anchor
        admission; same-time pairs: another drug, usually at the anchor's time)."""
        t, rows = self.t, self.rows(1, anchor.subject)
        if t.kind == "percentile":
            row = _pick(self.rng, [r for r in rows if r.hadm == anchor.hadm])
        elif t.kind in ("top_same", "pair_time"):
            name = anchor.fields["drug_name"]
            same = [r for r in rows if r.time == anchor.time and r.fields["drug_name"] != name]
            other = [r for r in rows if r.fields["drug_name"] != name]
            row = _pick(self.rng, same) if same and self.chance(0.8) else _pick(self.rng, other)
        else:
            after = [r for r in rows if r.time > anchor.time]
            if t.events[0].source == t.events[1].source and t.events[1].slots:  # "X after Y": usually X != Y
                other = [r for r in after if r.fields != anchor.fields]
                after = other if other and self.chance(0.8) else after
            row = _pick(self.rng, after) if after and self.chance(0.85) else _pick(self.rng, rows)
        if row is not None:
            self.name(1, row)
        return row

    def multi_drugs(self, anchor: Row, later: Row | None) -> None:
        self.v["drug_name1"] = anchor.fields["drug_name"]
        pool = [d for d in self.p.values("prescription", "drug_name") if d != self.v["drug_name1"]]
        if later is not None:
            self.v["drug_name2"] = later.fields["drug_name"]
        else:  # "drug1, drug2, or drug3": the anchor's drug and two others
            picks = self.rng.choice(len(pool), size=min(2, len(pool)), replace=False) if pool else []
            others = [pool[int(i)] for i in picks]
            if len(others) < 2:
                return
            self.v["drug_name2"], self.v["drug_name3"] = others
            order = self.rng.permutation(3)
            names = [self.v["drug_name1"], self.v["drug_name2"], self.v["drug_name3"]]
            for i, j in enumerate(order):
                self.v[f"drug_name{i + 1}"] = names[int(j)]

    def two_times(self, anchor: Row, pid: int) -> dict | None:
        """Two events of one name: an earlier (global1 / exact1) and a later one (global2 / exact2)."""
        rows = [r for r in self.rows(0, pid) if all(r.fields.get(s) == self.v.get(s) for s in self.t.events[0].slots)]
        r1, r2 = sorted([anchor, _pick(self.rng, rows)], key=lambda r: r.time)
        same = self.p.visit_tags.get(("hosp", r1.hadm), []) if r1.hadm == r2.hadm else []
        if same and self.chance(0.4):
            self.v["global1"] = self.v["global2"] = TimeFilter(_pick(self.rng, same))
        else:
            null = self.t.kind != "new_names"
            self.v["global1"] = self.f.time_filter(self.rng, r1.time, patient=False, allow_null=null)
            self.v["global2"] = self.f.time_filter(self.rng, r2.time, patient=False, allow_null=null)
        if "exact2" in self.v and self.v["exact2"] == self.v["exact1"] and self.v["global1"] == self.v["global2"]:
            self.v["exact1"], self.v["exact2"] = "first", "last"
        return self.v

    def first_diagnosis(self) -> dict | None:
        """Survival / mortality / death / return: a diagnosis name (usually of a patient who died), its first
        time t0 for that patient, a survival period that t0 allows, a window that usually covers the outcome."""
        rows = self.rows(0)
        dod_of = self.p.dod_of  # (one lookup: a kept value counts its tables at each use)
        dead = [r for r in rows if r.subject in dod_of]
        anchor = _pick(self.rng, dead) if dead and self.chance(0.6) else _pick(self.rng, rows)
        if anchor is None:
            return None
        self.operations(anchor)
        if self.t.kind == "mortality":
            return self.v
        self.name(0, anchor)
        name = anchor.fields["diagnosis_name"]
        t0 = min(r.time for r in self.p.by_patient("diagnosis")[anchor.subject] if r.fields["diagnosis_name"] == name)
        years = int(self.f.conn.execute(postprocess_query(f"select (julianday(current_time) - julianday('{t0}')) "
                                                          f"/ 365")).fetchone()[0])
        if "n_survival_period" in self.v and years >= 1:
            self.v["n_survival_period"] = list(slots.N_SURVIVAL)[int(self.rng.integers(min(years, 5)))]
        if len(self.t.events) > 1:
            later = [r for r in self.p.by_patient("prescription").get(anchor.subject, []) if r.time > t0]
            row = _pick(self.rng, later) or _pick(self.rng, self.p.rows("prescription"))
            if row is None:
                return None
            self.v["drug_name"] = row.fields["drug_name"]
        if "time_filter_global1" in self.t.slots:
            self.v["global1"] = self.f.time_filter(self.rng, t0, patient=False)
        if "time_filter_within" in self.t.slots:
            if self.t.kind == "dead_after":
                end = self.p.dod_of.get(anchor.subject, t0)
            else:
                back = [r.time for r in self.p.by_patient("admission")[anchor.subject] if r.time > t0]
                end = min(back) if back else t0
            self.v["within"] = self.within(t0, end)
        return self.v


def draw_table(filler, t, rng: np.random.Generator) -> dict | None:
    """Values for table template ``t`` (None when this draw failed; the filler retries)."""
    v = _Draw(filler, t, rng).draw()
    if v is None or t.one_row:
        return v
    try:  # list templates: a non-empty answer (kept by the filler for ``instantiate``)
        answer = filler.answer(t.queries(v)[0])
    except sqlite3.Error:
        return None
    return v if answer else None
