"""Our executor does not share the four defects of the authors' published NeuralSQL executor (its vendored
sqlglot evaluates the outer query in Python; docs/deviations.md, "Published executor defects").

Each query is in a published shape (``neuralsql.shapes``) and runs on the fixture database with the oracle; the
expected answers are worked out by hand from ``tests.neuralsql`` (studies, affirmed labels, lab times).
"""

from __future__ import annotations

import pytest

from ehrxqa_pipeline.questions.neuralsql.shapes import shape
from tests.neuralsql import A, B

EFFUSION = 'func_vqa("is there pleural effusion in the left lung?", t1.study_id) = true'  # A1, A2
A_EFFUSION_STUDIES = (f"select tb_cxr.subject_id, tb_cxr.hadm_id, tb_cxr.studydatetime from tb_cxr where tb_cxr.study_id "
                      f"in (select distinct t1.study_id from (select tb_cxr.study_id from tb_cxr where "
                      f"tb_cxr.subject_id = {A}) as t1 where {EFFUSION})")
A_LABS = f"select labevents.subject_id, labevents.charttime as event_time from labevents where labevents.subject_id = {A}"


def test_julian_days_keep_their_case(run):
    """The published executor lower-cases the whole query before its Python pass, so strftime('%J') becomes
    '%j' (day of year): B1 (2104-05-03 09:00, right-lung pneumonia) to 2105-12-31 23:59 is 607 days 14:59
    (607.624306), not 365 - 124 = 241."""
    query = (f"select 1 * (strftime('%j', current_time) - strftime('%j', t1.studydatetime)) from (select "
             f"tb_cxr.study_id, tb_cxr.studydatetime from tb_cxr where tb_cxr.subject_id = {B}) as t1 where "
             f'func_vqa("is there pneumonia in the right lung?", t1.study_id) = true order by t1.studydatetime desc '
             "limit 1")  # stored lower-cased, as released
    assert shape(query) == "P2"
    assert run(query).answer == [607.624306]


def test_count_distinct_counts_distinct_values(run):
    """The published executor's COUNT(DISTINCT x) counts rows: A1 and A2 both show the effusion -> 1 patient,
    not 2."""
    query = f"select count(distinct t1.subject_id) from (select * from tb_cxr) as t1 where {EFFUSION}"
    assert shape(query) == "P2"
    assert run(query).answer == [1]


def test_start_of_month_drops_the_time_of_day(run):
    """The published executor's datetime(x, 'start of month') keeps x's time of day: A's lab of 2105-01-02
    06:00 and its effusion study A1 (2105-01-02 10:00) are in the same month (true), which the defect reads as
    2105-01-01 06:00 <> 2105-01-01 10:00."""
    query = (f"select count(*) > 0 from ({A_LABS}) as t1 join ({A_EFFUSION_STUDIES}) as t2 on t1.subject_id = "
             "t2.subject_id where datetime(t1.event_time) < datetime(t2.studydatetime) and "
             "datetime(t1.event_time, 'start of month') = datetime(t2.studydatetime, 'start of month')")
    assert shape(query) == "P4"
    assert run(query).answer == [1]


def test_adding_months_into_december(run):
    """The published executor raises when '+N month' lands in December: A1 (2105-01-02 10:00) + 11 months is
    2105-12-02 10:00, and A's lab of 2105-01-04 follows A1 within it (true)."""
    query = (f"select count(*) > 0 from ({A_EFFUSION_STUDIES}) as t1 join ({A_LABS}) as t2 on t1.subject_id = "
             "t2.subject_id where datetime(t1.studydatetime) < datetime(t2.event_time) and datetime(t2.event_time) "
             "between datetime(t1.studydatetime) and datetime(t1.studydatetime, '+11 month')")
    assert shape(query) == "P4"
    assert run(query).answer == [1]


@pytest.mark.parametrize("months, expected", [(11, [1]), (0, [0])])
def test_the_december_window_is_a_real_condition(run, months, expected):
    """The same query with a zero-month window finds nothing: the answer above comes from the window."""
    query = (f"select count(*) > 0 from ({A_EFFUSION_STUDIES}) as t1 join ({A_LABS}) as t2 on t1.subject_id = "
             "t2.subject_id where datetime(t1.studydatetime) < datetime(t2.event_time) and datetime(t2.event_time) "
             f"between datetime(t1.studydatetime) and datetime(t1.studydatetime, '+{months} month')")
    assert run(query).answer == expected
