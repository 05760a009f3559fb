"""benchmarks/published_executor.py sorts each disagreement of the authors' executor with a release record by the
defect it shows (docs/deviations.md, "Published executor defects"); running that executor needs the authors'
repository, which the tests do not fetch."""

import pytest

from benchmarks.published_executor import defect

SAME = lambda answer: answer  # noqa: E731  (the authors' post_process_answer changes none of these answers)
JULIAN = ("select 24 * (strftime('%J', current_time) - strftime('%J', tb_cxr.studydatetime)) from tb_cxr "
          "where tb_cxr.study_id = 1")
COUNT = "select count( distinct tb_cxr.subject_id ) from tb_cxr where func_vqa(\"is there x?\", tb_cxr.study_id) = true"
MONTH = "select datetime(tb_cxr.studydatetime, 'start of month') from tb_cxr"


@pytest.mark.parametrize("query, answer, got, expected", [
    (JULIAN, [12.0], [12.0], None),  # agrees
    (MONTH + " where tb_cxr.studydatetime < datetime(current_time, '+2 month')", [1], "null", "d"),  # it failed
    (JULIAN, [12.0], "null", "unexplained"),  # it failed, and not on a month shift
    ("select a from t except select a from u", ["x", "y"], ["y", "x"], "e"),  # the same rows, another order
    (JULIAN, [12.0], [36.0], "a"),
    (COUNT, [2], [3], "b"),
    (MONTH, [1], [0], "c"),
    ("select 1", [1], [2], "unexplained"),
])
def test_each_disagreement_is_named_by_its_defect(query, answer, got, expected):
    assert defect({"query": query, "answer": answer}, got, SAME) == expected
