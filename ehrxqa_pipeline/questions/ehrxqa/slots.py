"""Operation slots of the EHRXQA templates: time filters, tense, comparison labels, units, age groups,
study references.

Time filters follow reference-builders.md 6.3 (the EHRSQL tags), on any time column: the global filter
(``TimeFilter``: absolute / relative / mixed periods, hospital or ICU visit), the within filter between two
events (``WithinFilter``) and the exact choice of one event (``EXACT``: first, last, second, second to
last). "Now" is the placeholder ``current_time`` that ``neuralsql.postprocess_query`` turns into
'2105-12-31 23:59:00'. Each filter gives its words and an SQLite condition; the gold SQL and the NeuralSQL
use the same condition text, so both select the same candidate rows by construction.

Tense placeholders (``has_verb``, ``is_verb``, ...) follow the global filter (``tense``): present when its
period reaches now (no filter, "since ...", "this year", the current visit), past otherwise. ``has_verb``
is "has" / "had" (not EHRSQL's "did", which would need the main verb changed: "did patient 1 been ...").

Study references (paper Table C10) are SQL subqueries returning one column ``study_id``:
``by_time`` (the [exact] study of a patient [global]), ``by_id`` (study {study_id}) and ``previous``
(the latest study of the same patient strictly before a target study).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COL = "tb_cxr.studydatetime"
_NOW = "current_time"


def _period(unit: str, back: int) -> str:
    return f"datetime({{c}}, 'start of {unit}') = datetime({_NOW}, 'start of {unit}', '-{back} {unit}')"


def _visit(table: str, key: str, start: str, end: str, which: str) -> str:
    """{key column} in the patient's current / first / last (closed) hospital or ICU visit."""
    owner = (f"{table}.subject_id = {{p}}" if table == "admissions" else
             f"{table}.hadm_id in (select admissions.hadm_id from admissions where admissions.subject_id = {{p}})")
    if which == "cur":
        return f"{{{key}}} in (select {table}.{key} from {table} where {owner} and {table}.{end} is null)"
    order = "asc" if which == "first" else "desc"
    return (f"{{{key}}} in (select {table}.{key} from {table} where {owner} and {table}.{end} is not null "
            f"order by {table}.{start} {order} limit 1)")


# tag -> (words, SQLite condition, tense). {v} value, {c} time column, {p} patient, {hadm_id} / {stay_id} the
# row's visit columns; {yyyy} {mm} {dd} parts of an absolute value.
_CMP = {"in": "=", "since": ">=", "until": "<="}
_ABS = {"year": ("{yyyy}", "%Y"), "month": ("{mm}/{yyyy}", "%Y-%m"), "day": ("{mm}/{dd}/{yyyy}", "%Y-%m-%d")}
_GLOBAL: dict[str, tuple[str, str, str]] = {"null": ("", "", "present")}
for _unit, (_words, _fmt) in _ABS.items():
    for _rel, _op in _CMP.items():
        _GLOBAL[f"abs-{_unit}-{_rel}"] = (f"{'on' if _unit == 'day' and _rel == 'in' else _rel} {_words}",
                                          f"strftime('{_fmt}', {{c}}) {_op} '{{v}}'",
                                          "present" if _rel == "since" else "past")
for _unit, (_this, _last) in {"year": ("this year", "last year"), "month": ("this month", "last month"),
                              "day": ("today", "yesterday")}.items():
    _GLOBAL[f"rel-{_unit}-this"] = (_this, _period(_unit, 0), "present")
    _GLOBAL[f"rel-{_unit}-last"] = (_last, _period(_unit, 1), "past")
    _GLOBAL[f"rel-{_unit}-since"] = (f"since {{v}} {_unit} ago", f"datetime({{c}}) >= datetime({_NOW}, '-{{v}} {_unit}')",
                                     "present")
    _GLOBAL[f"rel-{_unit}-until"] = (f"until {{v}} {_unit} ago", f"datetime({{c}}) <= datetime({_NOW}, '-{{v}} {_unit}')",
                                     "past")
for _rel, _back in (("this", 0), ("last", 1)):
    _GLOBAL[f"mix-month-{_rel}_year"] = (f"in {{v}}/{_rel} year",
                                         f"strftime('%m', {{c}}) = '{{v}}' and {_period('year', _back)}", "past")
    _GLOBAL[f"mix-day-{_rel}_year"] = (f"on {{mm}}/{{dd}}/{_rel} year",
                                       f"strftime('%m-%d', {{c}}) = '{{v}}' and {_period('year', _back)}", "past")
    _GLOBAL[f"mix-day-{_rel}_month"] = (f"on {_rel} month/{{v}}",
                                        f"strftime('%d', {{c}}) = '{{v}}' and {_period('month', _back)}", "past")
