"""The shared parts of the table templates' SQL: event ``Source``s (table, time column, name, value, the
columns each value slot filters) and the query pieces built on them -- the exact event time, name lists,
event rows and pairs joined under a within filter, dense-rank top-N, each patient's first diagnosis and
survival after it. ``table_sql.Query`` composes them per template kind (semantics: ``table_templates``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.slots import EXACT, where
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import q

NAME = "name"  # output / slot column: the event's name (a dictionary label where the source has one)
NOW = "strftime('%J', current_time)"


@dataclass(frozen=True)
class Source:
    """One kind of event: a table, its time column, its name and value, and what each value slot filters."""

    key: str
    table: str
    time: str
    name: str = ""  # name column (of the dictionary when ``lookup``)
    lookup: tuple[str, str] | None = None  # (dictionary table, key column)
    value: str = ""  # measured / charged value column
    numeric: bool = True  # False: the value is text (doses) and is cast for sums
    base: str = ""  # condition every row of the source meets
    slot_columns: dict[str, str] = field(default_factory=dict)  # value slot -> column it filters (NAME: the name)
    end: str = ""  # end-of-stay column of a visit source
    stay: bool = False  # has stay_id (ICU visit filters apply)

    @property
    def t(self) -> str:
        return f"{self.table}.{self.time}"

    def column(self, out: str) -> str:
        if out != NAME:
            return f"{self.table}.{out}"
        if not self.name:
            raise ValueError(f"source {self.key} has no name column; give the template an out= column")
        return f"{self.lookup[0]}.{self.name}" if self.lookup else f"{self.table}.{self.name}"

    def join(self, out: str) -> str:
        if out != NAME or not self.lookup:
            return ""
        d, k = self.lookup
        return f" join {d} on {d}.{k} = {self.table}.{k}"

    def amount(self) -> str:
        col = f"{self.table}.{self.value}"
        return col if self.numeric else f"cast({col} as real)"

    def condition(self, slot: str, value) -> str:
        """Condition of one value slot ('drug_name2' filters like 'drug_name'); a list value gives IN. A name
        of a dictionary matches every code / itemid with that label (ICD titles collide across versions)."""
        col = self.slot_columns[slot.rstrip("0123456789")]
        vals = list(value) if isinstance(value, (list, tuple)) else [value]
        test = f"= {q(vals[0])}" if len(vals) == 1 else f"in ({', '.join(q(x) for x in vals)})"
        if col == NAME and self.lookup:
            d, k = self.lookup
            return f"{self.table}.{k} in (select {d}.{k} from {d} where {d}.{self.name} {test})"
        return f"{self.column(col)} {test}"


def _item(label: str) -> str:
    return f"chartevents.itemid in (select d_items.itemid from d_items where d_items.label = {q(label)})"


_ITEMS = ("d_items", "itemid")
SOURCES: dict[str, Source] = {s.key: s for s in (
    Source("patient", "patients", "dob"),
    Source("item", "d_items", "itemid", "label", slot_columns={"abbreviation": "abbreviation"}),
    Source("admission", "admissions", "admittime", slot_columns={"admission_route": "admission_location"},
           end="dischtime"),
    Source("discharge", "admissions", "dischtime", base="admissions.dischtime is not null"),
    Source("current", "admissions", "admittime", base="admissions.dischtime is null"),
    Source("emergency", "admissions", "admittime", base="admissions.admission_location = 'emergency room'"),
    Source("icu", "icustays", "intime", end="outtime", stay=True),
    Source("transfer", "transfers", "intime", "careunit", base="transfers.careunit is not null",
           slot_columns={"careunit": NAME}),
    Source("diagnosis", "diagnoses_icd", "charttime", "long_title", ("d_icd_diagnoses", "icd_code"),
           slot_columns={"diagnosis_name": NAME}),
    Source("procedure", "procedures_icd", "charttime", "long_title", ("d_icd_procedures", "icd_code"),
           slot_columns={"procedure_name": NAME}),
    Source("prescription", "prescriptions", "starttime", "drug", value="dose_val_rx", numeric=False,
           slot_columns={"drug_name": NAME, "drug_route": "route"}),
    Source("lab", "labevents", "charttime", "label", ("d_labitems", "itemid"), "valuenum",
           slot_columns={"lab_name": NAME}),
    Source("micro", "microbiologyevents", "charttime",
           slot_columns={"culture_name": "spec_type_desc", "test_name": "test_name"}),
    Source("intake", "inputevents", "starttime", "label", _ITEMS, "amount", slot_columns={"intake_name": NAME},
           stay=True),
    Source("output", "outputevents", "charttime", "label", _ITEMS, "value", slot_columns={"output_name": NAME},
           stay=True),
    Source("vital", "chartevents", "charttime", "label", _ITEMS, "valuenum", slot_columns={"vital_name": NAME},
           stay=True),
    Source("weight", "chartevents", "charttime", "label", _ITEMS, "valuenum", base=_item(slots.WEIGHT_LABEL),
           stay=True),
    Source("height", "chartevents", "charttime", "label", _ITEMS, "valuenum", base=_item(slots.HEIGHT_LABEL),
           stay=True),
    Source("cost", "cost", "chargetime", value="cost"),
)}


def num(x) -> str:
    """A number as an SQL / question literal: integral values without '.0'."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def exact_time(src: Source, conds: list[str], exact: str) -> str:
    """The [exact] distinct event time (first / second / last / second to last) of the rows meeting conds."""
    order, offset = EXACT[exact]
    return (f"select distinct {src.t} from {src.table}{where(*conds)} order by {src.t} {order} limit 1"
            + (f" offset {offset}" if offset else ""))


