"""SQL of the table templates: ``build(template, values)`` composes the shared parts of ``table_sources``
according to the template's ``kind`` (one ``Query`` method per kind; semantics in ``table_templates``).
The conditions of one event reference: patient, the source's base condition, the value slots (several
slots of one kind, "{drug_name1}, {drug_name2}, or {drug_name3}", give one IN), the global time filter on
the source's time column, and the age group / gender of the first event. Every query is plain SQLite with the
``current_time`` placeholder.
"""

from __future__ import annotations

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.slots import EXACT, TimeFilter, where
from ehrxqa_pipeline.questions.ehrxqa.table_sources import (NAME, NOW, SOURCES, after, at_exact, events, exact_time,
                                                            first_diagnosis, names, num, pair, survival, top)
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import q


class Query:
    """The SQL of one template filled with ``values``."""

    def __init__(self, t, v: dict):
        self.t, self.v = t, v
        self.pid = int(v["patient_id"]) if "patient_id" in t.slots else None
        self.ev = [SOURCES[e.source] for e in t.events]

    def flt(self, k: int = 1) -> TimeFilter:
        if k == 1 and self.t.fixed is not None:
            return self.t.fixed
        return self.v.get(f"global{k}", TimeFilter())

    def conds(self, i: int = 0, k: int = 1, flt: TimeFilter | None = None) -> list[str]:
        """Conditions on event reference i: patient, base, value slots, global filter k, population."""
        src, v = self.ev[i], self.v
        out = [f"{src.table}.subject_id = {self.pid}"] if self.pid is not None else []
        out.append(src.base)
        alike: dict[str, list] = {}  # "drug_name1, drug_name2, or drug_name3": one IN condition
        for slot in self.t.events[i].slots:
            if slot == "vital_value":
                out.append(f"{src.table}.valuenum {slots.VALUE_COMPARISON[v['comparison']]} {num(v[slot])}")
            else:
                alike.setdefault(slot.rstrip("0123456789"), []).append(v[slot])
        out += [src.condition(base, vals if len(vals) > 1 else vals[0]) for base, vals in alike.items()]
        out.append((flt or self.flt(k)).sql(self.pid, src.t))
        if i == 0 and "age_group" in self.t.slots:
            ages = f"admissions.age {slots.AGE_GROUP[v['age_group']]}"
            out.append(ages if src.table == "admissions" else
                       f"{src.table}.hadm_id in (select admissions.hadm_id from admissions where {ages})")
        if i == 0 and "gender" in self.t.slots:
            out.append(f"{src.table}.subject_id in (select patients.subject_id from patients where "
                       f"patients.gender = {q(v['gender'])})")
        return [c for c in out if c]

    def op(self, slot: str) -> str:
        table = {"agg_function": slots.AGG_FUNCTION, "n_rank": slots.N_RANK, "n_times": slots.N_TIMES,
                 "n_survival_period": slots.N_SURVIVAL, "sort": slots.SORT, "unit_average": slots.UNIT_AVERAGE,
                 "unit_count": slots.UNIT_COUNT, "comparison": slots.VALUE_COMPARISON}[slot]
        return table[self.v[slot]]

    def sql(self) -> str:
        return getattr(self, f"_{self.t.kind}")()

    # -- one source -------------------------------------------------------------------------------------
    def _frm(self, i: int = 0, **kw) -> str:
        return f" from {self.ev[i].table}{where(*self.conds(i, **kw))}"

    def _names(self):
        return names(self.ev[0], self.t.out, self.conds())

    _column = _names

    def _cost_of(self):
        src = self.ev[0]
        return (f"select distinct cost.cost from cost where cost.event_type = {q(src.table)} and cost.event_id in "
                f"(select {src.table}.row_id{self._frm()})")

    def _exact_names(self):
        return names(self.ev[0], self.t.out, at_exact(self.ev[0], self.conds(), self.v["exact1"]))

    def _value_at(self, k: int) -> str:
        src = self.ev[0]
        c = at_exact(src, self.conds(k=k), self.v[f"exact{k}"])
        return f"select distinct {src.table}.{src.value}{self._where(c)}"

    def _where(self, conds: list[str]) -> str:
        return f" from {self.ev[0].table}{where(*conds)}"

    def _exact_value(self):
        return self._value_at(1)

    def _change(self, op: str = "-"):
        col = self.ev[0].value
        return f"select t2.{col} {op} t1.{col} from ({self._value_at(2)}) as t2, ({self._value_at(1)}) as t1"

    def _compare(self):
        return self._change(self.op("comparison"))

    def _los(self):
        src = self.ev[0]
        c = at_exact(src, [*self.conds(), f"{src.table}.{src.end} is not null"], self.v["exact1"])
        return f"select strftime('%J', {src.table}.{src.end}) - strftime('%J', {src.t}){self._where(c)}"

    def _percentile(self):  # events: the patient's admission(s) in the filter, then the lab
        age = f"select admissions.age from admissions{where(*self.conds())}"
        pop = (f"select labevents.valuenum, percent_rank() over (order by labevents.valuenum) as c1 from labevents "
               f"where {self.ev[1].condition('lab_name', self.v['lab_name'])} and labevents.hadm_id in "
               f"(select admissions.hadm_id from admissions where admissions.age in ({age}))")
        return f"select distinct t1.c1 from ({pop}) as t1 where t1.valuenum = {num(self.v['lab_value'])}"

    def _since(self, time: str) -> str:
        return f"{self.op('unit_count')} * ({NOW} - strftime('%J', {time}))"

    def _since_current(self):
        src = self.ev[0]
        return f"select {self._since(src.t)}{self._where([*self.conds(), f'{src.table}.{src.end} is null'])}"

    def _since_exact(self):
        src = self.ev[0]
        return f"select {self._since('t1.' + src.time)} from ({exact_time(src, self.conds(), self.v['exact1'])}) as t1"

    def _exact_time(self):
        return exact_time(self.ev[0], self.conds(), self.v["exact1"])

    def _exact_sorted(self):
        src, c = self.ev[0], self.conds()
        extreme = f"{src.table}.{src.value} = (select {self.op('sort')}({src.table}.{src.value}){self._where(c)})"
        return exact_time(src, [*c, extreme], self.v["exact1"])

    def _has(self):
        return f"select count(*) > 0{self._frm()}"

    def _has_org(self):
        c = at_exact(self.ev[0], self.conds(), self.v["exact1"])
        return f"select count(*) > 0{self._where([*c, 'microbiologyevents.org_name is not null'])}"

    def _normal(self):
        return (f"select sum(chartevents.valuenum {slots.normal_range_sql(self.v['vital_name'])}) = count(*)"
                f"{self._frm()}")

    def _times(self):
        return f"select {self.ev[0].t}{self._frm()}"

    def _total(self):
        return f"select sum({self.ev[0].amount()}){self._frm()}"

    def _agg(self):
        return f"select {self.op('agg_function')}({self.ev[0].amount()}){self._frm()}"

    def _per_period(self):
        src = self.ev[0]
        return (f"select {self.op('agg_function')}({src.amount()}){self._frm()} group by "
                f"strftime('{self.op('unit_average')}', {src.t})")

    def _count(self):
        what = "*" if self.t.out == NAME else f"distinct {self.ev[0].table}.{self.t.out}"
        return f"select count({what}){self._frm()}"

    def _cases(self):
        return f"select count(*){self._frm()}"

    def _patients(self):
        return f"select count(distinct {self.ev[0].table}.subject_id){self._frm()}"

    def _patient_ids(self):
        return f"select distinct {self.ev[0].table}.subject_id{self._frm()}"

    def _n_times_names(self):
        src = self.ev[0]
        col = src.column(NAME)
        return (f"select t1.event_name from (select {col} as event_name, count(*) as c1 from {src.table}"
                f"{src.join(NAME)}{where(*self.conds())} group by {col}) as t1 where t1.c1 {self.op('n_times')}")

    def _patients_n_times(self):
        t = self.ev[0].table
        return (f"select count(*) from (select {t}.subject_id, count(*) as c1{self._frm()} group by {t}.subject_id) "
                f"as t1 where t1.c1 {self.op('n_times')}")

    def _new_names(self):
        src = self.ev[0]
        return f"{names(src, NAME, self.conds(k=2))} except {names(src, NAME, self.conds(k=1))}"

    def _io_diff(self):
        return (f"select (select sum({self.ev[0].amount()}){self._frm(0)}) - "
                f"(select sum({self.ev[1].amount()}){self._frm(1)})")

    def _top(self):
        src = self.ev[0]
        col = src.column(self.t.out)
        rest = f" from {src.table}{src.join(self.t.out)}{where(*self.conds(), f'{col} is not null')}"
        return top(col, "count(*)", rest, self.op("n_rank"))

    # -- two events -------------------------------------------------------------------------------------
    def _pair(self, link: str, named: bool = False) -> str:
        e1 = events(self.ev[0], self.conds(0))
        e2 = events(self.ev[1], self.conds(1), self.t.out if named else None)
        return pair(e1, e2, link)

    def _after_names(self):
        return f"select distinct t2.event_name{self._pair(after(self.v['within']), named=True)}"

    def _patients_after(self):
        return f"select count(distinct t1.subject_id){self._pair(after(self.v['within']))}"

    def _top_after(self):
        return top("t2.event_name", "count(distinct t2.event_id)", self._pair(after(self.v["within"]), named=True),
                   self.op("n_rank"))

    def _top_same(self):
        within = self.v["within"].sql("t1.event_time", "t2.event_time", "t1.hadm_id", "t2.hadm_id")
        link = f"{within} and t2.event_name <> {q(self.v['drug_name'])}"
        return top("t2.event_name", "count(distinct t2.event_id)", self._pair(link, named=True), self.op("n_rank"))

    def _pair_time(self):
        order, offset = EXACT[self.v["exact1"]]
        w = self.v["within"].sql("t1.event_time", "t2.event_time", "t1.hadm_id", "t2.hadm_id")
        return (f"select distinct t1.event_time{self._pair(w)} order by t1.event_time {order} limit 1"
                + (f" offset {offset}" if offset else ""))

    # -- group: costs, records, first diagnosis ---------------------------------------------------------
    def _cost_agg(self):
        src = self.ev[0]
        involved = f"cost.hadm_id in (select {src.table}.hadm_id{self._frm(flt=TimeFilter())})"
        return (f"select {self.op('agg_function')}(t1.c1) from (select sum(cost.cost) as c1 from cost"
                f"{where(involved, self.flt().sql(None, 'cost.chargetime'))} group by cost.hadm_id) as t1")

    def _records_agg(self):
        src = self.ev[0]
        return (f"select {self.op('agg_function')}(t1.c1) from (select count(distinct {src.table}.hadm_id) as c1"
                f"{self._frm()} group by strftime('{self.op('unit_average')}', {src.t})) as t1")

    def _first(self) -> str:
        return first_diagnosis(self.ev[0].condition("diagnosis_name", self.v["diagnosis_name"]))

    def _survival(self):
        alive, seen = survival(self.op("n_survival_period"))
        conds = [seen]
        if len(self.ev) > 1:
            conds.append(f"t1.subject_id in (select prescriptions.subject_id from prescriptions where "
                         f"{self.ev[1].condition('drug_name', self.v['drug_name'])} and "
                         f"datetime(prescriptions.starttime) > datetime(t1.t0))")
        return (f"select 100.0 * sum(case when {alive} then 1 else 0 end) / count(*) from ({self._first()}) as t1 "
                f"join patients on patients.subject_id = t1.subject_id{where(*conds)}")

    def _mortality(self):
        alive, seen = survival(self.op("n_survival_period"))
        rates = (f"select t1.event_name, 100.0 - 100.0 * sum(case when {alive} then 1 else 0 end) / count(*) as c2 "
                 f"from ({first_diagnosis('', by_name=True)}) as t1 join patients on patients.subject_id = "
                 f"t1.subject_id where {seen} group by t1.event_name")
        return top("t2.event_name", "t2.c2", f" from ({rates}) as t2 where t2.c2 > 0", self.op("n_rank"))

    def _dead_after(self):
        w = self.v["within"].sql("date(t1.t0)", "patients.dod", "", "")
        conds = [self.flt().sql(None, "t1.t0"), "patients.dod is not null", "date(patients.dod) >= date(t1.t0)", w]
        return (f"select count(distinct t1.subject_id) from ({self._first()}) as t1 join patients on "
                f"patients.subject_id = t1.subject_id{where(*conds)}")

    def _no_return(self):
        w = self.v["within"].sql("t1.t0", "admissions.admittime", "", "")
        back = (f"not exists (select admissions.hadm_id from admissions where admissions.subject_id = t1.subject_id "
                f"and datetime(admissions.admittime) > datetime(t1.t0) and {w})")
        return (f"select count(distinct t1.subject_id) from ({self._first()}) as t1"
                f"{where(self.flt().sql(None, 't1.t0'), back)}")


def build(template, values: dict) -> str:
    return Query(template, values).sql()