for _which in ("cur", "first", "last"):
    _when = "current" if _which == "cur" else _which
    _GLOBAL[f"rel-hosp-{_which}"] = (f"on the {_when} hospital visit",
                                     _visit("admissions", "hadm_id", "admittime", "dischtime", _which),
                                     "present" if _which == "cur" else "past")
    _GLOBAL[f"rel-icu-{_which}"] = (f"on the {_when} icu visit", _visit("icustays", "stay_id", "intime", "outtime",
                                                                        _which),
                                    "present" if _which == "cur" else "past")

GLOBAL_TAGS = tuple(_GLOBAL)
PATIENT_TAGS = frozenset(t for t in GLOBAL_TAGS if t.startswith(("rel-hosp", "rel-icu")))  # need a patient id
ICU_TAGS = frozenset(t for t in GLOBAL_TAGS if t.startswith("rel-icu"))  # need a stay_id column
# exact-*: (order, offset) of the one event kept
EXACT = {"first": ("asc", 0), "last": ("desc", 0), "second": ("asc", 1), "second to last": ("desc", 1)}
IMAGE_EXACT = ("first", "last")  # the image templates' study references (paper Table C10)
UNIT_COUNT = {"days": "1", "hours": "24"}  # o_tag unit_count: nlq -> multiplier of the Julian-day difference
AGE_GROUP = {"20s": "between 20 and 29", "30s": "between 30 and 39", "40s": "between 40 and 49",
             "50s": "between 50 and 59", "60 or above": ">= 60"}  # o_tag age_group: nlq -> SQL on the age
GENDER = {"f": "female", "m": "male"}  # patients.gender -> words
COMPARISONS = ("still present", "still absent", "newly detected", "resolved")
SET_COMPARISONS = ("still present", "newly detected", "resolved")  # expressible as set operations of lists
TENSE = {"has_verb": ("has", "had"), "is_verb": ("is", "was"), "are_verb": ("are", "were"),
         "do_verb": ("does", "did")}
_TENSE_SLOT = re.compile(r"\b(" + "|".join(TENSE) + r")\b", re.IGNORECASE)


def _table_of(column: str) -> str:
    return column.split(".")[0] if "." in column else ""


@dataclass(frozen=True)
class TimeFilter:
    """One global time filter: a tag of reference-builders.md 6.3 and its value ('2105', '2105-03',
    '2105-03-04' for abs-*; a count for rel-*-since/until; '03' / '04-17' / '21' for mix-*)."""

    tag: str = "null"
    value: str | int | None = None

    def __post_init__(self):
        if self.tag not in _GLOBAL:
            raise ValueError(f"unknown time filter tag {self.tag!r}; known: {GLOBAL_TAGS}")

    def _fields(self) -> dict:
        v = "" if self.value is None else str(self.value)
        parts = v.split("-") if self.tag.startswith(("abs-", "mix-day-")) else []
        if self.tag.startswith("mix-day-") and self.tag.endswith("_year"):
            parts = ["", *parts]
        return {"v": v, "yyyy": parts[0] if parts else "", "mm": parts[1] if len(parts) > 1 else "",
                "dd": parts[2] if len(parts) > 2 else ""}

    @property
    def nl(self) -> str:
        return _GLOBAL[self.tag][0].format(**self._fields())

    @property
    def tense(self) -> str:
        """'present' or 'past': the tense of a question asked with this filter."""
        return _GLOBAL[self.tag][2]

    def sql(self, patient_id: int | None = None, column: str = COL) -> str:
        """SQLite condition on ``column`` ('' for null). Visit filters need the patient id and read the
        ``hadm_id`` / ``stay_id`` column of the column's table."""
        if self.tag in PATIENT_TAGS and patient_id is None:
            raise ValueError(f"time filter {self.tag} needs a patient id")
        t = _table_of(column)
        return _GLOBAL[self.tag][1].format(c=column, p=patient_id, hadm_id=f"{t}.hadm_id" if t else "hadm_id",
                                           stay_id=f"{t}.stay_id" if t else "stay_id", **self._fields())


# within tag -> (words, condition on the earlier event e1 and the later event e2)
_WITHIN = {
    "within-same": ("at the same time", "datetime({t1}) = datetime({t2})"),
    "within-hosp": ("within the same hospital visit", "{h1} = {h2}"),
    "within-month": ("within the same month", "datetime({t1}, 'start of month') = datetime({t2}, 'start of month')"),
    "within-n_day": ("within {v} day", "datetime({t2}) between datetime({t1}) and datetime({t1}, '+{v} day')"),
    "within-n_month": ("within {v} month", "datetime({t2}) between datetime({t1}) and datetime({t1}, '+{v} month')"),
}
WITHIN_TAGS = tuple(_WITHIN)