def at_exact(src: Source, conds: list[str], exact: str) -> list[str]:
    return [*conds, f"{src.t} = ({exact_time(src, conds, exact)})"]


def names(src: Source, out: str, conds: list[str]) -> str:
    col = src.column(out)
    return f"select distinct {col} from {src.table}{src.join(out)}{where(*conds, f'{col} is not null')}"


def events(src: Source, conds: list[str], out: str | None = None) -> str:
    """Event rows: subject_id, hadm_id, event_time, event_id (+ event_name when ``out``)."""
    cols = [f"{src.table}.subject_id", f"{src.table}.hadm_id", f"{src.t} as event_time",
            f"{src.table}.row_id as event_id"]
    if out is None:
        return f"select {', '.join(cols)} from {src.table}{where(*conds)}"
    col = src.column(out)
    return (f"select {', '.join(cols)}, {col} as event_name from {src.table}{src.join(out)}"
            f"{where(*conds, f'{col} is not null')}")


def pair(e1: str, e2: str, link: str) -> str:
    """FROM clause joining the earlier events t1 and the later events t2 of the same patient."""
    return f" from ({e1}) as t1 join ({e2}) as t2 on t1.subject_id = t2.subject_id where {link}"


def after(within: slots.WithinFilter) -> str:
    return (f"datetime(t1.event_time) < datetime(t2.event_time) and "
            f"{within.sql('t1.event_time', 't2.event_time', 't1.hadm_id', 't2.hadm_id')}")


def top(name: str, count: str, rest: str, n: str) -> str:
    """Names whose dense rank by ``count`` (descending) is at most n; ``rest``: FROM ... (no GROUP BY)."""
    return (f"select t3.event_name from (select {name} as event_name, dense_rank() over (order by {count} desc) "
            f"as c1{rest} group by {name}) as t3 where t3.c1 <= {n}")


def first_diagnosis(cond: str, by_name: bool = False) -> str:
    """Each patient's first diagnosis time t0 (per diagnosis title when ``by_name``)."""
    if by_name:
        return ("select diagnoses_icd.subject_id, d_icd_diagnoses.long_title as event_name, "
                "min(diagnoses_icd.charttime) as t0 from diagnoses_icd join d_icd_diagnoses on "
                "d_icd_diagnoses.icd_code = diagnoses_icd.icd_code group by diagnoses_icd.subject_id, "
                "d_icd_diagnoses.long_title")
    return (f"select diagnoses_icd.subject_id, min(diagnoses_icd.charttime) as t0 from diagnoses_icd where {cond} "
            f"group by diagnoses_icd.subject_id")


def survival(years: str) -> tuple[str, str]:
    """(alive N years after t0, t0 at least N years before now); a year is 365 days."""
    alive = f"patients.dod is null or strftime('%J', patients.dod) - strftime('%J', t1.t0) > {years} * 365"
    return alive, f"{NOW} - strftime('%J', t1.t0) > {years} * 365"
