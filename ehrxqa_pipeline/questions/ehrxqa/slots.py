"""Operation slots of the EHRXQA image templates: time filters, comparison labels, units, study references.

Time filters follow reference-builders.md 6.3 (EHRSQL tags), applied to ``tb_cxr.studydatetime``; "now" is
the placeholder ``current_time`` that ``neuralsql.postprocess_query`` turns into '2105-12-31 23:59:00'.
Each filter gives its natural-language words and an SQLite condition; the same condition text is used in
the gold SQL and in the NeuralSQL, so the two queries select the same candidate studies by construction.

Study references (paper Table C10) are SQL subqueries returning one column ``study_id``:
``by_time`` (the [exact] study of a patient [global]), ``by_id`` (study {study_id}) and ``previous``
(the latest study of the same patient strictly before a target study).
"""

from __future__ import annotations

from dataclasses import dataclass

COL = "tb_cxr.studydatetime"

# tag -> (nl format, sql format); {v} is the filter value, {c} the time column, {p} the patient id.
_GLOBAL = {
    "null": ("", ""),
    "abs-year-in": ("in {v}", "strftime('%Y', {c}) = '{v}'"),
    "abs-year-since": ("since {v}", "strftime('%Y', {c}) >= '{v}'"),
    "abs-year-until": ("until {v}", "strftime('%Y', {c}) <= '{v}'"),
    "abs-month-in": ("in {mm}/{yyyy}", "strftime('%Y-%m', {c}) = '{v}'"),
    "abs-day-in": ("on {mm}/{dd}/{yyyy}", "strftime('%Y-%m-%d', {c}) = '{v}'"),
    "rel-year-this": ("this year",
                      "datetime({c}, 'start of year') = datetime(current_time, 'start of year', '-0 year')"),
    "rel-year-last": ("last year",
                      "datetime({c}, 'start of year') = datetime(current_time, 'start of year', '-1 year')"),
    "rel-month-this": ("this month",
                       "datetime({c}, 'start of month') = datetime(current_time, 'start of month', '-0 month')"),
    "rel-month-last": ("last month",
                       "datetime({c}, 'start of month') = datetime(current_time, 'start of month', '-1 month')"),
    "rel-year-since": ("since {v} year ago", "datetime({c}) >= datetime(current_time, '-{v} year')"),
    "rel-month-since": ("since {v} month ago", "datetime({c}) >= datetime(current_time, '-{v} month')"),
    "rel-day-since": ("since {v} day ago", "datetime({c}) >= datetime(current_time, '-{v} day')"),
    "rel-hosp-cur": ("on the current hospital visit",
                     "tb_cxr.hadm_id in (select admissions.hadm_id from admissions where admissions.subject_id = {p}"
                     " and admissions.dischtime is null)"),
    "rel-hosp-first": ("on the first hospital visit",
                       "tb_cxr.hadm_id in (select admissions.hadm_id from admissions where admissions.subject_id = {p}"
                       " and admissions.dischtime is not null order by admissions.admittime asc limit 1)"),
    "rel-hosp-last": ("on the last hospital visit",
                      "tb_cxr.hadm_id in (select admissions.hadm_id from admissions where admissions.subject_id = {p}"
                      " and admissions.dischtime is not null order by admissions.admittime desc limit 1)"),
}
GLOBAL_TAGS = tuple(_GLOBAL)
PATIENT_TAGS = frozenset({"rel-hosp-cur", "rel-hosp-first", "rel-hosp-last"})  # need a patient id
EXACT = {"first": "asc", "last": "desc"}  # exact-first / exact-last: order by time, limit 1
UNIT_COUNT = {"days": "1", "hours": "24"}  # o_tag unit_count: nlq -> multiplier of the Julian-day difference
COMPARISONS = ("still present", "still absent", "newly detected", "resolved")
SET_COMPARISONS = ("still present", "newly detected", "resolved")  # expressible as set operations of lists


@dataclass(frozen=True)
class TimeFilter:
    """One global time filter: tag (reference-builders.md 6.3) and value ('2105', '2105-03', '2105-03-04', 3)."""

    tag: str = "null"
    value: str | int | None = None

    def __post_init__(self):
        if self.tag not in _GLOBAL:
            raise ValueError(f"unknown time filter tag {self.tag!r}; known: {GLOBAL_TAGS}")

    def _fields(self) -> dict:
        v = "" if self.value is None else str(self.value)
        parts = v.split("-") if self.tag.startswith("abs-") else []
        return {"v": v, "yyyy": parts[0] if parts else "", "mm": parts[1] if len(parts) > 1 else "",
                "dd": parts[2] if len(parts) > 2 else ""}

    @property
    def nl(self) -> str:
        return _GLOBAL[self.tag][0].format(**self._fields())

    def sql(self, patient_id: int | None = None, column: str = COL) -> str:
        """SQLite condition ('' for null); hospital-visit filters need the patient id."""
        if self.tag in PATIENT_TAGS and patient_id is None:
            raise ValueError(f"time filter {self.tag} needs a patient id")
        return _GLOBAL[self.tag][1].format(c=column, p=patient_id, **self._fields())


def where(*conditions: str) -> str:
    """' where a and b' over the non-empty conditions ('' when none)."""
    kept = [c for c in conditions if c]
    return f" where {' and '.join(kept)}" if kept else ""


def by_time(patient_id: int, exact: str, flt: TimeFilter) -> str:
    """The [exact] study of patient [global]: a subquery with one column study_id (at most one row)."""
    if exact not in EXACT:
        raise ValueError(f"unknown exact time filter {exact!r}; known: {tuple(EXACT)}")
    return (f"select tb_cxr.study_id from tb_cxr{where(f'tb_cxr.subject_id = {int(patient_id)}', flt.sql(patient_id))}"
            f" order by {COL} {EXACT[exact]}, tb_cxr.study_id {EXACT[exact]} limit 1")


def by_id(study_id: int) -> str:
    return f"select tb_cxr.study_id from tb_cxr where tb_cxr.study_id = {int(study_id)}"


def previous(target: str) -> str:
    """The latest study of the target's patient strictly before the target (``target``: a study subquery)."""
    return (f"select tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = (select subject_id from tb_cxr where "
            f"study_id = ({target})) and {COL} < (select studydatetime from tb_cxr where study_id = ({target})) "
            f"order by {COL} desc, tb_cxr.study_id desc limit 1")