@dataclass(frozen=True)
class WithinFilter:
    """How close a later event must follow an earlier one (t_tag position 3)."""

    tag: str
    value: int | None = None

    def __post_init__(self):
        if self.tag not in _WITHIN:
            raise ValueError(f"unknown within filter tag {self.tag!r}; known: {WITHIN_TAGS}")
        if self.tag.startswith("within-n_") and (not isinstance(self.value, int) or self.value < 1):
            raise ValueError(f"within filter {self.tag} needs a count >= 1, got {self.value!r}")

    @property
    def nl(self) -> str:
        return _WITHIN[self.tag][0].format(v=self.value)

    def sql(self, t1: str, t2: str, h1: str, h2: str) -> str:
        """Condition for event 1 (time t1, visit h1) and the later event 2 (t2, h2)."""
        return _WITHIN[self.tag][1].format(t1=t1, t2=t2, h1=h1, h2=h2, v=self.value)


def tense(text: str, flt: TimeFilter | None) -> str:
    """Resolve the tense placeholders of ``text`` from the global filter (keeping an initial capital)."""
    past = flt is not None and flt.tense == "past"

    def word(m: re.Match) -> str:
        w = TENSE[m.group(1).lower()][int(past)]
        return w.capitalize() if m.group(1)[0].isupper() else w
    return _TENSE_SLOT.sub(word, text)


def where(*conditions: str) -> str:
    """' where a and b' over the non-empty conditions ('' when none)."""
    kept = [c for c in conditions if c]
    return f" where {' and '.join(kept)}" if kept else ""


def exact_clause(exact: str, column: str, tiebreak: str) -> str:
    """' order by ... limit 1 [offset 1]' keeping the [exact] event."""
    if exact not in EXACT:
        raise ValueError(f"unknown exact time filter {exact!r}; known: {tuple(EXACT)}")
    order, offset = EXACT[exact]
    return f" order by {column} {order}, {tiebreak} {order} limit 1" + (f" offset {offset}" if offset else "")


def by_time(patient_id: int, exact: str, flt: TimeFilter) -> str:
    """The [exact] study of patient [global]: a subquery with one column study_id (at most one row)."""
    return (f"select tb_cxr.study_id from tb_cxr{where(f'tb_cxr.subject_id = {int(patient_id)}', flt.sql(patient_id))}"
            + exact_clause(exact, COL, "tb_cxr.study_id"))


def by_id(study_id: int) -> str:
    return f"select tb_cxr.study_id from tb_cxr where tb_cxr.study_id = {int(study_id)}"


def previous(target: str) -> str:
    """The latest study of the target's patient strictly before the target (``target``: a study subquery)."""
    return (f"select tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = (select subject_id from tb_cxr where "
            f"study_id = ({target})) and {COL} < (select studydatetime from tb_cxr where study_id = ({target})) "
            f"order by {COL} desc, tb_cxr.study_id desc limit 1")


# -- operation values of the table templates (reference-builders.md 6.3; o_tag: nlq -> SQL) -------------------
AGG_FUNCTION = {"average": "avg", "maximum": "max", "minimum": "min"}
VALUE_COMPARISON = {"greater": ">", "less": "<"}  # [comparison] of a measured value ("greater than ...")
N_RANK = {"three": "3", "four": "4", "five": "5"}  # top-N by dense rank: ties share a rank
N_TIMES = {"two times": "= 2", "two or more times": ">= 2"}
N_SURVIVAL = {"one year": "1", "two year": "2", "three year": "3", "four year": "4", "five year": "5"}  # x 365 days
SORT = {"maximum": "max", "minimum": "min"}  # [sort] value: the extreme value kept
UNIT_AVERAGE = {"daily": "%Y-%m-%d", "monthly": "%Y-%m", "yearly": "%Y"}  # strftime of the period
# Vital-sign "normal" ranges of reference-builders.md 5.10, keyed by the d_items label of the vital's itemid.
VITAL_RANGES = {
    "temperature celsius": (35.5, 38.1),  # itemid 223762 ("temperature")
    "o2 saturation pulseoxymetry": (95, 100),  # 220277 ("sao2")
    "heart rate": (60, 100),  # 220045
    "respiratory rate": (12, 18),  # 220210 ("respiration")
    "arterial blood pressure systolic": (90, 120),  # 220050
    "arterial blood pressure diastolic": (60, 90),  # 220051
    "arterial blood pressure mean": (60, 110),  # 220052
}
WEIGHT_LABEL, HEIGHT_LABEL = "admission weight (kg)", "height (cm)"  # d_items labels of 226512 / 226730


def normal_range_sql(vital: str) -> str:
    """'between lo and hi' for a vital sign (reference-builders.md 5.10)."""
    lo, hi = VITAL_RANGES[vital]
    return f"between {lo} and {hi}"
